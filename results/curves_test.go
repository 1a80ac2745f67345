package results

import (
	"bytes"
	"io"
	"reflect"
	"testing"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

// TestCurvesCoarsen: a long history keeps at most maxBuckets buckets of a
// doubled width and loses no count; the fail and info points stay capped.
func TestCurvesCoarsen(t *testing.T) {
	var buf bytes.Buffer
	w, _ := history.NewWriter(&buf, history.Header{Partitions: 2})
	const n = 20000
	// One send every 0.2 s over 4000 s: 40000 buckets of 100 ms before
	// coarsening; every third fails.
	for i := range int64(n) {
		inv := history.NewOp(int(i%3), history.Invoke, history.FSend)
		inv.Time, inv.Value, inv.HasValue, inv.Partition = i*200e6, i, true, int32(i%2)
		w.Write(&inv)
		done := inv
		done.Time += 5e6
		done.Type = history.OK
		if i%3 == 0 {
			done.Type = history.Fail
		} else {
			done.Offset = i
		}
		w.Write(&done)
	}
	w.Flush()
	c, err := ReadCurves(&buf, "h")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Buckets) > maxBuckets || len(c.Buckets) < maxBuckets/2 {
		t.Errorf("%d buckets, want between %d and %d", len(c.Buckets), maxBuckets/2, maxBuckets)
	}
	if c.Width != baseWidth*64 { // 4000 s / 800 buckets = 5 s -> 6.4 s
		t.Errorf("bucket width %v, want %v", c.Width, baseWidth*64)
	}
	var ok, fail, lat int64
	for _, b := range c.Buckets {
		ok += b.Send[iOK]
		fail += b.Send[iFail]
		lat += b.SendLat.n
	}
	if ok != n-n/3-1 || fail != n/3+1 || lat != ok {
		t.Errorf("ok %d fail %d latencies %d after coarsening", ok, fail, lat)
	}
	if len(c.Points) > maxPoints || c.PointStride < 2 {
		t.Errorf("%d points at stride %d", len(c.Points), c.PointStride)
	}
	// Nothing was read: every acknowledged value is unseen at the end.
	if c.Unseen != ok || c.MaxUnseen != ok || c.Acked != ok {
		t.Errorf("unseen %d max %d acked %d, want %d", c.Unseen, c.MaxUnseen, c.Acked, ok)
	}
}

// TestHist: quantiles within the bins' resolution.
func TestHist(t *testing.T) {
	var h hist
	for i := int64(1); i <= 1000; i++ {
		h.add(i * 1e6) // 1 ms .. 1 s
	}
	for _, tc := range []struct{ p, want float64 }{{0.5, 500e6}, {0.99, 990e6}, {1, 1000e6}} {
		if got := h.q(tc.p); got < tc.want*0.85 || got > tc.want*1.15 {
			t.Errorf("q(%v) = %v, want about %v", tc.p, got, tc.want)
		}
	}
	if binOf(-5) != 0 || binOf(1<<62) != histBins-1 {
		t.Error("out-of-range durations are not clamped")
	}
}

func TestFaultLabel(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{"kill", `{"kind":"kill","nodes":["leader:isrlab/0"],"resolved":["b2"]}`, "kill b2"},
		{"kill", `{"kind":"kill","nodes":["b1","b2","b3","c1","c2"]}`, "kill b1,b2,b3,c1,+1"},
		{"partition", `{"kind":"partition","topology":"random-halves","grudge":{"b1":["c1","b2"],"c1":["b1"],"b2":["b1"]}}`, "partition random-halves b1 | b2,c1"},
		{"partition", `["n1"]`, "partition n1"},
		{"partition", `"junk"`, "partition"},
	} {
		if got := faultLabel(tc.name, []byte(tc.raw)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestCurvesFromCheck: the curves the checker's pass computes (NewCurves
// in checker.Options.Also) are those ReadCurves reads, torn last line
// included.
func TestCurvesFromCheck(t *testing.T) {
	var buf bytes.Buffer
	w, _ := history.NewWriter(&buf, history.Header{Run: "c", Partitions: 3})
	if _, err := history.Synthesize(w, history.SynthOptions{Ops: 30000, Partitions: 3, Seed: 4, InfoRate: 0.05, FailRate: 0.05, Faults: true, AnomalyEvery: 3000}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	buf.WriteString(`{"index":99999,"time":1`) // torn
	want, err := ReadCurves(bytes.NewReader(buf.Bytes()), "h")
	if err != nil {
		t.Fatal(err)
	}
	got := NewCurves()
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
	if _, err := checker.Check(open, "h", checker.Options{Linearizable: checker.LinOff, Also: []history.Consumer{got}}); err != nil {
		t.Fatal(err)
	}
	if want.Torn == "" || want.Ops < 30000 {
		t.Fatalf("the history read as %d ops, torn %q", want.Ops, want.Torn)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("curves from the check differ from ReadCurves': %d ops, %d buckets, torn %q; want %d, %d, %q",
			got.Ops, len(got.Buckets), got.Torn, want.Ops, len(want.Buckets), want.Torn)
	}
}
