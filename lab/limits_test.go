package lab

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/series"
)

// synthetic returns a probe that overloads from n >= limit on, counting
// its calls.
func synthetic(limit int, calls *int) Probe {
	return func(_ context.Context, _, n int) (Signals, error) {
		*calls++
		if n >= limit {
			return Signals{HandlerIdle: 0.05, IsrChangeFraction: 0.9}, nil
		}
		return Signals{HandlerIdle: 0.8, IsrChangeFraction: 0}, nil
	}
}

func TestFindLimitMonotone(t *testing.T) {
	for _, limit := range []int{1, 2, 7, 13, 50, 64} {
		calls := 0
		s, err := FindLimit(context.Background(), 100, synthetic(limit, &calls), SearchOptions{MaxProducers: 64, Thresholds: DefaultThresholds()})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Done || s.Ceiling || s.Lo != limit-1 || s.Hi != limit {
			t.Errorf("limit %d: got lo %d hi %d done %v ceiling %v", limit, s.Lo, s.Hi, s.Done, s.Ceiling)
		}
		if calls > 8 { // 1 (max) + log2(65) rounded up
			t.Errorf("limit %d: %d probes", limit, calls)
		}
	}
}

func TestFindLimitNever(t *testing.T) {
	calls := 0
	s, err := FindLimit(context.Background(), 100, synthetic(1000, &calls), SearchOptions{MaxProducers: 32, Thresholds: DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Ceiling || s.Lo != 32 || calls != 1 {
		t.Errorf("never overloading: lo %d ceiling %v calls %d", s.Lo, s.Ceiling, calls)
	}
	s.SetLimit(1000, 4)
	if s.LimitPerSec != 32000 || s.LimitBytesPerSecPerBroker != 32000*100/4 {
		t.Errorf("limit %+v", s)
	}
}

func TestFindLimitAlways(t *testing.T) {
	calls := 0
	s, err := FindLimit(context.Background(), 100, synthetic(0, &calls), SearchOptions{MaxProducers: 32, Thresholds: DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ceiling || s.Lo != 0 || s.Hi != 1 || !s.Done {
		t.Errorf("always overloading: %+v", s)
	}
	s.SetLimit(1000, 3)
	if s.LimitPerSec != 0 {
		t.Errorf("limit %v", s.LimitPerSec)
	}
}

// A noisy boundary: near the true limit the signals flip at random. The
// search still ends with Lo safe-measured and Hi overload-measured, within
// the noisy band.
func TestFindLimitNoisy(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		const limit, band = 20, 3
		probe := func(_ context.Context, _, n int) (Signals, error) {
			// Idle falls linearly with load; noise of ±band producers.
			eff := float64(n) + (rng.Float64()*2-1)*band
			idle := 1 - 0.8*eff/limit
			return Signals{HandlerIdle: idle, HandlerIdleMin: idle}, nil
		}
		s, err := FindLimit(context.Background(), 100, probe, SearchOptions{MaxProducers: 64, Thresholds: DefaultThresholds()})
		if err != nil {
			t.Fatal(err)
		}
		if s.Hi-s.Lo != 1 || s.Lo < limit-band-1 || s.Lo > limit+band {
			t.Errorf("seed %d: lo %d hi %d", seed, s.Lo, s.Hi)
		}
		for _, p := range s.Points {
			if p.Producers == s.Lo && p.Overloaded || p.Producers == s.Hi && !p.Overloaded {
				t.Errorf("seed %d: bound %d contradicts its point", seed, p.Producers)
			}
		}
	}
}

func TestFindLimitStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	inner := synthetic(10, &calls)
	probe := func(ctx context.Context, size, n int) (Signals, error) {
		if calls == 3 {
			cancel()
			return Signals{}, ctx.Err()
		}
		return inner(ctx, size, n)
	}
	s, err := FindLimit(ctx, 100, probe, SearchOptions{MaxProducers: 64, Thresholds: DefaultThresholds()})
	if !errors.Is(err, context.Canceled) || s == nil || s.Done || len(s.Points) != 3 {
		t.Fatalf("err %v search %+v", err, s)
	}
}

func TestThresholds(t *testing.T) {
	th := Thresholds{HandlerIdle: 0.2, IsrChangeFraction: 0.5, ProduceP99Ms: 100, MinAckedRatio: 0.9}
	for _, c := range []struct {
		s    Signals
		over bool
	}{
		{Signals{HandlerIdle: 0.5, IsrChangeFraction: 0.5}, false},
		{Signals{HandlerIdle: 0.19}, true},
		{Signals{HandlerIdle: 0.5, IsrChangeFraction: 0.51}, true},
		{Signals{HandlerIdle: 0.5, ProduceP99Ms: 101}, true},
		{Signals{HandlerIdle: 0.5, OfferedPerSec: 1000, AckedPerSec: 800}, true},
		{Signals{HandlerIdle: 0.5, OfferedPerSec: 1000, AckedPerSec: 950}, false},
	} {
		if over, why := th.Overloaded(c.s); over != c.over {
			t.Errorf("%+v: overloaded %v (%v), want %v", c.s, over, why, c.over)
		}
	}
}

func TestPointSignals(t *testing.T) {
	var ss []series.Sample
	for sec := 1; sec <= 10; sec++ {
		ss = append(ss, series.Sample{T: float64(sec), Src: series.SrcWorkload, Values: map[string]float64{"acked_per_s": 1000, "offered_per_s": 1000, "produce_p99_ms": float64(sec)}})
		for _, b := range []string{"b1", "b2"} {
			v := map[string]float64{"up": 1, "RequestHandlerAvgIdlePercent": 0.5}
			if b == "b1" && sec%2 == 0 {
				v["IsrShrinksPerSec"] = 1
			}
			ss = append(ss, series.Sample{T: float64(sec) + 0.1, Src: b, Values: v})
		}
	}
	sig := PointSignals(ss, 2, 100)
	if sig.HandlerIdle != 0.5 || sig.AckedPerSec != 1000 || sig.AckedBytesPerSec != 100000 || sig.ProduceP99Ms != 10 {
		t.Errorf("%+v", sig)
	}
	// Intervals after warmup: seconds 2..9 by their middles (8), changes
	// in the even seconds' samples (4 of them: 4, 6, 8, 10 -> middles 3.6..9.6).
	if sig.Intervals != 8 || sig.IsrChangeFraction != 0.5 {
		t.Errorf("intervals %d fraction %v", sig.Intervals, sig.IsrChangeFraction)
	}
}

func TestLimitScenario(t *testing.T) {
	sc, err := LimitScenario(LimitsConfig{Brokers: 3, Rate: 500, Window: 10 * time.Second}, 1000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Topic.Partitions != 30 || sc.Topic.ReplicationFactor != 3 || sc.Workload.Producers != 7 || sc.Workload.RecordSize != 1000 ||
		sc.Workload.ConsumerGroups != 5 || sc.Duration != 15*time.Second || sc.Workload.Type != "rate" || sc.Workload.Payload != "random" {
		t.Errorf("%+v", sc)
	}
	if sc.Cluster.Secured {
		t.Error("a limit point is secured only when asked")
	}
	if sc, err = LimitScenario(LimitsConfig{Secured: true}, 100, 1); err != nil || !sc.Cluster.Secured {
		t.Errorf("secured: %v, %v", sc.Cluster.Secured, err)
	}
	sc, err = LimitScenario(LimitsConfig{Payload: "compressible"}, 100, 1)
	if err != nil || sc.Workload.Payload != "compressible" {
		t.Errorf("compressible: %q, %v", sc.Workload.Payload, err)
	}
	if _, err := LimitScenario(LimitsConfig{Payload: "zeros"}, 100, 1); err == nil || !strings.Contains(err.Error(), "payload") {
		t.Errorf("payload zeros: %v", err)
	}
}

func TestWriteLimits(t *testing.T) {
	calls := 0
	var ss []*Search
	for _, size := range []int{100, 1000} {
		s, err := FindLimit(context.Background(), size, synthetic(10, &calls), SearchOptions{MaxProducers: 16, Thresholds: DefaultThresholds()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetLimit(1000, 3)
		ss = append(ss, s)
	}
	r := &LimitsReport{Brokers: 3, ConsumerGroups: 5, Rate: 1000, WindowSeconds: 10, MaxProducers: 16, Acks: "1", Thresholds: DefaultThresholds(), Headroom: 0.8, Searches: ss}
	dir := t.TempDir()
	if err := WriteLimits(dir, r); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{LimitsJSON, LimitsText, LimitsSVG, results.ReportFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, LimitsText))
	// 9 producers x 1000/s / 3 brokers = 3000 msg/s/broker; x0.8 = 2400.
	if !strings.Contains(string(b), "3000") || !strings.Contains(string(b), "2400") {
		t.Errorf("table:\n%s", b)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, LimitsSVG))
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "MB/s per broker") {
		t.Errorf("svg: %.200s", svg)
	}
	page, _ := os.ReadFile(filepath.Join(dir, results.ReportFile))
	if n := strings.Count(string(page), `class="limit" data-size=`); n != 2 || !strings.Contains(string(page), `data-plot="limits"`) {
		t.Errorf("report.html: %d boundary rows", n)
	}
}
