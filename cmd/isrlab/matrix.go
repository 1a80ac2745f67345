package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/lab"
)

func init() { rootCmd.AddCommand(newMatrixCmd()) }

func newMatrixCmd() *cobra.Command {
	var (
		f        labFlags
		junit    string
		parallel int
		shard    string
		only     string
	)
	cmd := &cobra.Command{
		Use:   "matrix MATRIX",
		Short: "Run presets x fault schedules (x seeds): a verdict per cell against its expectation",
		Long: `Run a matrix: every combination of its presets, fault schedules and seeds
is a cell, a scenario run once and judged against its expectation (the
preset's own, e.g. safe expects a valid history and acks1 only observes,
unless the matrix says otherwise). MATRIX is a file or a library matrix
(scenarios/matrices/NAME.yaml).

The table is printed as cells finish (redrawn in place on a terminal):
verdict, the anomaly counts, availability, the longest unavailability and
the outcome. The matrix directory results/matrices/<name>/<start>-<id>/
holds table.txt, table.json, junit.xml (one testcase per cell; a failure
names the anomalies), report.html, matrix.yaml (the cells as they ran and
a hash of their resolved scenarios), each cell's log under logs/ and its
run directory under runs/.

--shard I/N runs only the I-th of N parts of the cells, for CI runners
that each take one: every cell is in exactly one shard, the shards are
balanced by the cells' expected durations (the duration plus about 5 s
of set-up and checking per run), and the same matrix always splits the
same way. A shard's directory (<start>-<id>-shard-I-of-N, linked as
latest-shard-I-of-N) records the shard and the matrix's hash and seeds;
'isrlab matrix merge' joins the shards' directories into one matrix
directory. A claim across seeds whose seeds ran in different shards is
judged by the merge.

Exit status: 0 every cell met its expectation, 1 some did not, 2 some were
undecided, 254 bad arguments, 255 a cell could not run.`,
		Example: `  isrlab matrix quickstart
  isrlab matrix scenarios/matrices/smoke.yaml --junit junit.xml
  isrlab matrix nightly --parallel 2 --duration 60s
  isrlab matrix nightly --shard 2/4 --results shard-2
  isrlab matrix clients --only 'clients/*@sarama/*'
  isrlab matrix merge shard-*/matrices/nightly/latest-shard-* --out nightly`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := lab.LoadMatrix(args[0])
			if err != nil {
				if errors.Is(err, lab.ErrScenario) {
					return usageError("%v", err)
				}
				return withCode(exitBadArgs, err)
			}
			for i := range m.Cells {
				// --preset goes under each cell's own keys, as in run.
				sc, err := m.Cells[i].Scenario.WithPresets(f.presets...)
				if err != nil {
					return usageError("--preset: %v", err)
				}
				m.Cells[i].Scenario = sc
			}
			if only != "" {
				if err := m.Only(only); err != nil {
					return usageError("%v", err)
				}
			}
			if f.seed != 0 {
				for i := range m.Cells {
					m.Cells[i].Scenario.Seed = f.seed
				}
			}
			if parallel < 1 {
				return usageError("--parallel %d: want at least 1", parallel)
			}
			var sh lab.Shard
			if shard != "" {
				if sh, err = lab.ParseShard(shard); err != nil {
					return usageError("--%v", err)
				}
			}
			if f.hosts != "" {
				if parallel > 1 {
					return usageError("--hosts: the cells share the hosts, so they run one at a time (no --parallel)")
				}
				for i := range m.Cells {
					if err := f.applyHosts(&m.Cells[i].Scenario); err != nil {
						return err
					}
				}
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			if caps, _ := compose.CapabilitiesOf(f.backend); caps.Rootless {
				if handled, err := reexecRootless(ctx); handled {
					return err
				}
			}
			out := cmd.OutOrStdout()
			res, err := lab.RunMatrix(ctx, m, lab.MatrixOptions{
				Options:  lab.Options{ResultsDir: f.results, Out: out, Live: isTerminal(out), Log: f.logger(cmd.ErrOrStderr())},
				Parallel: parallel, JUnit: junit, Duration: f.duration, Backend: f.backend, Shard: sh,
			})
			if err != nil {
				return withCode(exitInternal, fmt.Errorf("matrix %s: %w", m.Name, err))
			}
			if code := res.Code(); code != 0 {
				return withCode(code, nil)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&junit, "junit", "", "also write the JUnit XML here")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "cells run at once")
	cmd.Flags().StringVar(&shard, "shard", "", "run only shard I of N of the cells (I/N, e.g. 2/4)")
	cmd.Flags().StringVar(&only, "only", "", "run only the cells whose id (MATRIX/PRESET/SCHEDULE) matches this pattern, e.g. 'clients/*/lost-produce-responses'")
	cmd.AddCommand(newMatrixMergeCmd())
	return cmd
}

func newMatrixMergeCmd() *cobra.Command {
	var (
		out, results, junit string
		partial             bool
	)
	cmd := &cobra.Command{
		Use:   "merge SHARD-DIR...",
		Short: "Join the matrix directories of a matrix's shards into one matrix directory",
		Long: `merge joins the directories that 'isrlab matrix NAME --shard I/N' wrote
(one per shard, from any machines) into one matrix directory, as if the
matrix had run at once: table.txt, table.json, junit.xml, report.html
linking every cell's run, matrix.yaml, and every cell's run directory and
log copied in (hard links where they share a file system), with what
'isrlab shrink' found for a cell kept. Claims across seeds are judged on
all their seeds. 'isrlab diff' compares merged matrices like any others.

It refuses shards of different matrices, of different definitions of one
(its base, presets, schedules, expectations, --duration or --backend), of
different seeds or of different N, a shard given twice, and missing
shards: --partial merges without them, their cells skipped and the table
naming the missing shards.

Each argument is a shard's matrix directory (or its table.json). Without
--out the merge is a new directory under --results
(results/matrices/NAME/<start>-<id>/), which becomes the matrix's latest.

Exit status: the merged matrix's, as 'isrlab matrix' (0 every cell and
claim met its expectation, 1 some did not, 2 some were undecided or did
not run, 255 a cell could not run), 254 shards that do not make one
matrix.`,
		Example: `  isrlab matrix merge results/matrices/nightly/latest-shard-1-of-2 results/matrices/nightly/latest-shard-2-of-2
  isrlab matrix merge shard-*/matrices/nightly/*-shard-* --out nightly/matrix --junit junit.xml
  isrlab matrix merge shard-1/matrices/nightly/latest-shard-1-of-3 --partial --out partial`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := lab.MergeMatrix(args, lab.MergeOptions{Out: out, ResultsDir: results, Partial: partial, JUnit: junit})
			if err != nil {
				if errors.Is(err, lab.ErrShard) {
					return usageError("matrix merge: %v", err)
				}
				return withCode(exitInternal, fmt.Errorf("matrix merge: %w", err))
			}
			w := cmd.OutOrStdout()
			txt, err := os.ReadFile(filepath.Join(res.Dir, "table.txt"))
			if err != nil {
				return withCode(exitInternal, err)
			}
			fmt.Fprintf(w, "isrlab matrix merge: %s, %d cells from shards %s\n\n%s\n  results: %s (report.html, table.txt, table.json, junit.xml)\n",
				res.Matrix, len(res.Cells), strings.Join(res.Shards, ", "), txt, res.Dir)
			if code := res.Code(); code != 0 {
				return withCode(code, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the merged matrix directory (new or empty); default a new one under --results")
	cmd.Flags().StringVar(&results, "results", "results", "results directory, for the default --out")
	cmd.Flags().StringVar(&junit, "junit", "", "also write the JUnit XML here")
	cmd.Flags().BoolVar(&partial, "partial", false, "merge without missing shards: their cells are skipped")
	return cmd
}
