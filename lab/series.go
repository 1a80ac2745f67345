package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/compose"
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
		url := "http://" + net.JoinHostPort(n.Addr.String(), strconv.Itoa(compose.MetricsPort)) + "/metrics"
		targets = append(targets, series.Target{Name: n.Name, URL: url})
	}
	series.Scrape(ctx, w, targets, client, time.Second)
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
// verdict's fault windows; nil if the run has no series.
func summarizeSeries(path string, v *checker.Verdict) (*series.Summary, error) {
	_, ss, err := series.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := series.Summarize(ss, faultWindows(v), series.Options{})
	return &s, nil
}

// JudgeSeries adds the expectations on the time series (throughput, ISR
// shrinks) to j; s is the run's series summary (nil when it has none).
func (e Expect) JudgeSeries(j Judgement, s *series.Summary) Judgement {
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
	if s == nil || s.Faults == 0 {
		undecided("no fault windows or no metrics to compare throughput and ISR churn")
		return j
	}
	for _, x := range []struct {
		name  string
		c     Cond
		ratio float64
		have  bool
	}{
		{"throughput during faults", e.Throughput.DuringFaults, s.DuringRatio, s.HasThroughput()},
		{"throughput after heal", e.Throughput.AfterHeal, s.AfterRatio, s.HasThroughput() && s.AfterHeal.Samples > 0},
	} {
		switch {
		case x.c.IsZero():
		case !x.have:
			undecided("no rate-workload samples to measure " + x.name)
		case !x.c.Holds(x.ratio):
			fail("expected %s %s, got %.2fx (%.0f/s against a baseline of %.0f/s)", x.name, x.c, x.ratio, phaseRate(s, x.name), s.Baseline.AckedPerSec)
		}
	}
	if c := e.IsrShrinks; !c.IsZero() && !c.Holds(s.DuringFaults.IsrShrinks) {
		fail("expected isr-shrinks %s, got %.0f during the faults", c, s.DuringFaults.IsrShrinks)
	}
	return j
}

func phaseRate(s *series.Summary, name string) float64 {
	if strings.HasSuffix(name, "after heal") {
		return s.AfterHeal.AckedPerSec
	}
	return s.DuringFaults.AckedPerSec
}

// printSeries prints the series summary's line of the run report.
func printSeries(out io.Writer, s *series.Summary) {
	if s == nil {
		return
	}
	b, d, a := s.Baseline, s.DuringFaults, s.AfterHeal
	if b.Samples > 0 {
		fmt.Fprintf(out, "  throughput: %.0f/s before the faults, %.0f/s during (%.2fx, worst second %.0f/s), %.0f/s after (%.2fx)\n",
			b.AckedPerSec, d.AckedPerSec, s.DuringRatio, d.MinAckedPerSec, a.AckedPerSec, s.AfterRatio)
	}
	fmt.Fprintf(out, "  ISR churn during the faults: %.0f shrinks, %.0f expands; handler idle %.0f%% (min %.0f%%), read-lock wait %.0f ms/s, follower fetch p99 up to %.0f ms\n",
		d.IsrShrinks, d.IsrExpands, 100*d.HandlerIdle, 100*d.HandlerIdleMin, d.LockWaitMsPerSec, d.FetchFollowerP99Ms)
}
