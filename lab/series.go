package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/series"
)

// IsZero reports an unset throughput expectation.
func (t Throughput) IsZero() bool { return t.DuringFaults.IsZero() && t.AfterHeal.IsZero() }

// scrapeBrokers samples every broker's metrics into w once a second until
// ctx ends.
func scrapeBrokers(ctx context.Context, c *compose.Cluster, w series.Sink) {
	dial := c.Dial()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	defer client.CloseIdleConnections()
	var targets []series.Target
	for _, n := range c.Of(compose.RoleBroker) {
		base := clusterapi.BaseURL(n.Addr.String(), compose.MetricsPort)
		targets = append(targets, series.Target{Name: n.Name, URL: base + "/metrics", API: base})
	}
	series.Scrape(ctx, w, targets, client, time.Second)
}

// removeBrokerData deletes the brokers' log directories (and faultfs
// backing directories) of a finished run.
func removeBrokerData(topo compose.Topology) {
	for _, n := range topo.Role(compose.RoleBroker) {
		os.RemoveAll(n.DataDir)
		if n.Disk != nil {
			os.RemoveAll(n.Disk.Backing)
		}
	}
}

// faultWindows converts the checker's fault windows.
func faultWindows(v *checker.Verdict) []series.Window {
	var out []series.Window
	for _, f := range v.Timeline.Faults {
		out = append(out, series.Window{Name: f.Name, Start: f.Start, End: f.End})
	}
	return out
}

// summarizeSeries reads a run's metrics.jsonl and sums it up against the
// verdict's fault windows and what the faults in the history touched.
func summarizeSeries(dir string, v *checker.Verdict, t touched) (*results.Series, error) {
	_, ss, err := series.ReadFile(filepath.Join(dir, series.FileName))
	if err != nil {
		return nil, err
	}
	s := series.Summarize(ss, faultWindows(v), series.Options{})
	rs := &results.Series{Summary: &s}
	for k, n := range s.DuringFaults.IsrDrops {
		leader, replica, _ := strings.Cut(k, ">")
		if !t.touched(leader, replica) {
			rs.Collateral += n
		}
	}
	return rs, nil
}

// touched is what a run's faults acted on: nodes, and links a partition cut.
type touched struct {
	nodes map[string]bool
	links map[[2]string]bool
}

func (t touched) touched(a, b string) bool {
	return t.nodes[a] || t.nodes[b] || t.links[[2]string{a, b}] || t.links[[2]string{b, a}]
}

func newTouched() touched {
	return touched{nodes: map[string]bool{}, links: map[[2]string]bool{}}
}

// Start, Op and Finish make touched a history.Consumer: it takes the
// faults that started in a history, a partition's grudge giving the links
// it cut, any other fault's resolved nodes what it acted on.
func (t touched) Start(history.Header) {}

func (t touched) Op(op *history.Op) {
	if op.Process != history.Nemesis || op.Type != history.OK || !strings.HasPrefix(op.F, "start-") {
		return
	}
	fv, err := history.ParseFault(op.RawValue)
	if err != nil {
		return
	}
	for _, n := range fv.Resolved {
		t.nodes[n] = true
	}
	for to, froms := range fv.Links() {
		for _, from := range froms {
			t.links[[2]string{from, to}] = true
		}
	}
}

func (t touched) Finish(error) {}

// faultTouched reads what the faults in a stored run's history touched.
func faultTouched(path string) (touched, error) {
	t := newTouched()
	f, err := os.Open(path)
	if err != nil {
		return t, err
	}
	defer f.Close()
	r, err := history.NewReader(f, path)
	if err != nil {
		return t, err
	}
	err = r.Scan(0, func(op *history.Op, _ int64) error {
		t.Op(op)
		return nil
	})
	if errors.Is(err, history.ErrTruncated) {
		err = nil
	}
	return t, err
}

// analyzeRun checks a finished run's history, which open returns, and
// takes what its faults touched and its report's curves from the same
// pass: the history is read once.
func analyzeRun(open checker.OpenFunc, name string) (*checker.Verdict, touched, *results.Curves, error) {
	t, curves := newTouched(), results.NewCurves()
	v, err := checker.Check(open, name, checker.Options{Also: []history.Consumer{t, curves}})
	return v, t, curves, err
}

// judgeSeries adds the expectations on the time series (throughput, ISR
// shrinks and drops) to j; s is the run's series summary (nil when it has
// none).
func (e Expect) judgeSeries(j Judgement, s *results.Series) Judgement {
	if !e.series() {
		return j
	}
	undecided := func(reason string) {
		if j.Outcome == Met {
			j.Outcome = Undecided
		}
		j.Reasons = append(j.Reasons, reason)
	}
	fail := func(format string, a ...any) {
		j.Outcome = NotMet
		j.Reasons = append(j.Reasons, fmt.Sprintf(format, a...))
	}
	if s == nil || s.Summary == nil || s.Faults == 0 {
		undecided("no fault windows or no metrics to compare throughput and ISR churn")
		return j
	}
	for _, x := range []struct {
		name, term string
		c          Cond
		ratio      float64
		have       bool
	}{
		{"throughput during faults", "throughput.during-faults", e.Throughput.DuringFaults, s.DuringRatio, s.HasThroughput()},
		{"throughput after heal", "throughput.after-heal", e.Throughput.AfterHeal, s.AfterRatio, s.HasThroughput() && s.AfterHeal.Samples > 0},
	} {
		switch {
		case x.c.IsZero():
		case !x.have:
			undecided("no rate-workload samples to measure " + x.name)
		default:
			j.measure(x.term, x.ratio)
			if !x.c.Holds(x.ratio) {
				fail("expected %s %s, got %.2fx (%.0f/s against a baseline of %.0f/s)", x.name, x.c, x.ratio, phaseRate(s, x.name), s.Baseline.AckedPerSec)
			}
		}
	}
	if s.DuringFaults.BrokerSamples == 0 && (!e.IsrShrinks.IsZero() || !e.CollateralIsrDrops.IsZero() || !e.ReadLockWait.IsZero()) {
		// No broker answered a scrape during the faults: zeros here are
		// missing data, not a calm cluster.
		undecided("no broker metrics during the faults (no scrape of the brokers answered) to count ISR churn and lock waits")
		return j
	}
	for term, x := range map[string]float64{"isr-shrinks": s.DuringFaults.IsrShrinks, "collateral-isr-drops": s.Collateral, "read-lock-wait": s.DuringFaults.LockWaitMsPerSec} {
		if _, ok := e.Bounds()[term]; ok {
			j.measure(term, x)
		}
	}
	if c := e.IsrShrinks; !c.IsZero() && !c.Holds(s.DuringFaults.IsrShrinks) {
		fail("expected isr-shrinks %s, got %.0f during the faults", c, s.DuringFaults.IsrShrinks)
	}
	if c := e.CollateralIsrDrops; !c.IsZero() && !c.Holds(s.Collateral) {
		fail("expected collateral-isr-drops %s, got %.0f (ISR drops between brokers no fault touched)", c, s.Collateral)
	}
	if c := e.ReadLockWait; !c.IsZero() && !c.Holds(s.DuringFaults.LockWaitMsPerSec) {
		fail("expected read-lock-wait %s, got %.0f ms/s during the faults (all brokers)", c, s.DuringFaults.LockWaitMsPerSec)
	}
	return j
}

func phaseRate(s *results.Series, name string) float64 {
	if strings.HasSuffix(name, "after heal") {
		return s.AfterHeal.AckedPerSec
	}
	return s.DuringFaults.AckedPerSec
}
