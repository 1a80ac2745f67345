package checker

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/isrlab/isrlab/history"
)

// TestLinLogEvents writes the first pass's log of a generated history (info
// and failed sends, faults, anomalies) and reads it back: one event per
// client op, each carrying what the op and its invocation said, paired the
// way the test pairs them itself.
func TestLinLogEvents(t *testing.T) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 20000, Partitions: 3, Seed: 7, InfoRate: 0.1, FailRate: 0.05,
		Faults: true, AnomalyEvery: 500}); err != nil {
		t.Fatal(err)
	}
	a := newAnalysis(Options{}.withDefaults())
	for i := range m.Ops {
		a.add(&m.Ops[i], int64(i))
	}
	type invocation struct {
		t, v int64
		has  bool
		f    string
	}
	pend := map[int]invocation{}
	var want []linEvent
	for i := range m.Ops {
		op := &m.Ops[i]
		if op.Process < 0 {
			continue
		}
		if op.Type == history.Invoke {
			pend[op.Process] = invocation{t: op.Time, v: op.Value, has: op.HasValue, f: op.F}
			flags := byte(0)
			if isModelF(op.F) {
				flags |= evModel
			}
			if op.F == history.FSend && op.HasValue {
				flags |= evValue
			}
			want = append(want, linEvent{kind: evInvoke, flags: flags, proc: op.Process, time: op.Time, value: op.Value})
			continue
		}
		inv, paired := pend[op.Process]
		paired = paired && inv.f == op.F
		call := op.Time
		if paired {
			delete(pend, op.Process)
			call = inv.t
		}
		ev := linEvent{kind: evTick, proc: op.Process, time: op.Time, call: call}
		if paired && isModelF(op.F) {
			ev.flags |= evPaired
		}
		switch op.F {
		case history.FSend:
			value, has, part := op.Value, op.HasValue, op.Partition
			if paired && !has {
				value, has = inv.v, inv.has
			}
			switch {
			case op.Type == history.Fail || !has || op.Type == history.OK && op.Offset >= 0 && part < 0:
				ev.kind = evDone
			case op.Type == history.OK && op.Offset >= 0:
				ev.kind, ev.value, ev.part, ev.off = evSend, value, part, op.Offset
			default:
				ev.kind, ev.value = evResolve, value
			}
		case history.FPoll, history.FDrain:
			ev.kind = evDone
			if op.Type == history.OK || op.Type == history.Info {
				ev.kind = evPoll
				for _, pr := range op.Reads {
					if len(pr.Records) == 0 {
						continue
					}
					r := linRead{part: pr.Partition}
					for _, rec := range pr.Records {
						r.recs = append(r.recs, linRec{Offset: rec.Offset, Value: rec.Value})
					}
					ev.reads = append(ev.reads, r)
				}
			}
		}
		want = append(want, ev)
	}
	if a.lin.n != int64(len(want)) {
		t.Fatalf("%d events, want %d (one per client op)", a.lin.n, len(want))
	}
	i := 0
	a.lin.events(func(got *linEvent) {
		w := want[i]
		i++
		carriesProc := w.kind != evTick && (w.kind != evDone || w.flags&evPaired != 0)
		if got.kind != w.kind || carriesProc && got.proc != w.proc {
			t.Fatalf("event %d: kind %d proc %d, want %+v", i-1, got.kind, got.proc, w)
		}
		if got.flags&evPaired != w.flags&evPaired || w.kind == evInvoke && got.flags != w.flags {
			t.Fatalf("event %d: flags %b, want %+v", i-1, got.flags, w)
		}
		switch w.kind {
		case evInvoke:
			if got.time != w.time || w.flags&evValue != 0 && got.value != w.value {
				t.Fatalf("event %d: %+v, want %+v", i-1, *got, w)
			}
		case evSend:
			if got.time != w.time || got.call != w.call || got.value != w.value || got.part != w.part || got.off != w.off {
				t.Fatalf("event %d: %+v, want %+v", i-1, *got, w)
			}
		case evResolve:
			if got.time != w.time || got.call != w.call || got.value != w.value {
				t.Fatalf("event %d: %+v, want %+v", i-1, *got, w)
			}
		case evPoll:
			if got.time != w.time || got.call != w.call || len(got.reads) != len(w.reads) {
				t.Fatalf("event %d: %+v, want %+v", i-1, *got, w)
			}
			for j := range w.reads {
				if got.reads[j].part != w.reads[j].part || !slices.Equal(got.reads[j].recs, w.reads[j].recs) {
					t.Fatalf("event %d: reads %+v, want %+v", i-1, got.reads, w.reads)
				}
			}
		}
	})
	if i != len(want) {
		t.Fatalf("read %d events, want %d", i, len(want))
	}
}

// TestOrderLegalAgreesWithSearch: on random pieces, some of the usual shape
// and some not, orderLegal never says legal where porcupine's search does
// not, and on pieces of the usual shape it answers as the search does.
func TestOrderLegalAgreesWithSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	ranks := &linRanks{}
	ranks.dense.grow(64, 0)
	for o := range ranks.dense.len() {
		ranks.dense.set(o, int32(o)) // every offset observed: rank = offset
	}
	ranks.nDense = int32(ranks.dense.len())
	legal, decided := 0, 0
	for n := range 4000 {
		base := int32(rng.IntN(4))
		sends := 1 + rng.IntN(4)
		p := &linPiece{base: base}
		ranksOf := rng.Perm(sends)
		usual := true
		for i := range sends {
			r := base + int32(ranksOf[i])
			if rng.IntN(25) == 0 { // a gap or a repeat
				r += int32(rng.IntN(3)) - 1
				usual = usual && r == base+int32(ranksOf[i])
			}
			call := rng.Int64N(40)
			p.ops = append(p.ops, linOp{proc: i, send: true, value: 100 + int64(r), off: int64(r), rank: r, call: call, ret: call + rng.Int64N(15)})
		}
		for i := range 1 + rng.IntN(3) {
			call := rng.Int64N(40)
			op := linOp{proc: 10 + i, call: call, ret: call + rng.Int64N(15)}
			for r := base; r < base+int32(sends); r++ {
				if rng.IntN(2) == 0 {
					v := 100 + int64(r)
					if rng.IntN(30) == 0 {
						v++ // a value the log does not hold there
						usual = false
					}
					op.recs = append(op.recs, linRec{Offset: int64(r), Value: v})
				}
			}
			p.ops = append(p.ops, op)
		}
		quick := orderLegal(p, ranks)
		search := porcupine.CheckOperationsTimeout(pieceModel(base), pieceOps(*p), time.Minute) == porcupine.Ok
		if quick && !search {
			t.Fatalf("piece %d: orderLegal says legal, the search does not: %+v", n, p.ops)
		}
		if usual && quick != search {
			t.Fatalf("piece %d, of the usual shape: orderLegal %v, search %v: %+v", n, quick, search, p.ops)
		}
		if search {
			legal++
		}
		if quick {
			decided++
		}
	}
	// Both answers must occur, and most legal pieces must be decided
	// without a search, or the test proves little.
	if legal < 500 || legal > 3500 || decided < legal*3/4 {
		t.Fatalf("%d of 4000 pieces legal, %d decided by orderLegal", legal, decided)
	}
}

// TestSortByCall sorts nearly sorted and shuffled operations as a full
// sort by (call, seq) does.
func TestSortByCall(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, spread := range []int64{0, 3, 50, 1 << 40} {
		var ops []linOp
		for i := range 3000 {
			ret := int64(i) * 10
			ops = append(ops, linOp{seq: int64(i), ret: ret, call: ret - rng.Int64N(spread*10+1)})
		}
		want := slices.Clone(ops)
		slices.SortFunc(want, func(a, b linOp) int { return cmp.Or(cmp.Compare(a.call, b.call), cmp.Compare(a.seq, b.seq)) })
		sortByCall(ops)
		for i := range ops {
			if ops[i].seq != want[i].seq {
				t.Fatalf("spread %d: [%d] is op %d, want %d", spread, i, ops[i].seq, want[i].seq)
			}
		}
	}
}
