package results

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ShrunkFile is what a shrink of a run found, in the run's directory: the
// matrix the run belongs to shows it beside the cell.
const ShrunkFile = "shrunk.json"

// Shrunk is a shrink's result as a failing run's matrix shows it.
type Shrunk struct {
	// FailsWith says what the smallest failing scenario is, in words:
	// its faults with their times, the run's duration and its size.
	FailsWith string `json:"fails_with"`
	// Rate is the reproducer's measured rate ("fails in 3 of 3 runs"),
	// empty when it was not measured.
	Rate string `json:"rate,omitempty"`
	// Reproducer and Report are the scenario file and the shrink's report
	// page, relative to the run's directory.
	Reproducer string `json:"reproducer"`
	Report     string `json:"report,omitempty"`
}

// WriteShrunk writes shrunk.json into the run directory dir and, when the
// run is a cell of a matrix (dir is under the matrix directory that
// table.json names it in), records it in that cell and rewrites the
// matrix's table.json, junit.xml and report.html; it returns the matrix
// directory it updated, if any.
func WriteShrunk(dir string, s Shrunk) (matrix string, err error) {
	if err := WriteJSON(filepath.Join(dir, ShrunkFile), s); err != nil {
		return "", err
	}
	matrix, t, i := matrixOf(dir)
	if t == nil {
		return "", nil
	}
	t.Cells[i].Shrunk = &s
	junit, err := MatrixJUnit(t)
	if err != nil {
		return matrix, err
	}
	err = errors.Join(WriteJSON(filepath.Join(matrix, TableFile), t), WriteFile(filepath.Join(matrix, JUnitFile), junit))
	return matrix, errors.Join(err, WriteMatrixReport(matrix))
}

// matrixOf finds the matrix directory above the run directory dir whose
// table.json has a cell run in dir, and that cell's index.
func matrixOf(dir string) (string, *Table, int) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, 0
	}
	real := abs
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		real = r
	}
	for m := filepath.Dir(abs); m != filepath.Dir(m); m = filepath.Dir(m) {
		if !IsMatrix(os.DirFS(m), ".") {
			continue
		}
		t, err := ReadTable(os.DirFS(m))
		if err != nil {
			return "", nil, 0
		}
		for i, c := range t.Cells {
			if c.Dir == "" {
				continue
			}
			cd := c.Dir
			if r, err := filepath.EvalSymlinks(cd); err == nil {
				cd = r
			}
			if cd == real || c.Dir == abs {
				return m, t, i
			}
		}
		return "", nil, 0
	}
	return "", nil, 0
}

// ReadShrunk reads shrunk.json from a run directory.
func ReadShrunk(run fs.FS) (*Shrunk, error) {
	var s Shrunk
	if err := readJSON(run, ShrunkFile, &s); err != nil {
		return nil, err
	}
	if s.FailsWith == "" || s.Reproducer == "" {
		return nil, fmt.Errorf("%s: no fails_with or reproducer", ShrunkFile)
	}
	return &s, nil
}
