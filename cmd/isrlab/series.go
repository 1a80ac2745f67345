package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/lab"
)

func init() { rootCmd.AddCommand(newSeriesCmd()) }

func newSeriesCmd() *cobra.Command {
	var svg bool
	var markdown string
	cmd := &cobra.Command{
		Use:   "series DIR...",
		Short: "Sum up runs' time series: throughput and ISR churn before, during and after the faults",
		Long: `Read the metrics.jsonl of every run under the directories (a run's
directory, or a matrix's, whose runs are under runs/) with the run's fault
windows, and print one row per run: the rate workload's throughput before
the faults, during them (from the first fault's start to the last heal) and
after, against the baseline; the ISR shrinks and expands the brokers made,
the drops between brokers no fault touched, the request handlers' idle
share, the partition read-lock wait and the follower fetch latency.

--svg writes metrics.svg into each run directory: throughput, ISR churn,
handler idle, lock wait, follower fetch p99 and produce p99 over time with
the faults shaded. --markdown writes the table to a file, linking the
plots.`,
		Example: `  isrlab series results/latest
  isrlab series --svg --markdown report.md results/matrices/isr-churn/latest`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rows, err := lab.SeriesReport(args, svg)
			if err != nil {
				return withCode(exitInternal, err)
			}
			if len(rows) == 0 {
				return usageError("no run with a metrics.jsonl under %v", args)
			}
			lab.WriteSeriesTable(cmd.OutOrStdout(), rows, ".")
			if markdown == "" {
				return nil
			}
			f, err := os.Create(markdown)
			if err != nil {
				return withCode(exitInternal, err)
			}
			base, _ := filepath.Abs(filepath.Dir(markdown))
			lab.WriteSeriesTable(f, rows, base)
			if err := f.Close(); err != nil {
				return withCode(exitInternal, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", markdown)
			return nil
		},
	}
	cmd.Flags().BoolVar(&svg, "svg", false, "write metrics.svg into each run directory")
	cmd.Flags().StringVar(&markdown, "markdown", "", "also write the table as Markdown to this file")
	return cmd
}
