// Package results is isrlab's run store: it owns the layout of the results
// directory, writes every run file (atomically: a temporary file in the
// same directory, then a rename), and reads run and matrix directories back
// for the HTML report, JUnit XML, diffs between matrices and the web UI
// (isrlab serve).
//
// Layout:
//
//	<root>/<scenario>/<start>-<run id>/     a run (scenario names may hold '/')
//	    scenario.yaml   the resolved scenario, with its seed
//	    history.jsonl   every operation (the history package's format)
//	    verdict.json    checker.Verdict
//	    outcome.json    Outcome: the expectation and whether it was met
//	    junit.xml       one testcase
//	    report.html     plots and tables, self-contained
//	    linearizability.html   porcupine's visualization, when written
//	    nodes/<node>/<node>.log
//	<root>/latest -> the newest run
//	<root>/matrices/<matrix>/<start>-<id>/  a matrix
//	    table.json      Table; table.txt; junit.xml; report.html
//	    matrix.yaml     the matrix as it ran (lab.MatrixPlan): cells, hash, seeds
//	    logs/<cell>.log; runs/  (the cells' runs, laid out as above)
//	<root>/matrices/<matrix>/latest -> the newest matrix of that name
//
// Files written whole are written atomically; the two written while a run
// goes on (the history, a matrix cell's log) are created here and streamed
// by their writer, so a crash leaves what was recorded. Outcome and Table
// are the files' one schema: lab writes a run's Outcome through WriteRun,
// and lab.MatrixResult is Table.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
)

// File names in a run or matrix directory.
const (
	ScenarioFile        = "scenario.yaml"
	HistoryFile         = "history.jsonl"
	VerdictFile         = "verdict.json"
	OutcomeFile         = "outcome.json"
	JUnitFile           = "junit.xml"
	ReportFile          = "report.html"
	LinearizabilityFile = "linearizability.html"
	MetricsSVGFile      = "metrics.svg"
	NodesDir            = "nodes"
	TableFile           = "table.json"
	TableTextFile       = "table.txt"
	PlanFile            = "matrix.yaml"
	LogsDir             = "logs"
	RunsDir             = "runs"
	MatricesDir         = "matrices"
	LatestLink          = "latest"
)

// StampFormat is the start time's format in directory names.
const StampFormat = "20060102T150405Z"

// MakeDir makes a run or matrix directory.
func MakeDir(dir string) error { return os.MkdirAll(dir, 0o755) }

// CreateHistory creates a run's history.jsonl, which the run streams into
// as it goes.
func CreateHistory(dir string) (*os.File, error) { return os.Create(filepath.Join(dir, HistoryFile)) }

// CreateCellLog creates the log of a matrix cell (logs/<cell>.log).
func CreateCellLog(dir, cell string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Join(dir, LogsDir), 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(dir, LogsDir, strings.ReplaceAll(cell, "/", "_")+".log"))
}

// RunDir is the directory of a run of scenario started at start.
func RunDir(root, scenario string, start time.Time, runID string) string {
	return filepath.Join(root, filepath.FromSlash(scenario), start.UTC().Format(StampFormat)+"-"+runID)
}

// MatrixDir is the directory of a matrix run started at start.
func MatrixDir(root, matrix string, start time.Time, id string) string {
	return filepath.Join(root, MatricesDir, matrix, start.UTC().Format(StampFormat)+"-"+id)
}

// WriteFile replaces path with data atomically: readers see the old file
// or the new one, never half of it.
func WriteFile(path string, data []byte) error {
	return WriteWith(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteWith writes path atomically with what write produces: into a
// temporary file next to it, synced and renamed over path. A failure
// removes the temporary file and leaves path as it was.
func WriteWith(path string, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := write(f); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteJSON writes v as indented JSON, atomically.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'))
}

// WriteYAML writes v as YAML, atomically.
func WriteYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFile(path, data)
}

// LinkLatest points <root>/latest at dir (relative, so the store can be
// moved). The link is replaced with a rename: a reader, or a parallel run
// linking its own directory, never finds it missing.
func LinkLatest(root, dir string) error { return LinkAs(root, LatestLink, dir) }

// LinkAs points root/name at dir, replacing any link there atomically
// (latest-shard-1-of-4 leads to a matrix's newest first shard).
func LinkAs(root, name, dir string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("link latest: %w", err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("link latest: %w", err)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return fmt.Errorf("link latest: %w", err)
	}
	link := filepath.Join(root, name)
	tmp := fmt.Sprintf("%s.tmp-%d-%d", link, os.Getpid(), time.Now().UnixNano())
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("link latest: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link latest: %w", err)
	}
	return nil
}

// WriteScenario writes a run's resolved scenario (scenario.yaml) into dir,
// creating dir.
func WriteScenario(dir string, scenario any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	return WriteYAML(filepath.Join(dir, ScenarioFile), scenario)
}

// WriteRun writes what a finished run adds to its directory: verdict.json,
// outcome.json, junit.xml and report.html. curves are the history's,
// computed by the pass that checked it (NewCurves): the report then does
// not read the history again; nil reads it. Every file is attempted; the
// errors are joined.
func WriteRun(dir string, verdict *checker.Verdict, outcome *Outcome, curves *Curves) error {
	err := errors.Join(WriteJSON(filepath.Join(dir, VerdictFile), verdict),
		WriteJSON(filepath.Join(dir, OutcomeFile), outcome))
	junit, jerr := RunJUnit(outcome)
	if jerr != nil {
		err = errors.Join(err, jerr)
	} else {
		err = errors.Join(err, WriteFile(filepath.Join(dir, JUnitFile), junit))
	}
	return errors.Join(err, writeReport(dir, func(run fs.FS, name string) ([]byte, error) {
		return reportWith(run, name, curves)
	}))
}

// WriteMatrix writes a finished matrix's files into dir: table.json,
// table.txt (text), junit.xml, a copy of the JUnit XML at extraJUnit when it
// is set, and report.html.
func WriteMatrix(dir string, t *Table, text []byte, extraJUnit string) error {
	err := errors.Join(WriteJSON(filepath.Join(dir, TableFile), t),
		WriteFile(filepath.Join(dir, TableTextFile), text))
	junit, jerr := MatrixJUnit(t)
	if jerr != nil {
		err = errors.Join(err, jerr)
	} else {
		err = errors.Join(err, WriteFile(filepath.Join(dir, JUnitFile), junit))
		if extraJUnit != "" {
			err = errors.Join(err, WriteFile(extraJUnit, junit))
		}
	}
	return errors.Join(err, WriteMatrixReport(dir))
}
