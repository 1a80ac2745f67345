package checker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/isrlab/isrlab/history"
)

// Transactions (f "txn" and "txn-drain"; see package history) are checked
// after Jepsen's Kafka workload. Reads are the records of read_committed
// polls, whatever the outcome of the op that polled; a transaction counts
// as committed when it ended ok, or when it ended info after asking to
// commit (commit_at), or never completed, and a value it sent was read.
//
// These make the verdict invalid:
//
//   - aborted-read (Adya's G1a): a value was read whose transaction
//     definitely aborted (ended fail), or ended info without asking to
//     commit (no commit_at: an abort that was not confirmed).
//   - lost-write: a committed transaction's value that no poll returned,
//     although a later offset of its key was read or a complete drain
//     (f "drained") of its key covers it; or a value read once and missing
//     from a complete drain that covers its offset.
//   - duplicate: one value at two offsets (or keys).
//   - inconsistent-offsets: two values at one offset of a key.
//   - unexpected: a value read that no transaction sent.
//   - nonmonotonic-poll: a process read an offset of a key at or below
//     one it had read before (no assign, rebalance or crash between).
//   - precommitted-read: a transaction read a value it sent itself
//     (Jepsen's definition: read_committed hides a transaction's records
//     from everyone, its own consumer included, until it commits); or a
//     poll returned a value before the value's transaction asked to commit
//     (the reading op completed, or its own commit was requested, before
//     the writer's commit_at) or before the writer was invoked.
//   - G1b (intermediate read): a process read some values of a committed
//     transaction on a key and, reading on past them, not another of its
//     values on that key in between: a transaction seen half.
//   - txn-out-of-order: a process read a key past a committed
//     transaction's value without returning it, while returning values of
//     other transactions on both sides: a later transaction was visible
//     while an earlier committed one was not.
//   - eos-duplicate: a record consumed by two committed transactions of
//     one consumer group (each read it below the offsets it committed,
//     send-offsets): processed twice, which exactly-once forbids. An
//     unknown transaction's offsets committed when it did (as above).
//   - unseen (a committed value not read, with no read past it and no
//     complete drain of its key) makes the verdict unknown.
//
// The dependency graph between committed transactions that sent values
// (pure polls are not transactions and are not in it) has, as Jepsen
// infers them: ww edges from the log order of each key's values (T1's value
// directly before T2's), wr edges from each transaction's last read of a
// key to that value's writer, and rw edges from that last read to the
// writer of the next value in the key's log. Each strongly connected
// component (Tarjan) with more than one transaction is one anomaly, named
// after the most specific cycle it holds: G0 (ww edges only), G1c (ww and
// wr), G-single (exactly one rw) or G2-item (more); the example is a
// shortest such cycle. Kafka allows these cycles (a record takes its offset
// when it is sent, not when its transaction commits), so they are reported
// without making the verdict invalid, and an expectation can bound them,
// except a cycle made of wr edges alone: each of its transactions read a
// value the next committed before its own commit, which no order of commits
// allows. That makes the verdict invalid (noted in the verdict's notes).

// Transactional anomaly names; the others are shared with sends and polls.
const (
	PrecommittedRead = "precommitted-read"
	G1b              = "G1b"
	TxnOutOfOrder    = "txn-out-of-order"
	G0               = "G0"
	G1c              = "G1c"
	GSingle          = "G-single"
	G2Item           = "G2-item"
	EOSDuplicate     = "eos-duplicate"
)

// TxnAnomalyNames are the anomalies only transactional ops can show.
var TxnAnomalyNames = []string{PrecommittedRead, G1b, TxnOutOfOrder, EOSDuplicate, G0, G1c, GSingle, G2Item}

// cycleAnomalies are reported, not judged (see above).
var cycleAnomalies = []string{G0, G1c, GSingle, G2Item}

// Invalidating reports whether anomaly kind, counted once, makes a
// history invalid: the cycles, the delivery anomalies and unseen records
// are counted and left to expectations.
func Invalidating(kind string) bool {
	return kind != Unseen && !slices.Contains(cycleAnomalies, kind) && !slices.Contains(deliveryAnomalies, kind)
}

// TxnStats counts a history's transactional ops: transactions (ops that
// sent) by outcome, and pure polls.
type TxnStats struct {
	Txns       int64 `json:"txns"`
	OK         int64 `json:"ok"`
	Fail       int64 `json:"fail"`
	Info       int64 `json:"info"`
	Pending    int64 `json:"pending"`
	InfoRead   int64 `json:"info_committed_by_read"`
	Polls      int64 `json:"polls"`
	Values     int64 `json:"values_sent"`
	ValuesRead int64 `json:"values_read"`
	Keys       int   `json:"keys"`
	Nodes      int   `json:"graph_nodes"`
	Edges      int   `json:"graph_edges"`
}

type txState struct {
	index       int64
	pos, invPos int64
	inv, done   int64
	commitAt    int64
	proc        int
	typ         history.Type
	anyRead     bool
	sends       bool
	node        int32
	// finals are the last offset read per key, for a transaction that sent.
	finals []txFinal
}

type txFinal struct {
	key int32
	off int64
}

type txVal struct {
	writer  int32
	key     int32
	off     int64
	obsPos  int64 // where the offset was first seen
	readPos int64 // first read
	// readT is the earliest time by which a read of the value completed,
	// at readTPos.
	readT    int64
	readTPos int64
	read     bool
	drained  bool
	dupDone  bool
}

type txSlot struct {
	v   int64
	pos int64
	set bool
}

// denseLimit bounds the values and offsets indexed by slices; larger ones
// (a corrupt history) go to maps.
const denseLimit = 1 << 26

// txLog is one key's offsets: a slice for offsets from 0, a map beyond.
type txLog struct {
	dense  []txSlot
	sparse map[int64]txSlot
}

func (l *txLog) get(off int64) (txSlot, bool) {
	if off >= 0 && off < int64(len(l.dense)) {
		s := l.dense[off]
		return s, s.set
	}
	s, ok := l.sparse[off]
	return s, ok
}

func (l *txLog) put(off int64, s txSlot) {
	s.set = true
	if off >= 0 && off < denseLimit {
		if off >= int64(len(l.dense)) {
			l.dense = slices.Grow(l.dense, int(off)+1-len(l.dense))[:off+1]
		}
		l.dense[off] = s
		return
	}
	if l.sparse == nil {
		l.sparse = map[int64]txSlot{}
	}
	l.sparse[off] = s
}

// sorted returns the log in offset order.
func (l *txLog) sorted() sortedLog {
	var out sortedLog
	add := func(off int64, s txSlot) {
		out.offs = append(out.offs, off)
		out.vals = append(out.vals, s.v)
	}
	sp := slices.Sorted(maps.Keys(l.sparse))
	i := 0
	for ; i < len(sp) && sp[i] < 0; i++ {
		add(sp[i], l.sparse[sp[i]])
	}
	for off, s := range l.dense {
		if s.set {
			add(int64(off), s)
		}
	}
	for ; i < len(sp); i++ {
		add(sp[i], l.sparse[sp[i]])
	}
	return out
}

type txLast struct {
	off, v, pos int64
	flagged     int64 // the op position nonmonotonic-poll was last flagged at
}

type txProc struct {
	last map[int32]*txLast
	// invoked sends, for a completion that does not repeat them
	pend []history.MicroOp
}

type txSkip struct {
	key        int32
	proc       int32
	from, to   int64
	pos1, pos2 int64
}

// skipChunk is how many skips one chunk holds: chunks are never copied.
const skipChunk = 1 << 14

type txnAnalysis struct {
	a        *analysis
	keys     map[string]int32
	keyNames []string
	logs     []txLog
	maxRead  []int64
	maxPos   []int64
	drained  map[int32][2]int64
	txs      []txState
	// A value's state is vs[dense[v]-1], or vs[sparse[v]] for values
	// outside [0, denseLimit).
	dense    []int32
	sparse   map[int64]int32
	vs       []txVal
	procs    map[int]*txProc
	skips    [][]txSkip
	reported map[[2]int64]struct{}
	// groups holds, per consumer group, the committed transaction that
	// consumed each value; unsure what transactions of unknown outcome
	// consumed, judged in finish.
	groups  map[string]map[int64]txConsumer
	unsure  []txUnsure
	stats   TxnStats
	invalid bool
	notes   []string
}

func newTxnAnalysis(a *analysis) *txnAnalysis {
	return &txnAnalysis{a: a, keys: map[string]int32{}, sparse: map[int64]int32{}, procs: map[int]*txProc{},
		drained: map[int32][2]int64{}, reported: map[[2]int64]struct{}{}}
}

func (t *txnAnalysis) key(k string) int32 {
	if id, ok := t.keys[k]; ok {
		return id
	}
	id := int32(len(t.keyNames))
	t.keys[k] = id
	t.keyNames = append(t.keyNames, k)
	t.logs = append(t.logs, txLog{})
	t.maxRead = append(t.maxRead, -1)
	t.maxPos = append(t.maxPos, -1)
	return id
}

func (t *txnAnalysis) val(v int64) *txVal {
	i, ok := t.index(v)
	if !ok {
		i = int32(len(t.vs))
		t.vs = append(t.vs, txVal{writer: -1, key: -1, off: -1, obsPos: -1, readPos: -1, readT: math.MaxInt64, readTPos: -1})
		if v >= 0 && v < denseLimit {
			if v >= int64(len(t.dense)) {
				t.dense = slices.Grow(t.dense, int(v)+1-len(t.dense))[:v+1]
			}
			t.dense[v] = i + 1
		} else {
			t.sparse[v] = i
		}
	}
	return &t.vs[i]
}

// index returns where value v's state is.
func (t *txnAnalysis) index(v int64) (int32, bool) {
	if v >= 0 && v < int64(len(t.dense)) {
		i := t.dense[v] - 1
		return i, i >= 0
	}
	i, ok := t.sparse[v]
	return i, ok
}

func (t *txnAnalysis) proc(p int) *txProc {
	ps := t.procs[p]
	if ps == nil {
		ps = &txProc{last: map[int32]*txLast{}}
		t.procs[p] = ps
	}
	return ps
}

// reset forgets a process's read positions (assign, rebalance, crash).
func (t *txnAnalysis) reset(p int) {
	if ps := t.procs[p]; ps != nil {
		clear(ps.last)
	}
}

// drainedKey notes a complete drain of a key ([start, end)). Only an ok
// marker counts: an unknown one does not prove the drain reached the end.
func (t *txnAnalysis) drainedKey(op *history.Op) {
	if op.Type == history.OK && op.Key != "" && op.HasValue && op.Offset >= 0 {
		t.drained[t.key(op.Key)] = [2]int64{op.Value, op.Offset}
	}
}

// add takes a transactional op; inv is its invocation, if seen.
func (t *txnAnalysis) add(op *history.Op, pos int64, inv *pending) {
	ps := t.proc(op.Process)
	if op.Type == history.Invoke {
		ps.pend = ps.pend[:0]
		for _, m := range op.Txn {
			if m.F == history.MSend {
				ps.pend = append(ps.pend, m)
			}
		}
		return
	}
	tx := txState{index: op.Index, pos: pos, invPos: -1, inv: -1, done: op.Time, commitAt: op.CommitAt, proc: op.Process, typ: op.Type, node: -1}
	if inv != nil {
		tx.invPos, tx.inv = inv.pos, inv.time
	}
	id := int32(len(t.txs))
	sends := op.Txn
	hasSend := false
	for _, m := range sends {
		if m.F == history.MSend {
			hasSend = true
			break
		}
	}
	if !hasSend && len(ps.pend) > 0 {
		sends = ps.pend
	}
	ps.pend = ps.pend[:0]
	var own []int64
	for _, m := range sends {
		if m.F != history.MSend {
			continue
		}
		tx.sends = true
		own = append(own, m.Value)
		vs := t.val(m.Value)
		if vs.writer < 0 {
			vs.writer = id
			t.stats.Values++
		}
		k := t.key(m.Key)
		if vs.key < 0 {
			vs.key = k
		}
		if m.Offset >= 0 {
			t.observe(m.Value, k, m.Offset, pos)
		}
	}
	// When the reads happened, at the latest.
	readAt := op.Time
	if op.CommitAt > 0 && op.CommitAt < readAt {
		readAt = op.CommitAt
	}
	polled := false
	for mi := range op.Txn {
		m := &op.Txn[mi]
		if m.F != history.MPoll || m.Reads == nil {
			continue
		}
		polled = true
		for _, kr := range m.Reads {
			k := t.key(kr.Key)
			for _, r := range kr.Records {
				t.read(op, pos, id, k, r, readAt, own, ps, &tx)
			}
		}
	}
	// Counted by recorded outcome; InfoRead adds those judged committed.
	switch {
	case !tx.sends:
		if polled {
			t.stats.Polls++
		}
	case op.Type == history.OK:
		t.stats.Txns++
		t.stats.OK++
	case op.Type == history.Fail:
		t.stats.Txns++
		t.stats.Fail++
	default:
		t.stats.Txns++
		t.stats.Info++
	}
	if !tx.sends {
		tx.finals = nil
	}
	t.txs = append(t.txs, tx)
	switch op.Type {
	case history.OK:
		consumptions(op, func(c txConsumption) { t.consume(c, id, pos) })
	case history.Fail:
		// Definitely aborted: its offsets were not committed either.
	default:
		// Unknown: its offsets committed if it did, judged in finish.
		var cs []txConsumption
		consumptions(op, func(c txConsumption) { cs = append(cs, c) })
		if len(cs) > 0 {
			t.unsure = append(t.unsure, txUnsure{id: id, pos: pos, cs: cs})
		}
	}
}

func (t *txnAnalysis) read(op *history.Op, pos int64, id int32, k int32, r history.Record, readAt int64, own []int64, ps *txProc, tx *txState) {
	if r.Value == history.BadValue {
		t.flag(Unexpected, Example{Key: t.keyNames[k], Offset: i64p(r.Offset), Raw: r.Raw,
			Note: fmt.Sprintf("record value %q, not a number, was read from %s but never sent", r.Raw, t.keyNames[k]), positions: []int64{pos}})
		return
	}
	vs := t.observe(r.Value, k, r.Offset, pos)
	if !vs.read {
		t.stats.ValuesRead++
		vs.read, vs.readPos = true, pos
	}
	if readAt < vs.readT {
		vs.readT, vs.readTPos = readAt, pos
	}
	if op.F == history.FTxnDrain {
		vs.drained = true
	}
	if r.Offset > t.maxRead[k] {
		t.maxRead[k], t.maxPos[k] = r.Offset, pos
	}
	if slices.Contains(own, r.Value) {
		p := op.Process
		t.flag(PrecommittedRead, Example{Key: t.keyNames[k], Value: i64p(r.Value), Offset: i64p(r.Offset), Process: &p,
			Note: fmt.Sprintf("the transaction that sent value %d to %s read it before it committed", r.Value, t.keyNames[k]), positions: []int64{pos}})
	}
	last := ps.last[k]
	switch {
	case last == nil:
		ps.last[k] = &txLast{off: r.Offset, v: r.Value, pos: pos, flagged: -1}
	case r.Offset <= last.off:
		if last.flagged != pos {
			last.flagged = pos
			p := op.Process
			t.flag(NonmonotonicPoll, Example{Key: t.keyNames[k], Offsets: []int64{last.off, r.Offset}, Process: &p,
				Note:      fmt.Sprintf("process %d read offset %d of %s, then offset %d", p, last.off, t.keyNames[k], r.Offset),
				positions: uniq(last.pos, pos)})
		}
		last.off, last.v, last.pos = r.Offset, r.Value, pos
	default:
		if r.Offset > last.off+1 {
			if n := len(t.skips); n == 0 || len(t.skips[n-1]) == skipChunk {
				t.skips = append(t.skips, make([]txSkip, 0, skipChunk))
			}
			c := &t.skips[len(t.skips)-1]
			*c = append(*c, txSkip{key: k, from: last.off, to: r.Offset, pos1: last.pos, pos2: pos, proc: int32(op.Process)})
		}
		last.off, last.v, last.pos = r.Offset, r.Value, pos
	}
	for i := range tx.finals {
		if tx.finals[i].key == k {
			if r.Offset > tx.finals[i].off {
				tx.finals[i].off = r.Offset
			}
			return
		}
	}
	tx.finals = append(tx.finals, txFinal{key: k, off: r.Offset})
}

// flag reports an anomaly; the example's partition is its key's (-1 for
// a cycle, which has none).
func (t *txnAnalysis) flag(kind string, ex Example) {
	ex.Partition = -1
	if _, p, ok := history.ParseTxnKey(ex.Key); ok {
		ex.Partition = p
	}
	t.a.flag(kind, ex)
}

// txConsumption is one record a transaction consumed for a consumer
// group: read below the offset it committed for the record's key.
type txConsumption struct {
	group, key string
	rec        history.Record
}

// txUnsure holds what a transaction of unknown outcome consumed, until
// finish can judge whether it committed.
type txUnsure struct {
	id  int32
	pos int64
	cs  []txConsumption
}

// consumptions calls fn for each record op consumed for a consumer group
// (read below the offsets it committed, send-offsets).
func consumptions(op *history.Op, fn func(c txConsumption)) {
	for _, m := range op.Txn {
		if m.F != history.MSendOffsets {
			continue
		}
		for _, ko := range m.Offsets {
			for _, r := range op.Txn {
				for _, kr := range r.Reads {
					if kr.Key != ko.Key {
						continue
					}
					for _, rec := range kr.Records {
						if rec.Offset < ko.Offset && rec.Value != history.BadValue {
							fn(txConsumption{group: m.Group, key: kr.Key, rec: rec})
						}
					}
				}
			}
		}
	}
}

// consume checks a record that committed transaction id (at pos) consumed
// against the other committed transactions of its group.
func (t *txnAnalysis) consume(c txConsumption, id int32, pos int64) {
	if t.groups == nil {
		t.groups = map[string]map[int64]txConsumer{}
	}
	g := t.groups[c.group]
	if g == nil {
		g = map[int64]txConsumer{}
		t.groups[c.group] = g
	}
	prev, ok := g[c.rec.Value]
	switch {
	case !ok:
		g[c.rec.Value] = txConsumer{tx: id, pos: pos}
	case prev.tx != id:
		i, j := t.txs[prev.tx].index, t.txs[id].index
		t.flag(EOSDuplicate, Example{Key: c.key, Value: i64p(c.rec.Value), Offset: i64p(c.rec.Offset),
			Note: fmt.Sprintf("value %d at offset %d of %s was consumed by two committed transactions of group %q (txns %d and %d)",
				c.rec.Value, c.rec.Offset, c.key, c.group, min(i, j), max(i, j)),
			positions: sorted(prev.pos, pos)})
	}
}

type txConsumer struct {
	tx  int32
	pos int64
}

// observe records that value v is at offset off of key k.
func (t *txnAnalysis) observe(v int64, k int32, off, pos int64) *txVal {
	vs := t.val(v)
	switch {
	case vs.off < 0 && (vs.key < 0 || vs.key == k):
		vs.key, vs.off, vs.obsPos = k, off, pos
	case (vs.off != off || vs.key != k) && !vs.dupDone:
		vs.dupDone = true
		where := fmt.Sprintf("offsets %d and %d of %s", vs.off, off, t.keyNames[k])
		if vs.key != k {
			where = fmt.Sprintf("offset %d of %s and offset %d of %s", vs.off, t.keyNames[max(vs.key, 0)], off, t.keyNames[k])
		}
		t.flag(Duplicate, Example{Key: t.keyNames[k], Value: i64p(v), Offsets: []int64{vs.off, off},
			Note: fmt.Sprintf("value %d is at %s", v, where), positions: uniq(vs.obsPos, pos)})
	}
	log := &t.logs[k]
	if s, ok := log.get(off); !ok {
		log.put(off, txSlot{v: v, pos: pos})
	} else if s.v != v {
		id := [2]int64{int64(k), off}
		if _, done := t.reported[id]; !done {
			t.reported[id] = struct{}{}
			t.flag(InconsistentOffsets, Example{Key: t.keyNames[k], Offset: i64p(off), Values: []int64{s.v, v},
				Note: fmt.Sprintf("offset %d of %s holds value %d and value %d", off, t.keyNames[k], s.v, v), positions: uniq(s.pos, pos)})
		}
	}
	return vs
}

// committed reports whether transaction w committed: ok, or unknown with
// a value read.
func (t *txnAnalysis) committed(w int32) bool {
	if w < 0 {
		return false
	}
	tx := &t.txs[w]
	return tx.typ == history.OK || (tx.typ != history.Fail && !t.neverCommits(w) && tx.anyRead)
}

// neverCommits reports a transaction that ended without asking to commit:
// failed, or unknown with no commit_at (its abort was not confirmed).
func (t *txnAnalysis) neverCommits(w int32) bool {
	tx := &t.txs[w]
	return tx.typ == history.Fail || (tx.typ == history.Info && tx.commitAt <= 0)
}

// sortedLog is one key's log in offset order.
type sortedLog struct {
	offs []int64
	vals []int64
}

func (l *sortedLog) after(off int64) int {
	return sort.Search(len(l.offs), func(i int) bool { return l.offs[i] > off })
}

// finish adds the transactional anomalies to the analysis; t.invalid and
// t.notes say what the verdict must add.
func (t *txnAnalysis) finish() {
	// Values sent by a transaction that never completed.
	for _, ps := range t.procs {
		if len(ps.pend) == 0 {
			continue
		}
		id := int32(len(t.txs))
		t.txs = append(t.txs, txState{pos: -1, invPos: -1, inv: -1, done: -1, typ: history.TypeNone, node: -1, sends: true})
		t.stats.Txns++
		t.stats.Pending++
		for _, m := range ps.pend {
			vs := t.val(m.Value)
			if vs.writer < 0 {
				vs.writer = id
				t.stats.Values++
			}
			if vs.key < 0 {
				vs.key = t.key(m.Key)
			}
		}
	}
	for i := range t.vs {
		if vs := &t.vs[i]; vs.read && vs.writer >= 0 {
			t.txs[vs.writer].anyRead = true
		}
	}
	for i := range t.txs {
		// The judgement, not "read": an unknown one that never asked to
		// commit and was read is an aborted read.
		if t.txs[i].typ != history.OK && t.txs[i].anyRead && t.committed(int32(i)) {
			t.stats.InfoRead++
		}
	}
	for _, u := range t.unsure {
		if t.committed(u.id) {
			for _, c := range u.cs {
				t.consume(c, u.id, u.pos)
			}
		}
	}
	t.unsure = nil
	t.stats.Keys = len(t.keyNames)
	logs := make([]sortedLog, len(t.logs))
	for k := range t.logs {
		logs[k] = t.logs[k].sorted()
		t.logs[k] = txLog{}
	}
	t.values()
	t.resolveSkips(logs)
	t.cycles(logs)
}

func (t *txnAnalysis) writerOf(v int64) int32 {
	if i, ok := t.index(v); ok {
		return t.vs[i].writer
	}
	return -1
}

func (t *txnAnalysis) values() {
	order := slices.Sorted(maps.Keys(t.sparse))
	for v, i := range t.dense {
		if i > 0 {
			order = append(order, int64(v))
		}
	}
	slices.Sort(order)
	for _, v := range order {
		i, _ := t.index(v)
		vs := &t.vs[i]
		var key string
		if vs.key >= 0 {
			key = t.keyNames[vs.key]
		}
		w := vs.writer
		var wtx *txState
		if w >= 0 {
			wtx = &t.txs[w]
		}
		switch {
		case w < 0:
			if vs.read {
				t.flag(Unexpected, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
					Note: fmt.Sprintf("value %d was read from %s but no transaction sent it", v, key), positions: []int64{vs.readPos}})
			}
			continue
		case vs.read && t.neverCommits(w):
			how := "aborted"
			if wtx.typ == history.Info {
				how = "never asked to commit"
			}
			t.flag(AbortedRead, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
				Note:      fmt.Sprintf("value %d was read from %s although its transaction %s (G1a)", v, key, how),
				positions: sorted(wtx.invPos, wtx.pos, vs.readPos)})
			continue
		}
		if vs.read && vs.readTPos != wtx.pos {
			switch {
			case wtx.inv >= 0 && vs.readT < wtx.inv:
				t.flag(PrecommittedRead, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
					Note:      fmt.Sprintf("value %d of %s was read (by %s) before its transaction was invoked (at %s)", v, key, fmtNanos(vs.readT), fmtNanos(wtx.inv)),
					positions: sorted(wtx.invPos, wtx.pos, vs.readTPos)})
			case wtx.commitAt > 0 && vs.readT < wtx.commitAt:
				t.flag(PrecommittedRead, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
					Note:      fmt.Sprintf("value %d of %s was read (by %s) before its transaction asked to commit (at %s)", v, key, fmtNanos(vs.readT), fmtNanos(wtx.commitAt)),
					positions: sorted(wtx.invPos, wtx.pos, vs.readTPos)})
			}
		}
		if !t.committed(w) || vs.key < 0 {
			continue
		}
		dr, drained := t.drained[vs.key]
		inDrain := drained && (vs.off < 0 || (vs.off >= dr[0] && vs.off < dr[1]))
		switch {
		case vs.read && !vs.drained && drained && vs.off >= dr[0] && vs.off < dr[1]:
			t.flag(LostWrite, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
				Note:      fmt.Sprintf("value %d, read at offset %d of %s, is missing from the complete final drain of %s", v, vs.off, key, key),
				positions: sorted(wtx.pos, vs.readPos)})
		case vs.read:
		case inDrain:
			t.flag(LostWrite, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
				Note:      fmt.Sprintf("value %d of a committed transaction was never read, though a complete drain read %s to offset %d", v, key, dr[1]),
				positions: sorted(wtx.invPos, wtx.pos)})
		case vs.off >= 0 && vs.off <= t.maxRead[vs.key]:
			t.flag(LostWrite, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
				Note: fmt.Sprintf("value %d of a committed transaction, at offset %d, was never read, though offset %d of %s was",
					v, vs.off, t.maxRead[vs.key], key),
				positions: sorted(wtx.invPos, wtx.pos, t.maxPos[vs.key])})
		default:
			t.flag(Unseen, Example{Key: key, Value: i64p(v), Offset: optI64(vs.off),
				Note: fmt.Sprintf("value %d of a committed transaction was never read from %s", v, key), positions: sorted(wtx.invPos, wtx.pos)})
		}
	}
}

func optI64(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return i64p(v)
}

// resolveSkips finds the committed values a process read past.
func (t *txnAnalysis) resolveSkips(logs []sortedLog) {
	for _, chunk := range t.skips {
		for _, s := range chunk {
			t.resolveSkip(logs, s)
		}
	}
	t.skips = nil
}

func (t *txnAnalysis) resolveSkip(logs []sortedLog, s txSkip) {
	l := &logs[s.key]
	at := func(off int64) int64 {
		if i := l.after(off) - 1; i >= 0 && l.offs[i] == off {
			return l.vals[i]
		}
		return history.BadValue
	}
	for i := l.after(s.from); i < len(l.offs) && l.offs[i] < s.to; i++ {
		v := l.vals[i]
		w := t.writerOf(v)
		if !t.committed(w) {
			continue
		}
		key := t.keyNames[s.key]
		p := int(s.proc)
		ex := Example{Key: key, Value: i64p(v), Offset: i64p(l.offs[i]), Offsets: []int64{s.from, s.to}, Process: &p,
			positions: sorted(s.pos1, s.pos2, t.txs[w].pos)}
		if t.writerOf(at(s.from)) == w || t.writerOf(at(s.to)) == w {
			ex.Note = fmt.Sprintf("process %d read offsets %d and %d of %s, values of one committed transaction, but not its value %d at offset %d between them",
				p, s.from, s.to, key, v, l.offs[i])
			t.flag(G1b, ex)
		} else {
			ex.Note = fmt.Sprintf("process %d read offset %d of %s then offset %d, past committed value %d at offset %d of another transaction",
				p, s.from, key, s.to, v, l.offs[i])
			t.flag(TxnOutOfOrder, ex)
		}
		break
	}
}

// Dependency kinds.
const (
	depWW uint8 = 1 << iota
	depWR
	depRW
)

var depNames = map[uint8]string{depWW: "ww", depWR: "wr", depRW: "rw"}

type txEdge struct {
	from, to int32
	kind     uint8
	key      int32
}

// txGraph is the dependency graph in CSR form.
type txGraph struct {
	txOf  []int32 // node -> transaction
	start []int32 // node -> first edge
	edges []txEdge
	// Tarjan's and the searches' scratch space.
	idx, low []int32
	onStack  []bool
	seen     []int32 // == stamp: seen by the current search
	via      []int32 // the edge a search reached a node by
	stamp    int32
	queue    []int32
}

func (g *txGraph) out(n int32) []txEdge { return g.edges[g.start[n]:g.start[n+1]] }

func (t *txnAnalysis) graph(logs []sortedLog) *txGraph {
	g := &txGraph{}
	for i := range t.txs {
		tx := &t.txs[i]
		if tx.sends && t.committed(int32(i)) {
			tx.node = int32(len(g.txOf))
			g.txOf = append(g.txOf, int32(i))
		}
	}
	nodeOf := func(v int64) int32 {
		if w := t.writerOf(v); w >= 0 {
			return t.txs[w].node
		}
		return -1
	}
	var edges []txEdge
	for k := range logs {
		l := &logs[k]
		prev := int32(-1)
		for _, v := range l.vals {
			n := nodeOf(v)
			if n < 0 {
				continue
			}
			if prev >= 0 && prev != n {
				edges = append(edges, txEdge{from: prev, to: n, kind: depWW, key: int32(k)})
			}
			prev = n
		}
	}
	for i := range t.txs {
		tx := &t.txs[i]
		if tx.node < 0 {
			continue
		}
		for _, f := range tx.finals {
			l := &logs[f.key]
			j := l.after(f.off) - 1
			if j >= 0 && l.offs[j] == f.off {
				if w := nodeOf(l.vals[j]); w >= 0 && w != tx.node {
					edges = append(edges, txEdge{from: w, to: tx.node, kind: depWR, key: f.key})
				}
			}
			for j++; j < len(l.offs); j++ {
				w := nodeOf(l.vals[j])
				if w < 0 {
					continue
				}
				if w != tx.node {
					edges = append(edges, txEdge{from: tx.node, to: w, kind: depRW, key: f.key})
				}
				break
			}
		}
	}
	slices.SortFunc(edges, func(a, b txEdge) int {
		if a.from != b.from {
			return int(a.from - b.from)
		}
		if a.to != b.to {
			return int(a.to - b.to)
		}
		return int(a.kind) - int(b.kind)
	})
	edges = slices.CompactFunc(edges, func(a, b txEdge) bool { return a.from == b.from && a.to == b.to && a.kind == b.kind })
	g.edges = edges
	g.start = make([]int32, len(g.txOf)+1)
	for _, e := range edges {
		g.start[e.from+1]++
	}
	for i := 1; i < len(g.start); i++ {
		g.start[i] += g.start[i-1]
	}
	return g
}

// sccs returns the strongly connected components with more than one node
// among the nodes with in[n] == mark, over edges whose kind is in kinds
// (iterative Tarjan). Its scratch slices are the graph's, reset after use.
func (g *txGraph) sccs(nodes []int32, in []int32, mark int32, kinds uint8) [][]int32 {
	if g.idx == nil {
		g.idx = make([]int32, len(g.txOf))
		g.low = make([]int32, len(g.txOf))
		g.onStack = make([]bool, len(g.txOf))
		for i := range g.idx {
			g.idx[i] = -1
		}
	}
	idx, low, onStack := g.idx, g.low, g.onStack
	defer func() {
		for _, v := range nodes {
			idx[v] = -1
		}
	}()
	var stack []int32
	var out [][]int32
	next := int32(0)
	type frame struct {
		v int32
		e int32
	}
	var call []frame
	for _, root := range nodes {
		if idx[root] >= 0 {
			continue
		}
		call = append(call[:0], frame{v: root, e: g.start[root]})
		idx[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.e < g.start[f.v+1] {
				e := g.edges[f.e]
				f.e++
				if e.kind&kinds == 0 || in[e.to] != mark {
					continue
				}
				w := e.to
				if idx[w] < 0 {
					idx[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{v: w, e: g.start[w]})
				} else if onStack[w] && idx[w] < low[f.v] {
					low[f.v] = idx[w]
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				if p := call[len(call)-1].v; low[v] < low[p] {
					low[p] = low[v]
				}
			}
			if low[v] == idx[v] {
				i := len(stack) - 1
				for stack[i] != v {
					i--
				}
				comp := stack[i:]
				for _, w := range comp {
					onStack[w] = false
				}
				if len(comp) > 1 {
					out = append(out, slices.Clone(comp))
				}
				stack = stack[:i]
			}
		}
	}
	return out
}

// path returns a shortest path of edges from src to dst over nodes with
// in[n] == mark and edges of the given kinds (BFS), or nil. budget bounds
// the nodes visited; it is decremented.
func (g *txGraph) path(src, dst int32, in []int32, mark int32, kinds uint8, budget *int) []txEdge {
	if g.seen == nil {
		g.seen = make([]int32, len(g.txOf))
		g.via = make([]int32, len(g.txOf))
	}
	g.stamp++
	stamp := g.stamp
	g.queue = append(g.queue[:0], src)
	g.seen[src] = stamp
	for qi := 0; qi < len(g.queue) && *budget > 0; qi++ {
		v := g.queue[qi]
		*budget--
		for ei := g.start[v]; ei < g.start[v+1]; ei++ {
			e := g.edges[ei]
			if e.kind&kinds == 0 || in[e.to] != mark || g.seen[e.to] == stamp {
				continue
			}
			g.seen[e.to] = stamp
			g.via[e.to] = ei
			if e.to == dst {
				var p []txEdge
				for at := dst; at != src; {
					pe := g.edges[g.via[at]]
					p = append(p, pe)
					at = pe.from
				}
				slices.Reverse(p)
				return p
			}
			g.queue = append(g.queue, e.to)
		}
	}
	return nil
}

// cycleIn returns a shortest cycle among comp's nodes over edges of kinds,
// or nil when there is none.
func (g *txGraph) cycleIn(comp []int32, in []int32, mark *int32, kinds uint8, budget *int) []txEdge {
	*mark++
	sub := *mark
	outer := in[comp[0]]
	for _, v := range comp {
		in[v] = sub
	}
	defer func() {
		for _, v := range comp {
			in[v] = outer
		}
	}()
	inner := g.sccs(comp, in, sub, kinds)
	if len(inner) == 0 {
		return nil
	}
	// A shortest cycle through the first node of the first component.
	c := inner[0]
	*mark++
	m := *mark
	for _, v := range c {
		in[v] = m
	}
	s := slices.Min(c)
	var best []txEdge
	for _, e := range g.out(s) {
		if e.kind&kinds == 0 || in[e.to] != m {
			continue
		}
		if e.to == s {
			continue
		}
		p := g.path(e.to, s, in, m, kinds, budget)
		if p != nil && (best == nil || len(p)+1 < len(best)) {
			best = append([]txEdge{e}, p...)
		}
	}
	for _, v := range c {
		in[v] = sub
	}
	return best
}

// cycleSearchBudget bounds the nodes visited while classifying and
// explaining cycles.
const cycleSearchBudget = 20_000_000

func (t *txnAnalysis) cycles(logs []sortedLog) {
	g := t.graph(logs)
	t.stats.Nodes, t.stats.Edges = len(g.txOf), len(g.edges)
	if len(g.txOf) == 0 {
		return
	}
	in := make([]int32, len(g.txOf))
	all := make([]int32, len(g.txOf))
	for i := range all {
		all[i] = int32(i)
	}
	mark := int32(0)
	comps := g.sccs(all, in, 0, depWW|depWR|depRW)
	budget := cycleSearchBudget
	short := false
	for _, comp := range comps {
		mark++
		cm := mark
		for _, v := range comp {
			in[v] = cm
		}
		var kind string
		var cyc []txEdge
		if wr := g.cycleIn(comp, in, &mark, depWR, &budget); wr != nil {
			t.invalid = true
			t.notes = append(t.notes, "a cycle of wr dependencies alone ("+t.describeCycle(g, wr)+"): each transaction read a value the next committed before its own commit, which no order of commits allows")
		}
		if cyc = g.cycleIn(comp, in, &mark, depWW, &budget); cyc != nil {
			kind = G0
		} else if cyc = g.cycleIn(comp, in, &mark, depWW|depWR, &budget); cyc != nil {
			kind = G1c
		} else {
			// The first rw edge that ww and wr edges lead back from.
		search:
			for _, v := range comp {
				for _, e := range g.out(v) {
					if budget <= 0 {
						break search
					}
					if e.kind != depRW || in[e.to] != cm {
						continue
					}
					if p := g.path(e.to, e.from, in, cm, depWW|depWR, &budget); p != nil {
						cyc = append([]txEdge{e}, p...)
						break search
					}
				}
			}
			if cyc != nil {
				kind = GSingle
			} else {
				kind = G2Item
				cyc = g.cycleIn(comp, in, &mark, depWW|depWR|depRW, &budget)
			}
		}
		if budget <= 0 {
			short = true
		}
		ex := Example{Note: fmt.Sprintf("%d transactions in a dependency cycle; e.g. %s", len(comp), t.describeCycle(g, cyc))}
		for _, e := range cyc {
			ex.positions = append(ex.positions, t.txs[g.txOf[e.from]].pos)
		}
		ex.positions = sorted(ex.positions...)
		t.flag(kind, ex)
		for _, v := range comp {
			in[v] = 0
		}
	}
	if short {
		t.notes = append(t.notes, "the cycle search ran out of its budget: some cycles may be named G2-item where a shorter search would find G-single, and their examples may be missing")
	}
}

// describeCycle writes a cycle as "txn 12 (process 1) -ww t/0-> txn 40
// (process 2) -wr t/1-> txn 12 (process 1)",
// transactions named by the index of their completion.
func (t *txnAnalysis) describeCycle(g *txGraph, cyc []txEdge) string {
	if len(cyc) == 0 {
		return "(not explained: search budget exhausted)"
	}
	var b strings.Builder
	name := func(n int32) string {
		tx := &t.txs[g.txOf[n]]
		return fmt.Sprintf("txn %d (process %d)", tx.index, tx.proc)
	}
	b.WriteString(name(cyc[0].from))
	for _, e := range cyc {
		fmt.Fprintf(&b, " -%s %s-> %s", depNames[e.kind], t.keyNames[e.key], name(e.to))
	}
	return b.String()
}
