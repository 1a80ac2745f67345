package checker

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/isrlab/isrlab/history"
)

// LinResult is the outcome of the linearizability check of each partition
// against a log model: a send is appended at the next offset, and a poll
// returns records that are in the log at its linearization point. "Next"
// counts only offsets that some operation observed (acknowledged or read):
// offsets nobody observed belong to writes the history cannot place (an
// info send never read) and are skipped.
//
// Each partition's history is cut into pieces at quiescent points, where no
// operation on the partition is in flight: every operation before such a
// point returned before every operation after it was invoked, so the
// pieces linearize one after the other, and since every send of a piece is
// appended, the log a piece leaves behind is known without searching it.
// Pieces are checked independently and in parallel, each starting from that
// log; records a poll returns from earlier pieces are checked against it
// directly. An info send that was read took effect before the first poll
// that returned it and before any operation that saw a later offset of its
// partition completed; that is its return in the search.
type LinResult struct {
	// Result is "ok", "illegal", "unknown" (a piece could not be decided;
	// see Unknown) or "skipped" (see Reason).
	Result     string `json:"result"`
	Reason     string `json:"reason,omitempty"`
	Ops        int    `json:"ops"`
	Partitions int    `json:"partitions"`
	// Pieces is the number of pieces the partitions' histories were cut
	// into; LargestPiece the operations of the largest.
	Pieces       int `json:"pieces"`
	LargestPiece int `json:"largest_piece_ops"`
	// UnknownPieces and IllegalPieces count the pieces without an answer
	// and those found illegal; Unknown and Illegal list the first 10 of
	// each in time (by Start). A piece is checked from the log the history
	// implies before it; after a piece whose sends skip or repeat an offset
	// of the log, the next starts after that piece's highest offset.
	UnknownPieces int        `json:"unknown_pieces"`
	IllegalPieces int        `json:"illegal_pieces"`
	Unknown       []LinPiece `json:"unknown,omitempty"`
	Illegal       []LinPiece `json:"illegal,omitempty"`
	// IllegalPartitions lists the partitions with an illegal piece.
	IllegalPartitions []int32 `json:"illegal_partitions,omitempty"`
	// Visualization names the HTML file written for an illegal history, when
	// the caller wrote one.
	Visualization string `json:"visualization,omitempty"`
}

// LinPiece names a piece of a partition's history: the Piece-th (from 0)
// of that partition, with Ops operations from Start (its first invocation)
// to End (its last return), in seconds. Reason says why a piece is unknown.
type LinPiece struct {
	Partition int32   `json:"partition"`
	Piece     int     `json:"piece"`
	Ops       int     `json:"ops"`
	Start     float64 `json:"start_s"`
	End       float64 `json:"end_s"`
	Reason    string  `json:"reason,omitempty"`
}

// maxListedPieces bounds LinResult.Unknown and LinResult.Illegal.
const maxListedPieces = 10

// logNode is one entry of the model's log, a persistent list so that a send
// is O(1) and states share their prefix. A piece's search starts from a base
// node that stands for the log the earlier pieces left: rank is the last
// rank they took, and no record matches it.
type logNode struct {
	prev  *logNode
	off   int64
	rank  int32 // position of off among the partition's observed offsets
	value int64
	hash  uint64
	base  bool
}

func (n *logNode) nextRank() int32 {
	if n == nil {
		return 0
	}
	return n.rank + 1
}

func mix(h uint64, a, b int64) uint64 {
	h ^= uint64(a) * 0x9e3779b97f4a7c15
	h = (h<<31 | h>>33) * 0xbf58476d1ce4e5b9
	h ^= uint64(b) * 0x94d049bb133111eb
	return (h<<29 | h>>35) * 0x9e3779b97f4a7c15
}

type linInput struct {
	part  int32
	send  bool
	value int64
	off   int64
	rank  int32
	recs  []linRec
}

// linRec is a record a poll returned, as the model sees it.
type linRec struct {
	Offset, Value int64
}

// logModel is the model of one partition's log. pieceModel gives it the
// initial state of a piece.
var logModel = porcupine.Model{
	Init: func() any { return (*logNode)(nil) },
	Step: func(state, input, _ any) (bool, any) {
		n := state.(*logNode)
		in := input.(*linInput)
		if in.send {
			if in.rank != n.nextRank() {
				return false, n
			}
			var h uint64
			if n != nil {
				h = n.hash
			}
			return true, &logNode{prev: n, off: in.off, rank: in.rank, value: in.value, hash: mix(h, in.off, in.value)}
		}
		// Records come in ascending offsets: match them from the last one,
		// walking back once (a drain poll of a long log stays linear).
		cur := n
		for i := len(in.recs) - 1; i >= 0; i-- {
			r := in.recs[i]
			if i < len(in.recs)-1 && r.Offset >= in.recs[i+1].Offset {
				cur = n // not ascending: start again from the head
			}
			for cur != nil && !cur.base && cur.off > r.Offset {
				cur = cur.prev
			}
			if cur == nil || cur.base || cur.off != r.Offset || cur.value != r.Value {
				return false, n
			}
		}
		return true, n
	},
	Equal: func(a, b any) bool {
		x, y := a.(*logNode), b.(*logNode)
		for x != y {
			if x == nil || y == nil || x.base || y.base || x.off != y.off || x.value != y.value || x.hash != y.hash {
				return false
			}
			x, y = x.prev, y.prev
		}
		return true
	},
	Hash: func(s any) uint64 {
		if n := s.(*logNode); n != nil {
			return n.hash
		}
		return 0
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(*linInput)
		if in.send {
			return fmt.Sprintf("send(%d) -> %d", in.value, in.off)
		}
		var b strings.Builder
		b.WriteString("poll -> [")
		for i, r := range in.recs {
			if i == 8 {
				fmt.Fprintf(&b, " ... %d more", len(in.recs)-i)
				break
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%d", r.Offset, r.Value)
		}
		b.WriteByte(']')
		return b.String()
	},
	DescribeState: func(s any) string {
		n := s.(*logNode)
		var items []string
		for i := 0; n != nil && !n.base && i < 6; i, n = i+1, n.prev {
			items = append(items, fmt.Sprintf("%d:%d", n.off, n.value))
		}
		if n != nil {
			items = append(items, "...")
		}
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
		return "[" + strings.Join(items, " ") + "]"
	},
}

// pieceModel is logModel starting from the log of base ranks that earlier
// pieces appended.
func pieceModel(base int32) porcupine.Model {
	m := logModel
	if base > 0 {
		start := &logNode{rank: base - 1, off: math.MinInt64, base: true}
		m.Init = func() any { return start }
	}
	return m
}

// linSearch is the search of the first illegal piece, for Visualize: its
// model starts from the piece's base.
type linSearch struct {
	model porcupine.Model
	info  porcupine.LinearizationInfo
}

// linOp is one operation of the model: a send, or the records one poll
// returned from one partition.
type linOp struct {
	proc      int
	send      bool
	value     int64
	off       int64
	rank      int32
	call, ret int64
	seq       int64 // emission order, to sort deterministically
	recs      []linRec
}

// linPiece is a finished piece: base is the rank its first send takes.
type linPiece struct {
	part  int32
	index int
	base  int32
	ops   []linOp
}

func (p *linPiece) span() (float64, float64) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, o := range p.ops {
		lo, hi = min(lo, o.call), max(hi, o.ret)
	}
	return secs(lo), secs(hi)
}

// linBatch is consecutive pieces of one partition, checked by one worker.
type linBatch struct {
	part   int32
	ranks  *linRanks
	pieces []linPiece
	// ops holds the pieces' operations, which are slices of it.
	ops []linOp
}

// linOver is the open piece of a partition that grew past the piece limit:
// it is counted, not kept, until a quiescent point ends it.
type linOver struct {
	index   int
	ops     int
	sends   int32
	top     int32
	start   int64
	maxRet  int64
	longest linOp
}

type linDeferred struct {
	op      linOp
	part    int32
	emitted bool
}

// linRanks gives the rank of an offset of one partition: how many observed
// offsets lie below it.
type linRanks struct {
	dense  int32s
	nDense int32
	far    []int64
}

func (r *linRanks) of(off int64) int32 {
	if off < 0 {
		return -1
	}
	if off < int64(r.dense.len()) {
		return r.dense.at(int(off))
	}
	// Far offsets all lie beyond the slice (partState.set moves them in).
	return r.nDense + int32(sort.Search(len(r.far), func(i int) bool { return r.far[i] >= off }))
}

type linPart struct {
	id    int32
	ranks *linRanks
	// table holds the value the model appends at each rank, from the sends
	// of finished pieces (the first one when several share a rank, which
	// makes the later one's piece illegal).
	table    []int64
	nextRank int32 // ranks taken by finished pieces
	// cutAt is the latest return in the finished pieces: an operation
	// invoked before it would overlap them (a history whose times go back).
	cutAt   int64
	buf     []linOp
	recs    []linRec // the chunk alloc cuts from
	pieces  int
	batch   *linBatch
	over    *linOver
	defHeap []*linDeferred // by offset
}

// linResolved is where a send whose completion did not give its offset
// was first read: at offset off of part, by a poll that completed at t;
// read is false when no poll returned it.
type linResolved struct {
	off, t int64
	part   int32
	read   bool
}

// linTally collects the workers' answers.
type linTally struct {
	mu           sync.Mutex
	unknown      int
	illegal      int
	unknownList  []LinPiece
	illegalList  []LinPiece
	illegalParts map[int32]bool
	vis          *linPiece
}

func (t *linTally) add(list *[]LinPiece, p LinPiece) {
	*list = append(*list, p)
	slices.SortFunc(*list, func(a, b LinPiece) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Piece, b.Piece))
	})
	if len(*list) > maxListedPieces {
		*list = (*list)[:maxListedPieces]
	}
}

// linChecker runs the second pass, over the first pass's linLog: it
// rebuilds the model's operations in history order, cuts each partition's
// at quiescent points and hands the pieces to the workers.
type linChecker struct {
	maxPiece int
	deadline time.Time
	// ranks, resolved and dangling are what the first pass saw of the
	// whole history: the observed offsets of each partition; where the
	// values of the sends without an offset (the linLog's evResolve
	// events, in order) were read; the invocations never completed, by
	// client op, with where their values were read.
	ranks    map[int32]*linRanks
	resolved []linResolved
	dangling map[int64]*linResolved
	parts    map[int32]*linPart
	partFast []*linPart // parts, indexed by the usual small partitions
	// inflight holds the invocation time of each process's model op in
	// flight.
	inflight inflight
	deferred map[int64]*linDeferred
	work     chan *linBatch
	// free takes back the batches the workers are done with.
	free    chan *linBatch
	tally   linTally
	seq     int64
	lines   int
	ops     int
	pieces  int
	largest int
	active  map[int32]bool
	// backwards is set when an operation was invoked before the end of a
	// piece already cut: the times of the history go back, and the cuts
	// may not be quiescent.
	backwards bool
}

// linBatchOps is the size at which a batch of pieces goes to a worker.
const linBatchOps = 1024

// linFlushEvery is how many client operations pass between cuts.
const linFlushEvery = 4096

// linearize checks linearizability with a second pass over what the first
// kept (a.lin). It takes the first pass's per-value and per-offset state,
// which is freed: the analysis is done with it once the verdict is built.
func (a *analysis) linearize() (LinResult, *linSearch) {
	switch {
	case a.opt.Linearizable == LinOff:
		return LinResult{Result: "skipped", Reason: "disabled"}, nil
	case a.opt.Linearizable == LinAuto && a.opt.LinMaxOps > 0 && a.stats.ClientOps > int64(a.opt.LinMaxOps):
		return LinResult{Result: "skipped", Reason: fmt.Sprintf("more than %d client operations; use --linearizable=on to force", a.opt.LinMaxOps)}, nil
	}
	workers := a.opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	c := &linChecker{maxPiece: a.opt.LinMaxPieceOps, deadline: time.Now().Add(a.opt.LinTimeout),
		ranks:    a.takeRanks(),
		parts:    map[int32]*linPart{},
		deferred: map[int64]*linDeferred{}, work: make(chan *linBatch, 2*workers), free: make(chan *linBatch, 4*workers),
		active: map[int32]bool{}}
	c.resolved, c.dangling = a.resolvedSends()
	log := a.lin
	a.lin = nil
	a.freeValues()
	// Most of the heap is the first pass's state, garbage now: collect it
	// before this pass allocates, or the heap grows to twice what the
	// first pass held before the collector comes round.
	runtime.GC()
	c.tally.illegalParts = map[int32]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range c.work {
				if c.check(b) {
					continue // it holds the piece to visualize
				}
				b.pieces, b.ops = b.pieces[:0], b.ops[:0]
				select {
				case c.free <- b:
				default:
				}
			}
		}()
	}
	var n int64
	log.events(func(ev *linEvent) {
		c.add(ev, n)
		n++
	})
	c.end()
	close(c.work)
	wg.Wait()
	return c.result()
}

// takeRanks turns every partition's offset slots into its ranks, in place,
// and hands them over.
func (a *analysis) takeRanks() map[int32]*linRanks {
	out := map[int32]*linRanks{}
	take := func(p int32, ps *partState) {
		r := &linRanks{dense: ps.slots}
		for _, c := range r.dense.chunks {
			for o, v := range c {
				c[o] = r.nDense
				if v != emptySlot {
					r.nDense++
				}
			}
		}
		r.far = make([]int64, 0, len(ps.far))
		for o := range ps.far {
			r.far = append(r.far, o)
		}
		slices.Sort(r.far)
		ps.slots, ps.far = int32s{}, nil
		out[p] = r
	}
	for p, ps := range a.parts {
		take(int32(p), ps)
	}
	for p, ps := range a.farParts {
		take(p, ps)
	}
	return out
}

// resolvedSends returns where the values of the sends the pass must place
// were first read: those without an offset, in the order of their events,
// and those never completed, by client op.
func (a *analysis) resolvedSends() ([]linResolved, map[int64]*linResolved) {
	find := func(v int64) linResolved {
		if vs := a.value(v, false); vs != nil && vs.fl&flRead != 0 && vs.off >= 0 && vs.part >= 0 {
			return linResolved{off: vs.off, t: vs.t, part: vs.part, read: true}
		}
		return linResolved{}
	}
	out := make([]linResolved, len(a.lin.resolve))
	for i, v := range a.lin.resolve {
		out[i] = find(v)
	}
	a.lin.resolve = nil
	dangling := map[int64]*linResolved{}
	for _, ps := range a.procs {
		if ps.hasPend {
			r := find(ps.pend.value)
			if ps.pend.f != history.FSend || !ps.pend.hasValue {
				r.read = false
			}
			dangling[ps.pend.client] = &r
		}
	}
	return out, dangling
}

// freeValues drops the per-value state once the verdict no longer needs it.
func (a *analysis) freeValues() {
	a.vals, a.dense, a.sparse, a.raw, a.rawText = nil, int32s{}, nil, nil, nil
}

// noValue marks a rank of linPart.table no finished piece's send took.
const noValue = math.MinInt64 + 1

func (c *linChecker) part(p int32) *linPart {
	if p >= 0 && int(p) < len(c.partFast) && c.partFast[p] != nil {
		return c.partFast[p]
	}
	lp := c.parts[p]
	if lp != nil {
		return lp
	}
	lp = &linPart{id: p, cutAt: math.MinInt64}
	r := c.ranks[p]
	if r == nil {
		r = &linRanks{}
	}
	lp.ranks = r
	lp.table = make([]int64, int(r.nDense)+len(r.far))
	for i := range lp.table {
		lp.table[i] = noValue
	}
	c.parts[p] = lp
	if p >= 0 && p < 1<<16 {
		for int(p) >= len(c.partFast) {
			c.partFast = append(c.partFast, nil)
		}
		c.partFast[p] = lp
	}
	return lp
}

func isModelF(f string) bool {
	return f == history.FSend || f == history.FPoll || f == history.FDrain
}

// add is the second pass's view of the n-th client op (counted from 0).
func (c *linChecker) add(ev *linEvent, n int64) {
	c.lines++
	if c.lines%linFlushEvery == 0 {
		c.flush()
	}
	if ev.kind == evInvoke {
		c.inflight.del(ev.proc) // superseded: it never completes
		switch {
		case len(c.dangling) > 0 && c.dangling[n] != nil:
			if ev.flags&evValue != 0 {
				c.resolve(*c.dangling[n], ev.proc, ev.value, history.Info, ev.time, ev.time)
			}
		case ev.flags&evModel != 0:
			c.inflight.set(ev.proc, ev.time)
		}
		return
	}
	if ev.flags&evPaired != 0 {
		c.inflight.del(ev.proc)
	}
	switch ev.kind {
	case evSend:
		c.emit(ev.part, linOp{proc: ev.proc, send: true, value: ev.value, off: ev.off, call: ev.call, ret: ev.time}, ev.time)
	case evResolve:
		typ := history.Info
		if ev.flags&evOK != 0 {
			typ = history.OK
		}
		c.resolve(c.resolved[0], ev.proc, ev.value, typ, ev.call, ev.time)
		c.resolved = c.resolved[1:]
	case evPoll:
		for _, pr := range ev.reads {
			for _, r := range pr.recs {
				if len(c.deferred) == 0 {
					break
				}
				if d := c.deferred[r.Value]; d != nil && !d.emitted && r.Value != history.BadValue {
					c.release(d, ev.time)
				}
			}
			c.emit(pr.part, linOp{proc: ev.proc, recs: pr.recs, call: ev.call, ret: ev.time}, ev.time)
		}
	}
}

// resolve places a send whose offset its completion did not give (info, or
// ok without an offset, or never completed) where it was read (vs); one
// never read may or may not have happened and is left out. Its return is
// its first read (for an ok, its completion), or earlier: see release.
func (c *linChecker) resolve(vs linResolved, proc int, value int64, typ history.Type, call, now int64) {
	if !vs.read {
		return
	}
	op := linOp{proc: proc, send: true, value: value, off: vs.off, call: call, ret: now}
	if typ != history.OK {
		op.ret = max(vs.t, call)
	}
	if op.ret <= now {
		c.emit(vs.part, op, now)
		return
	}
	if d := c.deferred[value]; d != nil && !d.emitted {
		return // sent twice: the first one stands
	}
	d := &linDeferred{op: op, part: vs.part}
	c.deferred[value] = d
	lp := c.part(vs.part)
	lp.defHeap = append(lp.defHeap, d)
	heapUp(lp.defHeap, len(lp.defHeap)-1)
}

// release emits a deferred send that must have taken effect by now.
func (c *linChecker) release(d *linDeferred, now int64) {
	d.emitted = true
	delete(c.deferred, d.op.value)
	d.op.ret = max(d.op.call, min(d.op.ret, now))
	c.emit(d.part, d.op, now)
}

// emit adds a model operation on part that returned by now. Deferred sends
// at lower offsets come first: an operation that saw offset o of the log
// saw every lower offset appended.
func (c *linChecker) emit(part int32, op linOp, now int64) {
	if part < 0 {
		return
	}
	lp := c.part(part)
	hi := op.off
	if !op.send {
		hi = -1
		for _, r := range op.recs {
			hi = max(hi, r.Offset)
		}
	}
	for len(lp.defHeap) > 0 && (lp.defHeap[0].emitted || lp.defHeap[0].op.off < hi) {
		d := heapPop(&lp.defHeap)
		if !d.emitted {
			c.release(d, now)
		}
	}
	if op.send {
		op.rank = lp.ranks.of(op.off)
	} else {
		// Records of finished pieces are checked against their log here;
		// a poll left with none does not constrain the search.
		op.recs = lp.strip(op.recs, lp.nextRank, true)
		if len(op.recs) == 0 {
			return
		}
	}
	if op.call <= lp.cutAt {
		c.backwards = true
	}
	c.seq++
	op.seq = c.seq
	c.ops++
	if lp.over != nil && op.call <= lp.over.maxRet {
		lp.absorb(op)
		return
	}
	lp.buf = append(lp.buf, op)
	c.active[part] = true
}

// strip returns the records that are not those the log holds at ranks
// below base; a record below base that the log holds otherwise is kept, so
// that the search finds it illegal. copyOut copies the records (the op's are
// reused by the reader).
func (lp *linPart) strip(recs []linRec, base int32, copyOut bool) []linRec {
	keep := 0
	for _, r := range recs {
		if !lp.holds(r, base) {
			keep++
		}
	}
	if keep == len(recs) && !copyOut {
		return recs
	}
	out := lp.alloc(keep)[:0]
	for _, r := range recs {
		if !lp.holds(r, base) {
			out = append(out, r)
		}
	}
	return out
}

// alloc returns room for n records, cut from a chunk of the partition's
// (one allocation per poll cost more than the rest of the pass over it).
func (lp *linPart) alloc(n int) []linRec {
	if n > cap(lp.recs)-len(lp.recs) {
		lp.recs = make([]linRec, 0, max(4096, n))
	}
	from := len(lp.recs)
	lp.recs = lp.recs[:from+n]
	return lp.recs[from : from+n : from+n]
}

func (lp *linPart) holds(r linRec, base int32) bool {
	k := lp.ranks.of(r.Offset)
	return k >= 0 && k < base && int(k) < len(lp.table) && r.Value != history.BadValue && lp.table[k] == r.Value
}

func (lp *linPart) absorb(op linOp) {
	o := lp.over
	o.ops++
	o.maxRet = max(o.maxRet, op.ret)
	if op.ret-op.call > o.longest.ret-o.longest.call {
		o.longest = op
	}
	if op.send {
		o.sends++
		o.top = max(o.top, op.rank)
		lp.take(op)
	}
}

// advance moves the log's length past a finished piece that appended sends
// up to rank top. When they did not take the ranks that follow one another
// from the base, the piece is illegal by itself; the next piece then starts
// after its highest rank, so that one gap or overlap does not make every
// later piece illegal too.
func (lp *linPart) advance(sends, top int32) {
	if sends > 0 {
		lp.nextRank = max(lp.nextRank, top+1)
	}
}

// take records the value a finished piece appends at op's rank.
func (lp *linPart) take(op linOp) {
	if op.rank >= 0 && int(op.rank) < len(lp.table) && lp.table[op.rank] == noValue {
		lp.table[op.rank] = op.value
	}
}

// frontier is the earliest invocation of an operation that may still be
// emitted on part: one in flight, or a deferred send of part. No cut may be
// made at or after it.
func (c *linChecker) frontier() (int64, map[int32]int64) {
	f := c.inflight.earliest()
	byPart := map[int32]int64{}
	for _, d := range c.deferred {
		if cur, ok := byPart[d.part]; !ok || d.op.call < cur {
			byPart[d.part] = d.op.call
		}
	}
	return f, byPart
}

func (c *linChecker) flush() {
	f, byPart := c.frontier()
	for _, p := range slices.Sorted(mapKeys(c.active)) {
		lp := c.parts[p]
		pf := f
		if d, ok := byPart[p]; ok {
			pf = min(pf, d)
		}
		c.cut(lp, pf)
		if len(lp.buf) == 0 && lp.over == nil {
			delete(c.active, p)
		}
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// cut finishes every piece of part that ends before f.
func (c *linChecker) cut(lp *linPart, f int64) {
	buf := lp.buf
	sortByCall(buf)
	if lp.over != nil {
		i := 0
		for i < len(buf) && buf[i].call <= lp.over.maxRet {
			lp.absorb(buf[i])
			i++
		}
		buf = buf[i:]
		if lp.over.maxRet >= f {
			lp.buf = append(lp.buf[:0], buf...)
			return
		}
		c.finishOver(lp)
	}
	start := 0
	for start < len(buf) {
		j, maxRet := group(buf, start)
		big := c.maxPiece > 0 && j-start > c.maxPiece
		if maxRet >= f {
			// Open: later operations may still join it. One already too
			// big is counted from now on instead of kept.
			if big {
				c.startOver(lp, buf[start:j])
				start = j
			}
			break
		}
		if big {
			c.startOver(lp, buf[start:j])
			c.finishOver(lp)
		} else {
			c.finish(lp, buf[start:j])
		}
		start = j
	}
	tail := buf[start:]
	lp.buf = append(lp.buf[:0], tail...)
}

// sortByCall sorts operations by invocation, then emission. They come
// in the order of their returns, which is nearly that: an insertion sort
// moves little, and a history far from it goes to pdqsort.
func sortByCall(ops []linOp) {
	moves := 0
	for i := 1; i < len(ops); i++ {
		if !callBefore(&ops[i], &ops[i-1]) {
			continue
		}
		x := ops[i]
		j := i
		for ; j > 0 && callBefore(&x, &ops[j-1]); j-- {
			ops[j] = ops[j-1]
		}
		ops[j] = x
		if moves += i - j; moves > 8*len(ops) {
			slices.SortFunc(ops, func(a, b linOp) int { return cmp.Or(cmp.Compare(a.call, b.call), cmp.Compare(a.seq, b.seq)) })
			return
		}
	}
}

func callBefore(a, b *linOp) bool {
	return a.call < b.call || a.call == b.call && a.seq < b.seq
}

// group returns the end of the group of overlapping operations that starts
// at buf[start] (sorted by call) and its latest return.
func group(buf []linOp, start int) (int, int64) {
	maxRet := buf[start].ret
	j := start + 1
	for j < len(buf) && buf[j].call <= maxRet {
		maxRet = max(maxRet, buf[j].ret)
		j++
	}
	return j, maxRet
}

func (c *linChecker) finish(lp *linPart, ops []linOp) {
	if lp.batch != nil && len(lp.batch.ops)+len(ops) > cap(lp.batch.ops) {
		c.dispatch(lp)
	}
	if lp.batch == nil {
		lp.batch = c.newBatch(lp, len(ops))
	}
	b := lp.batch
	from := len(b.ops)
	b.ops = append(b.ops, ops...)
	piece := linPiece{part: lp.id, index: lp.pieces, base: lp.nextRank, ops: b.ops[from:len(b.ops):len(b.ops)]}
	lp.pieces++
	for _, o := range ops {
		lp.cutAt = max(lp.cutAt, o.ret)
	}
	c.pieces++
	c.largest = max(c.largest, len(ops))
	sends, top := int32(0), int32(-1)
	for i := range piece.ops {
		o := &piece.ops[i]
		if o.send {
			lp.take(*o)
			sends++
			top = max(top, o.rank)
		} else {
			o.recs = lp.strip(o.recs, piece.base, false)
		}
	}
	lp.advance(sends, top)
	b.pieces = append(b.pieces, piece)
	if len(b.ops) >= linBatchOps {
		c.dispatch(lp)
	}
}

func (c *linChecker) startOver(lp *linPart, ops []linOp) {
	lp.over = &linOver{index: lp.pieces, start: ops[0].call, maxRet: math.MinInt64, top: -1}
	lp.pieces++
	for _, op := range ops {
		lp.absorb(op)
	}
}

func (c *linChecker) finishOver(lp *linPart) {
	o := lp.over
	lp.over = nil
	c.dispatch(lp) // keep the pieces in order
	lp.advance(o.sends, o.top)
	lp.cutAt = max(lp.cutAt, o.maxRet)
	c.pieces++
	c.largest = max(c.largest, o.ops)
	what := "poll"
	if o.longest.send {
		what = fmt.Sprintf("send of %d", o.longest.value)
	}
	p := LinPiece{Partition: lp.id, Piece: o.index, Ops: o.ops, Start: secs(o.start), End: secs(o.maxRet),
		Reason: fmt.Sprintf("not searched: %d operations with no quiescent point between them (limit %d); the longest, process %d's %s, ran from %s to %s",
			o.ops, c.maxPiece, o.longest.proc, what, fmtNanos(o.longest.call), fmtNanos(o.longest.ret))}
	c.tally.mu.Lock()
	c.tally.unknown++
	c.tally.add(&c.tally.unknownList, p)
	c.tally.mu.Unlock()
}

// newBatch returns an empty batch for lp with room for n operations, one
// the workers gave back when there is one.
func (c *linChecker) newBatch(lp *linPart, n int) *linBatch {
	var b *linBatch
	select {
	case b = <-c.free:
	default:
		b = &linBatch{}
	}
	b.part, b.ranks = lp.id, lp.ranks
	if cap(b.ops) < n {
		b.ops = make([]linOp, 0, max(linBatchOps+linBatchOps/4, n))
	}
	return b
}

func (c *linChecker) dispatch(lp *linPart) {
	if lp.batch == nil {
		return
	}
	c.work <- lp.batch
	lp.batch = nil
}

// end finishes every piece once the history is over.
func (c *linChecker) end() {
	for len(c.deferred) > 0 {
		var first *linDeferred
		for _, d := range c.deferred {
			if first == nil || d.op.value < first.op.value {
				first = d
			}
		}
		c.release(first, first.op.ret)
	}
	c.inflight = inflight{}
	c.flush()
	for _, p := range slices.Sorted(mapKeys(c.parts)) {
		lp := c.parts[p]
		if lp.over != nil {
			c.finishOver(lp)
		}
		c.dispatch(lp)
	}
}

// check decides each piece of a batch: most by orderLegal, the others by a
// search. Past the deadline nothing more is decided. It reports whether the
// tally kept a piece of the batch.
func (c *linChecker) check(b *linBatch) (kept bool) {
	late := !time.Now().Before(c.deadline)
	for i := range b.pieces {
		p := &b.pieces[i]
		if !late && orderLegal(p, b.ranks) {
			continue
		}
		switch c.search(p.base, *p) {
		case porcupine.Ok:
		case porcupine.Unknown:
			info := pieceInfo(p)
			info.Reason = "the time budget (--lin-timeout) ran out"
			c.tally.mu.Lock()
			c.tally.unknown++
			c.tally.add(&c.tally.unknownList, info)
			c.tally.mu.Unlock()
		default:
			c.tally.mu.Lock()
			c.tally.illegalParts[b.part] = true
			c.tally.illegal++
			c.tally.add(&c.tally.illegalList, pieceInfo(p))
			if v := c.tally.vis; v == nil || earlier(p, v) {
				c.tally.vis = p
				kept = true
			}
			c.tally.mu.Unlock()
		}
	}
	return kept
}

// earlier orders pieces as LinResult.Illegal lists them.
func earlier(p, q *linPiece) bool {
	ps, _ := p.span()
	qs, _ := q.span()
	return cmp.Or(cmp.Compare(ps, qs), cmp.Compare(p.part, q.part), cmp.Compare(p.index, q.index)) < 0
}

func pieceInfo(p *linPiece) LinPiece {
	start, end := p.span()
	return LinPiece{Partition: p.part, Piece: p.index, Ops: len(p.ops), Start: start, End: end}
}

func pieceOps(pieces ...linPiece) []porcupine.Operation {
	n := 0
	for _, p := range pieces {
		n += len(p.ops)
	}
	ops := make([]porcupine.Operation, 0, n)
	for _, p := range pieces {
		for _, o := range p.ops {
			if !o.send && len(o.recs) == 0 {
				continue
			}
			in := &linInput{part: p.part, send: o.send, value: o.value, off: o.off, rank: o.rank, recs: o.recs}
			ops = append(ops, porcupine.Operation{ClientId: o.proc, Input: in, Call: o.call, Return: o.ret})
		}
	}
	return ops
}

func (c *linChecker) search(base int32, pieces ...linPiece) porcupine.CheckResult {
	left := time.Until(c.deadline)
	if left <= 0 {
		return porcupine.Unknown
	}
	return porcupine.CheckOperationsTimeout(pieceModel(base), pieceOps(pieces...), left)
}

func (c *linChecker) result() (LinResult, *linSearch) {
	t := &c.tally
	res := LinResult{Ops: c.ops, Partitions: len(c.parts), Pieces: c.pieces, LargestPiece: c.largest,
		UnknownPieces: t.unknown, IllegalPieces: t.illegal, Unknown: t.unknownList, Illegal: t.illegalList}
	for p := range t.illegalParts {
		res.IllegalPartitions = append(res.IllegalPartitions, p)
	}
	slices.Sort(res.IllegalPartitions)
	switch {
	case t.illegal > 0:
		res.Result = "illegal"
		v := t.vis
		s := &linSearch{model: pieceModel(v.base)}
		_, s.info = porcupine.CheckOperationsVerbose(s.model, pieceOps(*v), max(time.Until(c.deadline), time.Second))
		return res, s
	case c.backwards:
		res.Result = "unknown"
		res.Reason = "the history's times go back: an operation was invoked before the end of a piece already cut"
		return res, nil
	case t.unknown > 0:
		res.Result = "unknown"
		res.Reason = fmt.Sprintf("%d of %d pieces could not be decided; first: partition %d piece %d: %s",
			t.unknown, c.pieces, t.unknownList[0].Partition, t.unknownList[0].Piece, t.unknownList[0].Reason)
		return res, nil
	}
	res.Result = "ok"
	return res, nil
}

func heapUp(h []*linDeferred, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !deferredLess(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func heapPop(h *[]*linDeferred) *linDeferred {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && deferredLess(s[l], s[m]) {
			m = l
		}
		if r < len(s) && deferredLess(s[r], s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

func deferredLess(a, b *linDeferred) bool {
	return a.op.off < b.op.off || a.op.off == b.op.off && a.op.value < b.op.value
}

// HasVisualization reports whether the verdict can draw porcupine's HTML
// visualization (linearizability was found illegal).
func (v *Verdict) HasVisualization() bool { return v.lin != nil }

// Visualize writes porcupine's HTML visualization of the first illegal
// piece of the linearizability search.
func (v *Verdict) Visualize(w io.Writer) error {
	if v.lin == nil {
		return fmt.Errorf("no illegal linearizability result to visualize")
	}
	return porcupine.Visualize(v.lin.model, v.lin.info, w)
}
