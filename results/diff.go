package results

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Diff is what changed from one matrix to the next, cell by cell (cells
// are matched by their id, preset/schedule[/seed-N]; a group of claims
// across seeds is the cell preset/schedule/across-seeds).
type Diff struct {
	Old, New string
	// NewFailures are cells failing now (not met, undecided, error) that
	// met their expectation before or did not exist: regressions.
	NewFailures []CellChange `json:"new_failures"`
	// Fixed are cells that failed before and meet their expectation now.
	Fixed []CellChange `json:"fixed"`
	// StillFailing failed before and still do.
	StillFailing []CellChange `json:"still_failing"`
	// NotRun are cells that were skipped (the matrix was stopped).
	NotRun  []CellChange `json:"not_run"`
	Added   []CellChange `json:"added"`
	Removed []CellChange `json:"removed"`
	// Anomalies are changed anomaly counts of cells in both.
	Anomalies []AnomalyChange `json:"anomalies"`
	// Availability are changes of availability or of the longest
	// unavailability larger than DiffOptions allow.
	Availability []AvailChange `json:"availability"`
}

// CellChange is one cell's status before and after.
type CellChange struct {
	Cell    string   `json:"cell"`
	Old     string   `json:"old,omitempty"`
	New     string   `json:"new,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}

// AnomalyChange is one anomaly count of one cell before and after.
type AnomalyChange struct {
	Cell string `json:"cell"`
	Kind string `json:"kind"`
	Old  int64  `json:"old"`
	New  int64  `json:"new"`
}

// AvailChange is one cell's availability and longest unavailability
// before and after.
type AvailChange struct {
	Cell       string  `json:"cell"`
	OldAvail   float64 `json:"old_availability"`
	NewAvail   float64 `json:"new_availability"`
	OldMaxUnav float64 `json:"old_max_unavailable_s"`
	NewMaxUnav float64 `json:"new_max_unavailable_s"`
}

// DiffOptions set what counts as an availability change.
type DiffOptions struct {
	// Availability is the smallest change of the ok fraction reported
	// (default 0.01).
	Availability float64
	// Unavailability is the smallest change of the longest window
	// reported, in seconds (default 1).
	Unavailability float64
}

// Regression reports whether a cell fails now that did not before.
func (d *Diff) Regression() bool { return len(d.NewFailures) > 0 }

// Compare diffs the tables old and new.
func Compare(old, new *Table, o DiffOptions) *Diff {
	if o.Availability <= 0 {
		o.Availability = 0.01
	}
	if o.Unavailability <= 0 {
		o.Unavailability = 1
	}
	d := &Diff{Old: describe(old), New: describe(new)}
	before := map[string]Cell{}
	for _, c := range old.compared() {
		before[c.Cell] = c
	}
	seen := map[string]bool{}
	for _, n := range new.compared() {
		seen[n.Cell] = true
		ns := n.Status()
		ch := CellChange{Cell: n.Cell, New: ns, Reasons: cellReasons(n)}
		p, ok := before[n.Cell]
		if !ok {
			if Failing(ns) {
				d.NewFailures = append(d.NewFailures, ch)
			} else {
				d.Added = append(d.Added, ch)
			}
			continue
		}
		ps := p.Status()
		ch.Old = ps
		switch {
		case ns == "skipped":
			d.NotRun = append(d.NotRun, ch)
		case Failing(ns) && Failing(ps):
			d.StillFailing = append(d.StillFailing, ch)
		case Failing(ns):
			d.NewFailures = append(d.NewFailures, ch)
		case Failing(ps):
			d.Fixed = append(d.Fixed, ch)
		}
		if n.State != "done" || p.State != "done" {
			continue
		}
		var kinds []string
		for k := range n.Anomalies {
			kinds = append(kinds, k)
		}
		for k := range p.Anomalies {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			if n.Anomalies[k] != p.Anomalies[k] {
				d.Anomalies = append(d.Anomalies, AnomalyChange{Cell: n.Cell, Kind: k, Old: p.Anomalies[k], New: n.Anomalies[k]})
			}
		}
		if math.Abs(n.Avail-p.Avail) >= o.Availability || math.Abs(n.MaxUnavS-p.MaxUnavS) >= o.Unavailability {
			d.Availability = append(d.Availability, AvailChange{Cell: n.Cell, OldAvail: p.Avail, NewAvail: n.Avail,
				OldMaxUnav: p.MaxUnavS, NewMaxUnav: n.MaxUnavS})
		}
	}
	for _, p := range old.compared() {
		if !seen[p.Cell] {
			d.Removed = append(d.Removed, CellChange{Cell: p.Cell, Old: p.Status()})
		}
	}
	return d
}

// compared is what Compare matches: the cells, then each group across
// seeds as a cell of its own (preset/schedule/across-seeds) with the
// group's outcome, so that a claim met last night and not tonight is a
// regression like a cell's.
func (t *Table) compared() []Cell {
	out := slices.Clone(t.Cells)
	for _, g := range t.Groups {
		c := Cell{Cell: g.ID(), Preset: g.Preset, Schedule: g.Schedule, State: "done", Outcome: g.Status(),
			Expect: g.Expect, Reasons: g.Reasons}
		out = append(out, c)
	}
	return out
}

func cellReasons(c Cell) []string {
	r := slices.Clone(c.Reasons)
	if c.Error != "" {
		r = append(r, firstLine(c.Error))
	}
	return r
}

func describe(t *Table) string {
	s := "matrix " + t.Matrix
	if strings.HasPrefix(t.Matrix, "run ") {
		s = t.Matrix
	}
	if t.Started != "" {
		s += " started " + t.Started
	}
	s += ", " + plural(int64(len(t.Cells)), "cell")
	// A shard, or a merge without some shards, is not the whole matrix:
	// its other cells would read as removed or not run.
	switch {
	case t.Shard != "":
		s += " (shard " + t.Shard + " only)"
	case len(t.MissingShards) > 0:
		s += " (without shards " + strings.Join(t.MissingShards, ", ") + ")"
	}
	return s
}

// WriteText prints the diff for people.
func (d *Diff) WriteText(w io.Writer) {
	fmt.Fprintf(w, "old: %s\nnew: %s\n", d.Old, d.New)
	list := func(title string, cs []CellChange) {
		if len(cs) == 0 {
			return
		}
		fmt.Fprintf(w, "%s (%d):\n", title, len(cs))
		for _, c := range cs {
			line := "  " + c.Cell + ": "
			switch {
			case c.Old == "":
				line += c.New
			case c.New == "":
				line += "was " + c.Old
			default:
				line += c.Old + " -> " + c.New
			}
			if len(c.Reasons) > 0 && c.New != Met {
				line += " (" + strings.Join(c.Reasons, "; ") + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	list("new failures", d.NewFailures)
	list("fixed", d.Fixed)
	list("still failing", d.StillFailing)
	list("not run", d.NotRun)
	list("added cells", d.Added)
	list("removed cells", d.Removed)
	if len(d.Anomalies) > 0 {
		fmt.Fprintf(w, "anomaly counts changed (%d):\n", len(d.Anomalies))
		for _, a := range d.Anomalies {
			fmt.Fprintf(w, "  %s: %s %d -> %d\n", a.Cell, a.Kind, a.Old, a.New)
		}
	}
	if len(d.Availability) > 0 {
		fmt.Fprintf(w, "availability changed (%d):\n", len(d.Availability))
		for _, a := range d.Availability {
			fmt.Fprintf(w, "  %s: availability %.3f -> %.3f, longest unavailability %.1fs -> %.1fs\n",
				a.Cell, a.OldAvail, a.NewAvail, a.OldMaxUnav, a.NewMaxUnav)
		}
	}
	if d.Regression() {
		fmt.Fprintf(w, "REGRESSION: %d cell(s) fail that did not\n", len(d.NewFailures))
	} else {
		fmt.Fprintln(w, "no regression")
	}
}

// ErrNotComparable is a path that is neither a matrix directory (with
// table.json), its table.json, a directory whose latest link leads to
// one, nor a run directory.
var ErrNotComparable = errors.New("not a matrix directory (no table.json) or a run directory (no outcome.json)")

// ReadComparable reads what Compare takes from a matrix directory, its
// table.json, a matrix name's directory (through its latest link), or a
// run directory (a table of one cell named by the scenario).
func ReadComparable(p string) (*Table, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		dir, base := filepath.Split(p)
		if base != TableFile {
			return nil, fmt.Errorf("%s: %w", p, ErrNotComparable)
		}
		p = dir
	}
	for _, dir := range []string{p, filepath.Join(p, LatestLink)} {
		fsys := os.DirFS(dir)
		switch {
		case IsMatrix(fsys, "."):
			t, err := ReadTable(fsys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", dir, err)
			}
			return t, nil
		case IsRun(fsys, "."):
			return runTable(fsys, dir)
		}
	}
	return nil, fmt.Errorf("%s: %w", p, ErrNotComparable)
}

// runTable makes a one-cell table of a run.
func runTable(fsys fs.FS, dir string) (*Table, error) {
	o, err := ReadOutcome(fsys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	c := Cell{Cell: o.Scenario, State: "done", Outcome: o.Outcome, Valid: o.Valid.String(),
		Anomalies: o.Anomalies, Expect: o.Expect, Reasons: o.Reasons, Dir: dir, Seconds: o.Seconds, Seed: o.Seed}
	if v, err := ReadVerdict(fsys); err == nil {
		c.Avail = v.Availability.Overall.Fraction
		c.MaxUnavS = v.Unavailability.MaxWindow
	}
	return &Table{Matrix: "run " + o.Scenario, Dir: dir, Started: o.Started, Seconds: o.Seconds, Cells: []Cell{c}}, nil
}
