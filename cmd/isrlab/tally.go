package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/lab"
)

func newTallyCmd() *cobra.Command {
	var (
		anyVersion, markdown, asJSON, hog bool
		fewest                            int
		names                             []string
	)
	cmd := &cobra.Command{
		Use:   "tally [DIR|verify.json ...]",
		Short: "Add up the sweeps of scenarios verify: each scenario's record, with and without a hog",
		Long: `Add up every sweep of 'isrlab scenarios verify' found under the given
directories (default results/verify; a sweep's directory or its
verify.json also works, and a symlinked sweep such as latest counts once)
and print, per library scenario, how many runs met its expectation
without a CPU hog and beside one, the claims across seeds judged, the
run closest to each bound the expectation states (the fewest lost writes
under lost-write ">0", the longest window under unavailability "<25s"),
and the seeds of every run that did not meet it. This is a scenario's record over
nights of the nightly job's sweeps, or over a week's sweeps on your own
machine.

Only runs of the scenario as the library states it now are counted: a
run of an older version of its file, or of the scenario under --preset,
is counted under "other versions" (sweeps record each scenario's digest;
for older sweeps the run's own scenario.yaml is compared, and a run with
neither is unknown). --any-version counts them all.

A claim across seeds (expect: across-seeds, "skipped >0 in >=1 of 3") is
judged on all the runs counted, in the order the sweeps started, cut
into groups of as many seeds as it is about: three-seed nightly sweeps
add up to judge a claim about eight. The table says in how many groups
it held and names the seeds of a group that missed.

--fewest N prints only the names of the N scenarios with the fewest runs
counted (beside a hog with --hog), for the next sweep.

Exit status: 0 every counted run met its expectation and every group of
seeds its claims across seeds, 1 some did not, 254 bad arguments.`,
		Example: `  isrlab scenarios tally
  isrlab scenarios tally nightly/ --markdown
  isrlab scenarios tally results/verify restart-truncation/ --name unclean-election/
  isrlab scenarios verify --seeds 2 --hog $(isrlab scenarios tally --fewest 10 --hog)`,
		RunE: func(cmd *cobra.Command, args []string) error {
			roots := args
			if len(roots) == 0 {
				roots = []string{"results/verify"}
			}
			for _, r := range roots {
				if _, err := os.Stat(r); err != nil {
					return usageError("%v", err)
				}
			}
			if fewest < 0 {
				return usageError("--fewest must not be negative")
			}
			res, err := lab.TallySweeps(roots, lab.TallyOptions{AnyVersion: anyVersion, Names: names})
			if err != nil {
				return usageError("%v", err)
			}
			out := cmd.OutOrStdout()
			switch {
			case fewest > 0:
				for i, r := range res.Fewest(hog) {
					if i == fewest {
						break
					}
					fmt.Fprintln(out, r.Scenario)
				}
				return nil
			case asJSON:
				b, err := json.MarshalIndent(res, "", "  ")
				if err != nil {
					return withCode(exitInternal, err)
				}
				fmt.Fprintln(out, string(b))
			default:
				lab.WriteTally(out, res, markdown)
			}
			if !res.Met() {
				return withCode(1, nil)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&anyVersion, "any-version", false, "count runs of every version of a scenario (and under presets)")
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the table as Markdown")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	cmd.Flags().IntVar(&fewest, "fewest", 0, "print only the names of the N scenarios with the fewest runs counted")
	cmd.Flags().BoolVar(&hog, "hog", false, "with --fewest: count the runs beside a hog")
	cmd.Flags().StringArrayVar(&names, "name", nil, "only these scenarios (a name, alias or directory such as zombie-leader/); repeatable")
	return cmd
}
