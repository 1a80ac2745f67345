package lab

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/results"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Options are each run's; ResultsDir is where the sweep's directory
	// goes (results/verify/<start>-<id>/).
	Options
	// Seeds is how many fresh random seeds each scenario runs with.
	Seeds int
	// SeedList, if set, replaces the fresh seeds (to replay a sweep).
	SeedList []int64
	// Hog is how many busy-looping processes run beside every run, as on
	// a shared CI runner (the machine's core count keeps every core busy).
	Hog int
	// Budget stops starting new runs once it has passed (0: none); the
	// table then counts the runs made.
	Budget time.Duration
	// Parallel is how many runs go at once (default 1): each has its own
	// cluster, named after its run id, and the rounds keep their order of
	// starting.
	Parallel int

	// run runs a scenario (Run unless a test fakes the runs).
	run func(context.Context, Scenario, Options) (Result, error)
}

// SeedRun is one run of a sweep.
type SeedRun struct {
	Seed      int64            `json:"seed"`
	Outcome   string           `json:"outcome"` // met, not met, undecided, not set up, error
	Reasons   []string         `json:"reasons,omitempty"`
	Anomalies map[string]int64 `json:"anomalies,omitempty"`
	Valid     string           `json:"valid,omitempty"`
	Seconds   float64          `json:"seconds"`
	Dir       string           `json:"dir,omitempty"`
	Error     string           `json:"error,omitempty"`
	// Timing is where the run's time went (its outcome.json's).
	Timing *Timing `json:"timing,omitempty"`
	// Measured is what the run measured for each bound of the
	// expectation (Judgement.Measured).
	Measured map[string]float64 `json:"measured,omitempty"`
}

// Around is the time a run took beyond its workload: bring-up, topic,
// stop, drain, teardown, check and report.
func (r SeedRun) Around() (float64, bool) {
	if r.Timing == nil {
		return 0, false
	}
	return r.Seconds - r.Timing.Workload, true
}

// Tally is one scenario's runs in a sweep.
type Tally struct {
	Scenario string `json:"scenario"`
	Expect   string `json:"expect"`
	// Digest is the scenario's ScenarioDigest as the sweep ran it (with
	// its presets): what `isrlab scenarios tally` tells versions apart by.
	Digest string    `json:"digest,omitempty"`
	Runs   []SeedRun `json:"runs"`
	// Across is the judgement of the scenario's claims across seeds
	// (expect: across-seeds), over the sweep's runs; nil without any, or
	// when the sweep ran another number of seeds than a claim is about
	// (AcrossNote says so: such a claim is not judged, and does not make
	// the sweep undecided).
	Across     *Judgement `json:"across_seeds,omitempty"`
	AcrossNote string     `json:"across_seeds_note,omitempty"`
	// AcrossGroups is the outcome of each group of seeds the claims
	// were judged on, when the sweep ran more seeds than they are about
	// (judgeAcross); Across is then the worst of them.
	AcrossGroups []string `json:"across_seeds_groups,omitempty"`
	// Closest is the run nearest each bound of the expectation over the
	// sweep (Record.Closest).
	Closest map[string]Closest `json:"closest,omitempty"`
}

// Count is how many runs came out as outcome.
func (t Tally) Count(outcome string) int {
	n := 0
	for _, r := range t.Runs {
		if r.Outcome == outcome {
			n++
		}
	}
	return n
}

// Seeds lists the seeds of the runs with outcome.
func (t Tally) Seeds(outcome string) []int64 {
	var out []int64
	for _, r := range t.Runs {
		if r.Outcome == outcome {
			out = append(out, r.Seed)
		}
	}
	return out
}

// Status is the scenario's status over the sweep, the worst of its runs':
// error, not met, not set up, undecided, met.
func (t Tally) Status() string {
	for _, s := range []string{"error", results.NotMet, results.NotSetUp, results.Undecided} {
		if t.Count(s) > 0 || (t.Across != nil && t.Across.Outcome.String() == s) {
			return s
		}
	}
	if len(t.Runs) == 0 {
		return "skipped"
	}
	return results.Met
}

// VerifyResult is a sweep: verify.json in its directory.
type VerifyResult struct {
	Dir     string  `json:"dir"`
	Started string  `json:"started"`
	Seconds float64 `json:"seconds"`
	Hog     int     `json:"hog"`
	Seeds   int     `json:"seeds"`
	// Load is the machine's 1-minute load average after each run (mean
	// and maximum), with its core count: what the runs ran beside.
	LoadMean  float64 `json:"load_mean"`
	LoadMax   float64 `json:"load_max"`
	Cores     int     `json:"cores"`
	Scenarios []Tally `json:"scenarios"`
	// Around is the time around the sweep's runs (SeedRun.Around).
	Around *AroundSummary `json:"around,omitempty"`
	// Stopped says why the sweep ended before every run was made.
	Stopped string `json:"stopped,omitempty"`
	// HogCPUSeconds is the CPU time the hog's processes used: about
	// Hog times Seconds when they busy-looped through the sweep. HogError
	// says which ended early: the runs after that were not beside the
	// hog the sweep names, and the sweep fails (exit status 255).
	HogCPUSeconds float64 `json:"hog_cpu_s,omitempty"`
	HogError      string  `json:"hog_error,omitempty"`
	// InProgress marks the verify.json a sweep rewrites after each run:
	// a sweep killed before its end (a CI job's time limit) leaves the
	// runs it made on record.
	InProgress bool `json:"in_progress,omitempty"`
}

// AroundSummary is the time around a sweep's runs, in seconds: the median
// and 90th percentile of wall time minus workload, and the median of each
// phase.
type AroundSummary struct {
	Runs   int     `json:"runs"`
	Median float64 `json:"median_s"`
	P90    float64 `json:"p90_s"`
	Phases Timing  `json:"phase_medians"`
}

// summarizeAround summarizes the time around the runs that have a timing.
func summarizeAround(ts []Tally) *AroundSummary {
	var around []float64
	var ph [6][]float64
	for _, t := range ts {
		for _, r := range t.Runs {
			a, ok := r.Around()
			if !ok {
				continue
			}
			around = append(around, a)
			for i, v := range []float64{r.Timing.Up, r.Timing.Setup, r.Timing.Stop, r.Timing.Drain, r.Timing.Down, r.Timing.Check} {
				ph[i] = append(ph[i], v)
			}
		}
	}
	if len(around) == 0 {
		return nil
	}
	return &AroundSummary{Runs: len(around), Median: quantile(around, 0.5), P90: quantile(around, 0.9),
		Phases: Timing{Up: quantile(ph[0], 0.5), Setup: quantile(ph[1], 0.5), Stop: quantile(ph[2], 0.5),
			Drain: quantile(ph[3], 0.5), Down: quantile(ph[4], 0.5), Check: quantile(ph[5], 0.5)}}
}

// quantile is the q-quantile of xs (nearest rank; xs is sorted in place).
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// String is the summary's line in a sweep's table.
func (a *AroundSummary) String() string {
	p := a.Phases
	return fmt.Sprintf("time around a run (wall minus workload) over %d runs: median %.1fs, p90 %.1fs; phase medians: up %.1fs, topic %.1fs, stop %.1fs, drain %.1fs, down %.1fs, check %.1fs",
		a.Runs, a.Median, a.P90, p.Up, p.Setup, p.Stop, p.Drain, p.Down, p.Check)
}

// Code is the sweep's exit status: 255 if a run could not run, else 1 if
// any run did not meet its expectation, else 2 if any was undecided or not
// set up (or the sweep stopped early), else 0.
func (v *VerifyResult) Code() int {
	if v.HogError != "" {
		return 255
	}
	code := 0
	for _, t := range v.Scenarios {
		switch t.Status() {
		case "error":
			return 255
		case results.NotMet:
			code = 1
		case results.NotSetUp, results.Undecided, "skipped":
			if code == 0 {
				code = 2
			}
		}
	}
	if code == 0 && v.Stopped != "" {
		code = 2
	}
	return code
}

// VerifyFile and VerifyTableFile are a sweep's results.
const (
	VerifyFile      = "verify.json"
	VerifyTableFile = "verify.md"
)

// Verify runs each scenario with fresh random seeds (o.Seeds of them, or
// o.SeedList) and tallies how many runs met their expectation. Runs go
// round the scenarios, one seed of each at a time, so that a sweep cut
// short (a signal, the budget) still covers every scenario. With o.Hog,
// busy processes keep the cores loaded beside every run.
func Verify(ctx context.Context, scs []Scenario, o VerifyOptions) (*VerifyResult, error) {
	o.Options = o.Options.withDefaults()
	o.Parallel = max(o.Parallel, 1)
	if o.run == nil {
		o.run = Run
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, internalErr(err)
		}
		o.Binary = exe
	}
	// A round is one run of every scenario; each run of a round without
	// a seed list gets a fresh seed of its own.
	rounds := len(o.SeedList)
	if rounds == 0 {
		if o.Seeds <= 0 {
			return nil, fmt.Errorf("%w: verify needs a number of seeds", ErrScenario)
		}
		rounds = o.Seeds
	}
	start := time.Now()
	id := compose.NewRunID()
	dir, err := filepath.Abs(filepath.Join(o.ResultsDir, "verify", start.UTC().Format(results.StampFormat)+"-"+id))
	if err != nil {
		return nil, internalErr(err)
	}
	if err := results.MakeDir(dir); err != nil {
		return nil, internalErr(err)
	}
	res := &VerifyResult{Dir: dir, Started: start.UTC().Format(time.RFC3339), Hog: o.Hog, Seeds: rounds}
	for _, sc := range scs {
		res.Scenarios = append(res.Scenarios, Tally{Scenario: sc.Name, Expect: sc.Expect.String(), Digest: ScenarioDigest(sc)})
	}
	out := o.Out
	hogDesc := ""
	if o.Hog > 0 {
		hogDesc = ", beside " + busyProcesses(o.Hog)
	}
	if o.Parallel > 1 {
		hogDesc += fmt.Sprintf(", %d runs at a time", o.Parallel)
	}
	fmt.Fprintf(out, "isrlab scenarios verify: %d scenario(s) x %d seed(s)%s\n  results: %s\n", len(scs), rounds, hogDesc, dir)
	var busy *hog
	if o.Hog > 0 {
		if busy, err = startHog(o.Binary, o.Hog); err != nil {
			return nil, internalErr(err)
		}
		defer func() {
			if busy != nil {
				busy.stop()
			}
		}()
	}
	total, n := len(scs)*rounds, 0
	var loads []float64
	runOpts := o.Options
	runOpts.ResultsDir = filepath.Join(dir, results.RunsDir)
	runOpts.Live, runOpts.RunID = false, ""
	var (
		mu   sync.Mutex // guards res, loads and out below
		wg   sync.WaitGroup
		slot = make(chan struct{}, o.Parallel)
	)
	stopped := func(why string) {
		mu.Lock()
		if res.Stopped == "" {
			res.Stopped = why
		}
		mu.Unlock()
	}
sweep:
	for round := range rounds {
		for i, sc := range scs {
			seed := freshSeed()
			if len(o.SeedList) > 0 {
				seed = o.SeedList[round]
			}
			select {
			case slot <- struct{}{}:
			case <-ctx.Done():
			}
			mu.Lock()
			halted := res.Stopped != ""
			mu.Unlock()
			if ctx.Err() != nil {
				stopped(fmt.Sprintf("stopped (%v)", context.Cause(ctx)))
				halted = true
			}
			if o.Budget > 0 && time.Since(start) > o.Budget {
				stopped(fmt.Sprintf("the budget of %v ran out", o.Budget))
				halted = true
			}
			if halted {
				break sweep
			}
			n++
			sc.Seed = seed
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slot }()
				r := verifyRun(ctx, sc, runOpts, dir, o.run)
				if ctx.Err() != nil && r.Outcome != results.Met {
					// A run cut short by the signal is not a verdict.
					stopped(fmt.Sprintf("stopped (%v)", context.Cause(ctx)))
					return
				}
				mu.Lock()
				defer mu.Unlock()
				res.Scenarios[i].Runs = append(res.Scenarios[i].Runs, r)
				if l, ok := loadAverage(); ok {
					loads = append(loads, l)
				}
				done := 0
				for _, t := range res.Scenarios {
					done += len(t.Runs)
				}
				line := fmt.Sprintf("  [%d/%d] %s seed %d: %s (%.0fs)", done, total, sc.Name, seed, strings.ToUpper(r.Outcome), r.Seconds)
				if r.Outcome != results.Met && len(r.Reasons) > 0 {
					line += ": " + strings.Join(r.Reasons, "; ")
				}
				if r.Error != "" {
					line += ": " + firstLine(r.Error)
				}
				fmt.Fprintln(out, line)
				// verify.json so far: what a killed sweep leaves.
				res.InProgress = true
				if b, err := json.Marshal(res); err == nil {
					results.WriteFile(filepath.Join(dir, VerifyFile), b) //nolint:errcheck // the final write reports
				}
				res.InProgress = false
			}()
		}
	}
	wg.Wait()
	for i, sc := range scs {
		t := &res.Scenarios[i]
		t.Across, t.AcrossGroups, t.AcrossNote = judgeAcross(sc.Expect, t.Runs)
		var rec Record
		for _, r := range t.Runs {
			rec.closer(sc.Bounds(), r, r.Measured, o.Hog > 0)
		}
		t.Closest = rec.Closest
	}
	res.Seconds = time.Since(start).Seconds()
	res.Cores = runtime.NumCPU()
	if busy != nil {
		rep := busy.stop()
		busy = nil
		res.HogCPUSeconds = rep.cpu.Seconds()
		if len(rep.early) > 0 {
			res.HogError = strings.Join(rep.early, "; ")
		}
	}
	res.Around = summarizeAround(res.Scenarios)
	for _, l := range loads {
		res.LoadMean += l / float64(len(loads))
		res.LoadMax = max(res.LoadMax, l)
	}
	if res.Stopped != "" {
		fmt.Fprintf(out, "  %s after %d of %d runs\n", res.Stopped, n, total)
	}
	fmt.Fprintln(out)
	WriteVerifyTable(out, res)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return res, internalErr(err)
	}
	var md strings.Builder
	WriteVerifyMarkdown(&md, res)
	werr := errors.Join(os.WriteFile(filepath.Join(dir, VerifyFile), append(b, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, VerifyTableFile), []byte(md.String()), 0o644),
		results.LinkLatest(filepath.Dir(dir), dir))
	fmt.Fprintf(out, "  results: %s (%s, %s)\n", dir, VerifyFile, VerifyTableFile)
	return res, internalErr(werr)
}

// verifyRun runs sc once with its output in the sweep's log of that run.
func verifyRun(ctx context.Context, sc Scenario, o Options, dir string, run func(context.Context, Scenario, Options) (Result, error)) SeedRun {
	r := SeedRun{Seed: sc.Seed}
	lf, err := results.CreateCellLog(dir, sc.Name+"-seed-"+strconv.FormatInt(sc.Seed, 10))
	if err != nil {
		r.Outcome, r.Error = "error", err.Error()
		return r
	}
	defer lf.Close()
	o.Out = lf
	start := time.Now()
	res, err := run(ctx, sc, o)
	r.Seconds, r.Dir, r.Timing = time.Since(start).Seconds(), res.Dir, res.Timing
	if err != nil {
		r.Outcome, r.Error = "error", err.Error()
		fmt.Fprintf(lf, "error: %v\n", err)
		return r
	}
	if res.Verdict != nil {
		r.Valid, r.Anomalies = res.Verdict.Valid.String(), res.Verdict.Anomalies
	}
	r.Outcome, r.Reasons, r.Measured = res.Judgement.Outcome.String(), res.Judgement.Reasons, res.Judgement.Measured
	return r
}

// judgeAcross judges e's claims across seeds over a sweep's runs (nil
// when e makes none). A claim is about a number of seeds, N: a sweep of
// fewer leaves it undecided, saying so; a sweep of more judges it on
// each group of N runs in the order they ran (20 seeds: six groups of
// 3, two runs left over), each group a trial of the claim, and returns
// the groups' outcomes with the worst of them. Claims about different
// numbers of seeds are not judged.
func judgeAcross(e Expect, runs []SeedRun) (*Judgement, []string, string) {
	if len(e.AcrossSeeds) == 0 {
		return nil, nil, ""
	}
	of := 0
	for _, k := range slices.Sorted(maps.Keys(e.AcrossSeeds)) {
		c, err := ParseSeedClaim(k, e.AcrossSeeds[k])
		switch {
		case err != nil:
		case len(runs) < c.Of:
			return nil, nil, fmt.Sprintf("%s across seeds is a claim about %d seeds; %d ran (verify --seeds %d or more judges it)", c, c.Of, len(runs), c.Of)
		case of != 0 && c.Of != of:
			return nil, nil, fmt.Sprintf("claims across seeds about %d and %d seeds are not judged together", of, c.Of)
		default:
			of = c.Of
		}
	}
	if of == 0 || len(runs) == of {
		j := e.JudgeSeeds(seedOutcomes(runs))
		return &j, nil, ""
	}
	agg := Judgement{Outcome: Met, Expect: e.acrossString()}
	var outcomes []string
	met := 0
	for g := 0; g+of <= len(runs); g += of {
		group := runs[g : g+of]
		j := e.JudgeSeeds(seedOutcomes(group))
		outcomes = append(outcomes, j.Outcome.String())
		if j.Outcome == Met {
			met++
			continue
		}
		if j.Outcome == NotMet || agg.Outcome == Met {
			agg.Outcome = j.Outcome
		}
		seeds := make([]string, len(group))
		for i, r := range group {
			seeds[i] = strconv.FormatInt(r.Seed, 10)
		}
		agg.Reasons = append(agg.Reasons, fmt.Sprintf("seeds %s: %s: %s", strings.Join(seeds, ", "), j.Outcome, strings.Join(j.Reasons, "; ")))
	}
	agg.Reasons = append([]string{fmt.Sprintf("met in %d of %d groups of %d seeds", met, len(outcomes), of)}, agg.Reasons...)
	note := ""
	if left := len(runs) % of; left > 0 {
		note = fmt.Sprintf("%d groups of %d seeds in the order they ran; the last %d runs judged in none", len(outcomes), of, left)
	}
	return &agg, outcomes, note
}

// seedOutcomes are runs as judgeSeeds takes them.
func seedOutcomes(runs []SeedRun) []SeedOutcome {
	outs := make([]SeedOutcome, len(runs))
	for i, r := range runs {
		o := SeedOutcome{Seed: r.Seed, Anomalies: r.Anomalies}
		if err := o.Outcome.UnmarshalText([]byte(r.Outcome)); err != nil {
			o.Missing = r.Outcome
		}
		if r.Valid != "" {
			o.Valid.UnmarshalJSON([]byte(strconv.Quote(r.Valid))) //nolint:errcheck // an unknown validity stays Unknown
		}
		outs[i] = o
	}
	return outs
}

// WriteVerifyTable prints the sweep's table: per scenario, its runs by
// outcome and the seeds of those that did not meet the expectation.
func WriteVerifyTable(w io.Writer, v *VerifyResult) {
	nameW, expW := len("scenario"), len("expect")
	for _, t := range v.Scenarios {
		nameW, expW = max(nameW, len(t.Scenario)), max(expW, min(len(t.Expect), 40))
	}
	fmt.Fprintf(w, "%-*s  %-*s  %4s  %4s  %7s  %10s  %9s  %5s  %s\n", nameW, "scenario", expW, "expect", "runs", "met", "not-met", "not-set-up", "undecided", "error", "seeds not met")
	defer func() {
		if v.Around != nil {
			fmt.Fprintln(w, v.Around)
		}
		if h := v.hogLine(); h != "" {
			fmt.Fprintln(w, h)
		}
		for _, t := range v.Scenarios {
			if len(t.Closest) > 0 {
				fmt.Fprintf(w, "%s: closest to a bound: %s\n", t.Scenario, (&Record{Closest: t.Closest}).closest())
			}
		}
		for _, t := range v.Scenarios {
			if t.Across != nil {
				fmt.Fprintln(w, results.JudgementLine(t.Scenario+" across seeds", t.Across.Expect, t.Across.Outcome.String(), t.Across.Reasons))
				if t.AcrossNote != "" {
					fmt.Fprintf(w, "%s across seeds: %s\n", t.Scenario, t.AcrossNote)
				}
			} else if t.AcrossNote != "" {
				fmt.Fprintf(w, "%s: not judged: %s\n", t.Scenario, t.AcrossNote)
			}
		}
	}()
	for _, t := range v.Scenarios {
		exp := t.Expect
		if len(exp) > 40 {
			exp = exp[:37] + "..."
		}
		fmt.Fprintf(w, "%-*s  %-*s  %4d  %4d  %7d  %10d  %9d  %5d  %s\n", nameW, t.Scenario, expW, exp, len(t.Runs),
			t.Count(results.Met), t.Count(results.NotMet), t.Count(results.NotSetUp), t.Count(results.Undecided), t.Count("error"), failingSeeds(t))
	}
}

// WriteVerifyMarkdown writes the sweep's table as Markdown, for docs and
// a CI job's summary.
func WriteVerifyMarkdown(w io.Writer, v *VerifyResult) {
	hog := "no CPU hog"
	if v.Hog > 0 {
		hog = "beside " + busyProcesses(v.Hog)
	}
	fmt.Fprintf(w, "Sweep of %s: %d seed(s) per scenario, %s, %.0f min; the machine's 1-minute load average after each run: mean %.1f, max %.1f on %d cores.\n\n",
		v.Started, v.Seeds, hog, v.Seconds/60, v.LoadMean, v.LoadMax, v.Cores)
	if v.Stopped != "" {
		fmt.Fprintf(w, "The sweep %s before every run was made.\n\n", v.Stopped)
	}
	fmt.Fprintln(w, "| scenario | expect | runs | met | not met | not set up | undecided | error | seeds not met |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, t := range v.Scenarios {
		fmt.Fprintf(w, "| `%s` | %s | %d | %d | %d | %d | %d | %d | %s |\n", t.Scenario, strings.ReplaceAll(t.Expect, "|", "\\|"), len(t.Runs),
			t.Count(results.Met), t.Count(results.NotMet), t.Count(results.NotSetUp), t.Count(results.Undecided), t.Count("error"), failingSeeds(t))
	}
	if v.Around != nil {
		fmt.Fprintf(w, "\nThe %s.\n", v.Around)
	}
	if h := v.hogLine(); h != "" {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	for _, t := range v.Scenarios {
		if len(t.Closest) > 0 {
			fmt.Fprintf(w, "\n`%s`: closest to a bound: %s\n", t.Scenario, (&Record{Closest: t.Closest}).closest())
		}
	}
	for _, t := range v.Scenarios {
		if t.Across != nil {
			fmt.Fprintf(w, "\n`%s` across seeds (%s): **%s**: %s\n", t.Scenario, t.Across.Expect, t.Across.Outcome, strings.Join(t.Across.Reasons, "; "))
			if t.AcrossNote != "" {
				fmt.Fprintf(w, "(%s)\n", t.AcrossNote)
			}
		} else if t.AcrossNote != "" {
			fmt.Fprintf(w, "\n`%s`: not judged: %s\n", t.Scenario, t.AcrossNote)
		}
	}
}

// hogLine says what the hog did, for the sweep's table ("" without one).
func (v *VerifyResult) hogLine() string {
	if v.Hog == 0 {
		return ""
	}
	line := fmt.Sprintf("the hog: %s, %.0f CPU-seconds over the sweep's %.0f s (%.1f cores busy)",
		busyProcesses(v.Hog), v.HogCPUSeconds, v.Seconds, v.HogCPUSeconds/max(v.Seconds, 1))
	if v.HogError != "" {
		line += "; ENDED EARLY: " + v.HogError
	}
	return line
}

// failingSeeds lists the seeds of the runs that did not meet the
// expectation, with their outcome when it is not "not met".
func failingSeeds(t Tally) string {
	var parts []string
	for _, r := range t.Runs {
		switch r.Outcome {
		case results.Met:
		case results.NotMet:
			parts = append(parts, strconv.FormatInt(r.Seed, 10))
		default:
			parts = append(parts, fmt.Sprintf("%d (%s)", r.Seed, r.Outcome))
		}
	}
	return strings.Join(parts, " ")
}

// freshSeed is a random seed in [1, 1e9], the range `isrlab run` picks
// from.
func freshSeed() int64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return time.Now().UnixNano()%1_000_000_000 + 1
	}
	return int64(binary.LittleEndian.Uint64(b[:])%1_000_000_000) + 1
}

// HogSubcommand is the isrlab subcommand that busy-loops: the CPU hog
// Verify starts beside its runs.
var HogSubcommand = []string{"hog"}

// busyProcesses says how many busy processes a hog has: "1 busy
// process", "2 busy processes".
func busyProcesses(n int) string {
	if n == 1 {
		return "1 busy process"
	}
	return fmt.Sprintf("%d busy processes", n)
}

// hog is a sweep's CPU hog: busy processes started, watched and killed
// from one goroutine locked to its OS thread for their whole life. The
// kernel sends a child's Pdeathsig when the thread that started it exits,
// not the process, and the Go runtime ends a thread whose goroutine
// finishes locked to it (each switch into a network namespace does): a
// hog started from any thread could be killed by such a retirement
// seconds into a sweep, which then ran without it.
type hog struct {
	quit chan struct{}
	done chan hogReport
}

// hogReport is what the hog did: its processes' CPU time, and which of
// them ended before the sweep did.
type hogReport struct {
	cpu   time.Duration
	early []string
}

// startHog starts n busy processes of binary (`isrlab hog`), each dying
// with this process.
func startHog(binary string, n int) (*hog, error) {
	h := &hog{quit: make(chan struct{}), done: make(chan hogReport, 1)}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, after the
		// busy processes it started.
		runtime.LockOSThread()
		type exit struct {
			i     int
			state *os.ProcessState
		}
		exits := make(chan exit, n)
		var cmds []*exec.Cmd
		kill := func() {
			for _, c := range cmds {
				c.Process.Kill() //nolint:errcheck // it may have died already
			}
		}
		for i := range n {
			c := exec.Command(binary, HogSubcommand...)
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				kill()
				for range cmds {
					<-exits
				}
				started <- fmt.Errorf("start the CPU hog: %w", err)
				return
			}
			cmds = append(cmds, c)
			go func() {
				c.Wait() //nolint:errcheck // the state tells
				exits <- exit{i, c.ProcessState}
			}()
		}
		began := time.Now()
		started <- nil
		var rep hogReport
		left := n
		account := func(e exit, killed bool) {
			left--
			rep.cpu += e.state.UserTime() + e.state.SystemTime()
			// A process that exited on its own ended early, even if its
			// exit is read only after the sweep (ours are killed).
			if !killed || e.state.Exited() {
				rep.early = append(rep.early, fmt.Sprintf("busy process %d of %d ended after %v (%v)", e.i+1, n, time.Since(began).Round(time.Second), e.state))
			}
		}
		for {
			select {
			case e := <-exits:
				account(e, false)
				continue
			case <-h.quit:
			}
			break
		}
		kill()
		for left > 0 {
			account(<-exits, true)
		}
		h.done <- rep
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return h, nil
}

// stop kills the hog's processes and reports what they did.
func (h *hog) stop() hogReport {
	close(h.quit)
	return <-h.done
}

// SelectLibrary returns the library scenarios named by args: a name or
// alias (leader-cut-from-followers, seed000/partition-3) or a directory
// of names or aliases (zombie-leader/, seed000/, kip101); none means every
// scenario. Each scenario comes once, under its name.
func SelectLibrary(args []string) ([]Scenario, error) {
	ents, err := List()
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		out := make([]Scenario, len(ents))
		for i, e := range ents {
			out[i] = e.Scenario
		}
		return out, nil
	}
	var out []Scenario
	for _, a := range args {
		a = strings.TrimSuffix(a, ".yaml")
		dir := strings.TrimSuffix(a, "/") + "/"
		named := func(n string) bool { return n == a || strings.HasPrefix(n, dir) }
		found := false
		for _, e := range ents {
			if named(e.Name) || slices.ContainsFunc(e.Aliases, named) {
				if !slices.ContainsFunc(out, func(s Scenario) bool { return s.Name == e.Name }) {
					out = append(out, e.Scenario)
				}
				found = true
			}
		}
		if !found {
			return nil, noScenario(a)
		}
	}
	return out, nil
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	return v, err == nil
}
