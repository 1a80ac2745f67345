package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/scripttest"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
)

// describe prints a scenario's faults and size, one fault a line.
func describe(sc Scenario) string {
	var b strings.Builder
	for i, f := range sc.Faults {
		spec, _ := json.Marshal(f.Spec)
		fmt.Fprintf(&b, "  %d. at %v", i+1, f.At)
		if f.HealAfter > 0 {
			fmt.Fprintf(&b, " hold %v", f.HealAfter)
		}
		if f.Name != "" {
			fmt.Fprintf(&b, " name %s", f.Name)
		}
		if f.When != nil {
			w, _ := json.Marshal(f.When)
			fmt.Fprintf(&b, " when %s", w)
		}
		fmt.Fprintf(&b, " %s\n", spec)
	}
	fmt.Fprintf(&b, "  size: %s\n", sizeOf(sc))
	return b.String()
}

// TestShrinkCandidates: the reduction steps are pure functions over
// scenarios; this prints the materialised schedule, the first candidates
// of the faults' delta debugging, and each step's candidates in the order
// tried (testdata/shrink-candidates.golden).
func TestShrinkCandidates(t *testing.T) {
	sc, err := Load("testdata/shrink-candidates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mat, err := Materialise(sc)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "materialised (%d fixed faults + the schedule's):\n%s", len(sc.Faults), describe(mat))
	n := len(mat.Faults)
	first := make([]int, n/2)
	for i := range first {
		first[i] = i
	}
	for _, keep := range [][]int{first, minus(seq(n), first), {1, 2}, {}} {
		c := DropFaults(mat, keep)
		fmt.Fprintf(&b, "\n%s: %s\n%s", c.Step, c.Desc, describe(c.Scenario))
	}
	for _, r := range Steps {
		fmt.Fprintf(&b, "\n%s:\n", r.Step)
		for _, c := range r.Gen(mat) {
			if c.Step != r.Step {
				t.Errorf("%s proposes a candidate of step %s", r.Step, c.Step)
			}
			if err := c.Scenario.Validate(); err != nil {
				t.Errorf("%s: %s: %v", r.Step, c.Desc, err)
			}
			fmt.Fprintf(&b, "  %s\n", c.Desc)
		}
	}
	scripttest.Golden(t, filepath.Join("testdata", "shrink-candidates.golden"), b.String())
	// Pure: the same scenario gives the same candidates, and the input
	// is not changed.
	before := describe(mat)
	for _, r := range Steps {
		a, c := r.Gen(mat), r.Gen(mat)
		if len(a) != len(c) {
			t.Errorf("%s: %d then %d candidates", r.Step, len(a), len(c))
		}
	}
	if describe(mat) != before {
		t.Errorf("the reducers changed their input")
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestMaterialise: the fixed faults a generated schedule becomes play the
// same timeline: the same starts at the same times with the same specs
// (random seeds included), and the same stops.
func TestMaterialise(t *testing.T) {
	sc, err := Load("testdata/shrink-candidates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mat, err := Materialise(sc)
	if err != nil {
		t.Fatal(err)
	}
	if mat.Schedule != nil || len(mat.Faults) <= len(sc.Faults) {
		t.Fatalf("materialised: schedule %v, %d faults", mat.Schedule, len(mat.Faults))
	}
	timeline := func(s Scenario) []string {
		ev, err := s.ScheduleEvents()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ev {
			spec, _ := json.Marshal(e.Fault)
			if e.Action != nemesis.ActStart {
				spec = nil
			}
			w, _ := json.Marshal(e.When)
			out = append(out, fmt.Sprintf("%v %s %s %s %s", e.At, e.Action, e.Name, w, spec))
		}
		slices.Sort(out)
		return out
	}
	a, b := timeline(sc), timeline(mat)
	if !slices.Equal(a, b) {
		t.Errorf("timelines differ:\n%s\nvs\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	// A heal of everything mid-run ends what is active.
	fixed := sc.clone()
	fixed.Faults = nil
	fixed.Schedule = &Schedule{ScheduleSpec: nemesis.ScheduleSpec{Type: "fixed", Events: []nemesis.EventSpec{
		{At: 2e9, Action: nemesis.ActStart, Key: 1, Fault: &nemesis.Spec{Fault: &nemesis.Kill{}}},
		{At: 5e9, Action: nemesis.ActHealAll},
	}}}
	fixed.Schedule.Events[0].Fault.Fault.(*nemesis.Kill).Nodes = []string{"b1"}
	m2, err := Materialise(fixed)
	if err != nil || len(m2.Faults) != 1 || m2.Faults[0].At != 2*time.Second || m2.Faults[0].HealAfter != 3*time.Second {
		t.Errorf("heal-all at 5s: %v\n%s", err, describe(m2))
	}
}

// fakeOracle judges candidates with a predicate, one run each.
type fakeOracle struct {
	fails func(Scenario) bool
	calls int
	// each is called before each judgement.
	each func(n int)
}

func (f *fakeOracle) Fails(_ context.Context, sc Scenario) (Trial, error) {
	f.calls++
	if f.each != nil {
		f.each(f.calls)
	}
	ok := f.fails(sc)
	return Trial{Runs: []TrialRun{{Seed: sc.Seed, Fails: ok, Outcome: "not met"}}, Fails: ok}, nil
}

// zombie fails like seed 000's scenario 4: it needs the leader cut from
// the coordinators for longer than the 6 s session timeout, and two
// brokers besides the leader.
func zombie(sc Scenario) bool {
	for _, f := range sc.Faults {
		if p, ok := f.Spec.Fault.(*nemesis.Partition); ok && p.Topology == nemesis.SeedLeaderCoordinators && hold(sc, slices.Index(sc.Faults, f)) >= 7*time.Second {
			return sc.Cluster.Brokers >= 3
		}
	}
	return false
}

// TestShrinkSearch: the whole search on a deterministic fake oracle, its
// trace golden (testdata/shrink-search.golden): the faults' delta
// debugging first, then hold, start, targets, duration and the sizes.
func TestShrinkSearch(t *testing.T) {
	sc, err := Load("testdata/shrink-candidates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	orc := &fakeOracle{fails: zombie}
	var out strings.Builder
	var onStep int
	res, err := Shrink(context.Background(), sc, orc, ShrinkOptions{Out: &out, OnStep: func(st ShrinkStep, best Scenario) {
		onStep++
		if st.Accepted && describe(best) != describe(st.Scenario) {
			t.Errorf("step %d accepted but the best is another scenario", st.N)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, st := range res.Steps {
		v := "passes"
		if st.Accepted {
			v = "FAILS"
		}
		fmt.Fprintf(&b, "%d %s: %s: %s\n", st.N, st.Step, st.Desc, v)
	}
	fmt.Fprintf(&b, "\nsmallest:\n%s", describe(res.Best))
	scripttest.Golden(t, filepath.Join("testdata", "shrink-search.golden"), b.String())
	if onStep != len(res.Steps) || orc.calls != len(res.Steps) || res.Runs != len(res.Steps) {
		t.Errorf("%d steps, %d OnStep calls, %d oracle calls, %d runs", len(res.Steps), onStep, orc.calls, res.Runs)
	}
	if !zombie(res.Best) || len(res.Best.Faults) != 1 || res.Best.Faults[0].HealAfter != 8*time.Second ||
		res.Best.Cluster.Brokers != 3 || res.Best.Workload.Producers != 1 || res.Best.Topic.Partitions != 1 {
		t.Errorf("smallest:\n%s", describe(res.Best))
	}
	if !strings.Contains(out.String(), "FAILS in 1 of 1 run(s)") {
		t.Errorf("progress:\n%s", out.String())
	}
	// No distinct scenario was tried twice.
	seen := map[string]bool{}
	for _, st := range res.Steps {
		d := describe(st.Scenario)
		if seen[d] {
			t.Errorf("step %d (%s) tried again", st.N, st.Desc)
		}
		seen[d] = true
	}
}

// TestShrinkNeverFails: an oracle under which nothing smaller fails keeps
// the (materialised) original.
func TestShrinkNeverFails(t *testing.T) {
	sc, err := Load("testdata/shrink-candidates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mat, _ := Materialise(sc)
	res, err := Shrink(context.Background(), sc, &fakeOracle{fails: func(Scenario) bool { return false }}, ShrinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if describe(res.Best) != describe(mat) || len(res.Steps) == 0 {
		t.Errorf("after %d steps:\n%s", len(res.Steps), describe(res.Best))
	}
	for _, st := range res.Steps {
		if st.Accepted {
			t.Errorf("step %d accepted", st.N)
		}
	}
}

// TestShrinkStops: the budget and a signal end the search with the best
// scenario so far; the candidate cut short by the signal is not judged.
func TestShrinkStops(t *testing.T) {
	sc, err := Load("testdata/shrink-candidates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, 0)
	orc := &fakeOracle{fails: zombie, each: func(int) { clock = clock.Add(time.Minute) }}
	res, err := Shrink(context.Background(), sc, orc, ShrinkOptions{Budget: 5 * time.Minute, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 6 || !strings.Contains(res.Stopped, "budget of 5m0s ran out") || !zombie(res.Best) {
		t.Errorf("budget: %d steps, stopped %q\n%s", len(res.Steps), res.Stopped, describe(res.Best))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bestBefore string
	orc = &fakeOracle{fails: zombie}
	orc.each = func(n int) {
		if n == 4 {
			cancel()
		}
	}
	res, err = Shrink(ctx, sc, orc, ShrinkOptions{OnStep: func(_ ShrinkStep, best Scenario) { bestBefore = describe(best) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 3 || !strings.HasPrefix(res.Stopped, "stopped") || describe(res.Best) != bestBefore || !zombie(res.Best) {
		t.Errorf("signal: %d steps, stopped %q\n%s", len(res.Steps), res.Stopped, describe(res.Best))
	}
}

// TestTarget: a run that did not meet its expectation is matched on the
// clauses it missed, an invalid history on its anomaly kinds.
func TestTarget(t *testing.T) {
	notMet := &results.Outcome{Outcome: results.NotMet, Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 12},
		Reasons: []string{"expected lost-write 0, got 12", "expected valid=true, got valid=false"}}
	tg, err := TargetOf(notMet, nil)
	if err != nil || !slices.Equal(tg.Reasons, []string{"expected lost-write 0", "expected valid=true"}) {
		t.Fatalf("target %+v, %v", tg, err)
	}
	if !tg.Matches(NotMet, []string{"expected lost-write 0, got 3"}, nil) || tg.Matches(NotMet, []string{"expected availability >=0.9, got 0.5"}, nil) ||
		tg.Matches(Met, nil, map[string]int64{"lost-write": 3}) {
		t.Errorf("not-met matching")
	}
	invalid := &results.Outcome{Outcome: results.Met, Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 3, "inconsistent-offsets": 3, "duplicate": 0}}
	tg, err = TargetOf(invalid, nil)
	if err != nil || !slices.Equal(tg.Anomalies, []string{"inconsistent-offsets", "lost-write"}) {
		t.Fatalf("target %+v, %v", tg, err)
	}
	if !tg.Matches(Met, nil, map[string]int64{"lost-write": 1}) || tg.Matches(NotMet, nil, map[string]int64{"duplicate": 4}) {
		t.Errorf("anomaly matching")
	}
	if tg, _ := TargetOf(invalid, []string{"duplicate"}); !slices.Equal(tg.Anomalies, []string{"duplicate"}) {
		t.Errorf("--anomaly: %+v", tg)
	}
	met := &results.Outcome{Outcome: results.Met, Valid: checker.Valid, Anomalies: map[string]int64{}}
	if _, err := TargetOf(met, nil); !errors.Is(err, ErrNotFailing) {
		t.Errorf("a passing run: %v", err)
	}
}

// TestShrinkRunRefuses: a directory that is not a run, or a run that did
// not fail, is refused before anything runs.
func TestShrinkRunRefuses(t *testing.T) {
	if _, err := ShrinkRun(context.Background(), t.TempDir(), ShrinkRunOptions{}); !errors.Is(err, ErrScenario) {
		t.Errorf("not a run: %v", err)
	}
	dir := t.TempDir()
	sc := Default()
	if err := results.WriteScenario(dir, sc); err != nil {
		t.Fatal(err)
	}
	if err := results.WriteJSON(filepath.Join(dir, results.OutcomeFile), results.Outcome{Outcome: results.Met, Valid: checker.Valid}); err != nil {
		t.Fatal(err)
	}
	if _, err := ShrinkRun(context.Background(), dir, ShrinkRunOptions{}); !errors.Is(err, ErrNotFailing) {
		t.Errorf("a met run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ShrinkDirName)); err == nil {
		t.Errorf("a refused shrink left %s", ShrinkDirName)
	}
}

// e2eScenario loses acknowledged writes only through its second fault
// (seed 000's zombie leader: the leader cut from the coordinators under
// acks=1); a follower's slow network and a follower's pause do not.
const e2eScenario = `name: shrink/e2e
preset: [acks1, kafka-2.4]
seed: 3
cluster:
  coordinators: 1
  brokers: 3
  config: {coordinator.session.timeout.ms: "6000", replica.lag.time.max.ms: "4000"}
topic: {partitions: 1}
workload: {producers: 2, consumers: 1, send.interval: 2ms, delivery.timeout: 30s}
duration: 20s
faults:
  - {kind: slow-net, nodes: ["follower:isrlab/0"], delay: 20ms, at: 1s, heal.after: 2s}
  - {kind: partition, topology: leader-coordinators, partition: isrlab/0, at: 4s, heal.after: 12s}
  - {kind: pause, nodes: ["follower:isrlab/0"], at: 17s, heal.after: 1s}
expect:
  anomalies: {lost-write: 0}
`

// TestShrinkEndToEnd shrinks a stored failing run of e2eScenario with real
// runs (one per candidate, faults only): the reproducer is the partition
// alone, written where `isrlab run` reads it, with the candidates, runs,
// shrink.json and report.html beside it.
func TestShrinkEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
	bin := proctest.Binary(t)
	run := t.TempDir()
	sc, err := Parse("e2e.yaml", "e2e", []byte(e2eScenario))
	if err != nil {
		t.Fatal(err)
	}
	// The stored run: its scenario and an outcome that missed the claim.
	if err := results.WriteScenario(run, sc); err != nil {
		t.Fatal(err)
	}
	if err := results.WriteJSON(filepath.Join(run, results.OutcomeFile), results.Outcome{Scenario: sc.Name, Seed: sc.Seed,
		Outcome: results.NotMet, Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 900},
		Reasons: []string{"expected lost-write 0, got 900"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out strings.Builder
	rep, err := ShrinkRun(ctx, run, ShrinkRunOptions{Options: Options{Binary: bin, Out: &out}, Runs: 1, Steps: []string{"faults"},
		Budget: 8 * time.Minute})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	best := rep.Best
	if len(best.Faults) != 1 || best.Faults[0].Spec.Fault.Kind() != "partition" {
		t.Fatalf("reproducer:\n%s", describe(best))
	}
	repro, err := Load(filepath.Join(run, ReproducerFile))
	if err != nil || len(repro.Faults) != 1 || repro.Name != "shrink/e2e-shrunk" || repro.Seed != 3 {
		t.Errorf("reproducer.yaml: %v\n%s", err, describe(repro))
	}
	if sh, err := results.ReadShrunk(os.DirFS(run)); err != nil || !strings.HasPrefix(sh.FailsWith, "1 fault: partition ") ||
		sh.Reproducer != "shrink/"+ReproducerFile {
		t.Errorf("shrunk.json: %+v, %v", sh, err)
	}
	for _, f := range []string{ShrinkFile, ShrinkReportFile, ReproducerFile, "candidates/001.yaml", "shrink.log"} {
		if _, err := os.Stat(filepath.Join(rep.Dir, f)); err != nil {
			t.Errorf("shrink dir: %v", err)
		}
	}
	if len(rep.Steps) == 0 || rep.Steps[0].Trial.Runs[0].Dir == "" || !strings.HasPrefix(rep.Steps[0].Trial.Runs[0].Dir, rep.Dir) {
		t.Errorf("the candidates' runs are not in %s: %+v", rep.Dir, rep.Steps)
	}
}

// TestFailsWith: what a matrix cell and its JUnit failure say of a shrunk
// scenario, in a line.
func TestFailsWith(t *testing.T) {
	sc, err := Parse("e2e.yaml", "e2e", []byte(e2eScenario))
	if err != nil {
		t.Fatal(err)
	}
	got := FailsWith(sc)
	t.Log(got)
	scripttest.Golden(t, filepath.Join("testdata", "fails-with.golden"), got+"\n")
	one := sc.clone()
	one.Faults = one.Faults[:1]
	if got := FailsWith(one); !strings.HasPrefix(got, "1 fault: ") || strings.Contains(got, ";  ") {
		t.Errorf("one fault: %s", got)
	}
	none := sc.clone()
	none.Faults = nil
	if got := FailsWith(none); !strings.HasPrefix(got, "no fault; a ") {
		t.Errorf("no fault: %s", got)
	}
}
