package checker

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/isrlab/isrlab/history"
)

// Compact state keeps 10 million operations well under the memory budget:
// one valueState per distinct value (values are dense int64s in isrlab's
// workloads, so they index a slice), one int32 per partition offset.
const (
	denseValueLimit  = 1 << 27 // values in [0, limit) are indexed directly
	denseOffsetLimit = 1 << 28 // offsets below it live in a slice
	emptySlot        = -1
)

// Positions ("pos") locate ops: the op's index among the history's ops
// (Check maps it back to the line). They increase along the history; the
// per-value state keeps them in an int32 (maxOps).
type valueState struct {
	id  int64 // the value (BadValue for a record value that is not a number)
	off int64 // first offset it was seen at (ack or read), -1 if none
	// t is the completion time of the send's ok while the value is unseen
	// (flUnseen), then that of the first poll that read it (flRead).
	t    int64
	inv  int32 // position of the send's invoke, -1 if never sent
	done int32 // position of the send's completion, -1 if none
	read int32 // position of the first poll that returned it, -1 if none
	part int32 // partition of off, or of the send
	idx  int32 // its own index, which the offset slots hold
	st   history.Type
	fl   uint8
}

// maxOps is the most ops a history may have: positions are int32s.
const maxOps = math.MaxInt32

// floors are a partition's read and ack floors when a send was invoked (see
// floor), kept until the value's offset is known and checked against them.
type floors struct{ read, ack int64 }

const (
	flRead uint8 = 1 << iota
	flDupReported
	flAcked
	flDrained // returned by a drain poll
	flFloors  // analysis.floors holds the floors at the send's invocation
	flUnseen  // counted in the unseen series (ok, not yet read)
	flOK      // a send of it ended ok
)

// floor is the highest offset of a partition known to be in the log from
// operations that completed: acknowledged by a send (the ack floor) or
// returned by a poll (the read floor). A send invoked later must land above
// both. before is the floor from completions strictly before t, so that a
// send invoked at the same nanosecond as a completion is not ordered after
// it.
type floor struct {
	cur, before, t int64
}

func newFloor() floor { return floor{cur: -1, before: -1, t: math.MinInt64} }

func (f *floor) raise(off, t int64) {
	if t > f.t {
		f.before, f.t = f.cur, t
	}
	f.cur = max(f.cur, off)
}

// at returns the floor from completions strictly before t; -1 when there is
// none or the history goes back in time.
func (f *floor) at(t int64) int64 {
	switch {
	case t > f.t:
		return f.cur
	case t == f.t:
		return f.before
	}
	return -1
}

// partState is what one partition's offsets were seen holding: slots[off]
// is the index of the first value seen at off (emptySlot for none).
type partState struct {
	slots   int32s
	far     map[int64]int32
	maxRead int64
	// maxReadPos is the position of the first poll that read maxRead.
	maxReadPos int64
	readF      floor
	ackF       floor
}

func newPartState() *partState {
	return &partState{maxRead: -1, readF: newFloor(), ackF: newFloor()}
}

func (p *partState) get(off int64) int32 {
	if off < int64(p.slots.len()) {
		return p.slots.at(int(off))
	}
	if v, ok := p.far[off]; ok {
		return v
	}
	return emptySlot
}

// set stores v at off: in the slice while offsets grow steadily, in a map
// for offsets far beyond what was seen (a corrupt or sparse history must not
// allocate gigabytes).
func (p *partState) set(off int64, v int32) {
	if off < int64(p.slots.len()) {
		p.slots.set(int(off), v)
		return
	}
	if off < denseOffsetLimit && off <= 2*int64(p.slots.len())+1<<20 {
		p.slots.grow(int(off)+1, emptySlot)
		for o, fv := range p.far {
			if o < int64(p.slots.len()) {
				p.slots.set(int(o), fv)
				delete(p.far, o)
			}
		}
		p.slots.set(int(off), v)
		return
	}
	if p.far == nil {
		p.far = map[int64]int32{}
	}
	p.far[off] = v
}

// anyBetween returns the lowest known offset strictly between a and b.
func (p *partState) anyBetween(a, b int64) (int64, bool) {
	for o := a + 1; o < b && o < int64(p.slots.len()); o++ {
		if p.slots.at(int(o)) != emptySlot {
			return o, true
		}
	}
	best, found := int64(0), false
	for o := range p.far {
		if o > a && o < b && (!found || o < best) {
			best, found = o, true
		}
	}
	return best, found
}

type pending struct {
	pos      int64
	client   int64 // the op's number among client ops
	time     int64
	f        string
	value    int64
	hasValue bool
	part     int32
}

type mark struct {
	off int64
	pos int64
}

type procState struct {
	pend     pending
	hasPend  bool
	lastPoll marks
	lastSend marks
}

// marks is a mark per partition.
type marks struct{ indexed[mark] }

func (ms *marks) get(p int32) (mark, bool) { return ms.indexed.get(int(p)) }

func (ms *marks) set(p int32, m mark) { ms.indexed.set(int(p), m) }

type skipCandidate struct {
	part     int32
	proc     int
	from, to int64
	pos1     int64
	pos2     int64
}

type analysis struct {
	opt Options

	dense  int32s // value -> index+1 into vals
	sparse map[int64]int32
	// vals is chunked so that growing never copies (10M values).
	vals  [][]valueState
	nvals int
	// Record values that are not numbers each get a value of their own,
	// keyed by their text (id BadValue); rawText names them.
	raw     map[string]int32
	rawText map[*valueState]string
	// floors holds, per value whose send was invoked and whose offset is
	// not known yet, the floors at the invocation (flFloors): few at a
	// time, so they are not kept per value.
	floors floorTable

	parts    []*partState
	farParts map[int32]*partState // partition numbers too large for the slice
	procs    map[int]*procState
	// procFast caches procs for small process numbers.
	procFast []*procState

	skips []skipCandidate

	anomalies map[string]int64
	examples  map[string][]Example
	reported  map[[2]int64]struct{} // inconsistent offsets already counted

	stats   Stats
	drained bool // an ok drain poll was seen
	// drainedRange holds, per partition a drain read completely, the
	// [start, end) it read (f "drained").
	drainedRange map[int32][2]int64
	cluster      clusterTracker
	timeline     timeline
	avail        availTracker
	unavail      unavailTracker
	queue        queueTracker
	lat          map[string]*histogram
	// lin keeps what the linearizability pass needs from this one; nil
	// when it is off.
	lin *linLog
	// txn checks transactional ops; nil until the first.
	txn *txnAnalysis
	// delivery follows consumer groups' processed records and commits.
	delivery deliveryTracker
}

func (a *analysis) txnA() *txnAnalysis {
	if a.txn == nil {
		a.txn = newTxnAnalysis(a)
	}
	return a.txn
}

func newAnalysis(opt Options) *analysis {
	a := &analysis{
		opt:       opt,
		sparse:    map[int64]int32{},
		procs:     map[int]*procState{},
		anomalies: map[string]int64{},
		examples:  map[string][]Example{},
		reported:  map[[2]int64]struct{}{},
		lat:       map[string]*histogram{},
		unavail:   newUnavailTracker(opt.UnavailableAfter, opt.Partitions),
		queue:     newQueueTracker(opt.Partitions),
	}
	if opt.Linearizable != LinOff {
		a.lin = &linLog{}
	}
	return a
}

const valChunk = 1 << 16

func (a *analysis) val(i int32) *valueState { return &a.vals[i/valChunk][i%valChunk] }

func (a *analysis) newValue(v int64) int32 {
	if a.nvals%valChunk == 0 {
		a.vals = append(a.vals, make([]valueState, 0, valChunk))
	}
	last := &a.vals[len(a.vals)-1]
	i := int32(a.nvals)
	*last = append(*last, valueState{id: v, inv: -1, done: -1, read: -1, off: -1, part: -1, idx: i})
	a.nvals++
	return i
}

// value returns the state of value v. Values that grow steadily from zero
// (isrlab's workloads send 0, 1, 2, ...) index a slice; others, and absurd
// ones from a corrupt history, go to a map.
func (a *analysis) value(v int64, create bool) *valueState {
	if v >= 0 && v < int64(a.dense.len()) {
		if i := a.dense.at(int(v)); i != 0 {
			return a.val(i - 1)
		}
	}
	if len(a.sparse) > 0 {
		if i, ok := a.sparse[v]; ok {
			return a.val(i)
		}
	}
	if !create {
		return nil
	}
	if v >= 0 && v < denseValueLimit && v <= 2*int64(a.dense.len())+1<<20 {
		a.dense.grow(int(v)+1, 0)
		i := a.newValue(v)
		a.dense.set(int(v), i+1)
		return a.val(i)
	}
	i := a.newValue(v)
	a.sparse[v] = i
	return a.val(i)
}

// rawValue returns the state of a record value that is not a number: one
// per distinct text, so that two different texts are two unexpected values
// and not one value seen twice.
func (a *analysis) rawValue(text string) *valueState {
	if i, ok := a.raw[text]; ok {
		return a.val(i)
	}
	if a.raw == nil {
		a.raw, a.rawText = map[string]int32{}, map[*valueState]string{}
	}
	i := a.newValue(history.BadValue)
	a.raw[text], a.rawText[a.val(i)] = i, text
	return a.val(i)
}

// record returns the state of a polled record's value.
func (a *analysis) record(r *history.Record) *valueState {
	if r.Value == history.BadValue {
		return a.rawValue(r.Raw)
	}
	return a.value(r.Value, true)
}

// describe names a value in notes: the number, or the quoted text of a
// value that is not one.
func (a *analysis) describe(vs *valueState) string {
	if t, ok := a.rawText[vs]; ok {
		return fmt.Sprintf("%q (not a number)", t)
	}
	return fmt.Sprint(vs.id)
}

func (a *analysis) textOf(vs *valueState) string { return a.rawText[vs] }

func (a *analysis) part(p int32) *partState {
	if p >= 1<<16 {
		// A corrupt history must not make the checker allocate billions of
		// partitions.
		ps := a.farParts[p]
		if ps == nil {
			if a.farParts == nil {
				a.farParts = map[int32]*partState{}
			}
			ps = newPartState()
			a.farParts[p] = ps
		}
		return ps
	}
	for int(p) >= len(a.parts) {
		a.parts = append(a.parts, newPartState())
	}
	return a.parts[p]
}

func (a *analysis) proc(id int) *procState {
	if id < len(a.procFast) && a.procFast[id] != nil {
		return a.procFast[id]
	}
	ps := a.procs[id]
	if ps == nil {
		ps = &procState{}
		a.procs[id] = ps
	}
	if id < 1<<16 {
		for id >= len(a.procFast) {
			a.procFast = append(a.procFast, nil)
		}
		a.procFast[id] = ps
	}
	return ps
}

func (a *analysis) flag(kind string, ex Example) {
	a.anomalies[kind]++
	if len(a.examples[kind]) < a.opt.MaxExamples {
		a.examples[kind] = append(a.examples[kind], ex)
	}
}

func i64p(v int64) *int64 { return &v }

// add processes the op at position pos (0-based among the history's ops).
func (a *analysis) add(op *history.Op, pos int64) {
	a.stats.Ops++
	switch {
	case op.Process == history.Nemesis:
		a.stats.FaultOps++
		a.avail.fault(op)
		return
	case op.Process == history.Cluster:
		a.stats.StateEvents++
		if op.F == history.FState {
			a.cluster.add(op)
		}
		return
	case op.Process < 0:
		a.stats.Ignored++
		return
	}
	a.stats.ClientOps++
	if a.lin != nil && a.opt.Linearizable == LinAuto && a.opt.LinMaxOps > 0 && a.stats.ClientOps > int64(a.opt.LinMaxOps) {
		a.lin = nil // skipped: keep nothing for it
	}
	a.queue.seen(op.Time)
	ps := a.proc(op.Process)
	if op.Type == history.Invoke {
		ps.pend = pending{pos: pos, client: a.stats.ClientOps - 1, time: op.Time, f: op.F, value: op.Value, hasValue: op.HasValue, part: op.Partition}
		ps.hasPend = true
		if a.lin != nil {
			a.lin.invoke(op)
		}
		if op.F == history.FSend {
			a.unavail.invoked(op.Time)
		}
		if op.F == history.FSend && op.HasValue {
			a.invokeSend(op, pos)
		}
		if op.F == history.FTxn || op.F == history.FTxnDrain {
			a.txnA().add(op, pos, nil)
		}
		return
	}
	// Events such as a rebalance may land between a poll's invoke and its
	// completion: only the completion of the same f closes the invocation.
	var inv *pending
	if ps.hasPend && ps.pend.f == op.F {
		inv = &ps.pend
		ps.hasPend = false
	}
	if a.lin != nil {
		a.lin.complete(op, inv)
	}
	if inv != nil && (op.F == history.FTxn || op.F == history.FTxnDrain) {
		a.avail.record(inv.time, op.Type == history.OK)
		if op.Type == history.OK {
			a.latency(op.F, op.Time-inv.time)
		}
	}
	if inv != nil && (op.F == history.FSend || op.F == history.FPoll) {
		a.avail.record(inv.time, op.Type == history.OK)
		n := 0
		for _, pr := range op.Reads {
			n += len(pr.Records)
		}
		a.timeline.add(op, n)
		if op.Type == history.OK {
			a.latency(op.F, op.Time-inv.time)
		}
	}
	switch op.F {
	case history.FTxn, history.FTxnDrain:
		a.txnA().add(op, pos, inv)
	case history.FSend:
		a.send(op, pos, inv, ps)
	case history.FPoll, history.FDrain:
		a.poll(op, pos, inv, ps)
		if op.F == history.FDrain && op.Type == history.OK {
			a.drained = true
		}
		if op.F == history.FPoll && op.Type == history.OK {
			a.delivery.polled(op, pos)
		}
	case history.FProcessed:
		a.processed(op, pos)
	case history.FCommit:
		if !a.delivery.commit(op, pos) {
			a.stats.Ignored++
		}
	case history.FDrained:
		if op.Type == history.OK && op.Partition >= 0 && op.HasValue {
			if a.drainedRange == nil {
				a.drainedRange = map[int32][2]int64{}
			}
			a.drainedRange[op.Partition] = [2]int64{op.Value, op.Offset}
		}
		if op.Key != "" {
			a.txnA().drainedKey(op)
		}
	case history.FAssign, history.FSubscribe, history.FRebalance, history.FSeek:
		if op.F == history.FSubscribe {
			a.delivery.subscribe(op)
		}
		if op.Type != history.Fail {
			ps.lastPoll.reset()
			if a.txn != nil {
				a.txn.reset(op.Process)
			}
		}
	case history.FCrash:
		ps.lastPoll.reset()
		ps.lastSend.reset()
		if a.txn != nil {
			a.txn.reset(op.Process)
		}
	default:
		a.stats.Ignored++
	}
}

// invokeSend notes the invocation of a send of a value: a value some poll
// returned before this invocation is a future read; otherwise the
// partition's floors are kept, to check the offset the value lands at.
func (a *analysis) invokeSend(op *history.Op, pos int64) {
	vs := a.value(op.Value, true)
	if vs.inv >= 0 {
		return
	}
	vs.inv = int32(pos)
	if vs.part < 0 && op.Partition >= 0 {
		vs.part = op.Partition
	}
	if vs.fl&flRead != 0 {
		if vs.t < op.Time {
			a.flag(FutureRead, Example{Partition: vs.part, Value: i64p(vs.id), Offset: optOff(vs),
				Note: fmt.Sprintf("value %d was read by a poll that completed at %s, before its send was invoked at %s",
					vs.id, fmtNanos(vs.t), fmtNanos(op.Time)),
				positions: sorted(int64(vs.read), pos)})
		}
		return
	}
	if vs.off >= 0 || op.Partition < 0 {
		return
	}
	p := a.part(op.Partition)
	a.floors.put(vs.idx, floors{read: p.readF.at(op.Time), ack: p.ackF.at(op.Time)})
	vs.fl |= flFloors
}

// placed checks the offset a value was first seen at against the floors of
// its partition when its send was invoked: the log only grows at its end, so
// a send must land above every offset that an earlier-completed operation
// had seen in the log. own is set when the ack is already a
// nonmonotonic-send of its process, which names that case.
func (a *analysis) placed(vs *valueState, part int32, off, pos int64, own bool) {
	if vs.fl&flFloors == 0 {
		return
	}
	vs.fl &^= flFloors
	f, _ := a.floors.take(vs.idx)
	if part != vs.part {
		return // the floors are those of the partition the send named
	}
	how := "acknowledged"
	if vs.fl&flAcked == 0 {
		how = "read"
	}
	switch {
	case off <= f.read:
		ex := Example{Partition: part, Value: i64p(vs.id), Offsets: []int64{f.read, off},
			Note: fmt.Sprintf("value %d was %s at offset %d of partition %d, though a poll that completed before its send was invoked had read offset %d",
				vs.id, how, off, part, f.read)}
		ex.positions = sorted(a.witness(part, f.read, true), int64(vs.inv), pos)
		a.flag(SendBelowRead, ex)
	case off <= f.ack && !own:
		ex := Example{Partition: part, Value: i64p(vs.id), Offsets: []int64{f.ack, off},
			Note: fmt.Sprintf("value %d was %s at offset %d of partition %d, though a send acknowledged at offset %d had completed before it was invoked",
				vs.id, how, off, part, f.ack)}
		ex.positions = sorted(a.witness(part, f.ack, false), int64(vs.inv), pos)
		a.flag(NonmonotonicSendRealtime, ex)
	}
}

// witness returns the position of the operation that put offset off of part
// into a floor: the first poll that read it, or the send acknowledged there.
func (a *analysis) witness(part int32, off int64, read bool) int64 {
	cur := a.part(part).get(off)
	if cur == emptySlot {
		return -1
	}
	w := a.val(cur)
	switch {
	case read && w.read >= 0:
		return int64(w.read)
	case !read && w.fl&flAcked != 0 && w.off == off:
		return int64(w.done)
	}
	return -1
}

func (a *analysis) send(op *history.Op, pos int64, inv *pending, ps *procState) {
	a.stats.Sends++
	value, has := op.Value, op.HasValue
	part := op.Partition
	if inv != nil {
		if !has {
			value, has = inv.value, inv.hasValue
		}
		if part < 0 {
			part = inv.part
		}
	}
	switch op.Type {
	case history.OK:
		a.stats.SendsOK++
	case history.Fail:
		a.stats.SendsFail++
	case history.Info:
		a.stats.SendsInfo++
	}
	if op.Type == history.OK || op.Type == history.Fail || op.Type == history.Info {
		start := op.Time
		if inv != nil {
			start = inv.time
		}
		a.unavail.completed(part, start, op.Time, op.Type == history.OK)
	}
	if !has {
		return
	}
	vs := a.value(value, true)
	if vs.inv < 0 && inv != nil {
		vs.inv = int32(inv.pos)
	}
	vs.done, vs.st = int32(pos), op.Type
	if part >= 0 && vs.part < 0 {
		vs.part = part
	}
	if op.Type == history.OK && vs.fl&flOK == 0 {
		vs.fl |= flOK
		if vs.fl&flRead == 0 {
			vs.fl |= flUnseen
			vs.t = op.Time
			a.queue.acked(vs.part, op.Time)
		} else {
			a.queue.lag(vs.part, vs.t, 0) // read before its ack came back
		}
	}
	if op.Type != history.OK || op.Offset < 0 || part < 0 {
		return
	}
	vs.fl |= flAcked
	own := false
	if last, ok := ps.lastSend.get(part); ok && op.Offset <= last.off {
		p := op.Process
		own = true
		a.flag(NonmonotonicSend, Example{Partition: part, Offsets: []int64{last.off, op.Offset}, Process: &p,
			Note:      fmt.Sprintf("process %d's send acknowledged at offset %d after its earlier send at offset %d", p, op.Offset, last.off),
			positions: []int64{last.pos, pos}})
	}
	ps.lastSend.set(part, mark{off: op.Offset, pos: pos})
	a.observe(vs, part, op.Offset, pos, op.Time, false, own)
	a.part(part).ackF.raise(op.Offset, op.Time)
}

func (a *analysis) poll(op *history.Op, pos int64, inv *pending, ps *procState) {
	a.stats.Polls++
	if op.Type == history.OK {
		a.stats.PollsOK++
	}
	if op.Type != history.OK && op.Type != history.Info {
		return
	}
	drain := op.F == history.FDrain && op.Type == history.OK
	for _, pr := range op.Reads {
		part := pr.Partition
		hi := int64(-1)
		for i := range pr.Records {
			r := &pr.Records[i]
			a.stats.Records++
			vs := a.record(r)
			a.observe(vs, part, r.Offset, pos, op.Time, true, false)
			if drain {
				vs.fl |= flDrained
			}
			hi = max(hi, r.Offset)
		}
		if hi >= 0 {
			a.part(part).readF.raise(hi, op.Time)
		}
		if op.Type != history.OK || len(pr.Records) == 0 {
			continue
		}
		prev, had := ps.lastPoll.get(part)
		for i, r := range pr.Records {
			if i > 0 || had {
				from, fromPos := prev.off, prev.pos
				if i > 0 {
					from, fromPos = pr.Records[i-1].Offset, pos
				}
				switch {
				case r.Offset <= from:
					p := op.Process
					a.flag(NonmonotonicPoll, Example{Partition: part, Offsets: []int64{from, r.Offset}, Process: &p,
						Note:      fmt.Sprintf("process %d read offset %d after offset %d", p, r.Offset, from),
						positions: uniq(fromPos, pos)})
				case r.Offset > from+1:
					a.skips = append(a.skips, skipCandidate{part: part, proc: op.Process, from: from, to: r.Offset, pos1: fromPos, pos2: pos})
				}
			}
		}
		last := pr.Records[len(pr.Records)-1]
		ps.lastPoll.set(part, mark{off: last.Offset, pos: pos})
	}
}

func uniq(a, b int64) []int64 {
	if a == b {
		return []int64{a}
	}
	return []int64{a, b}
}

// observe records that the value of vs is at offset off of partition part.
func (a *analysis) observe(vs *valueState, part int32, off int64, pos, at int64, read, own bool) {
	ps := a.part(part)
	v := vs.id
	if read {
		if vs.fl&flRead == 0 {
			vs.fl |= flRead
			acked := vs.t
			vs.read, vs.t = int32(pos), at
			a.stats.ReadValues++
			if vs.fl&flUnseen != 0 {
				vs.fl &^= flUnseen
				a.queue.firstRead(vs.part, at, at-acked)
			}
		}
		if off > ps.maxRead {
			ps.maxRead, ps.maxReadPos = off, pos
		}
	}
	if off < 0 {
		return
	}
	switch cur := ps.get(off); {
	case cur == emptySlot:
		ps.set(off, vs.idx)
	case cur != vs.idx:
		key := [2]int64{int64(part), off}
		if _, done := a.reported[key]; !done {
			a.reported[key] = struct{}{}
			other := a.val(cur)
			ex := Example{Partition: part, Offset: i64p(off), Values: []int64{other.id, v},
				Note: fmt.Sprintf("offset %d of partition %d seen holding %s and %s", off, part, a.describe(other), a.describe(vs))}
			ex.positions = append(ex.positions, firstSeen(other)...)
			ex.positions = append(ex.positions, pos)
			a.flag(InconsistentOffsets, ex)
		}
	}
	if vs.off < 0 {
		a.placed(vs, part, off, pos, own)
		vs.off, vs.part = off, part
		return
	}
	if (vs.off != off || vs.part != part) && vs.fl&flDupReported == 0 {
		vs.fl |= flDupReported
		ex := Example{Partition: part, Offsets: []int64{vs.off, off},
			Note: fmt.Sprintf("value %s seen at offset %d of partition %d and at offset %d of partition %d", a.describe(vs), vs.off, vs.part, off, part)}
		if v != history.BadValue {
			ex.Value = i64p(v)
		} else {
			ex.Raw = a.textOf(vs)
		}
		ex.positions = append(firstSeen(vs), pos)
		a.flag(Duplicate, ex)
	}
}

// firstSeen returns the position of the op that first placed vs at its
// offset: its acknowledgement or its first read.
func firstSeen(vs *valueState) []int64 {
	if vs.fl&flAcked != 0 && vs.done >= 0 && (vs.read < 0 || vs.done < vs.read) {
		return []int64{int64(vs.done)}
	}
	if vs.read >= 0 {
		return []int64{int64(vs.read)}
	}
	return nil
}

// finish runs the end-of-history analyses and builds the verdict.
func (a *analysis) latency(f string, d int64) {
	h := a.lat[f]
	if h == nil {
		h = &histogram{}
		a.lat[f] = h
	}
	h.add(d)
}

func (a *analysis) finish() *Verdict {
	if a.txn != nil {
		a.txn.finish()
		st := a.txn.stats
		a.stats.Txn = &st
	}
	for _, c := range a.skips {
		if o, ok := a.part(c.part).anyBetween(c.from, c.to); ok {
			p := c.proc
			w := a.val(a.part(c.part).get(o))
			held := fmt.Sprint(w.id)
			if text, raw := a.rawText[w]; raw {
				held = fmt.Sprintf("%q", text)
			}
			a.flag(PollSkip, Example{Partition: c.part, Offsets: []int64{c.from, c.to}, Process: &p,
				Note: fmt.Sprintf("process %d read offset %d then %d, skipping offset %d which holds %s",
					p, c.from, c.to, o, held),
				positions: uniq(c.pos1, c.pos2)})
		}
	}
	a.skips = nil
	for i := 0; i < a.nvals; i++ {
		vs := a.val(int32(i))
		v := vs.id
		read := vs.fl&flRead != 0
		if read && vs.inv >= 0 && vs.st != history.OK && vs.st != history.Fail {
			a.stats.InfoRead++
		}
		switch {
		case read && vs.inv < 0:
			ex := Example{Partition: vs.part, Offset: i64p(vs.off), positions: []int64{int64(vs.read)}}
			if text, raw := a.rawText[vs]; raw {
				ex.Raw = text
				ex.Note = fmt.Sprintf("record value %q, not a number, was read but never sent", text)
			} else {
				ex.Value = i64p(v)
				ex.Note = fmt.Sprintf("value %d was read but never sent", v)
			}
			a.flag(Unexpected, ex)
		case read && vs.st == history.Fail:
			a.flag(AbortedRead, Example{Partition: vs.part, Value: i64p(v), Offset: i64p(vs.off),
				Note: fmt.Sprintf("value %d was read although its send failed", v), positions: sorted(int64(vs.inv), int64(vs.done), int64(vs.read))})
		case read && vs.fl&flDrained == 0 && a.gone(vs):
			// Read once, then gone: a complete drain of its partition did
			// not return it (truncated by an unclean election, a diverged
			// replica or a power loss). A read value was committed (below
			// the high watermark), so this is lost data whatever its send
			// said.
			how := "acknowledged and read"
			switch vs.st {
			case history.Info:
				how = "read (its send ended info)"
			case history.TypeNone:
				how = "read (its send never completed)"
			}
			a.flag(LostWrite, Example{Partition: vs.part, Value: i64p(v), Offset: i64p(vs.off),
				Note:      fmt.Sprintf("value %d, %s at offset %d, is missing from the complete final drain of partition %d", v, how, vs.off, vs.part),
				positions: sorted(int64(vs.inv), int64(vs.done), int64(vs.read))})
		case !read && vs.st == history.OK:
			// Only an ok send is known written: an unread info send may never have been.
			if vs.fl&flAcked != 0 && a.gone(vs) {
				a.flag(LostWrite, Example{Partition: vs.part, Value: i64p(v), Offset: i64p(vs.off),
					Note:      fmt.Sprintf("value %d acknowledged at offset %d is missing from the complete final drain of partition %d", v, vs.off, vs.part),
					positions: sorted(int64(vs.inv), int64(vs.done))})
			} else if vs.fl&flAcked != 0 && vs.part >= 0 && vs.off <= a.part(vs.part).maxRead {
				a.flag(LostWrite, Example{Partition: vs.part, Value: i64p(v), Offset: i64p(vs.off),
					Note: fmt.Sprintf("value %d acknowledged at offset %d was never read, though offset %d of partition %d was",
						v, vs.off, a.part(vs.part).maxRead, vs.part),
					positions: sorted(int64(vs.inv), int64(vs.done), a.part(vs.part).maxReadPos)})
			} else {
				a.flag(Unseen, Example{Partition: vs.part, Value: i64p(v), Offset: optOff(vs),
					Note: fmt.Sprintf("value %d was acknowledged but never read", v), positions: sorted(int64(vs.inv), int64(vs.done))})
			}
		}
		if vs.inv >= 0 && vs.done < 0 {
			a.stats.SendsPending++
		}
	}
	a.stats.Values = int64(a.nvals)
	for _, ps := range a.parts {
		if ps.maxRead >= 0 || ps.slots.len() > 0 {
			a.stats.Partitions++
		}
	}
	a.stats.Partitions += len(a.farParts)
	for _, ps := range a.procs {
		if !ps.hasPend {
			continue
		}
		if ps.pend.f == history.FSend {
			a.unavail.pendingAt(ps.pend.part, ps.pend.time)
		}
	}

	v := &Verdict{
		Anomalies:      a.anomalies,
		Examples:       a.examples,
		Stats:          a.stats,
		Availability:   a.avail.result(),
		Unavailability: a.unavail.result(),
		Cluster:        a.cluster.result(),
		Timeline:       a.timeline.result(a.avail.faultWindows()),
		Latency:        map[string]Quantiles{},
	}
	v.Unseen, v.RealtimeLag = a.queue.result()
	v.Delivery = a.finishDelivery(v.Unseen.BucketSeconds, v.Unseen.Buckets)
	for f, h := range a.lat {
		v.Latency[f] = h.quantiles()
	}
	v.Valid = Valid
	for kind, n := range a.anomalies {
		if n > 0 && Invalidating(kind) {
			v.Valid = Invalid
		}
	}
	if a.txn != nil {
		if a.txn.invalid {
			v.Valid = Invalid
		}
		if st := a.txn.stats; st.OK+st.InfoRead == 0 && v.Valid == Valid {
			// Nothing committed: nothing a transaction promises was put
			// to the test.
			v.Valid = Unknown
			v.Notes = append(v.Notes, fmt.Sprintf("no transaction committed (%d failed, %d unknown): nothing transactional was checked", st.Fail, st.Info))
		}
		v.Notes = append(v.Notes, a.txn.notes...)
		for _, k := range cycleAnomalies {
			if a.anomalies[k] > 0 {
				v.Notes = append(v.Notes, "G0, G1c, G-single and G2-item cycles are reported, not judged: Kafka's transactions allow them (a record takes its offset when sent, not when its transaction commits); an expectation can bound their counts")
				break
			}
		}
	}
	if a.anomalies[Redelivered]+a.anomalies[Skipped] > 0 {
		v.Notes = append(v.Notes, "redelivered and skipped records are reported, not judged: they describe the consumer group's commit configuration, not the broker; an expectation can bound their counts")
	}
	if v.Valid == Valid && a.anomalies[Unseen] > 0 {
		// Without a final drain an acknowledged value may simply not have
		// been read yet: unseen proves nothing then.
		if a.drained {
			v.Valid = Invalid
		} else {
			v.Valid = Unknown
			v.Notes = append(v.Notes, "acknowledged values were not read and the history has no final drain (f \"drain\"): lost or not yet read cannot be told apart")
		}
	}
	return v
}

func optOff(vs *valueState) *int64 {
	if vs.off < 0 {
		return nil
	}
	return i64p(vs.off)
}

func sorted(ps ...int64) []int64 {
	out := ps[:0]
	for _, p := range ps {
		if p >= 0 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return slices.Compact(out)
}

// fmtNanos prints a history time (nanoseconds from the start) as seconds.
func fmtNanos(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', -1, 64) + " s"
}

// gone reports whether a value is missing from a complete drain of its
// partition that started at or below its offset.
func (a *analysis) gone(vs *valueState) bool {
	if vs.part < 0 || vs.off < 0 {
		return false
	}
	r, ok := a.drainedRange[vs.part]
	return ok && vs.off >= r[0]
}
