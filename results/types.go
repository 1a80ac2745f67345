package results

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/isrlab/isrlab/checker"
	metrics "github.com/isrlab/isrlab/series"
)

// Outcomes, as outcome.json and table.json spell them.
const (
	Met       = "met"
	NotMet    = "not met"
	Undecided = "undecided"
	// NotSetUp: the run could not create the cluster state its story
	// needs (a fault's condition did not hold in time); never met.
	NotSetUp = "not set up"
)

// Outcome is a run's outcome.json, the one type that both writes it (lab,
// through WriteRun) and reads it: the run, its verdict in brief, how it
// compares with the scenario's expectation, its series summary and where
// its time went.
type Outcome struct {
	Scenario   string           `json:"scenario"`
	RunID      string           `json:"run_id"`
	Seed       int64            `json:"seed"`
	Started    string           `json:"started"`
	Seconds    float64          `json:"seconds"`
	Incomplete bool             `json:"incomplete,omitempty"`
	Valid      checker.Validity `json:"valid"`
	Anomalies  map[string]int64 `json:"anomalies"`
	// Outcome is Met, NotMet, Undecided or NotSetUp (lab.Outcome's
	// names); Expect the expectation it was judged against, Reasons why.
	Outcome string   `json:"outcome"`
	Expect  string   `json:"expect"`
	Reasons []string `json:"reasons,omitempty"`
	// Measured is what the run measured for each bound of the
	// expectation (lab.Judgement.Measured).
	Measured map[string]float64 `json:"measured,omitempty"`
	// Series sums up metrics.jsonl: throughput and ISR churn before,
	// during and after the faults (absent without metrics).
	Series *Series `json:"series,omitempty"`
	// Timing says where the run's wall time went (absent from older
	// runs).
	Timing *Timing `json:"timing,omitempty"`
}

// Series is a run's series summary and what its faults touched.
type Series struct {
	*metrics.Summary
	// Collateral counts the ISR drops during the faults between two
	// brokers that no fault touched: neither was a fault's target and no
	// partition cut the link between them.
	Collateral float64 `json:"collateral_isr_drops"`
}

// Timing is where a run's wall time went, in seconds: what a run costs
// beyond its duration is Up + Setup + Stop + Drain + Down + Check.
type Timing struct {
	Up       float64 `json:"up_s"`       // namespaces, processes, readiness
	Setup    float64 `json:"setup_s"`    // topic creation, full ISRs
	Workload float64 `json:"workload_s"` // the scenario's duration (shorter when not set up or cut short)
	Stop     float64 `json:"stop_s"`     // workload and faults stopped, everything healed
	Drain    float64 `json:"drain_s"`    // cluster ready again, every partition read to its end
	Down     float64 `json:"down_s"`     // the cluster torn down
	Check    float64 `json:"check_s"`    // the history checked and judged
}

// Overhead is the time the run took beyond its workload.
func (t *Timing) Overhead() float64 {
	return t.Up + t.Setup + t.Stop + t.Drain + t.Down + t.Check
}

// Table is a matrix's table.json: one Cell per preset x schedule x seed.
// lab.MatrixResult is this type.
type Table struct {
	Matrix  string  `json:"matrix"`
	Dir     string  `json:"dir"`
	Started string  `json:"started"`
	Seconds float64 `json:"seconds"`
	Cells   []Cell  `json:"cells"`
	// Groups are the judgements of claims across seeds, one per preset x
	// schedule whose expectation has any (absent from older tables). A
	// shard judges only the groups whose seeds all ran in it; the merge
	// judges the rest.
	Groups []Group `json:"groups,omitempty"`
	// Hash identifies the matrix as it ran (every cell's resolved
	// scenario, lab.MatrixPlan); Seeds are its cells' seeds. Shards of one
	// matrix, and their merge, share both.
	Hash  string  `json:"hash,omitempty"`
	Seeds []int64 `json:"seeds,omitempty"`
	// Shard is "I/N" when the table is one shard of the matrix (its
	// cells only).
	Shard string `json:"shard,omitempty"`
	// Shards are the shards a merged table was merged from, and
	// MissingShards those a partial merge went without (their cells are
	// skipped).
	Shards        []string `json:"shards,omitempty"`
	MissingShards []string `json:"missing_shards,omitempty"`
}

// Group is one preset x schedule's claims across seeds (expect's
// across-seeds), judged on the set of its seeds' cells.
type Group struct {
	// Group is preset/schedule.
	Group    string      `json:"group"`
	Preset   string      `json:"preset"`
	Schedule string      `json:"schedule"`
	Expect   string      `json:"expect"`
	Outcome  string      `json:"outcome,omitempty"`
	Reasons  []string    `json:"reasons,omitempty"`
	Seeds    []GroupSeed `json:"seeds"`
}

// GroupSeed is one seed of a Group: its cell and what it showed for each
// claim.
type GroupSeed struct {
	Seed   int64      `json:"seed"`
	Cell   string     `json:"cell"`
	Status string     `json:"status"` // the cell's own (Cell.Status)
	Facts  []SeedFact `json:"facts,omitempty"`
}

// SeedFact is what one seed showed for one claim across seeds.
type SeedFact struct {
	// Name is the claim's anomaly, or valid.
	Name string `json:"name"`
	// Value is the seed's count or validity; empty when it did not run.
	Value string `json:"value"`
	// Held is "yes" or "no" when the claim's per-run condition held or
	// not, "unknown" when the seed's own outcome was not decided (or
	// its validity unknown): it might count either way.
	Held string `json:"held"`
}

// ID names the group among cells: preset/schedule/across-seeds.
func (g Group) ID() string { return g.Group + "/across-seeds" }

// Status is the group's outcome; undecided when it has none.
func (g Group) Status() string {
	if g.Outcome == "" {
		return Undecided
	}
	return g.Outcome
}

// Cell is one cell of a Table (lab.CellResult).
type Cell struct {
	Cell      string           `json:"cell"`
	Preset    string           `json:"preset"`
	Schedule  string           `json:"schedule"`
	Seed      int64            `json:"seed"`
	State     string           `json:"state"` // pending, running, done, error, skipped
	Outcome   string           `json:"outcome,omitempty"`
	Valid     string           `json:"valid,omitempty"`
	Anomalies map[string]int64 `json:"anomalies,omitempty"`
	Avail     float64          `json:"availability,omitempty"`
	MaxUnavS  float64          `json:"max_unavailable_s,omitempty"`
	Expect    string           `json:"expect"`
	Reasons   []string         `json:"reasons,omitempty"`
	Error     string           `json:"error,omitempty"`
	Dir       string           `json:"dir,omitempty"`
	Seconds   float64          `json:"seconds,omitempty"`
	// Shrunk is what isrlab shrink found for the cell's run, once run.
	Shrunk *Shrunk `json:"shrunk,omitempty"`
}

// Code is a matrix's exit status: 255 if a cell could not run, else 1 if
// any expectation (of a cell or a group across seeds) was not met, else 2
// if any was undecided or did not run, else 0.
func (t *Table) Code() int {
	code := 0
	statuses := make([]string, 0, len(t.Cells)+len(t.Groups))
	for _, c := range t.Cells {
		statuses = append(statuses, c.Status())
	}
	for _, g := range t.Groups {
		statuses = append(statuses, g.Status())
	}
	for _, st := range statuses {
		switch {
		case st == "error":
			return 255
		case st == NotMet:
			code = 1
		case code == 0 && st != Met:
			code = 2
		}
	}
	return code
}

// Status is what a cell's colour and the diff go by: "met", "not met",
// "undecided", "error", or "skipped" for a cell that never finished.
func (c Cell) Status() string {
	switch {
	case c.State == "error":
		return "error"
	case c.State != "done":
		return "skipped"
	case c.Outcome == "":
		return Undecided
	}
	return c.Outcome
}

// Failing reports a status that a CI job must not pass: not met,
// undecided, not set up or error.
func Failing(status string) bool {
	return status == NotMet || status == Undecided || status == NotSetUp || status == "error"
}

// RunRel is the cell's run directory relative to the matrix directory, in
// slash form, or "" when it does not lie under it. Both paths in table.json
// are absolute on the machine that ran the matrix, so the relative path
// still holds for a copied matrix directory.
func (t *Table) RunRel(c Cell) string {
	if c.Dir == "" || t.Dir == "" {
		return ""
	}
	d, m := path.Clean(toSlash(c.Dir)), path.Clean(toSlash(t.Dir))
	rel, ok := strings.CutPrefix(d, m+"/")
	if !ok || rel == "" {
		return ""
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return ""
		}
	}
	return rel
}

// toSlash treats backslashes as separators too: table.json may come from
// another machine.
func toSlash(p string) string { return strings.ReplaceAll(p, "\\", "/") }

// anomalyText lists counts as "lost-write=3, duplicate=1", in the
// checker's order, then any unknown kinds sorted.
func anomalyText(m map[string]int64) string {
	var parts []string
	for _, k := range anomalyKinds(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// anomalyKinds returns the kinds with a non-zero count, in the checker's
// order, then unknown kinds sorted.
func anomalyKinds(m map[string]int64) []string {
	var out, other []string
	for _, k := range checker.AnomalyNames {
		if m[k] != 0 {
			out = append(out, k)
		}
	}
	for k, n := range m {
		if n != 0 && !slices.Contains(checker.AnomalyNames, k) {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	return append(out, other...)
}

// readJSON decodes the JSON file name of fsys into v.
func readJSON(fsys fs.FS, name string, v any) error {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ReadOutcome reads outcome.json from a run directory.
func ReadOutcome(run fs.FS) (*Outcome, error) {
	var o Outcome
	if err := readJSON(run, OutcomeFile, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// ReadVerdict reads verdict.json from a run directory.
func ReadVerdict(run fs.FS) (*checker.Verdict, error) {
	var v checker.Verdict
	if err := readJSON(run, VerdictFile, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadTable reads table.json from a matrix directory.
func ReadTable(matrix fs.FS) (*Table, error) {
	var t Table
	if err := readJSON(matrix, TableFile, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// IsRun reports whether dir of fsys looks like a run directory.
func IsRun(fsys fs.FS, dir string) bool {
	for _, f := range []string{OutcomeFile, HistoryFile, VerdictFile} {
		if st, err := fs.Stat(fsys, path.Join(dir, f)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// IsMatrix reports whether dir of fsys looks like a matrix directory.
func IsMatrix(fsys fs.FS, dir string) bool {
	st, err := fs.Stat(fsys, path.Join(dir, TableFile))
	return err == nil && st.Mode().IsRegular()
}
