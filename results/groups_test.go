package results

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// groupTable is a two-seed matrix whose acks1/kill claims a loss across
// seeds; status is the group's outcome.
func groupTable(status string) *Table {
	cell := func(seed int64, lost int64) Cell {
		return Cell{Cell: "acks1/kill/seed-" + string(rune('0'+seed)), Preset: "acks1", Schedule: "kill", Seed: seed,
			State: "done", Outcome: Met, Valid: "true", Anomalies: map[string]int64{"lost-write": lost}, Expect: "anything (observed only)"}
	}
	return &Table{Matrix: "m", Cells: []Cell{cell(1, 0), cell(2, 0)}, Groups: []Group{{
		Group: "acks1/kill", Preset: "acks1", Schedule: "kill", Expect: "lost-write >0 in >=1 of 2 seeds", Outcome: status,
		Reasons: []string{"lost-write >0 held in 0 of 2 seeds (claimed: >=1 of 2): 1 (0), 2 (0)"},
		Seeds: []GroupSeed{
			{Seed: 1, Cell: "acks1/kill/seed-1", Status: Met, Facts: []SeedFact{{Name: "lost-write", Value: "0", Held: "no"}}},
			{Seed: 2, Cell: "acks1/kill/seed-2", Status: Met, Facts: []SeedFact{{Name: "lost-write", Value: "0", Held: "no"}}},
		}}}}
}

// TestGroupsCodeAndJUnit: a group across seeds counts in the exit code
// and is a testcase of its own whose text lists every seed; its seeds'
// cells, met, fail nothing.
func TestGroupsCodeAndJUnit(t *testing.T) {
	for status, code := range map[string]int{Met: 0, NotMet: 1, Undecided: 2, "": 2} {
		if c := groupTable(status).Code(); c != code {
			t.Errorf("group %q: code %d, want %d", status, c, code)
		}
	}
	b, err := MatrixJUnit(groupTable(NotMet))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Type    string `xml:"type,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	su := s.Suites[0]
	if su.Tests != 3 || su.Failures != 1 || su.Cases[0].Failure != nil || su.Cases[1].Failure != nil {
		t.Fatalf("suite: %s", b)
	}
	g := su.Cases[2]
	if g.Class != "isrlab.m.acks1" || g.Name != "kill/across-seeds" || g.Failure == nil || g.Failure.Type != "expectation" ||
		g.Failure.Message != "lost-write >0 held in 0 of 2 seeds (claimed: >=1 of 2): 1 (0), 2 (0)" ||
		!strings.Contains(g.Failure.Text, "seed 2: met; lost-write 0 (held: no) [acks1/kill/seed-2]") {
		t.Errorf("group testcase: %+v %+v", g, g.Failure)
	}
}

// TestCompareGroups: a group is compared like a cell
// (preset/schedule/across-seeds); a table from before groups compares.
func TestCompareGroups(t *testing.T) {
	ids := func(cs []CellChange) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Cell+":"+c.Old+">"+c.New)
		}
		return strings.Join(out, ",")
	}
	d := Compare(groupTable(Met), groupTable(NotMet), DiffOptions{})
	if got := ids(d.NewFailures); got != "acks1/kill/across-seeds:met>not met" || !d.Regression() {
		t.Errorf("new failures %s", got)
	}
	var buf bytes.Buffer
	d.WriteText(&buf)
	if !strings.Contains(buf.String(), "  acks1/kill/across-seeds: met -> not met (lost-write >0 held in 0 of 2 seeds") {
		t.Errorf("diff text:\n%s", buf.String())
	}
	old := groupTable(Met)
	old.Groups = nil
	if d := Compare(old, groupTable(Met), DiffOptions{}); ids(d.Added) != "acks1/kill/across-seeds:>met" || d.Regression() {
		t.Errorf("added %s", ids(d.Added))
	}
	if d := Compare(groupTable(Undecided), old, DiffOptions{}); ids(d.Removed) != "acks1/kill/across-seeds:undecided>" {
		t.Errorf("removed %s", ids(d.Removed))
	}
}

// TestGroupsReportAndIndex: the matrix report shows each group with its
// seeds' outcomes linking to their runs; the index colours the matrix by
// its groups too. A table without groups still renders (TestMatrixReport).
func TestGroupsReportAndIndex(t *testing.T) {
	root := t.TempDir()
	m := filepath.Join(root, MatricesDir, "m", "20260102T000000Z-g1")
	tab := groupTable(NotMet)
	tab.Dir = m
	tab.Cells[1].Dir = filepath.Join(m, "runs", "x")
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(filepath.Join(m, TableFile), tab); err != nil {
		t.Fatal(err)
	}
	page, err := MatrixReport(os.DirFS(m), "g1")
	if err != nil {
		t.Fatal(err)
	}
	all := parseHTML(t, page)
	if g := find(all, "a", "data-group", "acks1/kill"); len(g) != 1 || g[0].attrs["data-status"] != NotMet || g[0].attrs["href"] != "#across-acks1-kill" {
		t.Errorf("grid group: %+v", g)
	}
	for _, want := range []string{`<tr id="across-acks1-kill">`, `<a class="badge met" href="runs/x/report.html">seed 2: met</a>`,
		`lost-write 0 <span class="held-no">(did not hold)</span>`, "1 across seeds:"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("report lacks %s", want)
		}
	}
	s := newTestServer(t, root)
	rec := get(t, s, "GET", "/")
	if !strings.Contains(rec.Body.String(), "2 cells, 1 across seeds") {
		t.Errorf("index lacks the group:\n%s", rec.Body.String())
	}
	e := matrixEntry(os.DirFS(root), filepath.ToSlash(filepath.Join(MatricesDir, "m", "20260102T000000Z-g1")))
	if e.Status != NotMet {
		t.Errorf("matrix status %q, want not met (its group)", e.Status)
	}
}
