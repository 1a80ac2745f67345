package checker

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/isrlab/isrlab/history"
)

// queueHistory builds sends and polls at times in milliseconds.
type queueHistory struct{ ops []history.Op }

func (h *queueHistory) send(proc int, v int64, part int32, off, inv, done int64) {
	op := history.NewOp(proc, history.Invoke, history.FSend)
	op.Value, op.HasValue, op.Partition, op.Time = v, true, part, inv*1e6
	h.ops = append(h.ops, op)
	op.Type, op.Offset, op.Time = history.OK, off, done*1e6
	h.ops = append(h.ops, op)
}

func (h *queueHistory) poll(proc int, inv, done int64, part int32, recs ...history.Record) {
	op := history.NewOp(proc, history.Invoke, history.FPoll)
	op.Time = inv * 1e6
	h.ops = append(h.ops, op)
	op.Type, op.Time = history.OK, done*1e6
	op.Reads = []history.PartitionRecords{{Partition: part, Records: recs}}
	h.ops = append(h.ops, op)
}

func TestUnseenAndLagSeries(t *testing.T) {
	var h queueHistory
	h.send(0, 1, 0, 0, 400, 500)   // acked at 0.5 s
	h.send(1, 2, 1, 0, 1400, 1500) // acked at 1.5 s, never read
	h.poll(5, 2400, 2500, 0, history.Record{Offset: 0, Value: 1})
	// Value 3 is read at 3.2 s, before its ack comes back at 3.3 s; the
	// lines are in time order, as a recorder writes them.
	h.send(0, 3, 0, 1, 3000, 3300)
	h.poll(5, 3100, 3200, 0, history.Record{Offset: 1, Value: 3})
	ack := h.ops[len(h.ops)-3]
	h.ops = append(h.ops[:len(h.ops)-3], h.ops[len(h.ops)-2:]...)
	h.ops = append(h.ops, ack)
	v := CheckOps(h.ops, Options{Linearizable: LinOff, Partitions: 2})
	u, l := v.Unseen, v.RealtimeLag
	if u.BucketSeconds != 1 || u.Buckets != 4 || l.Buckets != 4 {
		t.Fatalf("bucket %v s, %d/%d buckets", u.BucketSeconds, u.Buckets, l.Buckets)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"overall count", u.Overall.Count, []int64{1, 2, 1, 1}},
		{"overall max", u.Overall.Max, []int64{1, 2, 2, 1}},
		{"overall final, peak", [3]any{u.Overall.Final, u.Overall.Peak, u.Overall.PeakAt}, [3]any{int64(1), int64(2), 1.5}},
		{"partition 0 count", u.Partitions[0].Count, []int64{1, 1, 0, 0}},
		{"partition 1 count", u.Partitions[1].Count, []int64{0, 1, 1, 1}},
		{"lag count", l.Overall.Count, []int64{0, 0, 1, 1}},
		{"lag mean", l.Overall.Mean, []float64{0, 0, 2, 0}},
		{"lag max", l.Partitions[0].Max, []float64{0, 0, 2, 0}},
		{"partition 1 lag", l.Partitions[1].Count, []int64{0, 0, 0, 0}},
		{"lag quantiles", [2]any{l.Overall.Quantiles.Count, l.Overall.Quantiles.Max}, [2]any{int64(2), 2000.0}},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestQueueSeriesStayBounded: a long history doubles the bucket instead of
// growing the series; nothing is lost in the merge.
func TestQueueSeriesStayBounded(t *testing.T) {
	var h queueHistory
	const n = 5000
	for i := range int64(n) {
		at := i * 2000 // one send every 2 s: 10000 s in all
		h.send(0, i, int32(i%3), i/3, at, at+10)
		h.poll(5, at+20, at+1000, int32(i%3), history.Record{Offset: i / 3, Value: i})
	}
	v := CheckOps(h.ops, Options{Linearizable: LinOff})
	u, l := v.Unseen, v.RealtimeLag
	if u.BucketSeconds != 8 || u.Buckets > queueBuckets || u.Buckets != 1250 || len(u.Overall.Count) != u.Buckets || len(l.Partitions[2].Mean) != u.Buckets {
		t.Fatalf("bucket %v s, %d buckets, %d points", u.BucketSeconds, u.Buckets, len(u.Overall.Count))
	}
	var reads int64
	for _, c := range l.Overall.Count {
		reads += c
	}
	if reads != n || u.Overall.Final != 0 || u.Overall.Peak != 1 || l.Overall.Max[10] != 0.99 {
		t.Errorf("%d lag samples, final %d, peak %d, max %v", reads, u.Overall.Final, u.Overall.Peak, l.Overall.Max[10])
	}
}

// TestQueueSeriesAddUp: on random histories the final unseen count is the
// number of ok values never read, every ok value read has one lag sample,
// and the partitions add up to the overall series.
func TestQueueSeriesAddUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 20 {
		var m history.Memory
		if _, err := history.Synthesize(&m, history.SynthOptions{Ops: int64(1000 + rng.IntN(5000)), Partitions: 1 + rng.IntN(4),
			Seed: rng.Uint64(), InfoRate: 0.1, FailRate: 0.1, AnomalyEvery: int64(200 + rng.IntN(2000))}); err != nil {
			t.Fatal(err)
		}
		// Stretch time so that the series have several buckets.
		for j := range m.Ops {
			m.Ops[j].Time *= 1000
		}
		v := CheckOps(m.Ops, Options{Linearizable: LinOff})
		okRead, okUnread := map[int64]bool{}, map[int64]bool{}
		read := map[int64]bool{}
		for _, op := range m.Ops {
			for _, pr := range op.Reads {
				for _, r := range pr.Records {
					read[r.Value] = true
				}
			}
		}
		for _, op := range m.Ops {
			if op.F == history.FSend && op.Type == history.OK {
				if read[op.Value] {
					okRead[op.Value] = true
				} else {
					okUnread[op.Value] = true
				}
			}
		}
		u, l := v.Unseen, v.RealtimeLag
		var samples int64
		for _, c := range l.Overall.Count {
			samples += c
		}
		if u.Overall.Final != int64(len(okUnread)) || samples != int64(len(okRead)) {
			t.Fatalf("case %d: final %d, want %d; %d lag samples, want %d", i, u.Overall.Final, len(okUnread), samples, len(okRead))
		}
		for b := range u.Buckets {
			var sum int64
			for _, p := range u.Partitions {
				sum += p.Count[b]
			}
			if sum != u.Overall.Count[b] {
				t.Fatalf("case %d bucket %d: partitions add to %d, overall %d", i, b, sum, u.Overall.Count[b])
			}
		}
	}
}
