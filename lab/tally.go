package lab

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/results"
)

// A library scenario's record over many sweeps (`isrlab scenarios tally`):
// the nightly job's sweeps, or a week of them on a workstation, added up
// per scenario, with and without a CPU hog. A run counts for a scenario
// only if it ran the scenario as the library states it now: a run of an
// older timeline, or of the scenario under a --preset, says nothing about
// the claim as it stands. Sweeps record each scenario's digest
// (Tally.Digest); for sweeps made before they did, the run's own
// scenario.yaml is compared, and a run with neither is "unknown".

// ScenarioDigest identifies what a scenario runs: the SHA-256 of its
// resolved form with what does not change a run left out (its name,
// aliases, description and seed). Two runs with the same digest ran the
// same cluster, topic, workload, faults and expectation.
func ScenarioDigest(s Scenario) string {
	s.Name, s.Description, s.Aliases, s.Seed, s.Workload.Seed = "", "", nil, 0, 0
	b, err := yaml.Marshal(s)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// TallyOptions configure TallySweeps.
type TallyOptions struct {
	// AnyVersion counts every run under its scenario's current name,
	// whatever version of the scenario it ran.
	AnyVersion bool
	// Names restricts the record to these scenarios (names, aliases or
	// directories as SelectLibrary takes them); none is the whole library.
	Names []string
}

// Record is one scenario's runs over the sweeps tallied.
type Record struct {
	Scenario string `json:"scenario"`
	Expect   string `json:"expect"`
	// Quiet and Hog count the runs of sweeps without and with --hog, by
	// outcome (met, not met, not set up, undecided, error).
	Quiet map[string]int `json:"quiet"`
	Hog   map[string]int `json:"hog"`
	// HogUnrecorded counts, by outcome, the runs of sweeps made with
	// --hog before sweeps recorded their hog's CPU time: those hogs could
	// end seconds into the sweep (see hog in verify.go), so their runs
	// count as neither.
	HogUnrecorded map[string]int `json:"hog_unrecorded,omitempty"`
	// Missed are the runs that did not meet the expectation: seed, outcome,
	// whether beside a hog, and the sweep.
	Missed []MissedRun `json:"missed,omitempty"`
	// Across counts, by outcome, the groups of seeds its claims across
	// seeds were judged on: every run counted, in the order of the sweeps
	// (and of the runs in each), cut into groups of as many as the claims
	// are about, so that three-seed nightly sweeps together judge a
	// claim about eight seeds. AcrossReasons say which groups missed.
	Across        map[string]int `json:"across_seeds,omitempty"`
	AcrossReasons []string       `json:"across_seeds_reasons,omitempty"`
	// Other is how many runs ran another version of the scenario (or
	// under a preset); Unknown how many could not be told (a sweep
	// without digests whose run directories are gone). Neither is counted
	// above unless AnyVersion.
	Other   int `json:"other_versions"`
	Unknown int `json:"unknown_version"`
	// Sweeps is how many sweeps had a run of it that counted.
	Sweeps int `json:"sweeps"`
	// Closest is, for each bound of the expectation (Expect.Bounds) that
	// is a lower or upper bound, the counted run that came closest to it:
	// the smallest value under ">0", the largest under "<25s". A claim
	// that holds by a hair shows here before it fails.
	Closest map[string]Closest `json:"closest,omitempty"`
}

// Closest is the run nearest a bound: its value and seed, and the bound.
type Closest struct {
	Bound string  `json:"bound"`
	Value float64 `json:"value"`
	Seed  int64   `json:"seed"`
	Hog   bool    `json:"hog"`
	// Runs is how many counted runs measured it.
	Runs int `json:"runs"`
}

// nearer reports whether x is nearer c's bound than y.
func nearer(c Cond, x, y float64) bool {
	if strings.HasPrefix(c.Op, ">") {
		return x < y
	}
	return x > y
}

// closer records a run's measured values in rec's closest calls.
func (r *Record) closer(bounds map[string]Cond, run SeedRun, measured map[string]float64, hog bool) {
	for term, x := range measured {
		c, ok := bounds[term]
		if !ok || (c.Op != "<" && c.Op != "<=" && c.Op != ">" && c.Op != ">=") {
			continue
		}
		if r.Closest == nil {
			r.Closest = map[string]Closest{}
		}
		cl, seen := r.Closest[term]
		cl.Runs++
		if !seen || nearer(c, x, cl.Value) {
			cl.Bound, cl.Value, cl.Seed, cl.Hog = c.String(), x, run.Seed, hog
		}
		r.Closest[term] = cl
	}
}

// String is "18.4s (<25s, seed 7, hog)".
func (c Closest) String() string {
	var v string
	cond, _ := ParseCond(c.Bound)
	switch {
	case cond.Dur:
		v = fmt.Sprintf("%.1fs", c.Value)
	case cond.Ratio:
		v = fmt.Sprintf("%.2fx", c.Value)
	case c.Value != float64(int64(c.Value)):
		v = fmt.Sprintf("%.3g", c.Value)
	default:
		v = fmt.Sprintf("%.0f", c.Value)
	}
	tags := fmt.Sprintf("%s, seed %d", c.Bound, c.Seed)
	if c.Hog {
		tags += ", hog"
	}
	return v + " (" + tags + ")"
}

// closest lists a record's closest calls, "term value (bound, seed)".
func (r *Record) closest() string {
	var parts []string
	for _, term := range slices.Sorted(maps.Keys(r.Closest)) {
		parts = append(parts, term+" "+r.Closest[term].String())
	}
	return strings.Join(parts, "; ")
}

// measuredIn is what a run measured for sc's bounds: the sweep's record,
// or else the run's verdict and series judged again.
func measuredIn(sc Scenario, run SeedRun) map[string]float64 {
	if run.Measured != nil || run.Dir == "" {
		return run.Measured
	}
	fsys := os.DirFS(run.Dir)
	v, err := results.ReadVerdict(fsys)
	if err != nil {
		return nil
	}
	var ser *results.Series
	if o, err := results.ReadOutcome(fsys); err == nil {
		ser = o.Series
	}
	return sc.Expect.judgeSeries(sc.Expect.Judge(v), ser).Measured
}

// MissedRun is a run of a record that did not meet its expectation.
type MissedRun struct {
	Seed    int64  `json:"seed"`
	Outcome string `json:"outcome"`
	Hog     bool   `json:"hog"`
	Sweep   string `json:"sweep"`
}

// Runs is how many runs counted, without (quiet) or beside a hog.
func (r *Record) Runs(hog bool) int {
	if hog {
		return sumCounts(r.Hog)
	}
	return sumCounts(r.Quiet)
}

// TallyResult is the record of every scenario over the sweeps found.
type TallyResult struct {
	Sweeps  []string  `json:"sweeps"`
	Records []*Record `json:"scenarios"`
	// Skipped names files that were not a sweep's verify.json, with why.
	Skipped []string `json:"skipped,omitempty"`
}

// TallySweeps adds up the sweeps found under roots: each a sweep's
// directory, its verify.json, or a directory searched for them (a
// symlinked sweep such as verify/latest is counted once).
func TallySweeps(roots []string, o TallyOptions) (*TallyResult, error) {
	scs, err := SelectLibrary(o.Names)
	if err != nil {
		return nil, err
	}
	ents, err := List()
	if err != nil {
		return nil, err
	}
	current := map[string]string{} // any name or alias -> current name
	for _, e := range ents {
		current[e.Name] = e.Name
		for _, a := range e.Aliases {
			current[a] = e.Name
		}
	}
	res := &TallyResult{}
	recs := map[string]*Record{}
	digests := map[string]string{}
	library := map[string]Scenario{}
	for _, sc := range scs {
		r := &Record{Scenario: sc.Name, Expect: sc.Expect.String(), Quiet: map[string]int{}, Hog: map[string]int{}, HogUnrecorded: map[string]int{}}
		recs[sc.Name] = r
		res.Records = append(res.Records, r)
		digests[sc.Name] = ScenarioDigest(sc)
		library[sc.Name] = sc
	}
	files, err := findSweeps(roots)
	if err != nil {
		return nil, err
	}
	type sweep struct {
		file string
		v    *VerifyResult
	}
	var sweeps []sweep
	for _, f := range files {
		v, err := readSweep(f)
		if err != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		sweeps = append(sweeps, sweep{f, v})
	}
	// In the order they started: the claims across seeds are judged on
	// the runs in that order.
	slices.SortStableFunc(sweeps, func(a, b sweep) int { return cmp.Compare(a.v.Started, b.v.Started) })
	pooled := map[string][]SeedRun{} // the counted runs, for the claims across seeds
	for _, sw := range sweeps {
		f, v := sw.file, sw.v
		if v.HogError != "" {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: its hog ended early (%s)", f, v.HogError))
			continue
		}
		res.Sweeps = append(res.Sweeps, filepath.Dir(f))
		// A sweep still running records its hog's CPU time at its end;
		// only a sweep with the lasting hog writes verify.json as it goes.
		unrecorded := v.Hog > 0 && v.HogCPUSeconds == 0 && !v.InProgress
		for _, t := range v.Scenarios {
			rec := recs[current[t.Scenario]]
			if rec == nil {
				continue
			}
			counted := false
			for _, run := range t.Runs {
				switch runVersion(t, run, digests[rec.Scenario]) {
				case "other":
					rec.Other++
					if !o.AnyVersion {
						continue
					}
				case "unknown":
					rec.Unknown++
					if !o.AnyVersion {
						continue
					}
				}
				counted = true
				pooled[rec.Scenario] = append(pooled[rec.Scenario], run)
				m := rec.Quiet
				switch {
				case unrecorded:
					m = rec.HogUnrecorded
				case v.Hog > 0:
					m = rec.Hog
				}
				m[run.Outcome]++
				sc := library[rec.Scenario]
				rec.closer(sc.Bounds(), run, measuredIn(sc, run), v.Hog > 0)
				if run.Outcome != results.Met {
					rec.Missed = append(rec.Missed, MissedRun{Seed: run.Seed, Outcome: run.Outcome, Hog: v.Hog > 0, Sweep: filepath.Dir(f)})
				}
			}
			if counted {
				rec.Sweeps++
			}
		}
	}
	for _, rec := range res.Records {
		j, groups, _ := judgeAcross(library[rec.Scenario].Expect, pooled[rec.Scenario])
		if j == nil {
			continue
		}
		// Each group of seeds judged is a trial of the claim.
		rec.Across = map[string]int{}
		for _, o := range groups {
			rec.Across[o]++
		}
		if groups == nil {
			rec.Across[j.Outcome.String()]++
		}
		if j.Outcome != Met {
			rec.AcrossReasons = j.Reasons
		}
	}
	return res, nil
}

// runVersion says whether run ran the scenario whose current digest is
// want: "same", "other" or "unknown".
func runVersion(t Tally, run SeedRun, want string) string {
	got := t.Digest
	if got == "" && run.Dir != "" {
		if b, err := os.ReadFile(filepath.Join(run.Dir, results.ScenarioFile)); err == nil {
			var s Scenario
			if yaml.Unmarshal(b, &s) == nil {
				got = ScenarioDigest(s)
			}
		}
	}
	switch {
	case got == "":
		return "unknown"
	case got == want:
		return "same"
	}
	return "other"
}

// findSweeps lists the verify.json files under roots, each once.
func findSweeps(roots []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			return
		}
		seen[real] = true
		out = append(out, real)
	}
	for _, root := range roots {
		st, err := os.Stat(root)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			add(root)
			continue
		}
		// WalkDir does not follow symlinks: a latest link is skipped
		// here and its target found on its own.
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == root {
					return err
				}
				return nil // gone since it was listed, or unreadable: not a sweep of ours
			}
			if d.IsDir() && (d.Name() == results.RunsDir || d.Name() == "logs") && p != root {
				return filepath.SkipDir // a sweep's run directories hold no sweep
			}
			if !d.IsDir() && d.Name() == VerifyFile {
				add(p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// readSweep reads a sweep's verify.json.
func readSweep(path string) (*VerifyResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v VerifyResult
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("not a sweep's %s: %w", VerifyFile, err)
	}
	if v.Started == "" || v.Scenarios == nil {
		return nil, errors.New("not a sweep's " + VerifyFile + " (no start or scenarios)")
	}
	return &v, nil
}

// outcomes in the order tables show them.
var tallyOutcomes = []string{results.Met, results.NotMet, results.NotSetUp, results.Undecided, "error"}

// cell is one side of a record: "met of runs", with anything else named.
func (r *Record) cell(hog bool) string {
	m := r.Quiet
	if hog {
		m = r.Hog
	}
	n := r.Runs(hog)
	if n == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d of %d", m[results.Met], n)
	var rest []string
	for _, o := range tallyOutcomes[1:] {
		if m[o] > 0 {
			rest = append(rest, fmt.Sprintf("%d %s", m[o], o))
		}
	}
	for o, c := range m {
		if !slices.Contains(tallyOutcomes, o) && c > 0 {
			rest = append(rest, fmt.Sprintf("%d %s", c, o))
		}
	}
	if len(rest) > 0 {
		slices.Sort(rest)
		s += " (" + strings.Join(rest, ", ") + ")"
	}
	return s
}

// missed lists a record's runs that did not meet, "seed (outcome, hog)".
func (r *Record) missed() string {
	var parts []string
	for _, m := range r.Missed {
		p := fmt.Sprint(m.Seed)
		var tags []string
		if m.Outcome != results.NotMet {
			tags = append(tags, m.Outcome)
		}
		if m.Hog {
			tags = append(tags, "hog")
		}
		if len(tags) > 0 {
			p += " (" + strings.Join(tags, ", ") + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// across is a record's claims across seeds, "met in K of N groups of
// seeds".
func (r *Record) across() string {
	if len(r.Across) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d seed groups", r.Across[results.Met], sumCounts(r.Across))
}

// Met is whether every counted run met its expectation and every claim
// across seeds judged was met.
func (t *TallyResult) Met() bool {
	for _, r := range t.Records {
		if len(r.Missed) > 0 || r.Across[results.Met] != sumCounts(r.Across) {
			return false
		}
	}
	return true
}

// sumCounts is the sum of m's counts.
func sumCounts(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// Fewest returns the records sorted by the runs counted on the side
// (hog or not) with the fewest, fewest first: the scenarios a sweep
// should run next.
func (t *TallyResult) Fewest(hog bool) []*Record {
	out := slices.Clone(t.Records)
	slices.SortStableFunc(out, func(a, b *Record) int { return cmp.Compare(a.Runs(hog), b.Runs(hog)) })
	return out
}

// WriteTally prints the record as a table (markdown: as Markdown).
func WriteTally(w io.Writer, t *TallyResult, markdown bool) {
	quiet, hog := 0, 0
	for _, r := range t.Records {
		quiet += r.Runs(false)
		hog += r.Runs(true)
	}
	head := []string{"scenario", "without a hog", "beside a hog", "hog not recorded", "across seeds met", "other versions", "closest to a bound", "seeds not met"}
	rows := [][]string{}
	for _, r := range t.Records {
		other := ""
		if r.Other+r.Unknown > 0 {
			other = fmt.Sprintf("%d", r.Other)
			if r.Unknown > 0 {
				other += fmt.Sprintf(" (+%d unknown)", r.Unknown)
			}
		}
		unrec := ""
		if n := sumCounts(r.HogUnrecorded); n > 0 {
			unrec = fmt.Sprintf("%d of %d", r.HogUnrecorded[results.Met], n)
		}
		rows = append(rows, []string{r.Scenario, r.cell(false), r.cell(true), unrec, r.across(), other, r.closest(), r.missed()})
	}
	if markdown {
		fmt.Fprintf(w, "%d sweeps: %d runs without a hog, %d beside one, of %d scenarios.\n\n", len(t.Sweeps), quiet, hog, len(t.Records))
		fmt.Fprintln(w, "| "+strings.Join(head, " | ")+" |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
		for _, row := range rows {
			row[0] = "`" + row[0] + "`"
			fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
		}
	} else {
		widths := make([]int, len(head))
		for i, h := range head {
			widths[i] = len(h)
		}
		for _, row := range rows {
			for i, c := range row[:len(row)-1] {
				widths[i] = max(widths[i], len(c))
			}
		}
		line := func(cells []string) {
			var b strings.Builder
			for i, c := range cells {
				if i == len(cells)-1 {
					b.WriteString(c)
					break
				}
				fmt.Fprintf(&b, "%-*s  ", widths[i], c)
			}
			fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		}
		line(head)
		for _, row := range rows {
			line(row)
		}
		fmt.Fprintf(w, "%d sweeps: %d runs without a hog, %d beside one, of %d scenarios\n", len(t.Sweeps), quiet, hog, len(t.Records))
	}
	for _, r := range t.Records {
		if len(r.AcrossReasons) > 0 {
			fmt.Fprintf(w, "%s across seeds: %s\n", r.Scenario, strings.Join(r.AcrossReasons, "; "))
		}
	}
	for _, s := range t.Skipped {
		fmt.Fprintf(w, "skipped %s\n", s)
	}
}
