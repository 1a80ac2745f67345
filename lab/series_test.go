package lab

import (
	"errors"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/checker"
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
	collapse := &series.Summary{Faults: 3,
		Baseline:     series.Phase{Samples: 10, AckedPerSec: 100000},
		DuringFaults: series.Phase{Samples: 20, AckedPerSec: 40000, IsrShrinks: 30},
		AfterHeal:    series.Phase{Samples: 5, AckedPerSec: 98000},
		DuringRatio:  0.4, AfterRatio: 0.98}
	holds := &series.Summary{Faults: 3,
		Baseline:     series.Phase{Samples: 10, AckedPerSec: 100000},
		DuringFaults: series.Phase{Samples: 20, AckedPerSec: 97000, IsrShrinks: 0},
		DuringRatio:  0.97}
	noWorkload := &series.Summary{Faults: 3, DuringFaults: series.Phase{IsrShrinks: 4}}
	incident := expect("expect: {throughput: {during-faults: \"<0.5x\", after-heal: \">=0.9x\"}, isr-shrinks: \">=10\"}")
	mitigated := expect("expect: {throughput: {during-faults: \">=0.9x\"}, isr-shrinks: \"<=2\"}")
	// No client operations: validity unknown, which a series-only
	// expectation does not ask about.
	noOps := &checker.Verdict{Valid: checker.Unknown, Anomalies: map[string]int64{}}
	for _, tc := range []struct {
		name string
		e    Expect
		s    *series.Summary
		want Outcome
	}{
		{"incident-collapses", incident, collapse, Met},
		{"incident-holds", incident, holds, NotMet},
		{"mitigated-holds", mitigated, holds, Met},
		{"mitigated-collapses", mitigated, collapse, NotMet},
		{"no-series", incident, nil, Undecided},
		{"no-workload-samples", incident, noWorkload, NotMet}, // 4 shrinks < 10 decides it
		{"no-workload-shrinks-ok", expect("expect: {throughput: {during-faults: \"<0.5x\"}, isr-shrinks: \">=1\"}"), noWorkload, Undecided},
		{"not-asked", Expect{Valid: "any"}, nil, Met},
	} {
		j := tc.e.JudgeSeries(tc.e.Judge(noOps, false), tc.s)
		if j.Outcome != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, j.Outcome, j.Reasons, tc.want)
		}
	}
	j := mitigated.JudgeSeries(mitigated.Judge(noOps, false), collapse)
	if r := strings.Join(j.Reasons, "; "); !strings.Contains(r, "got 0.40x (40000/s against a baseline of 100000/s)") || !strings.Contains(r, "got 30 during the faults") {
		t.Errorf("reasons: %s", r)
	}
	if s := incident.String(); s != "throughput during faults <0.5x, throughput after heal >=0.9x, isr-shrinks >=10" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []string{
		"expect: {throughput: {during-faults: \"<0.5\"}}",
		"expect: {throughput: {during-faults: \"<5s\"}}",
		"expect: {isr-shrinks: \"<0.5x\"}",
		"expect: {availability: \">0.9x\"}",
		"expect: {throughput: {during: \"<0.5x\"}}",
	} {
		if _, err := Parse("x.yaml", "x", []byte(bad)); !errors.Is(err, ErrScenario) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
