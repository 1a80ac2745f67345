package checker

import (
	"flag"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/isrlab/isrlab/history"
)

// txnSynth generates a transactional history with Kafka's read_committed
// semantics: up to 8 transactions open at once, each sending 1-4 values to
// random partitions (some first polling, read-process-write), a tenth of
// them aborted, consumers reading each partition up to its last stable
// offset, and a final drain. It has no anomalies but cycles.
func txnSynth(ops int, partitions int, seed uint64) []history.Op {
	rng := rand.New(rand.NewPCG(seed, 1))
	type slot struct {
		v  int64
		tx int // -1: a control record
	}
	type txn struct {
		proc  int
		inv   []history.MicroOp
		done  []history.MicroOp
		n     int // sends to make
		abort bool
		first map[int32]int64 // partition -> first offset
	}
	logs := make([][]slot, partitions)
	status := []int8{} // per txn: 0 open, 1 committed, 2 aborted
	var out []history.Op
	now := int64(0)
	emit := func(op history.Op) {
		now += 1000
		op.Index, op.Time = int64(len(out)), now
		out = append(out, op)
	}
	key := func(p int32) string { return history.TxnKey("t", p) }
	lso := func(p int32, open map[int]*txn) int64 {
		end := int64(len(logs[p]))
		for _, t := range open {
			if f, ok := t.first[p]; ok && f < end {
				end = f
			}
		}
		return end
	}
	// read returns what a consumer at pos reads of p, and its new position.
	read := func(p int32, pos int64, open map[int]*txn) ([]history.Record, int64) {
		end := lso(p, open)
		var rs []history.Record
		for ; pos < end; pos++ {
			s := logs[p][pos]
			if s.tx >= 0 && status[s.tx] == 1 {
				rs = append(rs, history.Record{Offset: pos, Value: s.v})
			}
		}
		return rs, pos
	}
	poll := func(pos []int64, open map[int]*txn) []history.KeyRecords {
		reads := []history.KeyRecords{}
		for p := range pos {
			var rs []history.Record
			rs, pos[p] = read(int32(p), pos[p], open)
			if len(rs) > 0 {
				reads = append(reads, history.KeyRecords{Key: key(int32(p)), Records: rs})
			}
		}
		return reads
	}
	open := map[int]*txn{}
	ids := map[*txn]int{}
	positions := map[int][]int64{} // consumer and producer read positions
	pos := func(proc int) []int64 {
		if positions[proc] == nil {
			positions[proc] = make([]int64, partitions)
		}
		return positions[proc]
	}
	// pollOp records a poll by proc.
	pollOp := func(proc int, f string) {
		inv := history.NewOp(proc, history.Invoke, f)
		inv.Txn = []history.MicroOp{{F: history.MPoll, Offset: -1}}
		emit(inv)
		done := history.NewOp(proc, history.OK, f)
		done.Txn = []history.MicroOp{{F: history.MPoll, Offset: -1, Reads: poll(pos(proc), open)}}
		emit(done)
	}
	value := int64(0)
	const producers, consumers = 8, 3
	for len(out) < ops {
		switch r := rng.IntN(10); {
		case r < 2:
			// A consumer polls.
			pollOp(100+rng.IntN(consumers), history.FTxn)
		default:
			p := rng.IntN(producers)
			t := open[p]
			if t == nil {
				t = &txn{proc: p, n: 1 + rng.IntN(4), abort: rng.IntN(10) == 0, first: map[int32]int64{}}
				ids[t] = len(status)
				status = append(status, 0)
				if rng.IntN(3) == 0 {
					t.inv = append(t.inv, history.MicroOp{F: history.MPoll, Offset: -1})
					t.done = append(t.done, history.MicroOp{F: history.MPoll, Offset: -1, Reads: poll(pos(p), open)})
				}
				open[p] = t
				continue
			}
			if t.n > 0 {
				part := int32(rng.IntN(partitions))
				off := int64(len(logs[part]))
				logs[part] = append(logs[part], slot{v: value, tx: ids[t]})
				if _, ok := t.first[part]; !ok {
					t.first[part] = off
				}
				t.inv = append(t.inv, history.Send(key(part), value))
				t.done = append(t.done, history.MicroOp{F: history.MSend, Key: key(part), Value: value, Offset: off, Done: true})
				value++
				t.n--
				continue
			}
			inv := history.NewOp(p, history.Invoke, history.FTxn)
			inv.Txn = t.inv
			emit(inv)
			done := history.NewOp(p, history.OK, history.FTxn)
			done.Txn = t.done
			if t.abort {
				done.Type = history.Fail
				status[ids[t]] = 2
			} else {
				done.CommitAt = now + 500
				status[ids[t]] = 1
			}
			for part := range t.first {
				logs[part] = append(logs[part], slot{tx: -1})
			}
			delete(open, p)
			emit(done)
		}
	}
	// Open transactions abort; then the drain.
	for _, p := range slices.Sorted(func(yield func(int) bool) {
		for p := range open {
			if !yield(p) {
				return
			}
		}
	}) {
		status[ids[open[p]]] = 2
		for part := range open[p].first {
			logs[part] = append(logs[part], slot{tx: -1})
		}
	}
	clear(open)
	d := 1000
	pollOp(d, history.FTxnDrain)
	for p := range partitions {
		dr := history.NewOp(d, history.OK, history.FDrained)
		dr.Key, dr.Value, dr.HasValue, dr.Offset = key(int32(p)), 0, true, int64(len(logs[p]))
		emit(dr)
	}
	return out
}

// TestTxnSynthIsValid: a read_committed history with interleaved
// transactions has no anomaly but (unjudged) cycles, and its graph is
// exercised.
func TestTxnSynthIsValid(t *testing.T) {
	ops := txnSynth(20000, 4, 3)
	v := CheckOps(ops, Options{Linearizable: LinOff})
	if v.Valid != Valid {
		t.Fatalf("valid = %s, anomalies %v, notes %q", v.Valid, v.Anomalies, v.Notes)
	}
	for k, n := range v.Anomalies {
		if !slices.Contains(cycleAnomalies, k) {
			t.Errorf("%s = %d: %+v", k, n, v.Examples[k])
		}
	}
	st := v.Stats.Txn
	if st == nil || st.Fail == 0 || st.OK == 0 || st.Edges == 0 || st.ValuesRead == 0 {
		t.Fatalf("stats = %+v", st)
	}
	if v.Anomalies[G0]+v.Anomalies[G1c]+v.Anomalies[GSingle]+v.Anomalies[G2Item] == 0 {
		t.Errorf("interleaved transactions gave no cycle: the graph search is not exercised")
	}
	// Hiding a committed value from the drain is found.
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].F == history.FTxnDrain && ops[i].Type == history.OK {
			rs := &ops[i].Txn[0].Reads[0].Records
			*rs = append((*rs)[:1], (*rs)[2:]...)
			break
		}
	}
	v = CheckOps(ops, Options{Linearizable: LinOff})
	if v.Valid != Invalid || v.Anomalies[TxnOutOfOrder]+v.Anomalies[G1b] != 1 {
		t.Errorf("after hiding one value from the drain: valid = %s, anomalies %v", v.Valid, v.Anomalies)
	}
}

var txnBenchOps = flag.Int("txn-bench-ops", 1_000_000, "ops of BenchmarkTxnCheck1M's history")

// BenchmarkTxnCheck1M checks a synthetic 1M-op transactional history.
func BenchmarkTxnCheck1M(b *testing.B) {
	ops := txnSynth(*txnBenchOps, 8, 1)
	b.ResetTimer()
	for range b.N {
		v := CheckOps(ops, Options{Linearizable: LinOff})
		if v.Stats.Txn == nil || v.Stats.Txn.Values == 0 {
			b.Fatal("no transactions checked")
		}
		b.ReportMetric(float64(v.Stats.Txn.Edges), "edges")
	}
}
