package results

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFileAtomic: a write replaces the file whole and leaves no
// temporary file; a failed write leaves the old content and no temporary
// file, and says so.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "verdict.json")
	if err := WriteFile(p, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteWith(p, func(w io.Writer) error {
		w.Write([]byte("half of thr"))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Errorf("failed write: %v, want it wrapped with the path", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two\n" {
		t.Errorf("after a failed write the file holds %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir", "f"), nil); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}

func TestLinkLatest(t *testing.T) {
	root := t.TempDir()
	for _, run := range []string{"a/20260101T000000Z-1", "a/b/20260101T000001Z-2"} {
		dir := filepath.Join(root, run)
		os.MkdirAll(dir, 0o755)
		if err := LinkLatest(root, dir); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.Readlink(filepath.Join(root, "latest")); got != filepath.FromSlash(run) {
			t.Errorf("latest -> %q, want %q (relative)", got, run)
		}
	}
	if err := LinkLatest(filepath.Join(root, "missing"), root); err == nil {
		t.Error("a link in a missing directory succeeded")
	}
}

// TestWriteRun: the files a finished run adds, from its verdict and
// Outcome.
func TestWriteRun(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/run-kill", dir)
	for _, f := range []string{OutcomeFile, VerdictFile, ReportFile} {
		os.Remove(filepath.Join(dir, f))
	}
	v, err := ReadVerdict(os.DirFS("testdata/run-kill"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := ReadOutcome(os.DirFS("testdata/run-kill"))
	if err != nil {
		t.Fatal(err)
	}
	o.Outcome, o.Reasons = NotMet, []string{"expected valid=true, got valid=false"}
	if err := WriteRun(dir, v, o, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{VerdictFile, OutcomeFile, JUnitFile, ReportFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	var suites struct {
		Suites []struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, JUnitFile))
	if err := xml.Unmarshal(b, &suites); err != nil {
		t.Fatal(err)
	}
	s := suites.Suites[0]
	if s.Tests != 1 || s.Failures != 1 || s.Cases[0].Name != "kill-leader-acks1" || s.Cases[0].Failure == nil {
		t.Fatalf("junit: %+v\n%s", s, b)
	}
	msg := s.Cases[0].Failure.Message
	for _, want := range []string{"expected valid=true, got valid=false", "lost-write=1", "inconsistent-offsets=1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q lacks %q", msg, want)
		}
	}
}

// TestMatrixJUnit: a testcase per cell; failures name the reasons and the
// anomaly counts; errors and skipped cells are counted.
func TestMatrixJUnit(t *testing.T) {
	tab, err := ReadTable(os.DirFS("testdata/matrix/new"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := MatrixJUnit(tab)
	if err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Errors   int `xml:"errors,attr"`
			Skipped  int `xml:"skipped,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &suites); err != nil {
		t.Fatal(err)
	}
	s := suites.Suites[0]
	if s.Tests != 6 || s.Failures != 1 || s.Errors != 1 || s.Skipped != 1 {
		t.Errorf("tests %d failures %d errors %d skipped %d, want 6 1 1 1\n%s", s.Tests, s.Failures, s.Errors, s.Skipped, b)
	}
	c := s.Cases[0]
	if c.Class != "isrlab.m.safe" || c.Name != "leader-kill" || c.Failure == nil ||
		c.Failure.Message != "expected valid=true, got valid=false; anomalies: lost-write=2, duplicate=1" {
		t.Errorf("first case: %+v", c)
	}
	if e := s.Cases[4].Error; e == nil || e.Message != "cluster did not come up: timed out" {
		t.Errorf("error case: %+v", s.Cases[4])
	}
}

// TestJUnitMessageNamesAnomaliesOnce: anomalies the reasons already name
// are not repeated.
func TestJUnitMessageNamesAnomaliesOnce(t *testing.T) {
	tab := &Table{Matrix: "m", Cells: []Cell{{Cell: "acks1/kill", Preset: "acks1", State: "done", Outcome: NotMet,
		Anomalies: map[string]int64{"lost-write": 12, "duplicate": 2}, Reasons: []string{"expected lost-write 0, got 12"}}}}
	b, err := MatrixJUnit(tab)
	if err != nil {
		t.Fatal(err)
	}
	if want := `message="expected lost-write 0, got 12; anomalies: duplicate=2"`; !strings.Contains(string(b), want) {
		t.Errorf("junit lacks %s:\n%s", want, b)
	}
}

// TestNotSetUpJUnit: a run whose story could not be set up is a JUnit
// failure of its own type, fails a CI job and makes a matrix undecided
// (exit 2), never passes as met.
func TestNotSetUpJUnit(t *testing.T) {
	reason := "could not set up: kill: the ISR of isrlab/0 has 1 member did not hold within 10s"
	b, err := RunJUnit(&Outcome{Scenario: "unclean-election/on", Outcome: NotSetUp, Reasons: []string{reason}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `type="not-set-up"`) || !strings.Contains(string(b), reason) || !strings.Contains(string(b), `failures="1"`) {
		t.Errorf("junit:\n%s", b)
	}
	tab := &Table{Cells: []Cell{{Cell: "a", State: "done", Outcome: Met}, {Cell: "b", State: "done", Outcome: NotSetUp}}}
	if !Failing(tab.Cells[1].Status()) || tab.Code() != 2 {
		t.Errorf("not set up: failing %v, code %d", Failing(tab.Cells[1].Status()), tab.Code())
	}
}
