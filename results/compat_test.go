package results_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

// TestLabTypesRoundTrip: what lab writes (lab.Summary, lab.MatrixResult)
// reads back into results.Outcome and results.Table without loss, so the
// JSON files stay the one contract between the two packages.
func TestLabTypesRoundTrip(t *testing.T) {
	sum := lab.Summary{Scenario: "s/x", RunID: "r1", Seed: 7, Started: "2026-01-01T00:00:00Z", Seconds: 3.5,
		Incomplete: true, Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 2},
		Judgement: lab.Judgement{Outcome: lab.NotMet, Expect: "valid", Reasons: []string{"expected valid=true, got valid=false"}}}
	want := results.Outcome{Scenario: "s/x", RunID: "r1", Seed: 7, Started: "2026-01-01T00:00:00Z", Seconds: 3.5,
		Incomplete: true, Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 2},
		Outcome: results.NotMet, Expect: "valid", Reasons: []string{"expected valid=true, got valid=false"}}
	var got results.Outcome
	roundTrip(t, sum, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outcome:\n got %+v\nwant %+v", got, want)
	}
	for _, o := range []lab.Outcome{lab.Met, lab.NotMet, lab.Undecided} {
		var g results.Outcome
		roundTrip(t, lab.Summary{Judgement: lab.Judgement{Outcome: o}}, &g)
		if g.Outcome != o.String() {
			t.Errorf("outcome %v reads as %q", o, g.Outcome)
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
