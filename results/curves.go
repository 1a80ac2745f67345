package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"

	"github.com/isrlab/isrlab/history"
)

// Limits that keep one pass over any history in bounded memory: the
// buckets coarsen (double their width) instead of growing past
// maxBuckets, and every list is capped.
const (
	baseWidth       = int64(100e6) // the first bucket width: 100 ms
	maxBuckets      = 800
	maxTime         = int64(30 * 24 * 3600 * 1e9) // ops later than 30 days are corrupt
	maxStripParts   = 64                          // partitions with an ok-send strip
	maxStateParts   = 256                         // partitions with a state timeline
	maxStateEvents  = 2000                        // state events kept per partition
	maxFaultOps     = 1000                        // fault starts kept for labels
	maxPoints       = 3000                        // fail/info latency points kept
	histBins        = 112                         // 4 per octave from 1 µs to ~9 min
	maxFaultValueSz = 400
)

// hist is a log-scale histogram of durations: four bins per octave of
// microseconds (about ±12%), fixed size, so buckets can be added.
type hist struct {
	c   [histBins]uint32
	n   int64
	max int64
}

func binOf(ns int64) int {
	us := ns / 1000
	if us < 4 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 1 // >= 2
	m := int(us >> (e - 2))         // 4..7
	return min(4*(e-1)+m-4, histBins-1)
}

// binMid is the middle of bin b in nanoseconds.
func binMid(b int) float64 {
	if b < 4 {
		return (float64(b) + 0.5) * 1000
	}
	e, m := b/4+1, b%4+4
	lo := float64(int64(m) << (e - 2))
	hi := float64(int64(m+1) << (e - 2))
	return (lo + hi) / 2 * 1000
}

func (h *hist) add(ns int64) {
	h.c[binOf(ns)]++
	h.n++
	h.max = max(h.max, ns)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.c {
		h.c[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// q returns the p-quantile in nanoseconds (0 for an empty histogram).
func (h *hist) q(p float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(p*float64(h.n) + 0.999999)
	rank = max(rank, 1)
	var seen int64
	for b, c := range h.c {
		seen += int64(c)
		if seen >= rank {
			return min(binMid(b), float64(h.max))
		}
	}
	return float64(h.max)
}

// Outcome indexes of Bucket.Send and Bucket.Poll.
const (
	iOK = iota
	iFail
	iInfo
)

// Bucket is what completed in one time bucket.
type Bucket struct {
	// Send and Poll count completions: ok, fail, info. Polls include the
	// final drain's.
	Send, Poll [3]int64
	// SendLat and PollLat are the latencies of ok completions.
	SendLat, PollLat hist
	// Lag is the time from acknowledgement to first read of the values
	// first read in this bucket.
	Lag hist
	// Unseen is the number of acknowledged values not yet read at the
	// last change in the bucket, -1 when nothing changed in it;
	// UnseenMax the highest in the bucket.
	Unseen, UnseenMax int64
	// PartOK counts ok sends per partition (index into Curves.StripParts).
	PartOK []int64
}

// StateEvent is one observed cluster state of a partition.
type StateEvent struct {
	T      int64
	Leader int32
	Epoch  int32
	ISR    []int32
	HW     int64
}

// PartitionStates is one partition's state timeline.
type PartitionStates struct {
	Partition int32
	Events    []StateEvent
	Dropped   int64 // events past maxStateEvents
}

// FaultOp is the start of a fault as the history recorded it.
type FaultOp struct {
	Name  string // the fault name, "kill" of "start-kill"
	T     int64  // the start's invocation time
	Label string // kind and the nodes it resolved to, for plots
	Value string // the fault's JSON (cut at maxFaultValueSz)
}

// LatPoint is one fail or info completion, for the latency plot.
type LatPoint struct {
	T, Lat int64
	F      string // send or poll
	Type   history.Type
}

// Curves are the over-time series of one history, computed in one
// streaming pass: memory is bounded by the caps above plus the values
// acknowledged and not yet read (and the sends in flight), never by the
// history's length.
type Curves struct {
	Header history.Header
	Ops    int64
	// End is the latest op time seen (ns).
	End int64
	// Width is the bucket width (ns).
	Width   int64
	Buckets []Bucket
	// StripParts are the partitions with ok-send counts in PartOK.
	StripParts []int32
	States     []PartitionStates
	Faults     []FaultOp
	Points     []LatPoint
	// PointStride is the sampling of Points: every PointStride-th fail or
	// info completion was kept.
	PointStride int64

	// Acked counts acknowledged sends with a value; FirstReads those read
	// afterwards (or before their acknowledgement: ReadBeforeAck); Unseen
	// is what was never read by the end, MaxUnseen the peak.
	Acked, FirstReads, ReadBeforeAck, Unseen, MaxUnseen int64
	// Lag is the acknowledgement-to-first-read distribution.
	Lag hist
	// Torn is set when the history ended in a torn line.
	Torn string
	// Late counts ops whose time was outside [0, 30 days].
	Late int64

	partIdx     map[int32]int
	stateIdx    map[int32]int
	procs       map[int]pendingOp
	inflight    map[int64]bool // send value -> read before its ack
	acked       map[int64]int64
	pointsSeen  int64
	faultByName map[string]int // the last start of each fault, index into Faults
}

type pendingOp struct {
	t        int64
	f        string
	value    int64
	hasValue bool
}

// ReadCurves streams the history in r and computes its curves. A torn last
// line is noted (Curves.Torn), any other bad line is an error.
func ReadCurves(r io.Reader, name string) (*Curves, error) {
	hr, err := history.NewReader(r, name)
	if err != nil {
		return nil, err
	}
	c := NewCurves()
	c.Start(hr.Header())
	err = hr.Scan(0, func(op *history.Op, _ int64) error {
		c.Op(op)
		return nil
	})
	if err != nil && !errors.Is(err, history.ErrTruncated) {
		return nil, err
	}
	c.Finish(err)
	return c, nil
}

// NewCurves returns the curves of a history that is yet to be read: a
// history.Consumer, so that the pass that checks a run's history computes
// them too (checker.Options.Also), and its report needs no pass of its own.
func NewCurves() *Curves {
	return &Curves{Width: baseWidth, PointStride: 1,
		partIdx: map[int32]int{}, stateIdx: map[int32]int{}, procs: map[int]pendingOp{},
		inflight: map[int64]bool{}, acked: map[int64]int64{}, faultByName: map[string]int{}}
}

// Start takes the history's header.
func (c *Curves) Start(h history.Header) { c.Header = h }

// Op adds one op, in history order.
func (c *Curves) Op(op *history.Op) { c.add(op) }

// Finish closes the curves after the last op; err is a torn last line's.
func (c *Curves) Finish(err error) {
	if err != nil {
		c.Torn = err.Error()
	}
	c.Unseen = int64(len(c.acked))
	c.acked, c.inflight, c.procs = nil, nil, nil
}

func (c *Curves) bucket(t int64) *Bucket {
	i := t / c.Width
	for i >= maxBuckets {
		c.coarsen()
		i = t / c.Width
	}
	for int64(len(c.Buckets)) <= i {
		c.Buckets = append(c.Buckets, Bucket{Unseen: -1})
	}
	return &c.Buckets[i]
}

// coarsen doubles the bucket width, merging pairs of buckets.
func (c *Curves) coarsen() {
	c.Width *= 2
	n := (len(c.Buckets) + 1) / 2
	for i := range n {
		a := c.Buckets[2*i]
		if 2*i+1 < len(c.Buckets) {
			b := &c.Buckets[2*i+1]
			for k := range 3 {
				a.Send[k] += b.Send[k]
				a.Poll[k] += b.Poll[k]
			}
			a.SendLat.merge(&b.SendLat)
			a.PollLat.merge(&b.PollLat)
			a.Lag.merge(&b.Lag)
			if b.Unseen >= 0 {
				a.Unseen = b.Unseen
			}
			a.UnseenMax = max(a.UnseenMax, b.UnseenMax)
			for len(a.PartOK) < len(b.PartOK) {
				a.PartOK = append(a.PartOK, 0)
			}
			for k, v := range b.PartOK {
				a.PartOK[k] += v
			}
		}
		c.Buckets[i] = a
	}
	clear(c.Buckets[n:])
	c.Buckets = c.Buckets[:n]
}

func (c *Curves) add(op *history.Op) {
	c.Ops++
	if op.Time < 0 || op.Time > maxTime {
		c.Late++
		return
	}
	c.End = max(c.End, op.Time)
	switch {
	case op.Process == history.Nemesis:
		c.fault(op)
	case op.Process == history.Cluster:
		if op.F == history.FState {
			c.state(op)
		}
	case op.IsClient():
		c.client(op)
	}
}

func (c *Curves) fault(op *history.Op) {
	name, ok := strings.CutPrefix(op.F, "start-")
	if !ok {
		return
	}
	if op.Type == history.Invoke && len(c.Faults) < maxFaultOps {
		c.Faults = append(c.Faults, FaultOp{Name: name, T: op.Time})
		c.faultByName[name] = len(c.Faults) - 1
	}
	// The targets are in the invocation's value, or only in the
	// completion's.
	if i, ok := c.faultByName[name]; ok && c.Faults[i].Value == "" && len(op.RawValue) > 0 {
		f := &c.Faults[i]
		f.Value = string(op.RawValue)
		if len(f.Value) > maxFaultValueSz {
			f.Value = f.Value[:maxFaultValueSz] + "…"
		}
		f.Label = faultLabel(name, op.RawValue)
	}
}

// faultLabel names a fault by its kind and targets: "kill b2",
// "partition leader-coordinators".
func faultLabel(name string, raw json.RawMessage) string {
	var targets []string
	v, err := history.ParseFault(raw)
	if err != nil {
		if json.Unmarshal(raw, &targets) != nil {
			return name
		}
	} else {
		targets = v.Resolved
		if len(targets) == 0 {
			targets = v.Nodes
		}
	}
	if len(targets) > 4 {
		targets = append(targets[:4:4], fmt.Sprintf("+%d", len(targets)-4))
	}
	label := name
	if v.Topology != "" {
		label += " " + v.Topology
	}
	if len(targets) > 0 {
		label += " " + strings.Join(targets, ",")
	}
	if sides := grudgeSides(v.Links()); len(sides) > 1 && len(sides) <= 4 {
		label += " " + strings.Join(sides, " | ")
	}
	return label
}

// grudgeSides returns the groups of nodes that still reach each other
// under a grudge (node -> nodes it drops), each as "b1,b2,c1": the halves
// of a partition.
func grudgeSides(g map[string][]string) []string {
	if len(g) == 0 || len(g) > 64 {
		return nil
	}
	drops := map[[2]string]bool{}
	var nodes []string
	add := func(n string) {
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	for from, tos := range g {
		add(from)
		for _, to := range tos {
			add(to)
			drops[[2]string{from, to}] = true
		}
	}
	slices.Sort(nodes)
	side := map[string]int{}
	var sides [][]string
	for _, n := range nodes {
		if _, ok := side[n]; ok {
			continue
		}
		// n and everything it reaches both ways, transitively.
		i := len(sides)
		sides = append(sides, nil)
		queue := []string{n}
		side[n] = i
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			sides[i] = append(sides[i], u)
			for _, w := range nodes {
				if _, ok := side[w]; !ok && !drops[[2]string{u, w}] && !drops[[2]string{w, u}] {
					side[w] = i
					queue = append(queue, w)
				}
			}
		}
	}
	out := make([]string, len(sides))
	for i, s := range sides {
		slices.Sort(s)
		out[i] = strings.Join(s, ",")
	}
	return out
}

func (c *Curves) state(op *history.Op) {
	if op.Partition < 0 {
		return
	}
	i, ok := c.stateIdx[op.Partition]
	if !ok {
		if len(c.States) >= maxStateParts {
			return
		}
		i = len(c.States)
		c.stateIdx[op.Partition] = i
		c.States = append(c.States, PartitionStates{Partition: op.Partition})
	}
	ps := &c.States[i]
	if len(ps.Events) >= maxStateEvents {
		ps.Dropped++
		return
	}
	ev := StateEvent{T: op.Time, Leader: op.Leader, Epoch: op.Epoch, ISR: slices.Clone(op.ISR), HW: op.HW}
	if n := len(ps.Events); n > 0 {
		prev := ps.Events[n-1]
		// An op with only a high watermark (the lab's HW observer) keeps
		// the leader, epoch and ISR last seen; one without a HW keeps the
		// last HW.
		if op.ISR == nil && op.Leader < 0 {
			ev.Leader, ev.Epoch, ev.ISR = prev.Leader, prev.Epoch, prev.ISR
		}
		if op.HW < 0 {
			ev.HW = prev.HW
		}
	}
	ps.Events = append(ps.Events, ev)
}

func (c *Curves) client(op *history.Op) {
	send := op.F == history.FSend
	read := op.F == history.FPoll || op.F == history.FDrain
	if !send && !read {
		return
	}
	if op.Type == history.Invoke {
		c.procs[op.Process] = pendingOp{t: op.Time, f: op.F, value: op.Value, hasValue: op.HasValue}
		if send && op.HasValue {
			c.inflight[op.Value] = false
		}
		return
	}
	inv, ok := c.procs[op.Process]
	if !ok || inv.f != op.F {
		return
	}
	delete(c.procs, op.Process)
	b := c.bucket(op.Time)
	k := iInfo
	switch op.Type {
	case history.OK:
		k = iOK
	case history.Fail:
		k = iFail
	}
	lat := max(op.Time-inv.t, 0)
	if send {
		b.Send[k]++
		if k == iOK {
			b.SendLat.add(lat)
			c.partOK(b, op.Partition)
		}
	} else {
		b.Poll[k]++
		if k == iOK {
			b.PollLat.add(lat)
		}
	}
	if k != iOK {
		c.point(LatPoint{T: op.Time, Lat: lat, F: op.F, Type: op.Type})
	}
	if send && inv.hasValue {
		readEarly, ok := c.inflight[inv.value]
		delete(c.inflight, inv.value)
		if ok && k == iOK {
			c.Acked++
			if readEarly {
				c.ReadBeforeAck++
				c.FirstReads++
			} else {
				c.acked[inv.value] = op.Time
				c.unseen(b)
			}
		}
	}
	if read && k == iOK {
		for _, pr := range op.Reads {
			for _, rec := range pr.Records {
				c.read(b, rec.Value, op.Time)
			}
		}
	}
}

func (c *Curves) read(b *Bucket, v, t int64) {
	if v == history.BadValue {
		return
	}
	if at, ok := c.acked[v]; ok {
		delete(c.acked, v)
		lag := max(t-at, 0)
		b.Lag.add(lag)
		c.Lag.add(lag)
		c.FirstReads++
		c.unseen(b)
		return
	}
	if _, ok := c.inflight[v]; ok {
		c.inflight[v] = true
	}
}

func (c *Curves) unseen(b *Bucket) {
	n := int64(len(c.acked))
	b.Unseen = n
	b.UnseenMax = max(b.UnseenMax, n)
	c.MaxUnseen = max(c.MaxUnseen, n)
}

func (c *Curves) partOK(b *Bucket, p int32) {
	if p < 0 {
		return
	}
	i, ok := c.partIdx[p]
	if !ok {
		if len(c.StripParts) >= maxStripParts {
			return
		}
		i = len(c.StripParts)
		c.partIdx[p] = i
		c.StripParts = append(c.StripParts, p)
	}
	for len(b.PartOK) <= i {
		b.PartOK = append(b.PartOK, 0)
	}
	b.PartOK[i]++
}

// point keeps every PointStride-th fail or info completion; when the list
// is full, every other point is dropped and the stride doubles.
func (c *Curves) point(p LatPoint) {
	c.pointsSeen++
	if c.pointsSeen%c.PointStride != 0 {
		return
	}
	if len(c.Points) >= maxPoints {
		kept := c.Points[:0]
		for i, q := range c.Points {
			if i%2 == 1 {
				kept = append(kept, q)
			}
		}
		c.Points = kept
		c.PointStride *= 2
		if c.pointsSeen%c.PointStride != 0 {
			return
		}
	}
	c.Points = append(c.Points, p)
}
