package series

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/internal/proctest"
)

func TestWriterRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	now := 0 * time.Second
	w, err := Create(path, Header{Run: "r1"}, func() time.Duration { return now })
	if err != nil {
		t.Fatal(err)
	}
	now = 1500 * time.Millisecond
	w.Sample(SrcWorkload, map[string]float64{"acked_per_s": 100, "produce_p99_ms": math.NaN()})
	now = 2 * time.Second
	w.Sample("b1", map[string]float64{"up": 1, "IsrShrinksPerSec": 0.5})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	w.Sample("b1", map[string]float64{"up": 1}) // after close: dropped
	h, ss, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != Version || h.Run != "r1" || len(ss) != 2 {
		t.Fatalf("header %+v, %d samples", h, len(ss))
	}
	if ss[0].T != 1.5 || ss[0].Src != SrcWorkload || ss[0].Values["acked_per_s"] != 100 {
		t.Errorf("sample 0: %+v", ss[0])
	}
	if _, ok := ss[0].Values["produce_p99_ms"]; ok {
		t.Errorf("NaN was written: %+v", ss[0])
	}
	// A torn last line (a killed run) is dropped; a torn line before
	// others is an error.
	data, _ := os.ReadFile(path)
	torn := append(bytes.Clone(data), []byte(`{"t":3,"src":"b`)...)
	if _, ss, err := Read(bytes.NewReader(torn)); err != nil || len(ss) != 2 {
		t.Errorf("torn last line: %d samples, %v", len(ss), err)
	}
	bad := append(append(bytes.Clone(data), []byte("{oops\n")...), data[bytes.IndexByte(data, '\n')+1:]...)
	if _, _, err := Read(bytes.NewReader(bad)); err == nil {
		t.Error("a torn line in the middle was accepted")
	}
	if _, _, err := Read(strings.NewReader(`{"isrlab_history":1}` + "\n")); err == nil {
		t.Error("a history file read as a series")
	}
}

func snapshot(t *testing.T, name string) *Snapshot {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseMetrics(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConvert(t *testing.T) {
	a, b := snapshot(t, "metrics-1.txt"), snapshot(t, "metrics-2.txt")
	v := Convert(a, b, 2)
	want := map[string]float64{
		"up":                           1,
		"IsrShrinksPerSec":             2, // 4 in 2 s
		"IsrExpandsPerSec":             0,
		"RequestHandlerAvgIdlePercent": 0.1,
		"MaxLag":                       52000,
		"FetchFollowerRequestsPerSec":  5,
		"FetchFollowerMeanMs":          80, // 800 ms over 10 fetches
		"LockWaitMsPerSec.read":        1500,
		"LockWaitsPerSec.read":         25,
	}
	for k, x := range want {
		if got, ok := v[k]; !ok || math.Abs(got-x) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, x)
		}
	}
	// All 10 new fetches fell in (10, 100]: p99 interpolates near the top.
	if p := v["FetchFollowerP99Ms"]; p < 90 || p > 100 {
		t.Errorf("FetchFollowerP99Ms = %v, want in (90, 100]", p)
	}
	if p := v["LockWaitP99Ms.read"]; p < 900 || p > 1000 {
		t.Errorf("LockWaitP99Ms.read = %v", p)
	}
	if _, ok := v["LockWaitP99Ms.write"]; ok {
		t.Error("a quantile of no observations")
	}
	// A restarted broker's counters start again from 0.
	if v := Convert(b, a, 1); v["IsrShrinksPerSec"] != 4 || v["FetchFollowerRequestsPerSec"] != 10 {
		t.Errorf("after a restart: %v", v)
	}
}

func TestQuantile(t *testing.T) {
	h := Histogram{Count: 100, Buckets: []Bucket{{1, 50}, {2, 100}, {math.Inf(1), 100}}}
	for _, c := range []struct{ q, want float64 }{{0.5, 1}, {0.25, 0.5}, {0.75, 1.5}, {1, 2}} {
		if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	inf := Histogram{Count: 10, Buckets: []Bucket{{5, 1}, {math.Inf(1), 10}}}
	if got := inf.Quantile(0.99); got != 5 {
		t.Errorf("a quantile in +Inf = %v, want the highest bound 5", got)
	}
}

// run is a synthetic run: 1 s workload and broker samples for 40 s, a
// fault from 10 s to 30 s during which throughput halves and b1 shrinks
// once a second.
func run() ([]Sample, []Window) {
	var ss []Sample
	for t := 1.0; t <= 40; t++ {
		acked := 1000.0
		shrinks, idle := 0.0, 0.9
		if t > 10 && t <= 30 {
			acked, shrinks, idle = 500, 1, 0.2
		}
		ss = append(ss,
			Sample{T: t, Src: SrcWorkload, Values: map[string]float64{"acked_per_s": acked, "offered_per_s": 1000, "produce_p99_ms": 2}},
			Sample{T: t, Src: "b1", Values: map[string]float64{"up": 1, "IsrShrinksPerSec": shrinks, "RequestHandlerAvgIdlePercent": idle, "LockWaitMsPerSec.read": 10 * shrinks, "IsrDropped.2": shrinks}},
			Sample{T: t, Src: "b2", Values: map[string]float64{"up": 1, "RequestHandlerAvgIdlePercent": 0.9, "LockWaitMsPerSec.read": 0}})
	}
	return ss, []Window{{Name: "slow-net", Start: 10, End: 20}, {Name: "partition", Start: 15, End: 30}}
}

func TestSummarize(t *testing.T) {
	ss, ws := run()
	s := Summarize(ss, ws, Options{})
	if !s.HasThroughput() || s.Faults != 2 {
		t.Fatalf("%+v", s)
	}
	if b := s.Baseline; b.From != 3 || b.To != 10 || b.Samples != 7 || b.AckedPerSec != 1000 || b.IsrShrinks != 0 {
		t.Errorf("baseline %+v", b)
	}
	d := s.DuringFaults
	if d.From != 10 || d.To != 30 || d.Samples != 20 || d.AckedPerSec != 500 || d.MinAckedPerSec != 500 {
		t.Errorf("during %+v", d)
	}
	if d.IsrDrops["b1>b2"] != 20 || len(d.IsrDrops) != 1 || s.Baseline.IsrDrops != nil {
		t.Errorf("drops during %v, before %v", d.IsrDrops, s.Baseline.IsrDrops)
	}
	if d.IsrShrinks != 20 || d.HandlerIdleMin != 0.2 || math.Abs(d.HandlerIdle-0.55) > 1e-9 || d.LockWaitMsPerSec != 10 {
		t.Errorf("during, brokers: %+v", d)
	}
	if s.DuringRatio != 0.5 || s.AfterRatio != 1 || s.AfterHeal.Samples != 10 {
		t.Errorf("ratios %v %v, after %+v", s.DuringRatio, s.AfterRatio, s.AfterHeal)
	}
	// No faults: everything after the warm-up is baseline.
	if s := Summarize(ss, nil, Options{Warmup: 5}); s.DuringFaults.Samples != 0 || s.Baseline.Samples != 35 || s.HasThroughput() {
		t.Errorf("no faults: %+v", s)
	}
	// A fault never healed ends with the run.
	if s := Summarize(ss, []Window{{Start: 20, End: -1}}, Options{}); s.DuringFaults.To != 40 || s.AfterHeal.Samples != 0 {
		t.Errorf("open fault: %+v", s)
	}
}

func TestPlotIsSVG(t *testing.T) {
	ss, ws := run()
	var b bytes.Buffer
	if err := Plot(&b, "isr-churn <incident>", ss, ws, IncidentPanels); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	polylines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	// throughput and offered, shrinks summed (no expands, no follower
	// fetches in the samples), idle and lock wait per broker, produce p99.
	if polylines != 2+1+2+2+1 {
		t.Errorf("%d polylines", polylines)
	}
}

type memory struct {
	mu sync.Mutex
	ss []Sample
}

func (m *memory) Sample(src string, v map[string]float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ss = append(m.ss, Sample{Src: src, Values: v})
}

func (m *memory) samples() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Sample(nil), m.ss...)
}

// TestScrape: a target's counter becomes a rate, and a target that does
// not answer is recorded as down.
func TestScrape(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n += 10
		c := n
		mu.Unlock()
		fmt.Fprintf(w, "# TYPE kafka_server_IsrShrinksPerSec counter\nkafka_server_IsrShrinksPerSec %d\n", c)
	}))
	defer srv.Close()
	m := &memory{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Scrape(ctx, m, []Target{{Name: "b1", URL: srv.URL + "/metrics"}, {Name: "b9", URL: "http://127.0.0.1:1/metrics"}}, srv.Client(), 50*time.Millisecond)
		close(done)
	}()
	proctest.Eventually(t, 10*time.Second, "two samples of each target", func() error {
		up, down := 0, 0
		for _, s := range m.samples() {
			switch {
			case s.Src == "b1" && s.Values["up"] == 1 && s.Values["IsrShrinksPerSec"] > 0:
				up++
			case s.Src == "b9" && s.Values["up"] == 0:
				down++
			}
		}
		if up < 2 || down < 2 {
			return fmt.Errorf("samples %+v", m.samples())
		}
		return nil
	})
	cancel()
	<-done
}

// TestDropCounter: a leader's ISR shrink in one epoch counts each replica
// it dropped; the first poll, leadership changes and followers' views do
// not count.
func TestDropCounter(t *testing.T) {
	var d dropCounter
	ev := func(seq int64, p int32, role string, epoch int32, isr ...int32) clusterapi.StateEvent {
		return clusterapi.StateEvent{Seq: seq, PartitionStatus: clusterapi.PartitionStatus{Topic: "t", Partition: p, Role: role, LeaderEpoch: epoch, ISR: isr}}
	}
	if got := d.add([]clusterapi.StateEvent{ev(1, 0, "leader", 1, 1, 2, 3), ev(2, 0, "leader", 1, 1, 2)}); len(got) != 0 {
		t.Errorf("first poll counted %v", got)
	}
	got := d.add([]clusterapi.StateEvent{
		ev(3, 0, "leader", 1, 1),       // drops 2
		ev(4, 0, "leader", 1, 1, 2, 3), // expands: nothing
		ev(5, 0, "leader", 2, 1),       // a new epoch: not a shrink
		ev(6, 1, "follower", 1, 2, 3),  // first sight of p1
		ev(7, 1, "follower", 1, 2),     // a follower's view: not its shrink
		ev(8, 0, "leader", 2),          // drops 1
	})
	if len(got) != 2 || got[2] != 1 || got[1] != 1 || d.seq != 8 {
		t.Errorf("drops %v, seq %d", got, d.seq)
	}
}

// TestSummarizeAcrossScrapeGaps: a broker that did not answer two scrapes
// loses none of its ISR shrinks: the next answer's rate covers the gap
// (the scraper keeps the last answer), and its interval reaches back to
// the last answer, not to the failed scrapes.
func TestSummarizeAcrossScrapeGaps(t *testing.T) {
	samples := []Sample{
		{T: 1, Src: "b1", Values: map[string]float64{"up": 1, "IsrShrinksPerSec": 0}},
		{T: 2, Src: "b1", Values: map[string]float64{"up": 1, "IsrShrinksPerSec": 2}},
		{T: 3, Src: "b1", Values: map[string]float64{"up": 0}},
		{T: 4, Src: "b1", Values: map[string]float64{"up": 0}},
		{T: 5, Src: "b1", Values: map[string]float64{"up": 1, "IsrShrinksPerSec": 5}}, // 15 over 2 s..5 s
	}
	if got := Intervals(samples); got[4] != 3 || got[1] != 1 {
		t.Errorf("intervals %v: the answer after the gap covers 3 s", got)
	}
	p := summarize(samples, -10, 10)
	if p.IsrShrinks != 17 || p.BrokerSamples != 3 {
		t.Errorf("shrinks %v over %d broker samples, want 17 over 3", p.IsrShrinks, p.BrokerSamples)
	}
}
