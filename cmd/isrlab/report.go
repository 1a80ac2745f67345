package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/results"
)

func init() { rootCmd.AddCommand(newReportCmd()) }

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN-DIR | MATRIX-DIR | LIMITS-DIR",
		Short: "Write report.html for a stored run, matrix or limit search: plots, anomalies, expectations",
		Long: `report writes one self-contained HTML file (inline SVG and CSS, no scripts,
no network) for a run directory or a matrix directory; isrlab run and isrlab
matrix write it at the end of every run.

A run's report has, on one time axis with every fault window shaded and
labelled: the faults with the nodes they resolved to; throughput per
second (ok, fail and info, sends and polls); latency (p50/p99/max per
bucket, log scale, fail and info as points); per partition the leader,
leader epoch, ISR membership and high watermark from the cluster-state
timeline; unavailability per partition; Jepsen's unseen curve
(acknowledged records not yet read) and the realtime lag (acknowledgement
to first read). Then the verdict, the expectation and its outcome, the
anomaly table with example operations and their times, availability,
latency quantiles, and links to the node logs and porcupine's
visualization. The history is read once, streaming, in bounded memory. A
run without verdict.json (cut short before its check) is checked in memory.

A matrix's report is the grid of presets x schedules coloured by outcome,
each cell linking to its run's report, and the table of cells.

A limit search's report (isrlab limits) is its settings, the boundary
table, the plot of messages/s and MB/s per broker against record size with
the planning figure, and every probed point's signals (handler idle, ISR
change fraction, produce p99) and verdict, each linking to its run's
report.

Exit status: 0 written, 254 bad arguments (not a run, matrix or limits directory),
255 a file could not be read or written.`,
		Example: `  isrlab report results/latest
  isrlab report results/matrices/nightly/latest
  isrlab report results/leader-kill/20261129T174135Z-1a2b3c4d --out /tmp/report.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			st, err := os.Stat(dir)
			if err != nil || !st.IsDir() {
				return usageError("%s: not a run or matrix directory", dir)
			}
			fsys := os.DirFS(dir)
			var build func(fs.FS, string) ([]byte, error)
			switch {
			case results.IsLimits(fsys, "."):
				build = results.LimitsReport
			case results.IsMatrix(fsys, "."):
				build = results.MatrixReport
			case results.IsRun(fsys, "."):
				build = results.RunReport
			default:
				return usageError("%s: not a run directory (no %s), a matrix directory (no %s) or a limit search's (no %s)", dir, results.HistoryFile, results.TableFile, results.LimitsFile)
			}
			abs, _ := filepath.Abs(dir)
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				abs = real
			}
			b, err := build(fsys, filepath.Base(abs))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return usageError("%s: %v", dir, err)
				}
				return withCode(exitInternal, err)
			}
			if out == "" {
				out = filepath.Join(dir, results.ReportFile)
			}
			if err := results.WriteFile(out, b); err != nil {
				return withCode(exitInternal, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the report here instead of <dir>/report.html")
	return cmd
}
