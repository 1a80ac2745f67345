package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/series"
)

// SeriesRow is one run of a series report.
type SeriesRow struct {
	Dir      string
	Scenario string
	Outcome  string
	Expect   string
	Series   *results.Series
	// SVG is the plot written next to the run's series, if any.
	SVG string
}

// SeriesReport sums up the series of every run under the roots (run
// directories, or a matrix's directory with its runs under runs/): one
// row per run, and with svg an SVG plot of each (metrics.svg in the run
// directory). Runs without metrics.jsonl are skipped; a run whose files do
// not read is an error naming it.
func SeriesReport(roots []string, svg bool) ([]SeriesRow, error) {
	var rows []SeriesRow
	var errs []error
	for _, root := range roots {
		// results/latest and the like are links.
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r
		}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "nodes" {
				return fs.SkipDir
			}
			if d.IsDir() || d.Name() != series.FileName {
				return nil
			}
			row, err := seriesRow(filepath.Dir(p), svg)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", filepath.Dir(p), err))
				return nil
			}
			rows = append(rows, row)
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	slices.SortFunc(rows, func(a, b SeriesRow) int { return strings.Compare(a.Dir, b.Dir) })
	return rows, errors.Join(errs...)
}

func seriesRow(dir string, svg bool) (SeriesRow, error) {
	row := SeriesRow{Dir: dir}
	var v checker.Verdict
	b, err := os.ReadFile(filepath.Join(dir, results.VerdictFile))
	if err != nil {
		return row, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return row, fmt.Errorf("%s: %w", results.VerdictFile, err)
	}
	if o, err := results.ReadOutcome(os.DirFS(dir)); err == nil {
		row.Scenario, row.Outcome, row.Expect = o.Scenario, o.Outcome, o.Expect
	}
	t, err := faultTouched(filepath.Join(dir, results.HistoryFile))
	if err != nil {
		return row, err
	}
	row.Series, err = summarizeSeries(dir, &v, t)
	if err != nil {
		return row, err
	}
	if svg {
		_, ss, err := series.ReadFile(filepath.Join(dir, series.FileName))
		if err != nil {
			return row, err
		}
		path := filepath.Join(dir, results.MetricsSVGFile)
		if err := results.WriteWith(path, func(w io.Writer) error {
			return series.Plot(w, orDefault(row.Scenario, filepath.Base(dir)), ss, faultWindows(&v), series.IncidentPanels)
		}); err != nil {
			return row, err
		}
		row.SVG, _ = filepath.Abs(path)
	}
	return row, nil
}

// WriteSeriesTable writes the rows as a Markdown table; SVG links are
// made relative to base.
func WriteSeriesTable(w io.Writer, rows []SeriesRow, base string) {
	fmt.Fprintln(w, "| run | before /s | during faults /s | ratio | worst second /s | after heal | ISR shrinks | expands | collateral drops | handler idle (min) | read-lock wait ms/s | follower fetch p99 max ms | produce p99 max ms | outcome |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rows {
		name := orDefault(r.Scenario, filepath.Base(r.Dir))
		if r.SVG != "" {
			if rel, err := filepath.Rel(base, r.SVG); err == nil {
				name = fmt.Sprintf("[%s](%s)", name, filepath.ToSlash(rel))
			}
		}
		s := r.Series
		b, d := s.Baseline, s.DuringFaults
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.2fx | %.0f | %.2fx | %.0f | %.0f | %.0f | %.0f%% (%.0f%%) | %.0f | %.0f | %.0f | %s |\n",
			name, b.AckedPerSec, d.AckedPerSec, s.DuringRatio, d.MinAckedPerSec, s.AfterRatio, d.IsrShrinks, d.IsrExpands,
			s.Collateral, 100*d.HandlerIdle, 100*d.HandlerIdleMin, d.LockWaitMsPerSec, d.FetchFollowerP99Ms, d.ProduceP99Ms, orDefault(r.Outcome, "?"))
	}
}
