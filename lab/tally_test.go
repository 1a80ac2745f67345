package lab

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/results"
)

// writeSweep writes a sweep's verify.json under root/name.
func writeSweep(t *testing.T, root, name string, v VerifyResult) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if v.Started == "" {
		v.Started = "2026-12-07T00:00:00Z"
	}
	v.Dir = dir
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, VerifyFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeRunDir writes a run directory holding sc as its resolved scenario.
func writeRunDir(t *testing.T, dir string, sc Scenario) string {
	t.Helper()
	if err := results.WriteScenario(dir, sc); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTallySweeps: runs are counted per scenario under its current name,
// quiet and beside a hog apart, only when they ran the scenario as the
// library states it (by the sweep's digest, or else the run's own
// scenario.yaml); a symlinked sweep counts once; misses are listed with
// their seeds.
func TestTallySweeps(t *testing.T) {
	scs, err := SelectLibrary([]string{"zombie-leader/acks1", "leader-kill"})
	if err != nil {
		t.Fatal(err)
	}
	zombie, kill := scs[0], scs[1]
	root := t.TempDir()
	met := func(seed int64) SeedRun { return SeedRun{Seed: seed, Outcome: results.Met} }

	// A quiet sweep with digests: two met, one not met; the zombie
	// scenario under its old name.
	writeSweep(t, root, "verify/a", VerifyResult{Scenarios: []Tally{
		{Scenario: "seed000/partition-4-acks1", Digest: ScenarioDigest(zombie), Runs: []SeedRun{met(1), {Seed: 2, Outcome: results.NotMet}}},
		{Scenario: "leader-kill", Digest: ScenarioDigest(kill), Runs: []SeedRun{met(3)}},
	}})
	// A hog sweep from before digests: one run's directory holds the
	// scenario as it stands (seeded), one an older version, one is gone.
	same := kill
	same.Seed, same.Workload.Seed, same.Description = 77, 77, "an older description"
	older := kill
	older.Duration += 5e9
	hog := writeSweep(t, root, "verify/b", VerifyResult{Hog: 2, HogCPUSeconds: 60, Scenarios: []Tally{
		{Scenario: "leader-kill", Runs: []SeedRun{
			{Seed: 77, Outcome: results.Met, Dir: writeRunDir(t, filepath.Join(root, "r1"), same)},
			{Seed: 78, Outcome: results.NotMet, Dir: writeRunDir(t, filepath.Join(root, "r2"), older)},
			{Seed: 79, Outcome: results.Met, Dir: filepath.Join(root, "gone")},
		}},
		{Scenario: "zombie-leader/acks1", Digest: ScenarioDigest(zombie), Runs: []SeedRun{met(5), {Seed: 6, Outcome: results.NotSetUp}}},
	}})
	if err := os.Symlink("b", filepath.Join(root, "verify", "latest")); err != nil {
		t.Fatal(err)
	}
	// Not a sweep: skipped, saying so.
	if err := os.WriteFile(filepath.Join(root, "verify", VerifyFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}

	res, err := TallySweeps([]string{root, filepath.Join(hog, VerifyFile)}, TallyOptions{Names: []string{"zombie-leader/", "leader-kill"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sweeps) != 2 || len(res.Skipped) != 1 {
		t.Fatalf("sweeps %v, skipped %v: want the two sweeps once each and the empty file skipped", res.Sweeps, res.Skipped)
	}
	recs := map[string]*Record{}
	for _, r := range res.Records {
		recs[r.Scenario] = r
	}
	z, k := recs["zombie-leader/acks1"], recs["leader-kill"]
	if z == nil || k == nil || recs["zombie-leader/safe"] == nil {
		t.Fatalf("records %v", res.Records)
	}
	if z.Quiet[results.Met] != 1 || z.Quiet[results.NotMet] != 1 || z.Hog[results.Met] != 1 || z.Hog[results.NotSetUp] != 1 || z.Sweeps != 2 {
		t.Errorf("zombie-leader/acks1: %+v", z)
	}
	if k.Quiet[results.Met] != 1 || k.Runs(true) != 1 || k.Hog[results.Met] != 1 || k.Other != 1 || k.Unknown != 1 {
		t.Errorf("leader-kill: %+v; want 1 quiet, 1 hog (the same scenario re-described), 1 other version, 1 unknown", k)
	}
	if res.Met() {
		t.Error("a record with misses is met")
	}
	if k.Across != nil || z.Across != nil {
		t.Errorf("claims across seeds judged for scenarios without any: %v, %v", k.Across, z.Across)
	}
	var tab, md strings.Builder
	WriteTally(&tab, res, false)
	WriteTally(&md, res, true)
	for _, want := range []string{"1 of 2 (1 not met)", "1 of 2 (1 not set up)", "2 6 (not set up, hog)"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	if !strings.Contains(md.String(), "| `leader-kill` | 1 of 1 | 1 of 1 |  |  | 1 (+1 unknown) |  |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if f := res.Fewest(true); f[0].Scenario != "zombie-leader/safe" || f[len(f)-1].Scenario != "zombie-leader/acks1" {
		t.Errorf("fewest beside a hog: %s ... %s", f[0].Scenario, f[len(f)-1].Scenario)
	}

	// The closest call to each bound: the sweep's measured values, or
	// else the run's verdict judged again.
	rd := writeRunDir(t, filepath.Join(root, "r3"), zombie)
	if err := os.WriteFile(filepath.Join(rd, results.VerdictFile), []byte(`{"valid":false,"anomalies":{"lost-write":2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	writeSweep(t, root, "verify/c", VerifyResult{Hog: 1, HogCPUSeconds: 30, Scenarios: []Tally{
		{Scenario: "zombie-leader/acks1", Digest: ScenarioDigest(zombie), Runs: []SeedRun{
			{Seed: 21, Outcome: results.Met, Measured: map[string]float64{"lost-write": 900}},
			{Seed: 22, Outcome: results.Met, Dir: rd},
			{Seed: 23, Outcome: results.Met, Measured: map[string]float64{"lost-write": 40}},
		}},
	}})
	// A sweep with --hog from before the hog's CPU time was recorded
	// counts apart; one whose hog ended early not at all.
	writeSweep(t, root, "verify/d", VerifyResult{Hog: 2, Scenarios: []Tally{
		{Scenario: "zombie-leader/acks1", Digest: ScenarioDigest(zombie), Runs: []SeedRun{met(31), {Seed: 32, Outcome: results.NotMet}}},
	}})
	writeSweep(t, root, "verify/e", VerifyResult{Hog: 2, HogCPUSeconds: 1, HogError: "busy process 1 of 2 ended after 0s", Scenarios: []Tally{
		{Scenario: "zombie-leader/acks1", Digest: ScenarioDigest(zombie), Runs: []SeedRun{met(41)}},
	}})
	res, err = TallySweeps([]string{root}, TallyOptions{Names: []string{"zombie-leader/acks1"}})
	if err != nil {
		t.Fatal(err)
	}
	if z := res.Records[0]; z.HogUnrecorded[results.Met] != 1 || z.HogUnrecorded[results.NotMet] != 1 || z.Runs(true) != 5 || !strings.Contains(strings.Join(res.Skipped, " "), "its hog ended early") {
		t.Errorf("unrecorded hog: %+v; skipped %v", z, res.Skipped)
	}
	cl, ok := res.Records[0].Closest["lost-write"]
	if !ok || cl.Value != 2 || cl.Seed != 22 || !cl.Hog || cl.Runs != 3 || cl.Bound != ">0" {
		t.Errorf("closest call %+v, want lost-write 2 (seed 22, of 3 runs measured)", cl)
	}
	if got := res.Records[0].closest(); got != "lost-write 2 (>0, seed 22, hog)" {
		t.Errorf("closest %q", got)
	}
	up := Cond{Op: "<", Value: 25, Dur: true, src: "<25s"}
	r := &Record{}
	for i, x := range []float64{12.1, 18.4, 17} {
		r.closer(map[string]Cond{"unavailability": up, "lost-write": {Op: "=", Value: 0, src: "0"}}, SeedRun{Seed: int64(i)}, map[string]float64{"unavailability": x, "lost-write": 0}, false)
	}
	if got := r.closest(); got != "unavailability 18.4s (<25s, seed 1)" {
		t.Errorf("an upper bound's closest call: %q (an equality has none)", got)
	}

	all, err := TallySweeps([]string{root}, TallyOptions{AnyVersion: true, Names: []string{"leader-kill"}})
	if err != nil {
		t.Fatal(err)
	}
	if k := all.Records[0]; k.Runs(true) != 3 || k.Hog[results.NotMet] != 1 || k.missed() != "78 (hog)" {
		t.Errorf("--any-version: %+v, missed %q", k, k.missed())
	}
}

// TestTallyAcrossSeeds: a claim across seeds is judged on every run the
// tally counts, in the order of the sweeps, in groups of as many seeds as
// it is about: three-seed nightly sweeps add up, and a group that misses
// is named.
func TestTallyAcrossSeeds(t *testing.T) {
	scs, err := SelectLibrary([]string{"consumer-crash/auto-commit-librdkafka"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	if sc.Expect.AcrossSeeds["skipped"] != ">0 in >=1 of 3" {
		t.Fatalf("the scenario's claim changed: %v", sc.Expect.AcrossSeeds)
	}
	run := func(seed, skipped int64) SeedRun {
		return SeedRun{Seed: seed, Outcome: results.Met, Valid: "true", Anomalies: map[string]int64{"skipped": skipped, "redelivered": 9}}
	}
	root := t.TempDir()
	// Two sweeps of two seeds and one of three, in the order they
	// started (not of their directories' names): seeds 1-3 show a skip,
	// 4-6 none, 7 is in no group; a run of another version is not counted.
	at := func(h int) string { return fmt.Sprintf("2026-12-07T0%d:00:00Z", h) }
	writeSweep(t, root, "verify/a", VerifyResult{Started: at(1), Scenarios: []Tally{{Scenario: sc.Name, Digest: ScenarioDigest(sc), Runs: []SeedRun{run(1, 0), run(2, 0)}}}})
	writeSweep(t, root, "verify/b", VerifyResult{Started: at(2), Scenarios: []Tally{{Scenario: sc.Name, Digest: "another", Runs: []SeedRun{run(90, 0)}}}})
	writeSweep(t, root, "verify/c", VerifyResult{Started: at(3), Scenarios: []Tally{{Scenario: sc.Name, Digest: ScenarioDigest(sc), Runs: []SeedRun{run(3, 4), run(4, 0)}}}})
	writeSweep(t, root, "verify/0-last", VerifyResult{Started: at(4), Scenarios: []Tally{{Scenario: sc.Name, Digest: ScenarioDigest(sc), Runs: []SeedRun{run(5, 0), run(6, 0), run(7, 1)}}}})
	res, err := TallySweeps([]string{root}, TallyOptions{Names: []string{sc.Name}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Records[0]
	if !maps.Equal(r.Across, map[string]int{results.Met: 1, results.NotMet: 1}) || r.across() != "1 of 2 seed groups" ||
		len(r.AcrossReasons) != 2 || !strings.HasPrefix(r.AcrossReasons[1], "seeds 4, 5, 6: not met") || res.Met() {
		t.Fatalf("across seeds %v (%s), reasons %q, met %v", r.Across, r.across(), r.AcrossReasons, res.Met())
	}
	var tab strings.Builder
	WriteTally(&tab, res, false)
	if !strings.Contains(tab.String(), sc.Name+" across seeds: met in 1 of 2 groups of 3 seeds; seeds 4, 5, 6: not met") {
		t.Errorf("the table does not name the group that missed:\n%s", tab.String())
	}
	// Two runs: too few to judge.
	few, err := TallySweeps([]string{filepath.Join(root, "verify", "a")}, TallyOptions{Names: []string{sc.Name}})
	if err != nil {
		t.Fatal(err)
	}
	if few.Records[0].Across != nil || !few.Met() {
		t.Errorf("two runs of a claim about three: %v", few.Records[0].Across)
	}
}

// TestScenarioDigest: what a run does changes the digest; its name,
// description and seed do not.
func TestScenarioDigest(t *testing.T) {
	scs, err := SelectLibrary([]string{"leader-kill"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	d := ScenarioDigest(sc)
	renamed := sc
	renamed.Name, renamed.Description, renamed.Seed, renamed.Workload.Seed = "x", "y", 5, 5
	if ScenarioDigest(renamed) != d {
		t.Error("name, description or seed changed the digest")
	}
	preset, err := sc.WithPresets("kafka-4.0")
	if err != nil {
		t.Fatal(err)
	}
	if ScenarioDigest(preset) == d {
		t.Error("a preset did not change the digest")
	}
	changed := sc
	changed.Expect.Valid = "unknown-for-this-test"
	if ScenarioDigest(changed) == d {
		t.Error("the expectation did not change the digest")
	}
}

// TestWaitBounds: a fault that waits for a state within a time is a bound
// of its scenario ("wait NAME" <= within); the run's record of how long
// the wait took (the nemesis' condition op) is measured under that name,
// and the closest call over runs is the longest wait.
func TestWaitBounds(t *testing.T) {
	scs, err := SelectLibrary([]string{"unclean-election/on"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[0]
	const term = "wait kill (fault 2)"
	b := sc.Bounds()
	if c, ok := b[term]; !ok || c.String() != "<=16s" || !c.Dur {
		t.Fatalf("bounds %v: want %q <=16s", b, term)
	}
	if _, ok := b["lost-write"]; !ok {
		t.Fatalf("bounds %v lack the expectation's", b)
	}
	var mem history.Memory
	p := newProgress(&mem, sc.Duration, time.Now())
	for key, secs := range map[int]float64{2: 9.5, 1: 3} {
		op := history.NewOp(history.Nemesis, history.Info, history.FCondition)
		op.RawValue = json.RawMessage(fmt.Sprintf(`{"fault":"","key":%d,"held":"x","waited_s":%g}`, key, secs))
		if err := p.Write(&op); err != nil {
			t.Fatal(err)
		}
	}
	var j Judgement
	sc.measureWaits(&j, p.waits())
	// Fault 1 (the cut) does not wait: its record, were there one, is not a bound.
	if !maps.Equal(j.Measured, map[string]float64{term: 9.5}) {
		t.Fatalf("measured %v, want %s 9.5", j.Measured, term)
	}
	var r Record
	r.closer(b, SeedRun{Seed: 1}, j.Measured, false)
	r.closer(b, SeedRun{Seed: 2}, map[string]float64{term: 12.25}, true)
	r.closer(b, SeedRun{Seed: 3}, map[string]float64{term: 7}, false)
	if got := r.closest(); got != term+" 12.2s (<=16s, seed 2, hog)" {
		t.Errorf("closest %q", got)
	}
}
