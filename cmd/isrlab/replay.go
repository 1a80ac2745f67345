package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

func init() { rootCmd.AddCommand(newReplayCmd()) }

func newReplayCmd() *cobra.Command {
	var (
		resultsDir string
		runs       int
		print      bool
		verbose    bool
	)
	cmd := &cobra.Command{
		Use:   "replay RUN_DIR",
		Short: "Run a stored run again with its faults at the same times on the same nodes",
		Long: `Run a stored run again, as exactly as the lab can: the stored scenario and
seed, with every fault fired at the offset from the start its injection
began in the original run, on the nodes it resolved to then (read from
the history, not resolved again: leader:isrlab/0 stays the broker that led
then; a partition cuts the links it cut), and healed as long after its
injection as it was then. Conditions (when:) and generated schedules are
gone: the recorded times already hold them. Then it prints both runs'
anomalies side by side.

What it cannot make identical: thread and goroutine scheduling, network
and disk timing, when the coordinators' sessions expire, which broker the
controller elects, the clients' batching and retries. A fault fired at the
same offset may meet another cluster state: the broker that led then may
not lead now. docs/shrink.md has the measured rates.

--print writes the replay scenario (a file 'isrlab run FILE' runs) and
exits without running. --runs N replays N times and prints how many showed
the original's anomaly kinds.

Exit status: 0 every replay showed the same anomaly kinds as the original
run, 1 one did not, 2 a replay was cut short, 254 bad arguments, 255
internal error.`,
		Example: `  isrlab replay results/latest
  isrlab replay results/zombie-leader/acks1/20260101T000000Z-1a2b3c4d --runs 5
  isrlab replay results/latest --print > exact.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs <= 0 {
				return usageError("--runs must be positive")
			}
			dir := args[0]
			plan, err := lab.ReplayScenario(dir)
			if err != nil {
				if errors.Is(err, lab.ErrScenario) {
					return usageError("replay: %v", err)
				}
				return withCode(exitInternal, fmt.Errorf("replay: %w", err))
			}
			out := cmd.OutOrStdout()
			if print {
				b, err := yaml.Marshal(plan.Scenario)
				if err != nil {
					return withCode(exitInternal, err)
				}
				_, err = out.Write(b)
				return err
			}
			orig, err := results.ReadOutcome(os.DirFS(dir))
			if err != nil {
				return usageError("replay: %s: %v (a run that finished has one)", dir, err)
			}
			fmt.Fprintf(out, "isrlab replay %s: %d fault(s) as recorded, seed %d\n", dir, len(plan.Scenario.Faults), plan.Scenario.Seed)
			for _, f := range plan.Scenario.Faults {
				spec, _ := yaml.Marshal(f)
				fmt.Fprintf(out, "  at %v for %s: %s\n", f.At, holdText(f.HealAfter), oneLine(spec))
			}
			for _, n := range plan.Notes {
				fmt.Fprintf(out, "  note: %s\n", n)
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			if handled, err := reexecRootless(ctx); handled {
				return err
			}
			f := labFlags{verbose: verbose}
			want := lab.AnomalyKinds(orig.Anomalies)
			same, sameOutcome, done := 0, 0, 0
			for i := range runs {
				res, err := lab.Run(ctx, plan.Scenario, lab.Options{ResultsDir: resultsDir, Out: out, Live: isTerminal(out) && runs == 1,
					Log: f.logger(cmd.ErrOrStderr())})
				if err != nil {
					if errors.Is(err, lab.ErrScenario) {
						return usageError("%v", err)
					}
					return withCode(exitInternal, fmt.Errorf("replay %s: %w", dir, err))
				}
				if res.Incomplete || res.Verdict == nil {
					return withCode(exitUnknown, nil)
				}
				done++
				got := lab.AnomalyKinds(res.Verdict.Anomalies)
				fmt.Fprintf(out, "\n  replay %d of %d (%s):\n", i+1, runs, res.Dir)
				lab.WriteAnomalies(out, [2]string{"original", "replay"}, orig.Anomalies, res.Verdict.Anomalies,
					[2]string{orig.Outcome, res.Judgement.Outcome.String()})
				if slices.Equal(want, got) {
					same++
				}
				if res.Judgement.Outcome.String() == orig.Outcome {
					sameOutcome++
				}
			}
			fmt.Fprintf(out, "\n  the original's anomaly kinds (%s) showed again in %d of %d replay(s)\n", orNone(want), same, done)
			// The kinds a handful of operations make (a reorder, one
			// late read) come and go with timing; the expectation names
			// what the scenario is about.
			fmt.Fprintf(out, "  its outcome (%s: %s) came again in %d of %d\n", orig.Expect, orig.Outcome, sameOutcome, done)
			if same < done {
				return withCode(exitInvalid, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&resultsDir, "results", "results", "directory for the replays' results")
	cmd.Flags().IntVar(&runs, "runs", 1, "replay this many times")
	cmd.Flags().BoolVar(&print, "print", false, "print the replay scenario and exit")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log cluster bring-up, faults and teardown")
	return cmd
}

func holdText(d time.Duration) string {
	if d == 0 {
		return "the rest of the run"
	}
	return d.String()
}

func oneLine(b []byte) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\n", " ")), " ")
}

func orNone(kinds []string) string {
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ", ")
}
