package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/series"
)

// TestJudgeSeries: throughput ratios and ISR shrinks are judged from the
// series summary; a rate run's history has no client operations, so such
// an expectation does not ask for validity.
func TestJudgeSeries(t *testing.T) {
	expect := func(s string) Expect {
		t.Helper()
		sc, err := Parse("x.yaml", "x", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return sc.Expect
	}
	collapse := &results.Series{Collateral: 12, Summary: &series.Summary{Faults: 3,
		Baseline:     series.Phase{Samples: 10, AckedPerSec: 100000},
		DuringFaults: series.Phase{Samples: 20, AckedPerSec: 40000, IsrShrinks: 30, LockWaitMsPerSec: 16775, BrokerSamples: 60},
		AfterHeal:    series.Phase{Samples: 5, AckedPerSec: 98000},
		DuringRatio:  0.4, AfterRatio: 0.98}}
	holds := &results.Series{Summary: &series.Summary{Faults: 3,
		Baseline:     series.Phase{Samples: 10, AckedPerSec: 100000},
		DuringFaults: series.Phase{Samples: 20, AckedPerSec: 97000, IsrShrinks: 0, LockWaitMsPerSec: 3, BrokerSamples: 60},
		DuringRatio:  0.97}}
	noWorkload := &results.Series{Summary: &series.Summary{Faults: 3, DuringFaults: series.Phase{IsrShrinks: 4, BrokerSamples: 60}}}
	// A busy machine where no scrape of the brokers answered: the zeros
	// are missing data.
	noBrokers := &results.Series{Summary: &series.Summary{Faults: 3,
		Baseline:     series.Phase{Samples: 10, AckedPerSec: 100000},
		DuringFaults: series.Phase{Samples: 20, AckedPerSec: 40000},
		DuringRatio:  0.4}}
	incident := expect("expect: {throughput: {during-faults: \"<0.5x\", after-heal: \">=0.9x\"}, isr-shrinks: \">=10\", collateral-isr-drops: \">0\"}")
	mitigated := expect("expect: {throughput: {during-faults: \">=0.9x\"}, isr-shrinks: \"<=2\", collateral-isr-drops: 0}")
	// No client operations: validity unknown, which a series-only
	// expectation does not ask about.
	noOps := &checker.Verdict{Valid: checker.Unknown, Anomalies: map[string]int64{}}
	for _, tc := range []struct {
		name string
		e    Expect
		s    *results.Series
		want Outcome
	}{
		{"incident-collapses", incident, collapse, Met},
		{"incident-holds", incident, holds, NotMet},
		{"mitigated-holds", mitigated, holds, Met},
		{"mitigated-collapses", mitigated, collapse, NotMet},
		{"no-series", incident, nil, Undecided},
		{"no-workload-samples", incident, noWorkload, NotMet}, // 4 shrinks < 10 decides it
		{"no-spread", expect("expect: {collateral-isr-drops: \">0\"}"), holds, NotMet},
		{"no-workload-shrinks-ok", expect("expect: {throughput: {during-faults: \"<0.5x\"}, isr-shrinks: \">=1\"}"), noWorkload, Undecided},
		{"not-asked", Expect{Valid: "any"}, nil, Met},
		{"lock-stall", expect("expect: {read-lock-wait: \">1000\"}"), collapse, Met},
		{"no-lock-stall", expect("expect: {read-lock-wait: \">1000\"}"), holds, NotMet},
		{"locks-free", expect("expect: {read-lock-wait: \"<500\"}"), holds, Met},
		{"no-broker-metrics", incident, noBrokers, Undecided},
		{"no-broker-metrics-locks", expect("expect: {read-lock-wait: \"<500\"}"), noBrokers, Undecided},
		{"no-broker-metrics-throughput-only", expect("expect: {throughput: {during-faults: \"<0.5x\"}}"), noBrokers, Met},
	} {
		j := tc.e.judgeSeries(tc.e.Judge(noOps), tc.s)
		if j.Outcome != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, j.Outcome, j.Reasons, tc.want)
		}
	}
	lock := expect("expect: {read-lock-wait: \"<500\"}")
	if j := lock.judgeSeries(lock.Judge(noOps), collapse); !slices.Contains(j.Reasons, "expected read-lock-wait <500, got 16775 ms/s during the faults (all brokers)") {
		t.Errorf("read-lock-wait reasons: %q", j.Reasons)
	}
	j := mitigated.judgeSeries(mitigated.Judge(noOps), collapse)
	if r := strings.Join(j.Reasons, "; "); !strings.Contains(r, "got 0.40x (40000/s against a baseline of 100000/s)") || !strings.Contains(r, "got 30 during the faults") || !strings.Contains(r, "collateral-isr-drops 0, got 12") {
		t.Errorf("reasons: %s", r)
	}
	// What each bound was compared with is recorded, met or not.
	if m := j.Measured; m["throughput.during-faults"] != 0.4 || m["isr-shrinks"] != 30 || m["collateral-isr-drops"] != 12 {
		t.Errorf("measured %v", m)
	}
	if _, ok := j.Measured["read-lock-wait"]; ok {
		t.Errorf("measured a term the expectation does not bound: %v", j.Measured)
	}
	both := expect("expect: {valid: false, anomalies: {lost-write: \">0\"}, unavailability: \"<25s\"}")
	v := &checker.Verdict{Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 7}}
	v.Unavailability.MaxWindow = 18.4
	if j := both.Judge(v); j.Outcome != Met || j.Measured["lost-write"] != 7 || j.Measured["unavailability"] != 18.4 {
		t.Errorf("%v: measured %v", j.Outcome, j.Measured)
	}
	if s := incident.String(); s != "throughput during faults <0.5x, throughput after heal >=0.9x, isr-shrinks >=10, collateral-isr-drops >0" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []string{
		"expect: {throughput: {during-faults: \"<0.5\"}}",
		"expect: {throughput: {during-faults: \"<5s\"}}",
		"expect: {isr-shrinks: \"<0.5x\"}",
		"expect: {availability: \">0.9x\"}",
		"expect: {throughput: {during: \"<0.5x\"}}",
		"expect: {collateral-isr-drops: \"1s\"}",
		"expect: {read-lock-wait: \"<0.5x\"}",
	} {
		if _, err := Parse("x.yaml", "x", []byte(bad)); !errors.Is(err, ErrScenario) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestSummarizeSeriesCollateral: ISR drops between brokers a partition cut
// apart, or involving a fault's target, are the fault's own; the rest
// spread by themselves.
func TestSummarizeSeriesCollateral(t *testing.T) {
	dir := t.TempDir()
	hist := `{"isrlab_history":1}
{"index":0,"time":1000000000,"process":"nemesis","type":"invoke","f":"start-slow-net","value":{"kind":"slow-net","nodes":["coordinators"]}}
{"index":1,"time":1100000000,"process":"nemesis","type":"ok","f":"start-slow-net","value":{"kind":"slow-net","nodes":["coordinators"],"resolved":["c1"]}}
{"index":2,"time":1200000000,"process":"nemesis","type":"invoke","f":"start-partition","value":{"kind":"partition"}}
{"index":3,"time":1300000000,"process":"nemesis","type":"ok","f":"start-partition","value":{"kind":"partition","grudge":{"b1":["b3"],"b2":["b3"],"b3":["b1","b2"]}}}
{"index":4,"time":9000000000,"process":"nemesis","type":"invoke","f":"heal"}
{"index":5,"time":9100000000,"process":"nemesis","type":"ok","f":"heal"}
`
	ser := `{"isrlab_series":1}
{"t":5,"src":"b1","v":{"up":1,"IsrDropped.3":4,"IsrDropped.2":2}}
{"t":6,"src":"b3","v":{"up":1,"IsrDropped.1":1}}
{"t":7,"src":"b2","v":{"up":1,"IsrDropped.1":3}}
`
	os.WriteFile(filepath.Join(dir, "history.jsonl"), []byte(hist), 0o644)
	os.WriteFile(filepath.Join(dir, series.FileName), []byte(ser), 0o644)
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(filepath.Join(dir, "history.jsonl")) }, "h", checker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := faultTouched(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := summarizeSeries(dir, v, tc)
	if err != nil {
		t.Fatal(err)
	}
	// b1>b3 and b3>b1 went over the cut link; b1>b2 and b2>b1 did not.
	if rs.Collateral != 5 || rs.Faults != 2 {
		t.Errorf("collateral %v, faults %d, drops %v", rs.Collateral, rs.Faults, rs.DuringFaults.IsrDrops)
	}
}

// TestSeriesReport: isrlab series finds the runs under a directory, plots
// each and tabulates them.
func TestSeriesReport(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "runs", "x", "20250101T000000Z-abcd")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "history.jsonl"), []byte(`{"isrlab_history":1}
{"index":0,"time":4000000000,"process":"nemesis","type":"invoke","f":"start-pause","value":{"kind":"pause"}}
{"index":1,"time":4100000000,"process":"nemesis","type":"ok","f":"start-pause","value":{"kind":"pause","resolved":["b3"]}}
{"index":2,"time":6000000000,"process":"nemesis","type":"invoke","f":"stop-pause"}
{"index":3,"time":6100000000,"process":"nemesis","type":"ok","f":"stop-pause"}
`), 0o644)
	ser := `{"isrlab_series":1}` + "\n"
	for i := 1; i <= 8; i++ {
		acked := 1000
		if i == 5 || i == 6 {
			acked = 200
		}
		ser += fmt.Sprintf(`{"t":%d,"src":"workload","v":{"acked_per_s":%d}}`+"\n", i, acked)
	}
	os.WriteFile(filepath.Join(dir, series.FileName), []byte(ser), 0o644)
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(filepath.Join(dir, "history.jsonl")) }, "h", checker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	os.WriteFile(filepath.Join(dir, "verdict.json"), b, 0o644)
	rows, err := SeriesReport([]string{root}, true)
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, %v", rows, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "metrics.svg")); err != nil {
		t.Error(err)
	}
	var md strings.Builder
	WriteSeriesTable(&md, rows, root)
	if !strings.Contains(md.String(), "(runs/x/20250101T000000Z-abcd/metrics.svg) | 1000 | 200 | 0.20x | 200 | 1.00x |") {
		t.Errorf("table:\n%s", md.String())
	}
}

// TestRunReadsHistoryOnce: a finished run's post-processing (the check,
// linearizability and the examples' operations included, what the faults
// touched, the series summary, verdict.json, outcome.json, junit.xml and
// report.html) opens the history once. The run directory has no
// history.jsonl here, so nothing but the counted OpenFunc can read it.
func TestRunReadsHistoryOnce(t *testing.T) {
	dir := t.TempDir()
	histPath := filepath.Join(t.TempDir(), "history.jsonl")
	f, err := os.Create(histPath)
	if err != nil {
		t.Fatal(err)
	}
	w, err := history.NewWriter(f, history.Header{Run: "once", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	cut := history.NewOp(history.Nemesis, history.OK, "start-partition")
	cut.RawValue = json.RawMessage(`{"kind":"partition","grudge":{"b1":["b3"],"b3":["b1"]}}`)
	if err := w.Write(&cut); err != nil {
		t.Fatal(err)
	}
	// Every anomaly kind, so that the verdict's examples are read back.
	if _, err := history.Synthesize(w, history.SynthOptions{Ops: 20000, Partitions: 3, Seed: 2, Faults: true, AnomalyEvery: 2000}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	ser := `{"isrlab_series":1}
{"t":5,"src":"b1","v":{"up":1,"IsrDropped.3":4,"IsrDropped.2":2}}
`
	if err := os.WriteFile(filepath.Join(dir, series.FileName), []byte(ser), 0o644); err != nil {
		t.Fatal(err)
	}

	opens := 0
	open := func() (io.ReadCloser, error) {
		opens++
		return os.Open(histPath)
	}
	v, hit, curves, err := analyzeRun(open, histPath)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := summarizeSeries(dir, v, hit)
	if err != nil {
		t.Fatal(err)
	}
	sum := &results.Outcome{Scenario: "once", Valid: v.Valid, Anomalies: v.Anomalies, Series: rs,
		Outcome: results.Met, Expect: "anything"}
	if err := results.WriteRun(dir, v, sum, curves); err != nil {
		t.Fatal(err)
	}
	if opens != 1 {
		t.Errorf("the history was opened %d times, want 1", opens)
	}
	// What the one read had to give.
	if v.Linearizable.Result != "illegal" || len(v.Examples[checker.LostWrite]) == 0 || len(v.Examples[checker.LostWrite][0].Ops) == 0 {
		t.Errorf("linearizable %s, lost-write examples %v", v.Linearizable.Result, v.Examples[checker.LostWrite])
	}
	if !hit.touched("b1", "b3") || hit.touched("b1", "b2") {
		t.Errorf("touched %+v", hit)
	}
	if curves.Ops != v.Stats.Ops || len(curves.Buckets) == 0 {
		t.Errorf("curves of %d ops (%d buckets), the verdict counts %d", curves.Ops, len(curves.Buckets), v.Stats.Ops)
	}
	for _, name := range []string{results.VerdictFile, results.OutcomeFile, results.JUnitFile, results.ReportFile} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}
