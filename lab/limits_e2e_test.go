package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
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

// TestLimitsPointSecured: a limit point on a secured cluster (limits
// --secured) runs its rate workload over SASL_SSL and measures it.
func TestLimitsPointSecured(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: each limit point runs a cluster in network namespaces")
	}
	bin := proctest.Binary(t)
	c := lab.LimitsConfig{Brokers: 1, Rate: 1000, Window: 3 * time.Second, Warmup: 2 * time.Second, Secured: true, ResultsDir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var dir string
	sig, err := lab.LimitProbe(c, lab.Options{Binary: bin}, func(d string) { dir = d })(ctx, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if sig.AckedPerSec <= 0 || sig.Intervals < 2 {
		t.Fatalf("signals %+v", sig)
	}
	b, err := os.ReadFile(filepath.Join(dir, "scenario.yaml"))
	if err != nil || !strings.Contains(string(b), "secured: true") {
		t.Fatalf("the point's scenario is not secured (%v):\n%s", err, b)
	}
}

// TestLimitsCtrlC runs `isrlab limits` on a pseudo-terminal, as from a
// shell, and types Ctrl-C while its second point's workload runs: the
// terminal sends SIGINT to the whole foreground process group, the
// command and every child it started. It stops, keeps what was measured
// (the first point, in the table and limits.json, marked incomplete, and
// report.html), exits 2 as isrlab run does when cut short, and leaves no
// network namespace or process of any point's cluster.
func TestLimitsCtrlC(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("-short: skipping the limit search's end-to-end run")
	}
	bin := proctest.Binary(t)
	results := t.TempDir()
	cmd := exec.Command(bin, "limits", "--record-sizes", "1000", "--brokers", "1", "--consumer-groups", "1",
		"--producer-rate", "500", "--max-producers", "2", "--window", "20s", "--results", results,
		"--p99", "0.01") // 2 producers overload (any acknowledgement takes longer), so 1 is tried next
	tty, err := pty.Start(cmd) // a new session whose controlling terminal is tty
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(tty)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(6 * time.Minute)
	var out []string
	var dir string
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			if ok {
				out = append(out, l)
			}
			return l, ok
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("isrlab limits: no progress:\n%s", strings.Join(out, "\n"))
		}
		return "", false
	}
	// The first point (2 producers) is measured, the second (1) started.
	for l, ok := next(); !strings.Contains(l, "trying 1 producers"); l, ok = next() {
		if !ok {
			t.Fatalf("isrlab limits ended early: %v\n%s", <-done, strings.Join(out, "\n"))
		}
		if _, d, found := strings.Cut(l, "results: "); found {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("no results directory in:\n%s", strings.Join(out, "\n"))
	}
	// Wait for the second point's workload to sample (its series grows).
	second := filepath.Join(dir, "points", "limits", "size-1000", "producers-1")
	proctest.Eventually(t, 3*time.Minute, "the second point's workload sampling", func() error {
		ms, _ := filepath.Glob(filepath.Join(second, "*", "metrics.jsonl"))
		if len(ms) == 1 {
			if b, _ := os.ReadFile(ms[0]); strings.Count(string(b), `"src":"workload"`) >= 2 {
				return nil
			}
		}
		return fmt.Errorf("no two workload samples yet:\n%s", strings.Join(out, "\n"))
	})
	if _, err := tty.Write([]byte{0x03}); err != nil { // ^C: the line discipline's VINTR
		t.Fatal(err)
	}
	for _, ok := next(); ok; _, ok = next() {
	}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("isrlab limits went on after Ctrl-C:\n%s", strings.Join(out, "\n"))
	}
	text := strings.Join(out, "\n")
	t.Logf("isrlab limits on a terminal, Ctrl-C in its second point:\n%s", text)
	if code := exitCode(werr); code != 2 {
		t.Errorf("exit %d, want 2 (stopped early)\n%s", code, text)
	}
	if !strings.Contains(text, "stopped early: kept what was measured") || !strings.Contains(text, "INCOMPLETE") ||
		!regexp.MustCompile(`(?m)^\s+2 producers: handler idle .* -> OVERLOAD`).MatchString(text) {
		t.Errorf("the table of what was measured is not printed:\n%s", text)
	}
	var rep lab.LimitsReport
	b, err := os.ReadFile(filepath.Join(dir, lab.LimitsJSON))
	if err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("limits.json: %v\n%s", err, b)
	}
	if !rep.Incomplete || len(rep.Searches) != 1 || len(rep.Searches[0].Points) != 1 || rep.Searches[0].Points[0].Producers != 2 {
		t.Errorf("limits.json: %s", b)
	}
	if page, err := os.ReadFile(filepath.Join(dir, "report.html")); err != nil || !strings.Contains(string(page), `id="incomplete"`) {
		t.Errorf("report.html: %v", err)
	}
	// Every point's cluster is gone: both points' run ids.
	runs, _ := filepath.Glob(filepath.Join(dir, "points", "limits", "size-1000", "producers-*", "*-*"))
	if len(runs) != 2 {
		t.Errorf("point run directories: %v", runs)
	}
	for _, r := range runs {
		id := r[strings.LastIndex(r, "-")+1:]
		if l := leftovers(t, id); len(l) > 0 {
			t.Errorf("run %s left behind: %v", id, l)
		}
	}
}
