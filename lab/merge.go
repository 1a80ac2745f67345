package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/results"
)

// MergeOptions configure MergeMatrix.
type MergeOptions struct {
	// Out is the merged matrix directory, which must not exist or be
	// empty. Empty: a new directory under ResultsDir/matrices/NAME/,
	// which becomes that matrix's latest.
	Out        string
	ResultsDir string
	// Partial merges without the shards not given: their cells are
	// skipped, and the table names the missing shards.
	Partial bool
	// JUnit, if set, is a second path for junit.xml.
	JUnit string
}

// shardRun is one shard's matrix directory, read.
type shardRun struct {
	dir   string
	table *results.Table
	plan  *MatrixPlan
	shard Shard
}

// MergeMatrix joins the matrix directories of a matrix's shards (isrlab
// matrix NAME --shard I/N) into one matrix directory: every cell in the
// matrix's order with its run directory and log copied in (shrink
// results included), the claims across seeds judged on all their seeds,
// and table.json, table.txt, junit.xml, report.html and matrix.yaml
// written as a whole run of the matrix writes them. It refuses, with
// ErrShard, directories that are not shards, shards of different
// matrices, definitions or seeds, a shard given twice, and missing shards
// unless o.Partial.
func MergeMatrix(dirs []string, o MergeOptions) (*MatrixResult, error) {
	if len(dirs) == 0 {
		return nil, refuse("no shard directories to merge")
	}
	var shards []*shardRun
	for _, d := range dirs {
		s, err := readShard(d)
		if err != nil {
			return nil, err
		}
		shards = append(shards, s)
	}
	first := shards[0]
	given := map[int]*shardRun{}
	for _, s := range shards {
		if err := sameMatrix(first, s); err != nil {
			return nil, err
		}
		if prev, ok := given[s.shard.I]; ok {
			return nil, refuse("shard %s given twice: %s and %s", s.shard, prev.dir, s.dir)
		}
		given[s.shard.I] = s
	}
	n := first.shard.N
	plan := first.plan
	var have, missing []string
	for i := 1; i <= n; i++ {
		if _, ok := given[i]; ok {
			have = append(have, Shard{i, n}.String())
		} else {
			missing = append(missing, Shard{i, n}.String())
		}
	}
	if len(missing) > 0 && !o.Partial {
		return nil, refuse("matrix %s is missing shard(s) %s (given: %s): give every shard's directory, or --partial to merge without them",
			plan.Name, strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	assign := plan.Shards(n)
	for _, s := range shards {
		if err := s.check(assign); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	out := o.Out
	latest := out == ""
	if latest {
		out = results.MatrixDir(o.ResultsDir, plan.Name, start, compose.NewRunID())
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return nil, refuse("--out %s is not empty: merge into a new directory", out)
	}
	if err := results.MakeDir(out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInternal, err)
	}

	res := &MatrixResult{Matrix: plan.Name, Dir: out, Hash: plan.Hash, Seeds: plan.Seeds, Shards: have, MissingShards: missing}
	var started time.Time
	for _, s := range shards {
		if t, err := time.Parse(time.RFC3339, s.table.Started); err == nil && (started.IsZero() || t.Before(started)) {
			started, res.Started = t, s.table.Started
		}
		// The shards ran at once: the matrix took as long as the longest.
		res.Seconds = max(res.Seconds, s.table.Seconds)
	}
	var errs []error
	for i, pc := range plan.Cells {
		s := given[assign[i]+1]
		if s == nil {
			res.Cells = append(res.Cells, CellResult{Cell: pc.Cell, Preset: pc.Preset, Schedule: pc.Schedule, Seed: pc.Seed,
				State: "skipped", Expect: pc.Expect.PerRun().String(),
				Reasons: []string{fmt.Sprintf("not run: shard %s is missing from the merge", Shard{assign[i] + 1, n})}})
			continue
		}
		c := s.cell(pc.Cell)
		if rel := s.table.RunRel(c); rel != "" {
			to := filepath.Join(out, filepath.FromSlash(rel))
			errs = append(errs, results.CopyTree(filepath.Join(s.dir, filepath.FromSlash(rel)), to))
			c.Dir = to
		}
		log := filepath.FromSlash(results.CellLogName(plan.Name, c.Cell))
		if _, err := os.Stat(filepath.Join(s.dir, log)); err == nil {
			errs = append(errs, results.CopyTree(filepath.Join(s.dir, log), filepath.Join(out, log)))
		}
		res.Cells = append(res.Cells, c)
	}
	all := make([]*CellResult, len(res.Cells))
	for i := range res.Cells {
		all[i] = &res.Cells[i]
	}
	res.Groups = plan.matrix().groups(all)
	var txt bytes.Buffer
	writeTable(&txt, res)
	errs = append(errs, results.WriteYAML(filepath.Join(out, results.PlanFile), plan),
		results.WriteMatrix(out, res, txt.Bytes(), o.JUnit))
	if latest {
		errs = append(errs, results.LinkLatest(filepath.Dir(out), out))
	}
	return res, internalErr(errors.Join(errs...))
}

// readShard reads a shard's matrix directory (or its table.json).
func readShard(arg string) (*shardRun, error) {
	dir := arg
	if filepath.Base(arg) == results.TableFile {
		dir = filepath.Dir(arg)
	}
	fsys := os.DirFS(dir)
	if !results.IsMatrix(fsys, ".") {
		return nil, refuse("%s is not a matrix directory (no %s)", arg, results.TableFile)
	}
	t, err := results.ReadTable(fsys)
	if err != nil {
		return nil, refuse("%s: %v", dir, err)
	}
	if t.Shard == "" {
		what := "a whole matrix"
		if len(t.Shards) > 0 {
			what = "a merge of shards"
		}
		return nil, refuse("%s is %s, not a shard (isrlab matrix %s --shard I/N writes one)", dir, what, t.Matrix)
	}
	sh, err := ParseShard(t.Shard)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, results.PlanFile))
	if err != nil {
		return nil, refuse("%s: the matrix's plan: %v", dir, err)
	}
	var p MatrixPlan
	if err := yaml.Unmarshal(b, &p); err != nil {
		return nil, refuse("%s: %v", filepath.Join(dir, results.PlanFile), err)
	}
	if p.Hash != t.Hash || p.Name != t.Matrix {
		return nil, refuse("%s: %s (matrix %s, %s) and %s (matrix %s, %s) disagree", dir,
			results.PlanFile, p.Name, p.Hash, results.TableFile, t.Matrix, t.Hash)
	}
	return &shardRun{dir: dir, table: t, plan: &p, shard: sh}, nil
}

// sameMatrix refuses b unless it is a shard of a's matrix, as a ran it.
func sameMatrix(a, b *shardRun) error {
	switch {
	case a.plan.Name != b.plan.Name:
		return refuse("%s is a shard of matrix %s, %s of matrix %s: shards of different matrices",
			a.dir, a.plan.Name, b.dir, b.plan.Name)
	case !slices.Equal(a.plan.Seeds, b.plan.Seeds):
		return refuse("%s ran seeds %v, %s seeds %v: shards of one matrix run the same seeds",
			a.dir, a.plan.Seeds, b.dir, b.plan.Seeds)
	case a.plan.Hash != b.plan.Hash:
		return refuse("%s and %s ran different definitions of matrix %s (%s, %s): its base, presets, schedules, expectations or the overrides (--duration, --backend) differ",
			a.dir, b.dir, a.plan.Name, short(a.plan.Hash), short(b.plan.Hash))
	case a.shard.N != b.shard.N:
		return refuse("%s is shard %s, %s shard %s: shards of one split have the same N",
			a.dir, a.shard, b.dir, b.shard)
	}
	return nil
}

func short(hash string) string {
	if i := strings.IndexByte(hash, ':'); i >= 0 && len(hash) > i+13 {
		return hash[:i+13]
	}
	return hash
}

// check refuses a shard whose cells are not the ones the plan gives its
// shard (assign: each plan cell's shard, 0-based).
func (s *shardRun) check(assign []int) error {
	var want []string
	for i, pc := range s.plan.Cells {
		if assign[i] == s.shard.I-1 {
			want = append(want, pc.Cell)
		}
	}
	var got []string
	for _, c := range s.table.Cells {
		got = append(got, c.Cell)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return refuse("%s: its cells %v are not shard %s of matrix %s (%v)", s.dir, got, s.shard, s.plan.Name, want)
	}
	return nil
}

// cell is the shard's result for the cell named name (check made sure it
// has one).
func (s *shardRun) cell(name string) CellResult {
	for _, c := range s.table.Cells {
		if c.Cell == name {
			return c
		}
	}
	return CellResult{Cell: name, State: "skipped"}
}

// refusal is a merge refused: errors.Is(err, ErrShard) holds.
type refusal struct{ msg string }

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == ErrShard }

func refuse(format string, a ...any) error { return &refusal{fmt.Sprintf(format, a...)} }
