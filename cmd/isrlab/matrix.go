package main

import (
	"errors"
	"fmt"

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
names the anomalies), each cell's log under logs/ and its run directory
under runs/.

Exit status: 0 every cell met its expectation, 1 some did not, 2 some were
undecided, 254 bad arguments, 255 a cell could not run.`,
		Example: `  isrlab matrix quickstart
  isrlab matrix scenarios/matrices/smoke.yaml --junit junit.xml
  isrlab matrix nightly --parallel 2 --duration 60s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := lab.LoadMatrix(args[0])
			if err != nil {
				if errors.Is(err, lab.ErrScenario) {
					return usageError("%v", err)
				}
				return withCode(exitBadArgs, err)
			}
			if f.seed != 0 {
				for i := range m.Cells {
					m.Cells[i].Scenario.Seed = f.seed
				}
			}
			if parallel < 1 {
				return usageError("--parallel %d: want at least 1", parallel)
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
				Parallel: parallel, JUnit: junit, Duration: f.duration, Backend: f.backend,
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
	return cmd
}
