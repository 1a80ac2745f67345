package results_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

// TestLabTypesRoundTrip: what lab writes (results.Outcome with lab's
// outcome names, lab.MatrixResult) reads back into results.Outcome and
// results.Table without loss, so the JSON files stay the one contract
// between the two packages.
func TestLabTypesRoundTrip(t *testing.T) {
	for o, want := range map[lab.Outcome]string{lab.Met: results.Met, lab.NotMet: results.NotMet,
		lab.Undecided: results.Undecided, lab.NotSetUp: results.NotSetUp} {
		if b, _ := o.MarshalText(); o.String() != want || string(b) != want {
			t.Errorf("lab outcome %q (text %q), results spells it %q", o, b, want)
		}
	}

	cell := lab.CellResult{Cell: "safe/kill", Preset: "safe", Schedule: "kill", Seed: 3, State: "done", Outcome: "not met",
		Valid: "false", Anomalies: map[string]int64{"duplicate": 1}, Avail: 0.9, MaxUnavS: 4.5, Expect: "valid",
		Reasons: []string{"r"}, Error: "e", Dir: "/r/m/runs/x", Seconds: 30}
	mr := lab.MatrixResult{Matrix: "m", Dir: "/r/m", Started: "2026-01-01T00:00:00Z", Seconds: 60, Cells: []lab.CellResult{cell}}
	var tab results.Table
	roundTrip(t, mr, &tab)
	wantTab := results.Table{Matrix: "m", Dir: "/r/m", Started: "2026-01-01T00:00:00Z", Seconds: 60, Cells: []results.Cell{{
		Cell: "safe/kill", Preset: "safe", Schedule: "kill", Seed: 3, State: "done", Outcome: "not met", Valid: "false",
		Anomalies: map[string]int64{"duplicate": 1}, Avail: 0.9, MaxUnavS: 4.5, Expect: "valid", Reasons: []string{"r"},
		Error: "e", Dir: "/r/m/runs/x", Seconds: 30}}}
	if !reflect.DeepEqual(tab, wantTab) {
		t.Errorf("table:\n got %+v\nwant %+v", tab, wantTab)
	}
	// Every field of lab's types is read: the same JSON keys both ways.
	assertSameKeys(t, mr.Cells[0], tab.Cells[0])
	assertSameKeys(t, mr, tab)
}

func roundTrip(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func assertSameKeys(t *testing.T, a, b any) {
	t.Helper()
	keys := func(v any) map[string]bool {
		raw, _ := json.Marshal(v)
		m := map[string]json.RawMessage{}
		json.Unmarshal(raw, &m)
		out := map[string]bool{}
		for k := range m {
			out[k] = true
		}
		return out
	}
	if ka, kb := keys(a), keys(b); !reflect.DeepEqual(ka, kb) {
		t.Errorf("JSON keys differ:\n%v\n%v", ka, kb)
	}
}

// TestOutcomeFilesRoundTrip: outcome.json files lab wrote (one with a
// series summary and timing, from before Outcome had them, one without)
// decode into Outcome and encode again, as WriteRun writes them, byte for
// byte.
func TestOutcomeFilesRoundTrip(t *testing.T) {
	for _, name := range []string{"testdata/outcome/isr-churn.json", "../lab/testdata/shrink-replay/outcome.json"} {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var o results.Outcome
		if err := json.Unmarshal(want, &o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dir := t.TempDir()
		if err := results.WriteJSON(filepath.Join(dir, results.OutcomeFile), &o); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, results.OutcomeFile))
		if !bytes.Equal(got, want) {
			t.Errorf("%s does not encode back as it was:\n%s", name, got)
		}
	}
	// The typed fields hold the series summary and the timing.
	b, _ := os.ReadFile("testdata/outcome/isr-churn.json")
	var oc results.Outcome
	if err := json.Unmarshal(b, &oc); err != nil {
		t.Fatal(err)
	}
	if s := oc.Series; s == nil || s.Summary == nil || s.Faults != 11 || s.Collateral != 45 || s.DuringFaults.IsrDrops["b1>b2"] != 23 ||
		oc.Timing == nil || oc.Timing.Workload != 66.019462841 || oc.Outcome != results.Met {
		t.Errorf("isr-churn: %+v, series %+v, timing %+v", oc, oc.Series, oc.Timing)
	}
}
