package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteShrunkUpdatesItsMatrix: a shrink of a matrix cell's run lands in
// the run directory and in the matrix: the cell in table.json, the JUnit
// failure's message and text, and the report's links to the reproducer
// and the shrink's page. A run outside any matrix gets its file only.
func TestWriteShrunkUpdatesItsMatrix(t *testing.T) {
	root := t.TempDir()
	tab, err := ReadTable(os.DirFS("testdata/matrix/new"))
	if err != nil {
		t.Fatal(err)
	}
	// Move the recorded matrix under root, as if it had run there.
	old := tab.Dir
	m := filepath.Join(root, "matrices", "m", "20260102T000000Z-new1")
	tab.Dir = m
	for i := range tab.Cells {
		if tab.Cells[i].Dir != "" {
			tab.Cells[i].Dir = strings.Replace(tab.Cells[i].Dir, old, m, 1)
			if err := MakeDir(tab.Cells[i].Dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := WriteJSON(filepath.Join(m, TableFile), tab); err != nil {
		t.Fatal(err)
	}
	run := tab.Cells[0].Dir // safe/leader-kill, not met
	sh := Shrunk{FailsWith: "1 fault: kill leader:isrlab/0 at 3s until the end; a 10s run", Rate: "fails in 3 of 3 runs",
		Reproducer: "shrink/reproducer.yaml", Report: "shrink/report.html"}
	got, err := WriteShrunk(run, sh)
	if err != nil || got != m {
		t.Fatalf("WriteShrunk: matrix %q, %v; want %s", got, err, m)
	}
	if back, err := ReadShrunk(os.DirFS(run)); err != nil || *back != sh {
		t.Errorf("shrunk.json: %+v, %v", back, err)
	}
	again, err := ReadTable(os.DirFS(m))
	if err != nil || again.Cells[0].Shrunk == nil || *again.Cells[0].Shrunk != sh || again.Cells[1].Shrunk != nil {
		t.Fatalf("table.json cells: %+v, %v", again.Cells[:2], err)
	}
	junit, _ := os.ReadFile(filepath.Join(m, JUnitFile))
	if !strings.Contains(string(junit), `message="expected valid=true, got valid=false; anomalies: lost-write=2, duplicate=1 (shrunk: fails with: 1 fault: kill leader:isrlab/0 at 3s until the end; a 10s run; fails in 3 of 3 runs)"`) ||
		!strings.Contains(string(junit), "reproducer: "+filepath.Join(run, "shrink/reproducer.yaml")) {
		t.Errorf("junit.xml does not carry the shrink:\n%s", junit)
	}
	page, _ := os.ReadFile(filepath.Join(m, ReportFile))
	rel := "runs/m/safe/leader-kill/20260101T000000Z-c0/"
	for _, want := range []string{`href="` + rel + `shrink/reproducer.yaml"`, `href="` + rel + `shrink/report.html"`, "shrunk: fails with 1 fault: kill leader:isrlab/0"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %s", want)
		}
	}

	alone := t.TempDir()
	if got, err := WriteShrunk(alone, sh); err != nil || got != "" {
		t.Errorf("a run outside a matrix: matrix %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(alone, ShrunkFile)); err != nil {
		t.Error(err)
	}
}
