package results

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/checker"
	metrics "github.com/isrlab/isrlab/series"
)

// TestWriteVerdict: a run's verdict lines, as lab printed them before
// they moved here (testdata/verdict.txt): with a series summary and an
// unmet expectation, then with a summary of a run without faults,
// transactions and nothing to measure.
func TestWriteVerdict(t *testing.T) {
	v, err := ReadVerdict(os.DirFS("testdata/run-kill"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/outcome/isr-churn.json")
	if err != nil {
		t.Fatal(err)
	}
	var o Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	o.Outcome, o.Expect, o.Reasons = NotMet, "lost-write 0", []string{"expected lost-write 0, got 1", "r2"}
	var out strings.Builder
	WriteVerdict(&out, &o, v)
	v.Stats.Txn = &checker.TxnStats{Txns: 10, OK: 7, Fail: 1, Info: 1, Pending: 1, InfoRead: 1, Polls: 5}
	v.Anomalies = map[string]int64{}
	v.Unavailability = checker.Unavailability{MaxPartition: -1, ThresholdSeconds: 1}
	v.Availability = checker.Availability{}
	calm := &Series{Summary: &metrics.Summary{Baseline: metrics.Phase{Samples: 3, AckedPerSec: 1000, MinAckedPerSec: 900, ProduceP99Ms: 12}}}
	WriteVerdict(&out, &Outcome{Outcome: Met, Expect: "valid", Series: calm}, v)
	want, err := os.ReadFile("testdata/verdict.txt")
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("verdict lines:\n%s\nwant:\n%s", out.String(), want)
	}
	if got := JudgementLine("s across seeds", "lost-write >0 in 2 of 3", Undecided, nil); got != "s across seeds (lost-write >0 in 2 of 3): UNDECIDED" {
		t.Errorf("judgement line without reasons: %q", got)
	}
}
