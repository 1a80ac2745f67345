package lab

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// CellOverhead is what a run costs beyond its duration, as the shards are
// balanced: cluster up, topic, drain, check, teardown and report. The
// library's runs took a median of 4.2 s more than their durations on a
// loaded 2-core machine (docs/PERFORMANCE.md, "Run overhead").
const CellOverhead = 5 * time.Second

// ErrShard is a shard that cannot be run or merged: a bad I/N, shards of
// different matrices or seeds, shards given twice or missing.
var ErrShard = errors.New("shard")

// Shard is the I-th of N parts of a matrix, 1 <= I <= N. The zero Shard is
// the whole matrix.
type Shard struct{ I, N int }

// ParseShard reads "I/N".
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, ierr := strconv.Atoi(strings.TrimSpace(a))
	n, nerr := strconv.Atoi(strings.TrimSpace(b))
	switch {
	case !ok || ierr != nil || nerr != nil:
		return Shard{}, fmt.Errorf("%w %q: want I/N, shard I of N (1/4 ... 4/4)", ErrShard, s)
	case n < 1:
		return Shard{}, fmt.Errorf("%w %q: N must be at least 1", ErrShard, s)
	case i < 1 || i > n:
		return Shard{}, fmt.Errorf("%w %q: I must be between 1 and N (%d)", ErrShard, s, n)
	}
	return Shard{i, n}, nil
}

// IsZero reports the whole matrix.
func (s Shard) IsZero() bool { return s.N == 0 }

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.I, s.N) }

// AssignShards splits cells of the given expected durations onto n shards
// and returns each cell's shard, 0-based: the longest cell first, each onto
// the shard with the least work so far (equal durations in cell order,
// equal loads to the lowest shard), so every cell is in exactly one shard,
// the same cells always give the same shards, and the most and the least
// loaded shard differ by at most the longest cell.
func AssignShards(durations []time.Duration, n int) []int {
	order := make([]int, len(durations))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(durations[b], durations[a]) })
	load := make([]time.Duration, n)
	out := make([]int, len(durations))
	for _, c := range order {
		s := 0
		for j := 1; j < n; j++ {
			if load[j] < load[s] {
				s = j
			}
		}
		out[c] = s
		load[s] += durations[c]
	}
	return out
}

// MatrixPlan is a matrix as it runs: every cell's id, axes, expected duration
// and expectation, and a hash of every cell's resolved scenario. A matrix
// directory keeps it (matrix.yaml), so that shards can be checked to be
// of one matrix and merged without the matrix file or the library that
// resolved it.
type MatrixPlan struct {
	Name string `yaml:"name"`
	// Hash is the SHA-256 of every cell's resolved scenario, overrides
	// (--seed, --duration, --backend) applied: two runs with the same
	// hash ran the same cells.
	Hash string `yaml:"hash"`
	// Seeds are the seeds the cells run with (after --seed).
	Seeds []int64    `yaml:"seeds,omitempty"`
	Cells []PlanCell `yaml:"cells"`
}

// PlanCell is one cell of a MatrixPlan.
type PlanCell struct {
	Cell     string        `yaml:"cell"` // preset/schedule[/seed-N], as in table.json
	Preset   string        `yaml:"preset"`
	Schedule string        `yaml:"schedule"`
	Seed     int64         `yaml:"seed,omitempty"`
	Duration time.Duration `yaml:"duration"`
	Expect   Expect        `yaml:"expect,omitempty"`
}

// Expected is what the cell is expected to take: its duration and
// CellOverhead.
func (c PlanCell) Expected() time.Duration { return c.Duration + CellOverhead }

// Plan resolves the matrix as o runs it: each cell's scenario with the
// overrides applied, hashed in cell order.
func (m *Matrix) Plan(o MatrixOptions) (*MatrixPlan, error) {
	p := &MatrixPlan{Name: m.Name}
	h := sha256.New()
	seen := map[int64]bool{}
	for _, c := range m.Cells {
		sc := o.cellScenario(c)
		b, err := yaml.Marshal(sc)
		if err != nil {
			return nil, fmt.Errorf("%w: cell %s: %v", ErrInternal, c.ID(), err)
		}
		fmt.Fprintf(h, "%s\n%d\n", c.ID(), len(b))
		h.Write(b)
		p.Cells = append(p.Cells, PlanCell{Cell: strings.TrimPrefix(c.ID(), m.Name+"/"), Preset: c.Preset,
			Schedule: c.Schedule, Seed: c.Seed, Duration: sc.Duration, Expect: sc.Expect})
		if !seen[sc.Seed] {
			seen[sc.Seed] = true
			p.Seeds = append(p.Seeds, sc.Seed)
		}
	}
	p.Hash = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return p, nil
}

// cellScenario is the cell's scenario with o's overrides.
func (o MatrixOptions) cellScenario(c Cell) Scenario {
	sc := c.Scenario
	if o.Duration > 0 {
		sc.Duration = o.Duration
	}
	if o.Backend != "" {
		sc.Cluster.Backend = o.Backend
	}
	return sc
}

// Shards returns each cell's shard of n, 0-based (AssignShards on the
// cells' expected durations).
func (p *MatrixPlan) Shards(n int) []int {
	d := make([]time.Duration, len(p.Cells))
	for i, c := range p.Cells {
		d[i] = c.Expected()
	}
	return AssignShards(d, n)
}

// InShard reports which of the plan's cells shard s runs: all of them for
// the zero Shard.
func (p *MatrixPlan) InShard(s Shard) []bool {
	in := make([]bool, len(p.Cells))
	if s.IsZero() {
		for i := range in {
			in[i] = true
		}
		return in
	}
	for i, sh := range p.Shards(s.N) {
		in[i] = sh == s.I-1
	}
	return in
}

// matrix is the plan as a Matrix whose cells carry only what judging the
// claims across seeds reads (Matrix.groups).
func (p *MatrixPlan) matrix() *Matrix {
	m := &Matrix{Name: p.Name}
	for _, c := range p.Cells {
		m.Cells = append(m.Cells, Cell{Preset: c.Preset, Schedule: c.Schedule, Seed: c.Seed,
			Scenario: Scenario{Name: p.Name + "/" + c.Cell, Seed: c.Seed, Duration: c.Duration, Expect: c.Expect}})
	}
	return m
}

// shardName is the shard in a file name: shard-1-of-4.
func shardName(s Shard) string { return fmt.Sprintf("shard-%d-of-%d", s.I, s.N) }
