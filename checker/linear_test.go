package checker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/isrlab/isrlab/history"
)

// referenceLin checks each partition's whole history in one porcupine
// search, the way the checker did before it cut histories into pieces: the
// same model, info sends placed at their first read and bounded by it,
// sends never read left out. It is the yardstick of the pieces.
func referenceLin(ops []history.Op) string {
	type first struct {
		off, rt int64
		part    int32
	}
	read := map[int64]first{}
	observed := map[int32]map[int64]bool{}
	see := func(part int32, off int64) {
		if observed[part] == nil {
			observed[part] = map[int64]bool{}
		}
		observed[part][off] = true
	}
	type pend struct {
		time     int64
		f        string
		value    int64
		hasValue bool
		part     int32
	}
	procs := map[int]*pend{}
	type rop struct {
		proc      int
		part      int32
		send      bool
		typ       history.Type
		value     int64
		off       int64
		call, ret int64
		recs      []history.Record
	}
	var col []rop
	for i := range ops {
		op := &ops[i]
		if op.Process < 0 {
			continue
		}
		if op.Type == history.Invoke {
			procs[op.Process] = &pend{time: op.Time, f: op.F, value: op.Value, hasValue: op.HasValue, part: op.Partition}
			continue
		}
		inv := procs[op.Process]
		if inv != nil && inv.f == op.F {
			delete(procs, op.Process)
		} else {
			inv = nil
		}
		call := op.Time
		if inv != nil {
			call = inv.time
		}
		switch op.F {
		case history.FSend:
			value, has, part := op.Value, op.HasValue, op.Partition
			if inv != nil {
				if !has {
					value, has = inv.value, inv.hasValue
				}
				if part < 0 {
					part = inv.part
				}
			}
			if !has || op.Type == history.Fail {
				continue
			}
			if op.Type == history.OK && op.Offset >= 0 && part >= 0 {
				see(part, op.Offset)
			}
			col = append(col, rop{proc: op.Process, part: part, send: true, typ: op.Type, value: value, off: op.Offset, call: call, ret: op.Time})
		case history.FPoll, history.FDrain:
			if op.Type != history.OK && op.Type != history.Info {
				continue
			}
			for _, pr := range op.Reads {
				for _, r := range pr.Records {
					see(pr.Partition, r.Offset)
					if _, ok := read[r.Value]; !ok {
						read[r.Value] = first{off: r.Offset, rt: op.Time, part: pr.Partition}
					}
				}
				if len(pr.Records) > 0 {
					col = append(col, rop{proc: op.Process, part: pr.Partition, recs: pr.Records, call: call, ret: op.Time})
				}
			}
		}
	}
	var ids []int
	for id, p := range procs {
		if p.f == history.FSend && p.hasValue {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	for _, id := range ids {
		p := procs[id]
		col = append(col, rop{proc: id, part: p.part, send: true, typ: history.Info, value: p.value, off: -1, call: p.time, ret: math.MaxInt64})
	}
	ranks := map[int32][]int64{}
	for part, offs := range observed {
		for o := range offs {
			ranks[part] = append(ranks[part], o)
		}
		slices.Sort(ranks[part])
	}
	byPart := map[int32][]porcupine.Operation{}
	for _, o := range col {
		in := &linInput{part: o.part, send: o.send, value: o.value, off: o.off}
		for _, r := range o.recs {
			in.recs = append(in.recs, linRec{Offset: r.Offset, Value: r.Value})
		}
		ret := o.ret
		if o.send && (o.typ != history.OK || o.off < 0) {
			f, ok := read[o.value]
			if !ok {
				continue
			}
			in.off, in.part = f.off, f.part
			if o.typ != history.OK {
				ret = max(f.rt, o.call)
			}
		}
		if in.part < 0 {
			continue
		}
		if in.send {
			in.rank = int32(sort.Search(len(ranks[in.part]), func(i int) bool { return ranks[in.part][i] >= in.off }))
		}
		byPart[in.part] = append(byPart[in.part], porcupine.Operation{ClientId: o.proc, Input: in, Call: o.call, Return: ret})
	}
	result := "ok"
	for _, part := range slices.Sorted(mapKeys(byPart)) {
		switch porcupine.CheckOperationsTimeout(logModel, byPart[part], time.Minute) {
		case porcupine.Illegal:
			return "illegal"
		case porcupine.Unknown:
			result = "unknown"
		}
	}
	return result
}

// mutate damages a valid history the way broken systems do, without
// touching times: a read returns another value or offset, a send ends with
// another outcome or offset, a record goes missing.
func mutate(rng *rand.Rand, ops []history.Op, n int) {
	for range n {
		op := &ops[rng.IntN(len(ops))]
		switch {
		case len(op.Reads) > 0:
			pr := &op.Reads[rng.IntN(len(op.Reads))]
			if len(pr.Records) == 0 {
				continue
			}
			r := &pr.Records[rng.IntN(len(pr.Records))]
			switch rng.IntN(3) {
			case 0:
				r.Value += int64(1 + rng.IntN(3))
			case 1:
				r.Offset += int64(1 + rng.IntN(2))
			default:
				i := rng.IntN(len(pr.Records))
				pr.Records = append(pr.Records[:i:i], pr.Records[i+1:]...)
			}
		case op.F == history.FSend && op.Type != history.Invoke:
			switch rng.IntN(3) {
			case 0:
				op.Type, op.Offset = history.Info, -1
			case 1:
				if op.Offset >= 0 {
					op.Offset += int64(rng.IntN(3)) - 1
				}
			default:
				op.Type = history.OK
			}
		}
	}
}

// TestPiecesAgreeWithOneSearch: cutting partitions into pieces and
// checking them apart gives the answer of one search over each partition,
// on valid, anomalous and damaged histories.
func TestPiecesAgreeWithOneSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	counts := map[string]int{}
	for i := range 150 {
		o := history.SynthOptions{
			Ops:        int64(300 + rng.IntN(2500)),
			Partitions: 1 + rng.IntN(3),
			Producers:  1 + rng.IntN(8),
			Consumers:  1 + rng.IntN(3),
			Seed:       rng.Uint64(),
			InfoRate:   rng.Float64() * 0.4,
			FailRate:   rng.Float64() * 0.2,
			Faults:     rng.IntN(2) == 0,
		}
		if i%3 == 1 {
			o.AnomalyEvery = int64(100 + rng.IntN(400))
		}
		var m history.Memory
		if _, err := history.Synthesize(&m, o); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			mutate(rng, m.Ops, 1+rng.IntN(4))
		}
		want := referenceLin(m.Ops)
		v := CheckOps(m.Ops, Options{Linearizable: LinOn, LinTimeout: time.Minute})
		got := v.Linearizable.Result
		counts[want]++
		if got != want {
			t.Fatalf("case %d (%+v): pieces say %s (%+v), one search says %s", i, o, got, v.Linearizable, want)
		}
		if got == "illegal" && (len(v.Linearizable.Illegal) == 0 || !v.HasVisualization()) {
			t.Errorf("case %d: illegal without a named piece or a visualization: %+v", i, v.Linearizable)
		}
	}
	if counts["ok"] < 20 || counts["illegal"] < 20 {
		t.Errorf("outcomes %v: the cases do not exercise both answers", counts)
	}
	t.Logf("outcomes %v", counts)
}

// TestOversizedPieceIsUnknownAndNamed: an info send first read only by the
// final drain, at the end of its partition, keeps every later operation of
// the partition in its piece; with a small piece limit that piece is not
// searched, the answer is unknown and the piece is named with the reason.
func TestOversizedPieceIsUnknownAndNamed(t *testing.T) {
	var ops []history.Op
	at := int64(0)
	add := func(op history.Op) {
		at += 10
		op.Time = at
		ops = append(ops, op)
	}
	// Process 9's send never completes; only the drain reads it, at offset
	// 100, after every other send.
	long := history.NewOp(9, history.Invoke, history.FSend)
	long.Value, long.HasValue, long.Partition = 1000, true, 0
	add(long)
	for i := range int64(100) {
		inv := history.NewOp(int(i%3), history.Invoke, history.FSend)
		inv.Value, inv.HasValue, inv.Partition = i, true, 0
		add(inv)
		ok := inv
		ok.Type, ok.Offset = history.OK, i
		add(ok)
		pinv := history.NewOp(5, history.Invoke, history.FPoll)
		add(pinv)
		poll := history.NewOp(5, history.OK, history.FPoll)
		poll.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: i, Value: i}}}}
		add(poll)
	}
	add(history.NewOp(6, history.Invoke, history.FDrain))
	drain := history.NewOp(6, history.OK, history.FDrain)
	drain.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: 100, Value: 1000}}}}
	add(drain)

	v := CheckOps(ops, Options{Linearizable: LinOn, LinMaxPieceOps: 50})
	l := v.Linearizable
	if l.Result != "unknown" || l.UnknownPieces != 1 || len(l.Unknown) != 1 || v.Valid != Unknown {
		t.Fatalf("lin %+v, valid %s; want one unknown piece", l, v.Valid)
	}
	p := l.Unknown[0]
	if p.Partition != 0 || p.Ops != 202 || !strings.Contains(p.Reason, "process 9's send of 1000") || !strings.Contains(l.Reason, "partition 0 piece 0") {
		t.Errorf("piece %+v, reason %q", p, l.Reason)
	}
	// Without the limit the same history is one piece, and linearizable.
	if v := CheckOps(ops, Options{Linearizable: LinOn}); v.Linearizable.Result != "ok" || v.Linearizable.Pieces != 1 {
		t.Errorf("without a limit: %+v", v.Linearizable)
	}
}

// TestInfoSendBoundedByLaterOffsets: an info send read only by the drain,
// below offsets that were acknowledged and read during the run, took effect
// before those were seen; it must not tie the partition into one piece.
func TestInfoSendBoundedByLaterOffsets(t *testing.T) {
	var ops []history.Op
	at := int64(0)
	add := func(op history.Op) {
		at += 10
		op.Time = at
		ops = append(ops, op)
	}
	info := history.NewOp(9, history.Invoke, history.FSend)
	info.Value, info.HasValue, info.Partition = 1000, true, 0
	add(info)
	info.Type = history.Info
	add(info)
	for i := range int64(50) {
		inv := history.NewOp(int(i%3), history.Invoke, history.FSend)
		inv.Value, inv.HasValue, inv.Partition = i, true, 0
		add(inv)
		ok := inv
		ok.Type, ok.Offset = history.OK, i+1
		add(ok)
	}
	add(history.NewOp(6, history.Invoke, history.FDrain))
	drain := history.NewOp(6, history.OK, history.FDrain)
	recs := []history.Record{{Offset: 0, Value: 1000}}
	for i := range int64(50) {
		recs = append(recs, history.Record{Offset: i + 1, Value: i})
	}
	drain.Reads = []history.PartitionRecords{{Partition: 0, Records: recs}}
	add(drain)
	v := CheckOps(ops, Options{Linearizable: LinOn, LinMaxPieceOps: 10})
	if l := v.Linearizable; l.Result != "ok" || l.Pieces < 40 || l.LargestPiece > 3 {
		t.Fatalf("lin %+v: want ok in small pieces", l)
	}
}

func TestLinPieceCounts(t *testing.T) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 20000, Partitions: 4, Seed: 3, InfoRate: 0.1, FailRate: 0.05}); err != nil {
		t.Fatal(err)
	}
	v := CheckOps(m.Ops, Options{Linearizable: LinOn})
	l := v.Linearizable
	if l.Result != "ok" || l.Partitions != 4 || l.Pieces < 100 || l.LargestPiece == 0 || l.Ops == 0 {
		t.Fatalf("lin %+v", l)
	}
	// The same history checked twice gives the same pieces.
	if w := CheckOps(m.Ops, Options{Linearizable: LinOn}); fmt.Sprint(w.Linearizable) != fmt.Sprint(l) {
		t.Errorf("not deterministic:\n%+v\n%+v", l, w.Linearizable)
	}
}
