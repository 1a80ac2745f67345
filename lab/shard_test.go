package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/results"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		err  string
	}{
		{"1/1", Shard{1, 1}, ""},
		{"3/4", Shard{3, 4}, ""},
		{" 2 / 2 ", Shard{2, 2}, ""},
		{"0/2", Shard{}, "I must be between 1 and N (2)"},
		{"3/2", Shard{}, "I must be between 1 and N (2)"},
		{"1/0", Shard{}, "N must be at least 1"},
		{"x", Shard{}, "want I/N"},
		{"1/x", Shard{}, "want I/N"},
		{"", Shard{}, "want I/N"},
	} {
		got, err := ParseShard(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseShard(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrShard) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseShard(%q): %v; want ErrShard naming it and %q", tc.in, err, tc.err)
		}
	}
}

// TestAssignShards: for many cell lists and shard counts, every cell is
// in exactly one shard, the loads of the most and least loaded shards
// differ by at most the longest cell, and the same cells give the same
// shards.
func TestAssignShards(t *testing.T) {
	// Longest first onto the lightest shard, ties to the lower shard.
	if got := AssignShards([]time.Duration{50, 40, 30, 20, 10}, 2); !slices.Equal(got, []int{0, 1, 1, 0, 0}) {
		t.Errorf("assignment %v, want [0 1 1 0 0]", got)
	}
	// Equal cells go round the shards in cell order.
	if got := AssignShards([]time.Duration{7, 7, 7, 7, 7}, 3); !slices.Equal(got, []int{0, 1, 2, 0, 1}) {
		t.Errorf("equal cells: %v, want [0 1 2 0 1]", got)
	}
	rng := rand.New(rand.NewSource(28))
	for trial := range 500 {
		cells := rng.Intn(60)
		d := make([]time.Duration, cells)
		var longest time.Duration
		for i := range d {
			// Few distinct values, so that ties happen.
			d[i] = time.Duration(1+rng.Intn(8)) * 15 * time.Second
			longest = max(longest, d[i])
		}
		n := 1 + rng.Intn(12)
		got := AssignShards(d, n)
		if len(got) != cells {
			t.Fatalf("trial %d: %d assignments for %d cells", trial, len(got), cells)
		}
		load := make([]time.Duration, n)
		count := make([]int, n)
		for i, s := range got {
			if s < 0 || s >= n {
				t.Fatalf("trial %d: cell %d in shard %d of %d", trial, i, s, n)
			}
			load[s] += d[i]
			count[s]++
		}
		total := 0
		for _, c := range count {
			total += c
		}
		if total != cells {
			t.Fatalf("trial %d: shards hold %d cells, want %d", trial, total, cells)
		}
		if hi, lo := slices.Max(load), slices.Min(load); hi-lo > longest {
			t.Errorf("trial %d: %d cells on %d shards: loads %v differ by more than the longest cell %v", trial, cells, n, load, longest)
		}
		if again := AssignShards(slices.Clone(d), n); !slices.Equal(got, again) {
			t.Fatalf("trial %d: not deterministic: %v then %v", trial, got, again)
		}
	}
}

// fakeRunDirs judges as fakeRuns does and writes a run directory for
// each cell, as a real run would, under the cell's results directory.
func fakeRunDirs(lost map[int64]int64) func(context.Context, Scenario, Options) (Result, error) {
	judge := fakeRuns(lost, 0)
	return func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		r, err := judge(ctx, sc, o)
		if err != nil {
			return r, err
		}
		dir := results.RunDir(o.ResultsDir, sc.Name, time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC), "fake")
		if err := results.MakeDir(dir); err != nil {
			return r, err
		}
		r.Dir = dir
		return r, results.WriteJSON(filepath.Join(dir, results.OutcomeFile),
			results.Outcome{Scenario: sc.Name, Seed: sc.Seed, Outcome: r.Judgement.Outcome.String(), Anomalies: r.Verdict.Anomalies})
	}
}

// runShards runs every shard of n of m into its own results directory
// and returns the shards' matrix directories.
func runShards(t *testing.T, m *Matrix, n int, o MatrixOptions) []string {
	t.Helper()
	var dirs []string
	for i := 1; i <= n; i++ {
		o := o
		o.Shard = Shard{i, n}
		o.ResultsDir = t.TempDir()
		o.Out = &bytes.Buffer{}
		res, err := RunMatrix(context.Background(), m, o)
		if err != nil {
			t.Fatalf("shard %d/%d: %v", i, n, err)
		}
		dirs = append(dirs, res.Dir)
	}
	return dirs
}

// comparable strips what differs between two runs of the same cells:
// where they ran, when and for how long.
func comparable(t *results.Table) []results.Cell {
	out := slices.Clone(t.Cells)
	for i := range out {
		out[i].Dir = t.RunRel(out[i])
		out[i].Seconds = 0
	}
	return out
}

var junitVolatile = regexp.MustCompile(`(time|timestamp)="[^"]*"`)

// junitOf is a matrix directory's junit.xml without its times, the
// matrix directory's path replaced by MATRIX.
func junitOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, results.JUnitFile))
	if err != nil {
		t.Fatal(err)
	}
	return junitVolatile.ReplaceAllString(strings.ReplaceAll(string(b), dir, "MATRIX"), "")
}

// TestShardAndMerge: the shards of a matrix hold each cell once; merged,
// they give the table, JUnit and text of the whole matrix run at once,
// the claims across seeds judged on seeds from different shards, every
// cell's run and log copied in, a shrink's result kept; isrlab diff
// finds no change between the two and a regression in a later merge.
func TestShardAndMerge(t *testing.T) {
	m, err := LoadMatrix("testdata/across-seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lost := map[int64]int64{2: 17}
	o := MatrixOptions{run: fakeRunDirs(lost)}
	o.ResultsDir, o.Out = t.TempDir(), &bytes.Buffer{}
	whole, err := RunMatrix(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Groups) != 1 || whole.Groups[0].Outcome != results.Met || whole.Hash == "" || !slices.Equal(whole.Seeds, []int64{1, 2, 3}) {
		t.Fatalf("whole matrix: groups %+v hash %q seeds %v", whole.Groups, whole.Hash, whole.Seeds)
	}

	const n = 3
	dirs := runShards(t, m, n, MatrixOptions{run: fakeRunDirs(lost)})
	seen := map[string]int{}
	for i, d := range dirs {
		tab, err := results.ReadTable(os.DirFS(d))
		if err != nil {
			t.Fatal(err)
		}
		if tab.Shard != (Shard{i + 1, n}).String() || tab.Hash != whole.Hash || !slices.Equal(tab.Seeds, whole.Seeds) {
			t.Errorf("shard %d: shard %q hash %q seeds %v; want %d/%d of hash %q", i+1, tab.Shard, tab.Hash, tab.Seeds, i+1, n, whole.Hash)
		}
		// acks1/leader-kill's seeds are in different shards: its claim
		// is the merge's to judge.
		if len(tab.Groups) != 0 {
			t.Errorf("shard %d judged groups on part of their seeds: %+v", i+1, tab.Groups)
		}
		for _, c := range tab.Cells {
			seen[c.Cell]++
		}
		txt, _ := os.ReadFile(filepath.Join(d, results.TableTextFile))
		if !strings.Contains(string(txt), "shard "+tab.Shard+" of matrix across") {
			t.Errorf("shard %d: table.txt does not say which shard:\n%s", i+1, txt)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(d), "latest-"+shardName(Shard{i + 1, n}))); err != nil {
			t.Errorf("shard %d: %v", i+1, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dirs[0]), results.LatestLink)); err == nil {
		t.Errorf("a shard became the matrix's latest")
	}
	for _, c := range whole.Cells {
		if seen[c.Cell] != 1 {
			t.Errorf("cell %s ran in %d shards", c.Cell, seen[c.Cell])
		}
	}

	// A shrink of a shard's cell is kept by the merge.
	shrunkCell := "acks1/leader-kill/seed-2"
	var shrunkRun string
	for _, d := range dirs {
		tab, _ := results.ReadTable(os.DirFS(d))
		for _, c := range tab.Cells {
			if c.Cell == shrunkCell {
				shrunkRun = c.Dir
			}
		}
	}
	if err := os.WriteFile(filepath.Join(shrunkRun, "reproducer.yaml"), []byte("name: r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := results.WriteShrunk(shrunkRun, results.Shrunk{FailsWith: "kill b1 at 6s", Reproducer: "reproducer.yaml"}); err != nil {
		t.Fatal(err)
	}

	// The shards in any order.
	root := t.TempDir()
	merged, err := MergeMatrix([]string{dirs[2], dirs[0], dirs[1]}, MergeOptions{ResultsDir: root})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := filepath.EvalSymlinks(filepath.Join(root, "matrices", "across", "latest")); got != merged.Dir {
		t.Errorf("latest leads to %q, want the merge %s", got, merged.Dir)
	}
	mt, err := results.ReadTable(os.DirFS(merged.Dir))
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := results.ReadTable(os.DirFS(whole.Dir))
	got, want := comparable(mt), comparable(wt)
	for i := range got {
		if got[i].Cell == shrunkCell {
			if got[i].Shrunk == nil || got[i].Shrunk.FailsWith != "kill b1 at 6s" {
				t.Errorf("merged %s lost its shrink: %+v", shrunkCell, got[i].Shrunk)
			}
			got[i].Shrunk = nil
		}
	}
	if !equalJSON(t, got, want) || !equalJSON(t, mt.Groups, wt.Groups) || mt.Hash != wt.Hash || !slices.Equal(mt.Shards, []string{"1/3", "2/3", "3/3"}) {
		t.Errorf("merged table differs from the whole matrix's:\n%+v\n%+v\nwant\n%+v\n%+v", got, mt.Groups, want, wt.Groups)
	}
	for _, c := range mt.Cells {
		if _, err := os.Stat(filepath.Join(c.Dir, results.OutcomeFile)); err != nil || !strings.HasPrefix(c.Dir, merged.Dir+"/runs/") {
			t.Errorf("%s: run not copied into the merge: %s %v", c.Cell, c.Dir, err)
		}
		if _, err := os.Stat(filepath.Join(merged.Dir, results.CellLogName("across", c.Cell))); err != nil {
			t.Errorf("%s: log not copied: %v", c.Cell, err)
		}
	}
	// The JUnit XML is the whole matrix's, but for the shrink's note.
	mj := junitOf(t, merged.Dir)
	if !strings.Contains(mj, "fails with: kill b1 at 6s") {
		t.Errorf("merged junit.xml lacks the shrink:\n%s", mj)
	}
	wantJ := junitOf(t, whole.Dir)
	mj2 := regexp.MustCompile(`fails with: kill b1 at 6s&#xA;reproducer: [^&]*&#xA;`).ReplaceAllString(mj, "")
	if mj2 != wantJ {
		t.Errorf("merged junit.xml:\n%s\nwant\n%s", mj2, wantJ)
	}
	mtxt, _ := os.ReadFile(filepath.Join(merged.Dir, results.TableTextFile))
	wtxt, _ := os.ReadFile(filepath.Join(whole.Dir, results.TableTextFile))
	body, footer, _ := strings.Cut(string(mtxt), "\nmerged from shards ")
	if body != string(wtxt) || footer != "1/3, 2/3, 3/3\n" {
		t.Errorf("merged table.txt:\n%s\nwant\n%s", mtxt, wtxt)
	}
	page, _ := os.ReadFile(filepath.Join(merged.Dir, results.ReportFile))
	for _, c := range mt.Cells {
		if !strings.Contains(string(page), `href="`+mt.RunRel(c)+"/report.html") {
			t.Errorf("report.html does not link %s's run", c.Cell)
		}
	}
	if !strings.Contains(string(page), `class="reproducer"`) || !strings.Contains(string(page), "merged from shards 1/3, 2/3, 3/3") {
		t.Errorf("report.html lacks the reproducer or the shards")
	}

	// isrlab diff on merged matrices: none against the whole; a new
	// failure when a later night's shards lose a write of safe.
	for _, p := range []string{merged.Dir, filepath.Join(root, "matrices", "across")} {
		mc, err := results.ReadComparable(p)
		if err != nil {
			t.Fatal(err)
		}
		wc, _ := results.ReadComparable(whole.Dir)
		d := results.Compare(wc, mc, results.DiffOptions{})
		if d.Regression() || len(d.Fixed)+len(d.Added)+len(d.Removed)+len(d.NotRun)+len(d.Anomalies)+len(d.Availability) != 0 {
			t.Errorf("diff whole -> merged %s: %+v", p, d)
		}
	}
	badSafe := func(_ context.Context, sc Scenario, o Options) (Result, error) {
		r, err := fakeRunDirs(lost)(context.Background(), sc, o)
		if sc.Name == "across/safe/leader-kill/seed-3" {
			r.Verdict.Valid, r.Verdict.Anomalies[checker.LostWrite] = checker.Invalid, 2
			r.Judgement = sc.Expect.PerRun().Judge(r.Verdict)
		}
		return r, err
	}
	next, err := MergeMatrix(runShards(t, m, n, MatrixOptions{run: badSafe}), MergeOptions{Out: filepath.Join(t.TempDir(), "next")})
	if err != nil {
		t.Fatal(err)
	}
	d := results.Compare(merged, next, results.DiffOptions{})
	if !d.Regression() || len(d.NewFailures) != 1 || d.NewFailures[0].Cell != "safe/leader-kill/seed-3" {
		t.Errorf("diff merged -> next merged: %+v", d)
	}
}

// TestMergePartial: --partial merges without a shard; its cells are
// skipped with the reason, the table names the missing shard, the
// claims across seeds that needed them are undecided, and the diff lists
// them as not run.
func TestMergePartial(t *testing.T) {
	m, err := LoadMatrix("testdata/across-seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dirs := runShards(t, m, 3, MatrixOptions{run: fakeRunDirs(map[int64]int64{1: 3})})
	if _, err := MergeMatrix(dirs[:2], MergeOptions{Out: filepath.Join(t.TempDir(), "m")}); !errors.Is(err, ErrShard) ||
		!strings.Contains(err.Error(), "missing shard(s) 3/3 (given: 1/3, 2/3)") || !strings.Contains(err.Error(), "--partial") {
		t.Fatalf("merge without shard 3: %v", err)
	}
	res, err := MergeMatrix(dirs[:2], MergeOptions{Out: filepath.Join(t.TempDir(), "m"), Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.MissingShards, []string{"3/3"}) || len(res.Cells) != 6 {
		t.Fatalf("partial merge: missing %v, %d cells", res.MissingShards, len(res.Cells))
	}
	skipped := 0
	for _, c := range res.Cells {
		if c.State == "skipped" {
			skipped++
			if len(c.Reasons) != 1 || c.Reasons[0] != "not run: shard 3/3 is missing from the merge" {
				t.Errorf("%s: reasons %q", c.Cell, c.Reasons)
			}
		}
	}
	if skipped != 2 || res.Code() == 0 {
		t.Errorf("%d cells skipped (want shard 3's 2), code %d", skipped, res.Code())
	}
	txt, _ := os.ReadFile(filepath.Join(res.Dir, results.TableTextFile))
	if !strings.Contains(string(txt), "MISSING shards 3/3") {
		t.Errorf("table.txt does not name the missing shard:\n%s", txt)
	}
	j := junitOf(t, res.Dir)
	if !strings.Contains(j, `<skipped message="not run: shard 3/3 is missing from the merge">`) {
		t.Errorf("junit.xml:\n%s", j)
	}
	full, err := MergeMatrix(dirs, MergeOptions{Out: filepath.Join(t.TempDir(), "m")})
	if err != nil {
		t.Fatal(err)
	}
	if d := results.Compare(full, res, results.DiffOptions{}); len(d.NotRun) != 2 || !strings.HasSuffix(d.New, "6 cells (without shards 3/3)") {
		t.Errorf("diff full -> partial: %q, not run %+v", d.New, d.NotRun)
	}
	shard, err := results.ReadComparable(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if d := results.Compare(full, shard, results.DiffOptions{}); !strings.HasSuffix(d.New, "2 cells (shard 1/3 only)") {
		t.Errorf("diff full -> shard 1/3: new is %q", d.New)
	}
}

// TestMergeRefuses: shards that do not make one matrix are refused with
// a clear error, and nothing is written.
func TestMergeRefuses(t *testing.T) {
	m, err := LoadMatrix("testdata/across-seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeRunDirs(nil)
	three := runShards(t, m, 3, MatrixOptions{run: fake})
	two := runShards(t, m, 2, MatrixOptions{run: fake})
	longer := runShards(t, m, 3, MatrixOptions{run: fake, Duration: time.Minute})

	reseeded, err := LoadMatrix("testdata/across-seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range reseeded.Cells {
		reseeded.Cells[i].Scenario.Seed = 9 // isrlab matrix --seed 9
	}
	seed9 := runShards(t, reseeded, 3, MatrixOptions{run: fake})

	other, err := LoadMatrix("smoke")
	if err != nil {
		t.Fatal(err)
	}
	smoke := runShards(t, other, 3, MatrixOptions{run: fake})

	o := MatrixOptions{run: fake}
	o.ResultsDir, o.Out = t.TempDir(), &bytes.Buffer{}
	whole, err := RunMatrix(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)

	for _, tc := range []struct {
		name string
		dirs []string
		out  string
		want string
	}{
		{"twice", []string{three[0], three[1], three[1], three[2]}, "", "shard 2/3 given twice"},
		{"other-n", []string{three[0], two[1]}, "", "shards of one split have the same N"},
		{"other-matrix", []string{three[0], smoke[1], three[2]}, "", "shards of different matrices"},
		{"other-seeds", []string{three[0], seed9[1], three[2]}, "", "ran seeds [1 2 3]"},
		{"other-definition", []string{three[0], longer[1], three[2]}, "", "ran different definitions of matrix across"},
		{"whole", []string{whole.Dir}, "", "is a whole matrix, not a shard"},
		{"not-a-matrix", []string{t.TempDir()}, "", "is not a matrix directory"},
		{"out-not-empty", three, full, "is not empty"},
		{"none", nil, "", "no shard directories"},
	} {
		root := t.TempDir()
		_, err := MergeMatrix(tc.dirs, MergeOptions{ResultsDir: root, Out: tc.out})
		if !errors.Is(err, ErrShard) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant ErrShard containing %q", tc.name, err, tc.want)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 0 {
			t.Errorf("%s: a refused merge wrote %v", tc.name, ents)
		}
	}
}

// equalJSON compares a and b as their JSON, reporting an encoding error.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// BenchmarkMergeMatrix merges the four shards of a 120-cell matrix (3
// presets x 4 schedules x 10 seeds), each cell's run directory holding a
// 256 KiB history and a 64 KiB report, into a new directory on the same
// file system (docs/PERFORMANCE.md, "Merging a sharded matrix").
func BenchmarkMergeMatrix(b *testing.B) {
	dir := b.TempDir()
	def := filepath.Join(dir, "bench.yaml")
	os.WriteFile(def, []byte(`name: bench
base: {cluster: {coordinators: 1, brokers: 3}, topic: {partitions: 1, replication.factor: 3}, duration: 30s}
presets: [acks1, safe, acks-all]
schedules: [{name: a}, {name: b}, {name: c}, {name: d}]
seeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
`), 0o644)
	m, err := LoadMatrix(def)
	if err != nil {
		b.Fatal(err)
	}
	history, report := bytes.Repeat([]byte("x"), 256<<10), bytes.Repeat([]byte("y"), 64<<10)
	fake := fakeRunDirs(nil)
	run := func(ctx context.Context, sc Scenario, o Options) (Result, error) {
		r, err := fake(ctx, sc, o)
		if err == nil {
			err = errors.Join(os.WriteFile(filepath.Join(r.Dir, results.HistoryFile), history, 0o644),
				os.WriteFile(filepath.Join(r.Dir, results.ReportFile), report, 0o644))
		}
		return r, err
	}
	var shards []string
	for i := 1; i <= 4; i++ {
		res, err := RunMatrix(context.Background(), m, MatrixOptions{Options: Options{ResultsDir: dir, Out: &bytes.Buffer{}},
			run: run, Shard: Shard{i, 4}})
		if err != nil {
			b.Fatal(err)
		}
		shards = append(shards, res.Dir)
	}
	b.ResetTimer()
	for i := range b.N {
		res, err := MergeMatrix(shards, MergeOptions{Out: filepath.Join(dir, "merged", strconv.Itoa(i))})
		if err != nil || len(res.Cells) != 120 {
			b.Fatal(err)
		}
	}
}
