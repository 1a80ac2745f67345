package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/workloads"
)

// Matrix is presets x fault schedules (x seeds): every combination is a
// cell, a scenario run once and judged against its expectation (the
// preset's own unless the matrix says otherwise).
//
//	name: quickstart
//	base: {cluster: ..., topic: ..., workload: ..., duration: 30s}
//	presets: [acks1, safe]
//	schedules:
//	  - name: leader-kill
//	    faults: [{kind: kill, nodes: [leader:isrlab/0], at: 8s, heal.after: 10s}]
//	  - name: zombie-leader
//	    from: zombie-leader/safe   # the faults of a library scenario
//	seeds: [1, 2, 3]
//	clients: [franz-go, sarama]          # optional: every cell once per client
//	expect:
//	  acks1/leader-isolated: {anomalies: {lost-write: ">0"}}
//	  acks1/leader-kill: {across-seeds: {lost-write: ">0 in >=1 of 3"}}
//
// With clients, every preset runs once per client and its cells are named
// PRESET@CLIENT (safe@sarama/leader-kill); an expectation keyed by the
// preset applies to every client, one keyed PRESET@CLIENT to that one.
//
// An expectation with across-seeds (the preset's or the matrix's) claims
// what is possible: besides its cells, each such preset/schedule is a
// group judged on the set of its seeds (Expect.JudgeSeeds), whose M must
// be the number of seeds.
type Matrix struct {
	Name        string               `yaml:"name"`
	Description string               `yaml:"description,omitempty"`
	Base        yaml.Node            `yaml:"base,omitempty"`
	Presets     []Names              `yaml:"presets"`
	Schedules   []MatrixSchedule     `yaml:"schedules"`
	Seeds       []int64              `yaml:"seeds,omitempty"`
	Clients     []MatrixClient       `yaml:"clients,omitempty"`
	Expect      map[string]yaml.Node `yaml:"expect,omitempty"`

	file  string
	Cells []Cell `yaml:"-"`
}

// MatrixSchedule is one fault-schedule axis value: fixed faults, a
// generated schedule, or those of a library scenario (From).
type MatrixSchedule struct {
	Name     string      `yaml:"name"`
	From     string      `yaml:"from,omitempty"`
	Faults   []yaml.Node `yaml:"faults,omitempty"`
	Schedule yaml.Node   `yaml:"schedule,omitempty"`
	Duration string      `yaml:"duration,omitempty"`
}

// MatrixClient is one value of the clients axis: a client's name
// (franz-go, sarama), or a named client with its settings, such as an
// exec driver: {name: mine, client: exec, exec: [./driver], client.config: {...}}.
// Presets, when given, are the matrix's presets this client runs (as
// their cells name them: safe, safe+retries-no-idempotence), so that a
// client without an idempotent producer skips the presets that need one.
type MatrixClient struct {
	Name                 string   `yaml:"name"`
	Presets              []string `yaml:"presets,omitempty"`
	workloads.ClientSpec `yaml:",inline"`
}

// UnmarshalYAML takes a name or a mapping.
func (c *MatrixClient) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind == yaml.ScalarNode {
		c.Name, c.Client = v.Value, v.Value
		return nil
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if k := v.Content[i].Value; !slices.Contains([]string{"name", "client", "client.config", "exec", "presets"}, k) {
			return fmt.Errorf("line %d: clients: field %s not found (name, client, client.config, exec, presets)", v.Content[i].Line, k)
		}
	}
	type plain MatrixClient
	if err := v.Decode((*plain)(c)); err != nil {
		return err
	}
	if c.Name == "" {
		c.Name = c.Client
	}
	return nil
}

// Cell is one combination.
type Cell struct {
	Preset   string
	Schedule string
	Seed     int64
	Scenario Scenario
}

// ID names the cell: preset/schedule[/seed-N].
func (c Cell) ID() string { return c.Scenario.Name }

// Only keeps the cells whose id (MATRIX/PRESET/SCHEDULE, with a seed
// suffix when the matrix has seeds) matches the shell pattern (path.Match:
// * stops at a /), e.g. "clients/*/lost-produce-responses". A bad pattern
// or one that matches no cell is an error naming the cells there are.
func (m *Matrix) Only(pattern string) error {
	var keep []Cell
	for _, c := range m.Cells {
		ok, err := path.Match(pattern, c.ID())
		if err != nil {
			return fmt.Errorf("--only %q: %v", pattern, err)
		}
		if ok {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		var ids []string
		for _, c := range m.Cells {
			ids = append(ids, c.ID())
		}
		if len(ids) > 4 {
			ids = append(ids[:3], fmt.Sprintf("... (%d in all)", len(m.Cells)))
		}
		return fmt.Errorf("--only %q matches no cell of matrix %s (cells: %s)", pattern, m.Name, strings.Join(ids, ", "))
	}
	m.Cells = keep
	return nil
}

// LoadMatrix reads a matrix file (or a library matrix by name) and builds
// its cells, each validated as a scenario.
func LoadMatrix(arg string) (*Matrix, error) {
	data, file, err := readMatrix(arg)
	if err != nil {
		return nil, err
	}
	m := &Matrix{file: file}
	if err := decodeStrict(data, m); err != nil {
		return nil, yamlError(file, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrScenario, file, fmt.Sprintf(format, a...))
	}
	if m.Name == "" {
		m.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	if !compose.ValidName(m.Name) {
		return nil, bad("name %q: use 1-24 of a-z 0-9 -", m.Name)
	}
	if len(m.Presets) == 0 || len(m.Schedules) == 0 {
		return nil, bad("a matrix needs presets and schedules")
	}
	seeds := m.Seeds
	if len(seeds) == 0 {
		seeds = []int64{0}
	}
	names := map[string]bool{}
	for _, sch := range m.Schedules {
		if sch.Name == "" || strings.ContainsAny(sch.Name, "/ ") || names[sch.Name] {
			return nil, bad("schedule %q: each schedule needs a distinct name without / or spaces", sch.Name)
		}
		names[sch.Name] = true
	}
	clients := m.Clients
	if len(clients) == 0 {
		clients = []MatrixClient{{}} // no clients axis: the scenarios' own client
	}
	clientNames := map[string]bool{}
	for _, c := range m.Clients {
		if c.Name == "" || strings.ContainsAny(c.Name, "/@+ ") || clientNames[c.Name] {
			return nil, bad("clients: %q: each client needs a distinct name without /, @, + or spaces", c.Name)
		}
		clientNames[c.Name] = true
	}
	presetIDs := map[string]bool{}
	var ids []string
	for _, p := range m.Presets {
		ids = append(ids, strings.Join(p, "+"))
	}
	for _, c := range m.Clients {
		for _, p := range c.Presets {
			if !slices.Contains(ids, p) {
				return nil, bad("clients: %s: presets: %q is none of the matrix's presets (%s)", c.Name, p, strings.Join(ids, ", "))
			}
		}
	}
	for _, id := range ids {
		presetIDs[id] = true
		for _, c := range m.Clients {
			if len(c.Presets) == 0 || slices.Contains(c.Presets, id) {
				presetIDs[id+"@"+c.Name] = true
			}
		}
	}
	for k := range m.Expect {
		p, s, _ := strings.Cut(k, "/")
		if !presetIDs[p] || (s != "" && !names[s]) {
			return nil, bad("expect: %q names no preset (or preset/schedule, preset@client) of the matrix", k)
		}
	}
	for _, cl := range clients {
		for _, p := range m.Presets {
			if len(cl.Presets) > 0 && !slices.Contains(cl.Presets, strings.Join(p, "+")) {
				continue
			}
			if err := m.addCells(file, cl, p, seeds, bad); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// addCells adds preset p's cells (of client cl, when the matrix has a
// clients axis): one per schedule and seed.
func (m *Matrix) addCells(file string, cl MatrixClient, p Names, seeds []int64, bad func(string, ...any) error) error {
	pid := strings.Join(p, "+")
	if cl.Name != "" {
		pid += "@" + cl.Name
	}
	for _, sch := range m.Schedules {
		for _, seed := range seeds {
			name := m.Name + "/" + pid + "/" + sch.Name
			if len(seeds) > 1 {
				name += "/seed-" + strconv.FormatInt(seed, 10)
			}
			doc, err := m.cellDoc(p, pid, cl, sch, seed, name)
			if err != nil {
				return bad("cell %s: %v", name, err)
			}
			sc, err := Parse(file+" cell "+pid+"/"+sch.Name, name, doc)
			if err != nil {
				return err
			}
			if err := m.checkSeeds(sc.Expect, pid, sch.Name, len(seeds)); err != nil {
				return bad("cell %s: %v", name, err)
			}
			m.Cells = append(m.Cells, Cell{Preset: pid, Schedule: sch.Name, Seed: seed, Scenario: sc})
		}
	}
	return nil
}

// checkSeeds refuses a claim across seeds about another number of seeds
// than the matrix runs (n): its M says what the claim is about.
func (m *Matrix) checkSeeds(e Expect, pid, sch string, n int) error {
	for _, k := range slices.Sorted(maps.Keys(e.AcrossSeeds)) {
		c, err := ParseSeedClaim(k, e.AcrossSeeds[k])
		if err != nil || c.Of == n {
			continue // Parse reported any error already
		}
		from := "preset " + pid + "'s expect"
		if _, ok := m.Expect[pid+"/"+sch]; ok {
			from = "expect " + pid + "/" + sch
		} else if _, ok := m.Expect[pid]; ok {
			from = "expect " + pid
		}
		return fmt.Errorf("%s: across-seeds.%s %q is about %d seeds, and the matrix runs %d (seeds:)", from, k, e.AcrossSeeds[k], c.Of, n)
	}
	return nil
}

func readMatrix(arg string) ([]byte, string, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		data, err := os.ReadFile(arg)
		return data, arg, err
	}
	name := strings.TrimSuffix(strings.TrimPrefix(arg, "scenarios/"), ".yaml")
	if !strings.HasPrefix(name, "matrices/") {
		name = "matrices/" + name
	}
	data, err := readLibrary(name + ".yaml")
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: no such file and no library matrix %s", ErrScenario, arg, name)
	}
	return data, "scenarios/" + name + ".yaml", nil
}

// cellDoc builds the scenario document of one cell: the base keys, the
// preset, the schedule's faults and the expectation.
func (m *Matrix) cellDoc(preset Names, pid string, cl MatrixClient, sch MatrixSchedule, seed int64, name string) ([]byte, error) {
	doc := map[string]any{}
	if m.Base.Kind != 0 {
		if err := m.Base.Decode(&doc); err != nil {
			return nil, fmt.Errorf("base: %v", err)
		}
		for _, k := range []string{"name", "preset", "faults", "schedule", "expect", "seed"} {
			if _, ok := doc[k]; ok {
				return nil, fmt.Errorf("base: %s is set by the matrix, not the base", k)
			}
		}
	}
	doc["name"] = name
	doc["preset"] = []string(preset)
	if seed != 0 {
		doc["seed"] = seed
	}
	if sch.From != "" {
		src, err := Lookup(sch.From)
		if err != nil {
			return nil, err
		}
		if len(src.Faults) > 0 {
			doc["faults"] = src.Faults
		}
		if src.Schedule != nil {
			doc["schedule"] = src.Schedule
		}
		if _, ok := doc["duration"]; !ok {
			doc["duration"] = src.Duration.String()
		}
	}
	if len(sch.Faults) > 0 {
		doc["faults"] = sch.Faults
	}
	if sch.Schedule.Kind != 0 {
		doc["schedule"] = &sch.Schedule
	}
	if sch.Duration != "" {
		doc["duration"] = sch.Duration
	}
	if cl.Name != "" {
		w, _ := doc["workload"].(map[string]any)
		if w == nil {
			w = map[string]any{}
		}
		w["client"] = cl.ClientSpec.Name()
		if len(cl.Config) > 0 {
			w["client.config"] = cl.Config
		}
		if len(cl.Exec) > 0 {
			w["exec"] = cl.Exec
		}
		doc["workload"] = w
	}
	// The most specific expectation: preset@client/schedule,
	// preset@client, preset/schedule, preset.
	keys := []string{pid + "/" + sch.Name, pid}
	if base, _, ok := strings.Cut(pid, "@"); ok {
		keys = append(keys, base+"/"+sch.Name, base)
	}
	for _, k := range keys {
		if e, ok := m.Expect[k]; ok {
			doc["expect"] = &e
			break
		}
	}
	return yaml.Marshal(doc)
}

// CellResult is one cell's outcome, a row of table.json.
type CellResult = results.Cell

// MatrixResult is the whole table (table.json); its Code is the matrix's
// exit status.
type MatrixResult = results.Table

// MatrixOptions configure a matrix run.
type MatrixOptions struct {
	Options
	// Parallel is how many cells run at once (default 1).
	Parallel int
	// JUnit, if set, is a second path for junit.xml.
	JUnit string
	// Duration, Seed and Backend override every cell's when set.
	Duration time.Duration
	Backend  string
	// Shard, when set, runs only that shard's cells (MatrixPlan.InShard): the
	// matrix directory records the shard, and isrlab matrix merge joins
	// the shards' directories into one.
	Shard Shard

	// run runs a cell (Run unless a test fakes the runs).
	run func(context.Context, Scenario, Options) (Result, error)
}

// RunMatrix runs every cell (or those of o.Shard), prints the table as
// cells finish (redrawn in place when Live) and writes the matrix
// directory: table.json, table.txt, junit.xml, report.html, matrix.yaml
// (the MatrixPlan) and each cell's run directory under runs/.
func RunMatrix(ctx context.Context, m *Matrix, o MatrixOptions) (*MatrixResult, error) {
	o.Options = o.Options.withDefaults()
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.run == nil {
		o.run = Run
	}
	plan, err := m.Plan(o)
	if err != nil {
		return nil, err
	}
	in := plan.InShard(o.Shard)
	start := time.Now()
	id := compose.NewRunID()
	if !o.Shard.IsZero() {
		id += "-" + shardName(o.Shard)
	}
	dir, err := filepath.Abs(results.MatrixDir(o.ResultsDir, m.Name, start, id))
	if err != nil {
		return nil, err
	}
	if err := results.MakeDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInternal, err)
	}
	res := &MatrixResult{Matrix: m.Name, Dir: dir, Started: start.UTC().Format(time.RFC3339), Hash: plan.Hash, Seeds: plan.Seeds}
	if !o.Shard.IsZero() {
		res.Shard = o.Shard.String()
	}
	var cells []Cell // this run's cells, in the matrix's order
	for i, c := range m.Cells {
		if !in[i] {
			continue
		}
		cells = append(cells, c)
		res.Cells = append(res.Cells, CellResult{Cell: strings.TrimPrefix(c.ID(), m.Name+"/"), Preset: c.Preset,
			Schedule: c.Schedule, Seed: c.Seed, State: "pending", Expect: c.Scenario.Expect.PerRun().String()})
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &stopWriter{w: o.Out, stop: func(err error) { cancel(fmt.Errorf("output closed: %w", err)) }}
	axes := fmt.Sprintf("%d presets x %d schedules x %d seeds", len(m.Presets), len(m.Schedules), max(1, len(m.Seeds)))
	if len(m.Clients) > 0 {
		axes = fmt.Sprintf("%d clients x %s", len(m.Clients), axes)
		var fewer []string
		for _, c := range m.Clients {
			if len(c.Presets) > 0 {
				fewer = append(fewer, fmt.Sprintf("%s %d", c.Name, len(c.Presets)))
			}
		}
		if len(fewer) > 0 {
			axes += "; presets per client: " + strings.Join(fewer, ", ")
		}
	}
	if o.Shard.IsZero() {
		fmt.Fprintf(out, "isrlab matrix %s: %d cells (%s), %d at a time\n  results: %s\n", m.Name, len(m.Cells), axes, o.Parallel, dir)
	} else {
		fmt.Fprintf(out, "isrlab matrix %s, shard %s: %d of %d cells (%s), %d at a time\n  results: %s\n",
			m.Name, o.Shard, len(cells), len(m.Cells), axes, o.Parallel, dir)
	}
	var mu sync.Mutex
	tab := &table{out: out, live: o.Live, res: res}
	tab.draw()
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, c := range cells {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sc := o.cellScenario(c)
			mu.Lock()
			res.Cells[i].State = "running"
			tab.draw()
			mu.Unlock()
			cr := runCell(ctx, sc, o, dir)
			mu.Lock()
			cr.Cell, cr.Preset, cr.Schedule, cr.Seed = res.Cells[i].Cell, c.Preset, c.Schedule, c.Seed
			res.Cells[i] = cr
			tab.draw()
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range res.Cells {
		if res.Cells[i].State == "pending" {
			res.Cells[i].State = "skipped"
		}
	}
	res.Groups = m.groups(spread(res.Cells, in))
	res.Seconds = time.Since(start).Seconds()
	tab.final()
	var txt bytes.Buffer
	writeTable(&txt, res)
	// matrix.yaml, table.json, table.txt, junit.xml (and o.JUnit),
	// report.html; latest leads to the newest whole matrix, a shard has
	// a link of its own.
	link := results.LatestLink
	if !o.Shard.IsZero() {
		link += "-" + shardName(o.Shard)
	}
	werr := errors.Join(internalErr(results.WriteYAML(filepath.Join(dir, results.PlanFile), plan)),
		internalErr(results.WriteMatrix(dir, res, txt.Bytes(), o.JUnit)),
		internalErr(results.LinkAs(filepath.Dir(dir), link, dir)))
	fmt.Fprintf(out, "  results: %s (report.html, table.txt, table.json, junit.xml)\n", dir)
	return res, werr
}

// runCell runs one cell with its output in the cell's log. The cell is
// judged on its expectation's per-run part; claims across seeds are its
// group's (Matrix.groups).
func runCell(ctx context.Context, sc Scenario, mo MatrixOptions, dir string) CellResult {
	cr := CellResult{State: "done", Expect: sc.Expect.PerRun().String()}
	lf, err := results.CreateCellLog(dir, sc.Name)
	if err != nil {
		cr.State, cr.Error = "error", err.Error()
		return cr
	}
	defer lf.Close()
	o := mo.Options
	o.Out, o.Live, o.RunID = lf, false, ""
	o.ResultsDir = filepath.Join(dir, "runs")
	start := time.Now()
	r, err := mo.run(ctx, sc, o)
	cr.Seconds = time.Since(start).Seconds()
	cr.Dir = r.Dir
	if err != nil {
		cr.State, cr.Error = "error", err.Error()
		fmt.Fprintf(lf, "error: %v\n", err)
		return cr
	}
	if r.Verdict != nil {
		cr.Valid = r.Verdict.Valid.String()
		cr.Anomalies = r.Verdict.Anomalies
		cr.Avail = r.Verdict.Availability.Overall.Fraction
		cr.MaxUnavS = maxUnavailable(r.Verdict).Seconds()
	}
	cr.Outcome = r.Judgement.Outcome.String()
	cr.Reasons = r.Judgement.Reasons
	return cr
}

// spread places a shard's cells (those of m.Cells that in marks, in
// order) at their indices among all the matrix's cells; the others are
// nil.
func spread(cells []CellResult, in []bool) []*CellResult {
	out := make([]*CellResult, len(in))
	k := 0
	for i := range in {
		if in[i] && k < len(cells) {
			out[i] = &cells[k]
			k++
		}
	}
	return out
}

// groups judges, per preset x schedule whose expectation claims anything
// across seeds, those claims on the cells of its seeds (cells parallels
// m.Cells). A group with a cell that is nil (in another shard) is left to
// the merge of the shards.
func (m *Matrix) groups(cells []*CellResult) []results.Group {
	var out []results.Group
	index := map[string]int{}
	var runs [][]SeedOutcome
	var members [][]int
	partial := map[string]bool{}
	for i, c := range m.Cells {
		if i < len(cells) && cells[i] == nil {
			partial[c.Preset+"/"+c.Schedule] = true
		}
	}
	for i, c := range m.Cells {
		e := c.Scenario.Expect
		if len(e.AcrossSeeds) == 0 || i >= len(cells) || partial[c.Preset+"/"+c.Schedule] {
			continue
		}
		key := c.Preset + "/" + c.Schedule
		g, ok := index[key]
		if !ok {
			g = len(out)
			index[key] = g
			out = append(out, results.Group{Group: key, Preset: c.Preset, Schedule: c.Schedule})
			runs, members = append(runs, nil), append(members, nil)
		}
		runs[g] = append(runs[g], seedOutcome(*cells[i]))
		members[g] = append(members[g], i)
	}
	for g := range out {
		e := m.Cells[members[g][0]].Scenario.Expect
		j, facts := e.judgeSeeds(runs[g])
		out[g].Expect, out[g].Outcome, out[g].Reasons = j.Expect, j.Outcome.String(), j.Reasons
		for k, i := range members[g] {
			c := *cells[i]
			out[g].Seeds = append(out[g].Seeds, results.GroupSeed{Seed: c.Seed, Cell: c.Cell, Status: c.Status(), Facts: facts[k]})
		}
	}
	return out
}

// seedOutcome reads a cell as a claim across seeds does: a cell that
// could not run or did not is missing, one without an outcome undecided.
func seedOutcome(c CellResult) SeedOutcome {
	r := SeedOutcome{Seed: c.Seed, Outcome: Undecided, Anomalies: c.Anomalies}
	switch st := c.Status(); st {
	case "error", "skipped":
		r.Missing = st
		return r
	}
	if err := r.Outcome.UnmarshalText([]byte(c.Outcome)); err != nil {
		r.Outcome = Undecided
	}
	switch c.Valid {
	case "true":
		r.Valid = checker.Valid
	case "false":
		r.Valid = checker.Invalid
	}
	return r
}

// JUnit encodes a matrix result as JUnit XML (results.MatrixJUnit).
func JUnit(r *MatrixResult) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var t results.Table
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	return results.MatrixJUnit(&t)
}

// table prints the matrix: redrawn in place when live, else one line per
// finished cell.
type table struct {
	out     io.Writer
	live    bool
	res     *MatrixResult
	lines   int
	printed map[int]bool
}

func (t *table) draw() {
	if t.live {
		var b bytes.Buffer
		writeTable(&b, t.res)
		if t.lines > 0 {
			fmt.Fprintf(t.out, "\033[%dA\033[J", t.lines)
		}
		t.out.Write(b.Bytes())
		t.lines = bytes.Count(b.Bytes(), []byte("\n"))
		return
	}
	if t.printed == nil {
		t.printed = map[int]bool{}
	}
	for i, c := range t.res.Cells {
		if (c.State == "done" || c.State == "error") && !t.printed[i] {
			t.printed[i] = true
			fmt.Fprintf(t.out, "  [%d/%d] %s\n", len(t.printed), len(t.res.Cells), cellLine(c))
		}
	}
}

func (t *table) final() {
	if t.live {
		t.draw()
		return
	}
	fmt.Fprintln(t.out)
	writeTable(t.out, t.res)
}

func cellLine(c CellResult) string {
	s := fmt.Sprintf("%s: %s", c.Cell, strings.ToUpper(orDefault(c.Outcome, c.State)))
	if c.Error != "" {
		s += " (" + firstLine(c.Error) + ")"
	} else if len(c.Reasons) > 0 {
		s += " (" + strings.Join(c.Reasons, "; ") + ")"
	}
	return s
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// writeTable writes the text table: one row per cell, the anomaly counts
// seen in any cell as columns.
func writeTable(w io.Writer, r *MatrixResult) {
	var kinds []string
	for _, c := range r.Cells {
		for k, n := range c.Anomalies {
			if n > 0 && !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	head := append([]string{"preset", "schedule", "seed", "state", "valid"}, kinds...)
	head = append(head, "avail", "max-unavail", "expect", "outcome")
	rows := [][]string{head}
	for _, c := range r.Cells {
		seed := ""
		if c.Seed != 0 {
			seed = strconv.FormatInt(c.Seed, 10)
		}
		row := []string{c.Preset, c.Schedule, seed, c.State, c.Valid}
		for _, k := range kinds {
			row = append(row, strconv.FormatInt(c.Anomalies[k], 10))
		}
		avail, unav := "", ""
		if c.State == "done" {
			avail, unav = fmt.Sprintf("%.3f", c.Avail), fmt.Sprintf("%.1fs", c.MaxUnavS)
		}
		row = append(row, avail, unav, c.Expect, strings.ToUpper(c.Outcome))
		rows = append(rows, row)
	}
	widths := make([]int, len(head))
	for _, row := range rows {
		for i, v := range row {
			widths[i] = max(widths[i], len(v))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, v := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			if i == len(row)-1 {
				b.WriteString(v)
			} else {
				fmt.Fprintf(&b, "%-*s", widths[i], v)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	writeGroups(w, r.Groups)
	switch {
	case r.Shard != "":
		fmt.Fprintf(w, "\nshard %s of matrix %s (%s); isrlab matrix merge joins the shards' directories\n", r.Shard, r.Matrix, cellCount(len(r.Cells)))
	case len(r.Shards) > 0:
		fmt.Fprintf(w, "\nmerged from shards %s", strings.Join(r.Shards, ", "))
		if len(r.MissingShards) > 0 {
			fmt.Fprintf(w, "; MISSING shards %s: their cells did not run (skipped)", strings.Join(r.MissingShards, ", "))
		}
		fmt.Fprintln(w)
	}
}

// writeGroups writes the claims across seeds: one row per group, then
// its reasons, which name every seed's count.
func writeGroups(w io.Writer, gs []results.Group) {
	if len(gs) == 0 {
		return
	}
	rows := [][]string{{"across seeds", "expect", "outcome"}}
	for _, g := range gs {
		rows = append(rows, []string{g.Group, g.Expect, strings.ToUpper(g.Status())})
	}
	widths := make([]int, 3)
	for _, row := range rows {
		for i, v := range row {
			widths[i] = max(widths[i], len(v))
		}
	}
	fmt.Fprintln(w)
	for i, row := range rows {
		fmt.Fprintf(w, "%-*s  %-*s  %s\n", widths[0], row[0], widths[1], row[1], row[2])
		if i > 0 {
			for _, reason := range gs[i-1].Reasons {
				fmt.Fprintf(w, "  %s\n", reason)
			}
		}
	}
}

// cellCount is "1 cell" or "N cells".
func cellCount(n int) string {
	if n == 1 {
		return "1 cell"
	}
	return strconv.Itoa(n) + " cells"
}
