package checker

import (
	"fmt"
	"sort"

	"github.com/isrlab/isrlab/history"
)

// Delivery semantics of consumer groups (the queue workload's f
// "processed" and commits that carry "committed" offsets). A record is one
// offset of one partition.
//
//   - redelivered: a record the group processed more than once (by one
//     member or several): the price of at-least-once, paid when a member
//     dies between processing a record and committing it.
//   - skipped: a record below an offset the group committed (ok) that no
//     member of the group ever processed: at-most-once's loss, when a
//     commit covered records that were polled but not yet processed and
//     their member died.
//
// Both describe the consumer's commit configuration, not the broker: they
// are reported, never make a history invalid, and an expectation can name
// them. Only records some operation of the history showed (an ack or a
// read) can be skipped; a record processed after the commit that covered
// it is not skipped.
const (
	Redelivered = "redelivered"
	Skipped     = "skipped"
)

// deliveryAnomalies are reported, not judged (see above).
var deliveryAnomalies = []string{Redelivered, Skipped}

// Delivery is, per consumer group, what its members did with the records
// they polled: processed once, more than once, or committed and never
// processed, over time. Buckets are those of UnseenOverTime.
type Delivery struct {
	BucketSeconds float64         `json:"bucket_s"`
	Buckets       int             `json:"buckets"`
	Groups        []GroupDelivery `json:"groups"`
}

// GroupDelivery is one consumer group's delivery counts.
type GroupDelivery struct {
	Group string `json:"group"`
	// Processed counts processed ops, Records the distinct records they
	// named; Reprocessed = Processed - Records.
	Processed   int64 `json:"processed"`
	Records     int64 `json:"records"`
	Reprocessed int64 `json:"reprocessed"`
	Redelivered int64 `json:"redelivered"`
	Skipped     int64 `json:"skipped"`
	// Commits counts ok commits that said what they committed.
	Commits int64 `json:"commits"`
	// RedeliveredPerBucket[i] records were processed for the second time
	// in bucket i; SkippedPerBucket[i] skipped records were first covered
	// by a commit in bucket i.
	RedeliveredPerBucket []int64 `json:"redelivered_per_bucket"`
	SkippedPerBucket     []int64 `json:"skipped_per_bucket"`
	// Committed is the committed-offset timeline, per partition.
	Committed []CommittedSeries `json:"committed"`
}

// CommittedSeries is a group's committed offset of one partition: Offset[i]
// is the offset the last ok commit at or before the end of bucket i set
// (-1 before the first), Final the last one, Max the highest.
type CommittedSeries struct {
	Partition int32   `json:"partition"`
	Offset    []int64 `json:"offset"`
	Final     int64   `json:"final"`
	Max       int64   `json:"max"`
}

// recDelivery is what a group did with one record. Positions and
// processes are stored +1, so that 0 means none.
type recDelivery struct {
	n         uint16 // times processed, saturating
	firstPos  int64
	firstT    int64
	firstProc int32
	pollProc  int32
	pollPos   int64
	pollT     int64
}

type commitMark struct {
	t, off, pos int64
	proc        int
	// top is the highest offset committed up to this commit.
	top int64
}

type groupPart struct {
	recs    []recDelivery
	far     map[int64]*recDelivery
	commits []commitMark
}

// rec returns the record at off, creating it; nil for a negative offset.
func (g *groupPart) rec(off int64) *recDelivery {
	if off < 0 {
		return nil
	}
	if off < int64(len(g.recs)) {
		return &g.recs[off]
	}
	if off < denseOffsetLimit && off <= 2*int64(len(g.recs))+1<<20 {
		n := min(max(2*len(g.recs), 1024, int(off)+1), denseOffsetLimit)
		grown := make([]recDelivery, n)
		copy(grown, g.recs)
		for o, r := range g.far {
			if o < int64(n) {
				grown[o] = *r
				delete(g.far, o)
			}
		}
		g.recs = grown
		return &g.recs[off]
	}
	if g.far == nil {
		g.far = map[int64]*recDelivery{}
	}
	r := g.far[off]
	if r == nil {
		r = &recDelivery{}
		g.far[off] = r
	}
	return r
}

// peek returns the record at off without creating it.
func (g *groupPart) peek(off int64) *recDelivery {
	if off >= 0 && off < int64(len(g.recs)) {
		return &g.recs[off]
	}
	return g.far[off]
}

type groupState struct {
	name                            string
	parts                           map[int32]*groupPart
	processed, records, redelivered int64
	commits                         int64
	redeliveredAt                   []int64
}

func (g *groupState) part(p int32) *groupPart {
	gp := g.parts[p]
	if gp == nil {
		gp = &groupPart{}
		g.parts[p] = gp
	}
	return gp
}

type deliveryTracker struct {
	groups    map[string]*groupState
	procGroup map[int]string
}

func (d *deliveryTracker) group(name string) *groupState {
	if d.groups == nil {
		d.groups = map[string]*groupState{}
	}
	g := d.groups[name]
	if g == nil {
		g = &groupState{name: name, parts: map[int32]*groupPart{}}
		d.groups[name] = g
	}
	return g
}

// groupOf names the group of op: its own, else that of its process's
// subscribe.
func (d *deliveryTracker) groupOf(op *history.Op) (string, bool) {
	if op.Group != "" {
		return op.Group, true
	}
	g, ok := d.procGroup[op.Process]
	return g, ok
}

// subscribe notes the group a process joined.
func (d *deliveryTracker) subscribe(op *history.Op) {
	if op.Group == "" || op.Type == history.Fail {
		return
	}
	if d.procGroup == nil {
		d.procGroup = map[int]string{}
	}
	d.procGroup[op.Process] = op.Group
}

// polled notes the first poll by a group's member that returned each
// record, for the notes of skipped records.
func (d *deliveryTracker) polled(op *history.Op, pos int64) {
	if len(d.procGroup) == 0 || len(op.Reads) == 0 {
		return
	}
	name, ok := d.procGroup[op.Process]
	if !ok {
		return
	}
	g := d.group(name)
	for _, pr := range op.Reads {
		if pr.Partition < 0 {
			continue
		}
		gp := g.part(pr.Partition)
		for _, r := range pr.Records {
			if rd := gp.rec(r.Offset); rd != nil && rd.pollPos == 0 {
				rd.pollPos, rd.pollT, rd.pollProc = pos+1, op.Time, int32(op.Process)+1
			}
		}
	}
}

// processed notes one processed record; a second processing is a
// redelivery.
func (a *analysis) processed(op *history.Op, pos int64) {
	d := &a.delivery
	if op.Type != history.OK || op.Partition < 0 || op.Offset < 0 {
		a.stats.Ignored++
		return
	}
	name, _ := d.groupOf(op)
	g := d.group(name)
	g.processed++
	rd := g.part(op.Partition).rec(op.Offset)
	if rd.n < 1<<16-1 {
		rd.n++
	}
	switch rd.n {
	case 1:
		g.records++
		rd.firstPos, rd.firstT, rd.firstProc = pos+1, op.Time, int32(op.Process)+1
	case 2:
		g.redelivered++
		g.redeliveredAt = append(g.redeliveredAt, op.Time)
		var val *int64
		if op.HasValue {
			val = i64p(op.Value)
		}
		a.flag(Redelivered, Example{Partition: op.Partition, Offset: i64p(op.Offset), Value: val, Process: intp(op.Process),
			Note: fmt.Sprintf("group %s processed the record at offset %d of partition %d twice: process %d at %s, process %d at %s",
				groupLabel(name), op.Offset, op.Partition, rd.firstProc-1, fmtNanos(rd.firstT), op.Process, fmtNanos(op.Time)),
			positions: sorted(rd.firstPos-1, pos)})
	}
}

// commit notes an ok commit's offsets; it reports whether the op said
// what it committed.
func (d *deliveryTracker) commit(op *history.Op, pos int64) bool {
	if op.Committed == nil {
		return false
	}
	if op.Type != history.OK {
		return true // unknown or not done: it proves nothing committed
	}
	name, _ := d.groupOf(op)
	g := d.group(name)
	g.commits++
	for _, c := range op.Committed {
		if c.Partition < 0 || c.Offset < 0 {
			continue
		}
		gp := g.part(c.Partition)
		top := c.Offset
		if n := len(gp.commits); n > 0 {
			top = max(top, gp.commits[n-1].top)
		}
		gp.commits = append(gp.commits, commitMark{t: op.Time, off: c.Offset, pos: pos, proc: op.Process, top: top})
	}
	return true
}

func groupLabel(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return fmt.Sprintf("%q", name)
}

func intp(v int) *int { return &v }

// finishDelivery finds the skipped records, flags them and returns the
// per-group result (nil when the history has no delivery ops). width and
// n are the buckets of UnseenOverTime.
func (a *analysis) finishDelivery(bucketSeconds float64, n int) *Delivery {
	d := &a.delivery
	if len(d.groups) == 0 {
		return nil
	}
	width := int64(bucketSeconds * 1e9)
	bucket := func(t int64) int {
		if width <= 0 || n == 0 {
			return -1
		}
		return min(max(int(t/width), 0), n-1)
	}
	out := &Delivery{BucketSeconds: bucketSeconds, Buckets: n, Groups: []GroupDelivery{}}
	names := make([]string, 0, len(d.groups))
	for name := range d.groups {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g := d.groups[name]
		if g.processed == 0 && g.commits == 0 {
			continue // a group that was only polled: nothing to say
		}
		gd := GroupDelivery{Group: name, Processed: g.processed, Records: g.records, Reprocessed: g.processed - g.records,
			Redelivered: g.redelivered, Commits: g.commits,
			RedeliveredPerBucket: make([]int64, n), SkippedPerBucket: make([]int64, n), Committed: []CommittedSeries{}}
		for _, t := range g.redeliveredAt {
			if i := bucket(t); i >= 0 {
				gd.RedeliveredPerBucket[i]++
			}
		}
		parts := make([]int32, 0, len(g.parts))
		for p := range g.parts {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			gp := g.parts[p]
			if len(gp.commits) == 0 {
				continue
			}
			cs := CommittedSeries{Partition: p, Offset: make([]int64, n), Final: gp.commits[len(gp.commits)-1].off,
				Max: gp.commits[len(gp.commits)-1].top}
			j, cur := 0, int64(-1)
			for i := range n {
				end := int64(i+1) * width
				for j < len(gp.commits) && (gp.commits[j].t < end || i == n-1) {
					cur = gp.commits[j].off
					j++
				}
				cs.Offset[i] = cur
			}
			gd.Committed = append(gd.Committed, cs)
			gd.Skipped += a.skipped(name, p, gp, func(t int64) {
				if i := bucket(t); i >= 0 {
					gd.SkippedPerBucket[i]++
				}
			})
		}
		out.Groups = append(out.Groups, gd)
	}
	if len(out.Groups) == 0 {
		return nil
	}
	return out
}

// skipped flags every record of partition p below the group's highest
// committed offset that the history shows and no member processed; at is
// called with the time of the first commit that covered each.
func (a *analysis) skipped(name string, p int32, gp *groupPart, at func(int64)) int64 {
	ps := a.part(p)
	top := gp.commits[len(gp.commits)-1].top
	var n int64
	check := func(off, val int64) {
		if rd := gp.peek(off); rd != nil && rd.n > 0 {
			return
		}
		// The first commit whose running top passed off covered it.
		c := gp.commits[sort.Search(len(gp.commits), func(i int) bool { return gp.commits[i].top > off })]
		n++
		at(c.t)
		note := fmt.Sprintf("group %s committed offset %d of partition %d at %s (process %d), but no member processed the record at offset %d",
			groupLabel(name), c.off, p, fmtNanos(c.t), c.proc, off)
		positions := []int64{c.pos}
		var proc *int
		if rd := gp.peek(off); rd != nil && rd.pollPos > 0 {
			note += fmt.Sprintf("; process %d polled it at %s", rd.pollProc-1, fmtNanos(rd.pollT))
			positions = append(positions, rd.pollPos-1)
			proc = intp(int(rd.pollProc - 1))
		}
		var v *int64
		if val != history.BadValue {
			v = i64p(val)
		}
		a.flag(Skipped, Example{Partition: p, Offset: i64p(off), Value: v, Process: proc, Note: note, positions: sorted(positions...)})
	}
	for off := int64(0); off < top && off < int64(ps.slots.len()); off++ {
		if i := ps.slots.at(int(off)); i != emptySlot {
			check(off, a.val(i).id)
		}
	}
	far := make([]int64, 0, len(ps.far))
	for off := range ps.far {
		if off < top {
			far = append(far, off)
		}
	}
	sort.Slice(far, func(i, j int) bool { return far[i] < far[j] })
	for _, off := range far {
		check(off, a.val(ps.far[off]).id)
	}
	return n
}
