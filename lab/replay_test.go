package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/scripttest"
	"github.com/isrlab/isrlab/nemesis"
)

// TestReplayScenario: the replay of a stored run (testdata/shrink-replay:
// the nemesis's lines of a run of shrink-zombie.yaml) fires each fault at
// the offset its injection began, on the nodes it resolved to, healed as
// long after its injection as it was; the partition replays its recorded
// cut as a grudge (testdata/shrink-replay.golden).
func TestReplayScenario(t *testing.T) {
	plan, err := ReplayScenario("testdata/shrink-replay")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (seed %d):\n%s", plan.Scenario.Name, plan.Scenario.Seed, describe(plan.Scenario))
	for _, n := range plan.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	scripttest.Golden(t, filepath.Join("testdata", "shrink-replay.golden"), b.String())
	sc := plan.Scenario
	if sc.Schedule != nil || len(sc.Faults) != 5 || sc.Seed != 5 {
		t.Fatalf("replay: schedule %v, %d faults, seed %d", sc.Schedule, len(sc.Faults), sc.Seed)
	}
	// The recorded assignment: b1 leads first again, as in the original.
	if r := sc.Topic.Replicas[0]; len(sc.Topic.Replicas) != 1 || len(r) != 3 || r[0] != 1 {
		t.Errorf("replicas %v, want the recorded [1 2 3]", sc.Topic.Replicas)
	}
	p, ok := sc.Faults[2].Spec.Fault.(*nemesis.Partition)
	if !ok || p.Topology != nemesis.TopoGrudge || len(p.Grudge["b1"]) != 1 || p.Grudge["b1"][0] != "c1" {
		t.Errorf("partition: %+v", sc.Faults[2].Spec.Fault)
	}
	// Injected from 14.248 s, in at 14.282 s, its heal began at 28.284 s.
	if sc.Faults[2].At != 14248*time.Millisecond || sc.Faults[2].HealAfter != 14003*time.Millisecond {
		t.Errorf("partition at %v for %v", sc.Faults[2].At, sc.Faults[2].HealAfter)
	}
	// The loss went to follower:isrlab/0, which was b1 by then: b1 it stays.
	if l, ok := sc.Faults[4].Spec.Fault.(*nemesis.Loss); !ok || strings.Join(l.Nodes, ",") != "b1" {
		t.Errorf("loss: %+v", sc.Faults[4].Spec.Fault)
	}
	for _, f := range sc.Faults {
		if f.When != nil {
			t.Errorf("a replayed fault waits: %+v", f.When)
		}
	}
	// The replay itself replays to the same faults.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "scenario.yaml"), mustYAML(t, sc), 0o644); err != nil {
		t.Fatal(err)
	}
	hist, _ := os.ReadFile("testdata/shrink-replay/history.jsonl")
	os.WriteFile(filepath.Join(dir, "history.jsonl"), hist, 0o644)
	again, err := ReplayScenario(dir)
	if err != nil {
		t.Fatal(err)
	}
	if describe(again.Scenario) != describe(sc) || again.Scenario.Name != sc.Name {
		t.Errorf("replay of the replay:\n%s\nvs\n%s", describe(again.Scenario), describe(sc))
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := marshalYAML(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadRecordedFaults: starts pair with the stop of the same fault as
// it went in, a heal of everything ends what is active, a failed start is
// left out and says why.
func TestReadRecordedFaults(t *testing.T) {
	h := `{"isrlab_history":1,"run":"r","seed":1,"topic":"isrlab","partitions":1}
{"index":0,"time":1000000000,"process":"nemesis","type":"invoke","f":"start-kill","value":{"kind":"kill","nodes":["leader:isrlab/0"],"resolved":["b2"]}}
{"index":1,"time":1100000000,"process":"nemesis","type":"ok","f":"start-kill","value":{"kind":"kill","nodes":["leader:isrlab/0"],"resolved":["b2"]}}
{"index":2,"time":1200000000,"process":0,"type":"invoke","f":"send","value":1}
{"index":3,"time":2000000000,"process":"nemesis","type":"invoke","f":"start-kill","value":{"kind":"kill","nodes":["b1"],"resolved":["b1"]}}
{"index":4,"time":2100000000,"process":"nemesis","type":"ok","f":"start-kill","value":{"kind":"kill","nodes":["b1"],"resolved":["b1"]}}
{"index":5,"time":3000000000,"process":"nemesis","type":"invoke","f":"stop-kill","value":{"kind":"kill","nodes":["b1"],"resolved":["b1"]}}
{"index":6,"time":3100000000,"process":"nemesis","type":"ok","f":"stop-kill","value":{"kind":"kill","nodes":["b1"],"resolved":["b1"]}}
{"index":7,"time":4000000000,"process":"nemesis","type":"invoke","f":"start-pause","value":{"kind":"pause","nodes":["b9"]}}
{"index":8,"time":4000000000,"process":"nemesis","type":"fail","f":"start-pause","value":{"kind":"pause","nodes":["b9"]},"error":"no such node"}
{"index":9,"time":5000000000,"process":"nemesis","type":"invoke","f":"heal","value":["f1"]}
{"index":10,"time":5200000000,"process":"nemesis","type":"ok","f":"heal","value":["f1"]}
`
	got, err := ReadRecordedFaults(strings.NewReader(h))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"kind":"kill","start":1000000000,"in":1100000000,"stop":5000000000,"spec":{"kind":"kill","nodes":["leader:isrlab/0"],"resolved":["b2"]},"healed":"heal"},` +
		`{"kind":"kill","start":2000000000,"in":2100000000,"stop":3000000000,"spec":{"kind":"kill","nodes":["b1"],"resolved":["b1"]},"healed":"stop"},` +
		`{"kind":"pause","start":4000000000,"in":4000000000,"spec":{"kind":"pause","nodes":["b9"]},"skipped":"its injection did not complete (fail)"}]`
	if string(b) != want {
		t.Errorf("got\n%s\nwant\n%s", b, want)
	}
	if _, err := ReadRecordedFaults(strings.NewReader(`{"process":"nemesis",`)); err == nil {
		t.Errorf("a torn nemesis line is not an error")
	}
}

// TestReplayRefuses: a directory without a scenario or a history is not a
// run.
func TestReplayRefuses(t *testing.T) {
	if _, err := ReplayScenario(t.TempDir()); !errors.Is(err, ErrScenario) {
		t.Errorf("empty dir: %v", err)
	}
}
