package lab

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isrlab/isrlab/results"
)

func TestVerifyTally(t *testing.T) {
	run := func(seed int64, outcome string) SeedRun { return SeedRun{Seed: seed, Outcome: outcome} }
	v := &VerifyResult{Seeds: 3, Scenarios: []Tally{
		{Scenario: "a", Expect: "valid", Runs: []SeedRun{run(1, results.Met), run(2, results.Met), run(3, results.Met)}},
		{Scenario: "b", Expect: "invalid", Runs: []SeedRun{run(1, results.Met), run(2, results.NotSetUp), run(3, results.Met)}},
	}}
	if got := v.Code(); got != 2 {
		t.Errorf("not set up: code %d, want 2", got)
	}
	v.Scenarios[0].Runs[1].Outcome = results.NotMet
	if got := v.Code(); got != 1 {
		t.Errorf("not met: code %d, want 1", got)
	}
	v.Scenarios[1].Runs[0].Outcome = "error"
	if got := v.Code(); got != 255 {
		t.Errorf("error: code %d, want 255", got)
	}
	if s := failingSeeds(v.Scenarios[1]); s != "1 (error) 2 (not set up)" {
		t.Errorf("failing seeds %q", s)
	}
	var tab, md strings.Builder
	WriteVerifyTable(&tab, v)
	WriteVerifyMarkdown(&md, v)
	for _, want := range []string{"a         valid       3     2        1", "not-set-up"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	if !strings.Contains(md.String(), "| `b` | invalid | 3 | 1 | 0 | 1 | 0 | 1 | 1 (error) 2 (not set up) |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	all := &VerifyResult{Scenarios: []Tally{{Scenario: "a", Runs: []SeedRun{run(1, results.Met)}}}}
	if all.Code() != 0 {
		t.Error("all met: nonzero code")
	}
	all.Stopped = "stopped"
	if all.Code() != 2 {
		t.Error("a sweep stopped early met")
	}
}

func TestSelectLibrary(t *testing.T) {
	scs, err := SelectLibrary([]string{"restart-truncation/", "follower-cut-from-leader"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range scs {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != "restart-truncation/high-watermark restart-truncation/leader-epoch follower-cut-from-leader" {
		t.Errorf("selected %s", got)
	}
	for _, partial := range []string{"restart", "kip"} {
		if _, err := SelectLibrary([]string{partial}); err == nil {
			t.Errorf("a partial name (%s) selected something", partial)
		}
	}
	all, err := SelectLibrary(nil)
	if err != nil || len(all) < 30 {
		t.Errorf("the whole library: %d scenarios, %v", len(all), err)
	}
}

// TestVerifyAcrossSeeds: a scenario's claim across seeds is judged over
// the sweep's runs, and a miss fails the sweep though every run met its
// own (per-run) expectation. A sweep of more seeds judges it on each
// group of as many as it is about, in the order they ran, and the tally
// counts every group.
func TestVerifyAcrossSeeds(t *testing.T) {
	sc, err := Parse("x.yaml", "x", []byte("expect:\n  across-seeds:\n    lost-write: \">0 in >=1 of 3\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed, lost int64) SeedRun {
		return SeedRun{Seed: seed, Outcome: results.Met, Valid: "true", Anomalies: map[string]int64{"lost-write": lost}}
	}
	for _, tc := range []struct {
		runs []SeedRun
		want string
		code int
	}{
		{[]SeedRun{run(1, 0), run(2, 12), run(3, 0)}, results.Met, 0},
		{[]SeedRun{run(1, 0), run(2, 0), run(3, 0)}, results.NotMet, 1},
		{[]SeedRun{run(1, 0), {Seed: 2, Outcome: results.NotSetUp}, run(3, 0)}, results.Undecided, 2},
	} {
		across, groups, note := judgeAcross(sc.Expect, tc.runs)
		if groups != nil || note != "" {
			t.Errorf("one group: %v, %q", groups, note)
		}
		tl := Tally{Scenario: "x", Runs: tc.runs, Across: across, AcrossNote: note}
		v := &VerifyResult{Scenarios: []Tally{tl}}
		if tl.Across == nil || tl.Across.Outcome.String() != tc.want || v.Code() != tc.code {
			t.Errorf("%d runs: across %+v, code %d; want %s, %d", len(tc.runs), tl.Across, v.Code(), tc.want, tc.code)
		}
	}
	if j, _, _ := judgeAcross(Expect{}, nil); j != nil {
		t.Error("a judgement without a claim")
	}
	// Two runs of a claim about three seeds: not judged, and the sweep
	// is not made undecided by it.
	two := []SeedRun{run(1, 0), run(2, 0)}
	j, groups, note := judgeAcross(sc.Expect, two)
	v := &VerifyResult{Scenarios: []Tally{{Scenario: "x", Runs: two, Across: j, AcrossNote: note}}}
	if j != nil || groups != nil || !strings.Contains(note, "a claim about 3 seeds; 2 ran") || v.Code() != 0 {
		t.Errorf("2 of 3 seeds: %+v, %q, code %d", j, note, v.Code())
	}

	// Eight runs: groups 1-3 (met), 4-6 (no lost write: not met); 7 and
	// 8 are in none.
	eight := []SeedRun{run(1, 0), run(2, 5), run(3, 0), run(4, 0), run(5, 0), run(6, 0), run(7, 9), run(8, 0)}
	j, groups, note = judgeAcross(sc.Expect, eight)
	if j == nil || j.Outcome != NotMet || !slices.Equal(groups, []string{results.Met, results.NotMet}) ||
		len(j.Reasons) != 2 || j.Reasons[0] != "met in 1 of 2 groups of 3 seeds" || !strings.HasPrefix(j.Reasons[1], "seeds 4, 5, 6: not met: ") ||
		note != "2 groups of 3 seeds in the order they ran; the last 2 runs judged in none" {
		t.Fatalf("8 runs: %+v, %v, %q", j, groups, note)
	}
	// Six runs, every group met; an undecided group makes the whole
	// undecided.
	six := []SeedRun{run(1, 0), run(2, 5), run(3, 0), run(4, 0), run(5, 0), run(6, 1)}
	if j, groups, note = judgeAcross(sc.Expect, six); j.Outcome != Met || len(groups) != 2 || note != "" || j.Reasons[0] != "met in 2 of 2 groups of 3 seeds" {
		t.Errorf("6 runs: %+v, %v, %q", j, groups, note)
	}
	six[5] = SeedRun{Seed: 6, Outcome: results.NotSetUp}
	six[4].Anomalies = map[string]int64{"lost-write": 0}
	if j, groups, _ = judgeAcross(sc.Expect, six); j.Outcome != Undecided || !slices.Equal(groups, []string{results.Met, results.Undecided}) {
		t.Errorf("6 runs, one not set up: %+v, %v", j, groups)
	}
}

func TestVerifyAround(t *testing.T) {
	run := func(secs, workload, up float64) SeedRun {
		return SeedRun{Outcome: results.Met, Seconds: secs, Timing: &Timing{Up: up, Workload: workload, Check: 0.5}}
	}
	ts := []Tally{
		{Scenario: "a", Runs: []SeedRun{run(33, 30, 1), run(34, 30, 2), {Outcome: "error"}}},
		{Scenario: "b", Runs: []SeedRun{run(22, 20, 1), run(45, 40, 3), run(62, 60, 1)}},
	}
	a := summarizeAround(ts)
	// Around: 3, 4, 2, 5, 2 -> median 3, p90 5; ups 1, 2, 1, 3, 1 -> 1.
	if a == nil || a.Runs != 5 || a.Median != 3 || a.P90 != 5 || a.Phases.Up != 1 || a.Phases.Check != 0.5 {
		t.Fatalf("summary %+v", a)
	}
	var tab, md strings.Builder
	v := &VerifyResult{Scenarios: ts, Around: a}
	WriteVerifyTable(&tab, v)
	WriteVerifyMarkdown(&md, v)
	for _, out := range []string{tab.String(), md.String()} {
		if !strings.Contains(out, "time around a run (wall minus workload) over 5 runs: median 3.0s, p90 5.0s; phase medians: up 1.0s") {
			t.Errorf("no time around the runs in:\n%s", out)
		}
	}
	if summarizeAround([]Tally{{Runs: []SeedRun{{Outcome: "error"}}}}) != nil {
		t.Error("a summary without any timed run")
	}
}

// TestVerifyParallel: a sweep with Parallel runs that many at once, each
// scenario's runs counted under it whatever order they end in, and
// writes its verify.json; the budget and a signal stop it, a run cut
// short by the signal not counted.
func TestVerifyParallel(t *testing.T) {
	scs, err := SelectLibrary([]string{"leader-kill", "zombie-leader/"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu             sync.Mutex
		inFlight, most int
	)
	first := make(chan struct{})
	started := 0
	fake := func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		started++
		if started == 3 {
			close(first) // the first three wait for each other: three at once
		}
		mu.Unlock()
		select {
		case <-first:
		case <-time.After(time.Minute): // fewer than three at once: fails below, not hangs
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		j := Judgement{Outcome: Met}
		if sc.Name == "zombie-leader/safe" && sc.Seed%2 == 0 {
			j.Outcome = NotMet
		}
		if sc.Name == "zombie-leader/acks1" {
			j.Measured = map[string]float64{"lost-write": float64(sc.Seed)}
		}
		return Result{Judgement: j}, nil
	}
	dir := t.TempDir()
	var out strings.Builder
	res, err := Verify(context.Background(), scs, VerifyOptions{Options: Options{ResultsDir: dir, Out: &out, Binary: "/bin/true"},
		SeedList: []int64{2, 3, 4, 5}, Parallel: 3, run: fake})
	if err != nil {
		t.Fatal(err)
	}
	if most != 3 {
		t.Errorf("%d runs at once at most, want 3", most)
	}
	for _, tl := range res.Scenarios {
		if len(tl.Runs) != 4 {
			t.Errorf("%s: %d runs, want 4", tl.Scenario, len(tl.Runs))
		}
		if tl.Digest == "" {
			t.Errorf("%s: no digest", tl.Scenario)
		}
	}
	z := res.Scenarios[2]
	if z.Scenario != "zombie-leader/safe" || z.Count(results.NotMet) != 2 || res.Code() != 1 {
		t.Errorf("%s: %d not met, code %d; want 2 (seeds 2 and 4), 1", z.Scenario, z.Count(results.NotMet), res.Code())
	}
	if !strings.Contains(out.String(), "zombie-leader/acks1: closest to a bound: lost-write 2 (>0, seed 2)") {
		t.Errorf("no closest call in the table:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(res.Dir, VerifyFile)); err != nil {
		t.Error(err)
	}
	if !strings.Contains(out.String(), "3 runs at a time") || !strings.Contains(out.String(), "[12/12]") {
		t.Errorf("output:\n%s", out.String())
	}

	// The budget: nothing starts once it has passed.
	res, err = Verify(context.Background(), scs, VerifyOptions{Options: Options{ResultsDir: dir, Out: io.Discard, Binary: "/bin/true"},
		Seeds: 5, Budget: time.Nanosecond, Parallel: 2, run: fake})
	if err != nil || !strings.Contains(res.Stopped, "budget") || res.Code() != 2 {
		t.Errorf("budget: %v, stopped %q, code %d", err, res.Stopped, res.Code())
	}

	// A signal during the runs: the cut-short runs (not met) are not
	// counted, and the sweep says it stopped.
	ctx, cancel := context.WithCancel(context.Background())
	// A sweep rewrites verify.json after each run: a killed one leaves
	// its runs on record.
	var inProgress *VerifyResult
	look := func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		if sc.Name == "zombie-leader/safe" {
			if ms, _ := filepath.Glob(filepath.Join(o.ResultsDir, "..", VerifyFile)); len(ms) == 1 {
				inProgress, _ = readSweep(ms[0])
			}
		}
		return Result{Judgement: Judgement{Outcome: Met}}, nil
	}
	if _, err := Verify(context.Background(), scs, VerifyOptions{Options: Options{ResultsDir: t.TempDir(), Out: io.Discard, Binary: "/bin/true"},
		Seeds: 1, run: look}); err != nil {
		t.Fatal(err)
	}
	if inProgress == nil || !inProgress.InProgress || len(inProgress.Scenarios[0].Runs) != 1 || len(inProgress.Scenarios[1].Runs) != 1 {
		t.Errorf("verify.json during the sweep: %+v", inProgress)
	}

	cut := func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		cancel()
		<-ctx.Done()
		return Result{Judgement: Judgement{Outcome: NotMet}}, nil
	}
	res, err = Verify(ctx, scs, VerifyOptions{Options: Options{ResultsDir: dir, Out: io.Discard, Binary: "/bin/true"},
		Seeds: 2, Parallel: 2, run: cut})
	if err != nil || !strings.Contains(res.Stopped, "stopped") {
		t.Fatalf("signal: %v, stopped %q", err, res.Stopped)
	}
	for _, tl := range res.Scenarios {
		if len(tl.Runs) != 0 {
			t.Errorf("%s: a run cut short by the signal counted", tl.Scenario)
		}
	}
}

// TestVerifyHog: the hog busy-loops through the whole sweep, though runs
// retire OS threads (a goroutine ending locked to its thread, as every
// switch into a network namespace does, ends the thread, and a child's
// Pdeathsig follows the thread that started it); the sweep records the
// hog's CPU time, and a hog that ends early fails the sweep.
func TestVerifyHog(t *testing.T) {
	scs, err := SelectLibrary([]string{"leader-kill"})
	if err != nil {
		t.Fatal(err)
	}
	defer func(old []string) { HogSubcommand = old }(HogSubcommand)
	busy := true // the hog busy-loops (below: it exits at once)
	retire := func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			}()
		}
		wg.Wait()
		// The hog's CPU time to measure: wait until a busy child of this
		// process has run a tick.
		for deadline := time.Now().Add(30 * time.Second); busy && time.Now().Before(deadline) && !busyChild(); {
			runtime.Gosched()
		}
		// A hog that exits at once: wait until it has (its processes
		// reaped), not to kill it first.
		for deadline := time.Now().Add(30 * time.Second); !busy && time.Now().Before(deadline) && childNamed("sh"); {
			runtime.Gosched()
		}
		return Result{Judgement: Judgement{Outcome: Met}}, nil
	}
	opts := func() VerifyOptions {
		return VerifyOptions{Options: Options{ResultsDir: t.TempDir(), Out: io.Discard, Binary: "/bin/sh"}, Seeds: 3, Hog: 2, run: retire}
	}
	HogSubcommand = []string{"-c", "while :; do :; done"}
	res, err := Verify(context.Background(), scs, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.HogError != "" || res.HogCPUSeconds <= 0 || res.Code() != 0 {
		t.Errorf("a busy hog: error %q, %.2f CPU-seconds, code %d", res.HogError, res.HogCPUSeconds, res.Code())
	}
	var tab strings.Builder
	WriteVerifyTable(&tab, res)
	if !strings.Contains(tab.String(), "the hog: 2 busy processes") {
		t.Errorf("table:\n%s", tab.String())
	}
	HogSubcommand, busy = []string{"-c", "exit 3"}, false
	res, err = Verify(context.Background(), scs, opts())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.HogError, "busy process 1 of 2 ended") || !strings.Contains(res.HogError, "busy process 2 of 2 ended") || res.Code() != 255 {
		t.Errorf("a hog that ended: error %q, code %d", res.HogError, res.Code())
	}
}

// anyChild reports whether a child of this process matches: its name and
// the fields of /proc/PID/stat after it (f[1] is the parent, f[11] and
// f[12] user and system ticks). A child not yet reaped counts.
func anyChild(match func(comm string, f []string) bool) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		i, j := strings.LastIndexByte(string(b), ')'), strings.IndexByte(string(b), '(')
		if i < 0 || j < 0 || j > i {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) > 12 && f[1] == strconv.Itoa(os.Getpid()) && match(string(b[j+1:i]), f) {
			return true
		}
	}
	return false
}

// busyChild reports whether a child of this process has used CPU time.
func busyChild() bool {
	return anyChild(func(_ string, f []string) bool { return f[11] != "0" || f[12] != "0" })
}

// childNamed reports whether a process named comm is a child of this
// process, reaped or not.
func childNamed(comm string) bool {
	return anyChild(func(c string, _ []string) bool { return c == comm })
}

func TestBusyProcesses(t *testing.T) {
	for n, want := range map[int]string{1: "1 busy process", 2: "2 busy processes", 3: "3 busy processes"} {
		if got := busyProcesses(n); got != want {
			t.Errorf("busyProcesses(%d) = %q, want %q", n, got, want)
		}
	}
}
