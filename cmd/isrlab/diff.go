package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/results"
)

func init() { rootCmd.AddCommand(newDiffCmd()) }

func newDiffCmd() *cobra.Command {
	var (
		asJSON  bool
		avail   float64
		unavail time.Duration
	)
	cmd := &cobra.Command{
		Use:   "diff OLD-MATRIX-DIR NEW-MATRIX-DIR",
		Short: "Compare two matrices cell by cell: new failures, fixed cells, changed anomalies and availability",
		Long: `diff compares two stored matrices (last night's and tonight's, say), matching
cells by preset/schedule[/seed]. It lists new failures (cells that now do
not meet their expectation, are undecided or could not run, and met it
before or are new), fixed cells, cells still failing, cells not run, added
and removed cells, every changed anomaly count, and availability or
longest-unavailability changes of at least --availability-delta and
--unavailability-delta.

Each argument is a matrix directory, its table.json, a directory whose
latest link leads to one (results/matrices/NAME), or a run directory (a
table of one cell).

Exit status: 0 no regression, 1 a regression (a new failure), 254 bad
arguments (a path that is not a matrix or run).`,
		Example: `  isrlab diff previous/matrix results/matrices/nightly/latest
  isrlab diff --json old/table.json new/table.json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if avail < 0 || unavail < 0 {
				return usageError("--availability-delta and --unavailability-delta must not be negative")
			}
			var tabs [2]*results.Table
			for i, a := range args {
				t, err := results.ReadComparable(a)
				if err != nil {
					return usageError("%v", err)
				}
				tabs[i] = t
			}
			d := results.Compare(tabs[0], tabs[1], results.DiffOptions{Availability: avail, Unavailability: unavail.Seconds()})
			out := cmd.OutOrStdout()
			if asJSON {
				b, err := json.MarshalIndent(d, "", "  ")
				if err != nil {
					return withCode(exitInternal, err)
				}
				fmt.Fprintf(out, "%s\n", b)
			} else {
				d.WriteText(out)
			}
			if d.Regression() {
				return withCode(exitInvalid, nil)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the diff as JSON")
	cmd.Flags().Float64Var(&avail, "availability-delta", 0.01, "report availability changes at least this large (a fraction)")
	cmd.Flags().DurationVar(&unavail, "unavailability-delta", time.Second, "report longest-unavailability changes at least this large")
	return cmd
}
