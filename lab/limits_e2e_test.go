package lab_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
)

// TestLimitsEndToEnd runs a tiny limit search on 3 brokers (at most two
// points of a few seconds) and checks the table and the plot.
func TestLimitsEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: each limit point runs a cluster in network namespaces")
	}
	if testing.Short() {
		t.Skip("-short: skipping the limit search's end-to-end run")
	}
	bin := proctest.Binary(t)
	dir := t.TempDir()
	c := lab.LimitsConfig{Brokers: 3, Rate: 2000, Window: 3 * time.Second, Warmup: 3 * time.Second, ResultsDir: filepath.Join(dir, "points")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	th := lab.DefaultThresholds()
	s, err := lab.FindLimit(ctx, 1000, lab.LimitProbe(c, lab.Options{Binary: bin}, nil), lab.SearchOptions{MaxProducers: 2, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	s.SetLimit(c.Rate, c.Brokers)
	rep := &lab.LimitsReport{Brokers: 3, ConsumerGroups: 5, Rate: c.Rate, WindowSeconds: 3, MaxProducers: 2, Acks: "1", Thresholds: th, Headroom: 0.8, Searches: []*lab.Search{s}}
	if err := lab.WriteLimits(dir, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, lab.LimitsJSON))
	if err != nil {
		t.Fatal(err)
	}
	var got lab.LimitsReport
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	g := got.Searches[0]
	if !g.Done || g.Lo < 0 || g.Lo > 2 || len(g.Points) == 0 {
		t.Fatalf("search: %+v", g)
	}
	if want := float64(g.Lo) * 2000 / 3; g.LimitPerSecPerBroker != want || g.LimitBytesPerSecPerBroker != want*1000 {
		t.Errorf("limit %v msg/s/broker, want %v", g.LimitPerSecPerBroker, want)
	}
	for _, p := range g.Points {
		sig := p.Signals
		if sig.Intervals < 2 || sig.IsrChangeFraction < 0 || sig.IsrChangeFraction > 1 || sig.HandlerIdle < 0 || sig.HandlerIdle > 1 {
			t.Errorf("%d producers: signals %+v", p.Producers, sig)
		}
		// The offered rate is the producers' schedule, within 20%.
		if want := float64(p.Producers) * 2000; sig.OfferedPerSec < 0.8*want || sig.OfferedPerSec > 1.2*want || sig.AckedPerSec <= 0 {
			t.Errorf("%d producers: offered %.0f/s, acked %.0f/s", p.Producers, sig.OfferedPerSec, sig.AckedPerSec)
		}
	}
	txt, _ := os.ReadFile(filepath.Join(dir, lab.LimitsText))
	svg, _ := os.ReadFile(filepath.Join(dir, lab.LimitsSVG))
	if !strings.Contains(string(txt), "msg/s/broker") || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "plan ") {
		t.Errorf("table:\n%s\nsvg: %.300s", txt, svg)
	}
	t.Logf("\n%s", txt)
}
