package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/lab"
)

func init() { rootCmd.AddCommand(newShrinkCmd()) }

func newShrinkCmd() *cobra.Command {
	var (
		runs      int
		confirm   int
		budget    time.Duration
		outFile   string
		anomalies []string
		steps     string
		verbose   bool
	)
	cmd := &cobra.Command{
		Use:   "shrink RUN_DIR",
		Short: "Reduce a failing run to the smallest scenario that still fails the same way",
		Long: `Take a stored run (results/<scenario>/<start>-<id>/, or a matrix cell's run
under its runs/) that did not meet its expectation or whose history is
invalid, and search for the smallest scenario that still fails the same
way: the same unmet expectation (the clause it missed, such as "expected
lost-write 0"), or for a run that met its expectation with an invalid
history, one of the same anomaly kinds (--anomaly picks the kinds).

The search treats a run as an oracle. It first materialises the run's
generated schedule into fixed faults and drops whole faults by delta
debugging (Zeller's ddmin); then it halves each fault's hold and start
time, narrows its targets to one node (brokers to one broker), halves the
run's duration, and cuts producers, consumers, partitions, brokers and
coordinators where the faults allow. A fault whose condition names a
dropped fault stops waiting for it. Runs are not deterministic: each
candidate runs up to --runs K times (with the run's seed) and still fails
when one of them does. Progress is printed as it goes; the smallest
failing scenario so far is written after each step, so Ctrl-C (or
--budget, after which no candidate starts) keeps it. At the end the
reproducer runs --confirm more times and its rate is printed ("fails in
9 of 10 runs").

The reproducer is a scenario file 'isrlab run FILE' runs (--out, default
RUN_DIR/reproducer.yaml). RUN_DIR/shrink/ holds every candidate tried
(candidates/NNN.yaml), their runs (runs/) and output (logs/), shrink.json
and report.html, the reduction step by step.

Exit status: 0 a reproducer was written and failed the same way in at
least one confirmation run (or --confirm 0), 2 the search was stopped by
a signal or the reproducer failed in none of its confirmation runs, 254
bad arguments (including a run that did not fail), 255 internal error.`,
		Example: `  isrlab shrink results/latest
  isrlab shrink results/zombie-leader/acks1/20260101T000000Z-1a2b3c4d --runs 2 --budget 30m
  isrlab shrink results/matrices/nightly/latest/runs/acks1/leader-isolated/... --out zombie.yaml
  isrlab shrink RUN_DIR --steps faults,hold --confirm 0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs <= 0 {
				return usageError("--runs must be positive")
			}
			if confirm < 0 {
				return usageError("--confirm must not be negative")
			}
			var only []string
			if steps != "" {
				for _, s := range strings.Split(steps, ",") {
					only = append(only, strings.TrimSpace(s))
				}
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			if handled, err := reexecRootless(ctx); handled {
				return err
			}
			f := labFlags{verbose: verbose}
			rep, err := lab.ShrinkRun(ctx, args[0], lab.ShrinkRunOptions{
				Options: lab.Options{Out: cmd.OutOrStdout(), Log: f.logger(cmd.ErrOrStderr())},
				Runs:    runs, Confirm: confirm, Budget: budget, OutFile: outFile, Anomalies: anomalies, Steps: only,
			})
			if err != nil {
				if errors.Is(err, lab.ErrScenario) || errors.Is(err, lab.ErrNotFailing) {
					return usageError("shrink: %v", err)
				}
				return withCode(exitInternal, fmt.Errorf("shrink: %w", err))
			}
			if code := rep.Code(); code != 0 {
				return withCode(code, nil)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&runs, "runs", 3, "runs per candidate (K): it still fails when one of them does")
	cmd.Flags().IntVar(&confirm, "confirm", 10, "runs that measure the reproducer's rate at the end (0: none)")
	cmd.Flags().DurationVar(&budget, "budget", 0, "start no candidate after this long (0: no limit)")
	cmd.Flags().StringVar(&outFile, "out", "", "where to write the reproducer (default RUN_DIR/reproducer.yaml)")
	cmd.Flags().StringSliceVar(&anomalies, "anomaly", nil, "anomaly kinds the reproducer must show (default: the run's own failure)")
	cmd.Flags().StringVar(&steps, "steps", "", "only these reductions, comma-separated: "+strings.Join(lab.StepNames(), ","))
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log cluster bring-up, faults and teardown")
	return cmd
}
