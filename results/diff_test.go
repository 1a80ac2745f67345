package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	old, err := ReadComparable("testdata/matrix/old")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ReadComparable("testdata/matrix/new/table.json")
	if err != nil {
		t.Fatal(err)
	}
	d := Compare(old, cur, DiffOptions{})
	cells := func(cs []CellChange) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Cell+":"+c.Old+">"+c.New)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ what, got, want string }{
		{"new failures", cells(d.NewFailures), "safe/leader-kill:met>not met,safe/random-halves:>error"},
		{"fixed", cells(d.Fixed), "acks1/partition:not met>met"},
		{"not run", cells(d.NotRun), ""},
		{"added", cells(d.Added), "acks1/random-halves:>skipped"},
		{"removed", cells(d.Removed), "safe/slow-net:met>"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", tc.what, tc.got, tc.want)
		}
	}
	var anoms []string
	for _, a := range d.Anomalies {
		anoms = append(anoms, a.Cell+" "+a.Kind)
	}
	if strings.Join(anoms, ",") != "safe/leader-kill duplicate,safe/leader-kill lost-write,acks1/leader-kill lost-write,acks1/partition lost-write" {
		t.Errorf("anomaly changes: %v", anoms)
	}
	// safe/leader-kill: 0.999 -> 0.95 and 5 s -> 21 s; safe/partition's
	// 0.005 and 0.2 s are under the thresholds.
	if len(d.Availability) != 1 || d.Availability[0].Cell != "safe/leader-kill" || d.Availability[0].NewMaxUnav != 21 {
		t.Errorf("availability changes: %+v", d.Availability)
	}
	if !d.Regression() {
		t.Error("no regression")
	}
	var buf bytes.Buffer
	d.WriteText(&buf)
	for _, want := range []string{"new failures (2):", "  safe/leader-kill: met -> not met (expected valid=true, got valid=false)",
		"  acks1/leader-kill: lost-write 12 -> 40", "REGRESSION: 2 cell(s)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, buf.String())
		}
	}
	// The other way round: safe/leader-kill is fixed, acks1/partition
	// regresses, the error cell is gone.
	back := Compare(cur, old, DiffOptions{})
	if cells(back.NewFailures) != "acks1/partition:met>not met" || cells(back.Fixed) != "safe/leader-kill:not met>met" ||
		cells(back.Removed) != "safe/random-halves:error>,acks1/random-halves:skipped>" {
		t.Errorf("new -> old: %+v", back)
	}
	if same := Compare(old, old, DiffOptions{}); same.Regression() || len(same.Anomalies)+len(same.Availability) != 0 {
		t.Errorf("a matrix differs from itself: %+v", same)
	}
}

func TestReadComparable(t *testing.T) {
	root := t.TempDir()
	m := filepath.Join(root, "matrices", "m", "20260101T000000Z-a")
	copyDir(t, "testdata/matrix/old", m)
	if err := LinkLatest(filepath.Dir(m), m); err != nil {
		t.Fatal(err)
	}
	if tab, err := ReadComparable(filepath.Dir(m)); err != nil || tab.Matrix != "m" {
		t.Errorf("through latest: %v %v", tab, err)
	}
	if tab, err := ReadComparable("testdata/run-kill"); err != nil || len(tab.Cells) != 1 || tab.Cells[0].Cell != "kill-leader-acks1" || tab.Cells[0].MaxUnavS != 1.7 {
		t.Errorf("run directory: %+v %v", tab, err)
	}
	for _, bad := range []string{root, filepath.Join(root, "nope"), "testdata/README.md"} {
		if _, err := ReadComparable(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	os.WriteFile(filepath.Join(root, TableFile), []byte("{not json"), 0o644)
	if _, err := ReadComparable(root); err == nil {
		t.Error("a broken table.json reads")
	}
}

func TestMatrixReport(t *testing.T) {
	page, err := MatrixReport(os.DirFS("testdata/matrix/new"), "new")
	if err != nil {
		t.Fatal(err)
	}
	all := parseHTML(t, page)
	cells := find(all, "a", "class", "cell notmet")
	if len(cells) != 1 || cells[0].attrs["data-cell"] != "safe/leader-kill" ||
		cells[0].attrs["href"] != "runs/m/safe/leader-kill/20260101T000000Z-c0/report.html" {
		t.Errorf("not met cell: %+v", cells)
	}
	want := map[string]string{"safe/partition": "met", "acks1/partition": "met", "safe/random-halves": "error", "acks1/random-halves": "skipped"}
	for cell, status := range want {
		got := find(all, "a", "data-cell", cell)
		if len(got) != 1 || got[0].attrs["data-status"] != status {
			t.Errorf("cell %s: %+v, want status %s", cell, got, status)
		}
	}
	if got := find(all, "a", "data-cell", "acks1/random-halves"); len(got) == 1 && got[0].attrs["href"] != "" {
		t.Errorf("a skipped cell links to a report: %v", got[0].attrs)
	}
	// Grid: presets are rows, schedules columns.
	if !bytes.Contains(page, []byte("<th>leader-kill</th><th>partition</th><th>random-halves</th>")) {
		t.Error("schedules are not the grid's columns")
	}
}
