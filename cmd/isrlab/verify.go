package main

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/lab"
)

func newVerifyCmd() *cobra.Command {
	var (
		results  string
		seeds    int
		seedList string
		hog      bool
		hogProcs int
		budget   time.Duration
		verbose  bool
		presets  []string
		parallel int
	)
	cmd := &cobra.Command{
		Use:   "verify [NAME|DIR/ ...]",
		Short: "Run library scenarios over fresh random seeds and count how many meet their expectation",
		Long: `Run each named library scenario (every one by default; a directory such
as zombie-leader/ names all of its scenarios, and old names such as
seed000/partition-4-acks1 or the directory seed000/ still work) with
--seeds fresh random seeds and print, per scenario, how many runs met
their expectation, did not, could not set up the state their story needs,
or stayed undecided, with the seeds of every run that did not meet it
(isrlab run NAME --seed N replays one). A scenario's expectation is a
claim about every run: this is how it is checked.

A claim across seeds (expect: across-seeds: {skipped: ">0 in >=1 of 3"})
is judged on each group of as many seeds as it is about, in the order
the runs ended (--seeds 20: six groups of three), and met only if every
group met it; fewer seeds leave it not judged.

Runs go round the scenarios one seed at a time, so a sweep stopped early
(Ctrl-C, --budget) still covers each. --hog runs busy processes beside
every run, one per core, as on a shared CI runner. --parallel N makes N
runs at once, each on its own cluster (docs/library.md says how many
the library was measured with). --preset applies a
preset after each scenario's own, e.g. kafka-4.0 to check the library's
claims under KRaft; the expectations stay the scenarios'. The sweep's directory
(results/verify/<start>-<id>/) holds verify.json, verify.md (the table in
Markdown), each run's log under logs/ and its run directory under runs/.

Exit status: 0 every run met its expectation, 1 some run did not, 2 some
run was undecided or not set up (or the sweep stopped early), 254 bad
arguments, 255 a run could not run.`,
		Example: `  isrlab scenarios verify --seeds 20
  isrlab scenarios verify --seeds 20 --hog restart-truncation/ unclean-election/on
  isrlab scenarios verify --seed-list 7331,90210 restart-truncation/leader-epoch
  isrlab scenarios verify --seeds 3 --budget 50m
  isrlab scenarios verify --seeds 3 --parallel 2 --hog
  isrlab scenarios verify --seeds 1 --preset kafka-4.0 zombie-leader/ unclean-election/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			scs, err := lab.SelectLibrary(args)
			if err != nil {
				return usageError("%v", err)
			}
			for i := range scs {
				if scs[i], err = scs[i].WithPresets(presets...); err != nil {
					return usageError("--preset: %v", err)
				}
			}
			var list []int64
			if seedList != "" {
				for _, f := range strings.Split(seedList, ",") {
					n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
					if err != nil || n <= 0 {
						return usageError("--seed-list: %q is not a positive seed", f)
					}
					list = append(list, n)
				}
			} else if seeds <= 0 {
				return usageError("--seeds must be positive (or give --seed-list)")
			}
			if parallel <= 0 {
				return usageError("--parallel must be positive")
			}
			n := 0
			if hog {
				n = hogProcs
				if n <= 0 {
					n = runtime.NumCPU()
				}
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			if handled, err := reexecRootless(ctx); handled {
				return err
			}
			f := labFlags{verbose: verbose}
			res, err := lab.Verify(ctx, scs, lab.VerifyOptions{
				Options: lab.Options{ResultsDir: results, Out: cmd.OutOrStdout(), Log: f.logger(cmd.ErrOrStderr())},
				Seeds:   seeds, SeedList: list, Hog: n, Budget: budget, Parallel: parallel,
			})
			if err != nil {
				if errors.Is(err, lab.ErrScenario) {
					return usageError("%v", err)
				}
				if res == nil {
					return withCode(exitInternal, fmt.Errorf("verify: %w", err))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "verify: %v\n", err)
			}
			if code := res.Code(); code != 0 {
				return withCode(code, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&results, "results", "results", "directory for results (the sweep goes in verify/ under it)")
	cmd.Flags().IntVar(&seeds, "seeds", 5, "fresh random seeds per scenario")
	cmd.Flags().StringVar(&seedList, "seed-list", "", "comma-separated seeds to use instead of fresh ones")
	cmd.Flags().BoolVar(&hog, "hog", false, "keep every core busy beside each run (busy-looping processes)")
	cmd.Flags().IntVar(&hogProcs, "hog-procs", 0, "busy processes with --hog (default: one per core)")
	cmd.Flags().DurationVar(&budget, "budget", 0, "start no run after this long (0: no limit)")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "runs at once, each on its own cluster")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log cluster bring-up, faults and teardown")
	cmd.Flags().StringArrayVar(&presets, "preset", nil, "apply a preset after each scenario's own (scenarios/presets), e.g. kafka-4.0; repeatable")
	return cmd
}

// newHogCmd is the CPU hog `scenarios verify --hog` runs: one busy loop
// until killed.
func newHogCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "hog",
		Short:  "Busy-loop on one core until killed (the CPU hog of scenarios verify --hog)",
		Hidden: true,
		Args:   cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			runtime.GOMAXPROCS(1)
			x := uint64(1)
			for {
				x = x*6364136223846793005 + 1442695040888963407
				if x == 0 {
					fmt.Println(x)
				}
			}
		},
	}
}
