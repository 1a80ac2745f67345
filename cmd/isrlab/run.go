package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/lab"
)

func init() { rootCmd.AddCommand(newRunCmd(), newScenariosCmd(), newHogCmd()) }

// labFlags are the flags run and matrix share.
type labFlags struct {
	results  string
	seed     int64
	duration time.Duration
	backend  string
	hosts    string
	verbose  bool
	presets  []string
}

func (f *labFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.results, "results", "results", "directory for run results")
	cmd.Flags().Int64Var(&f.seed, "seed", 0, "seed (0: pick one and record it)")
	cmd.Flags().DurationVar(&f.duration, "duration", 0, "workload duration (default: the scenario's)")
	cmd.Flags().StringVar(&f.backend, "backend", "", "cluster backend: netns, docker or ssh (default: the scenario's, netns)")
	cmd.Flags().StringVar(&f.hosts, "hosts", "", "run on your own hosts over SSH: a cluster file (docs/external.md); implies --backend ssh")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "log cluster bring-up, faults and teardown")
	cmd.Flags().StringArrayVar(&f.presets, "preset", nil, "apply a preset (scenarios/presets) after the scenario's own, e.g. secured; repeatable")
}

func (f *labFlags) apply(sc *lab.Scenario) error {
	if len(f.presets) > 0 {
		withPresets, err := sc.WithPresets(f.presets...)
		if err != nil {
			return usageError("--preset: %v", err)
		}
		*sc = withPresets
	}
	if f.seed != 0 {
		sc.Seed = f.seed
	}
	if f.duration > 0 {
		sc.Duration = f.duration
	}
	if f.backend != "" {
		sc.Cluster.Backend = f.backend
	}
	return f.applyHosts(sc)
}

// applyHosts puts the scenario on the hosts of --hosts.
func (f *labFlags) applyHosts(sc *lab.Scenario) error {
	if f.hosts == "" {
		return nil
	}
	if f.backend != "" && f.backend != ssh.Name {
		return usageError("--hosts runs on the ssh backend, not %s", f.backend)
	}
	cfg, err := ssh.Load(f.hosts)
	if err != nil {
		return usageError("--hosts: %v", err)
	}
	sc.Cluster.Backend, sc.Cluster.SSH = ssh.Name, cfg
	return nil
}

func (f *labFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// runContext is cancelled by SIGINT, SIGTERM, SIGHUP and a closed stdout
// (SIGPIPE is caught, so writes fail with EPIPE instead of killing the
// process before it heals and tears the cluster down).
func runContext(parent context.Context) (context.Context, context.CancelFunc) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// isTerminal reports whether w is a terminal (the live progress line).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// loadScenario resolves a run argument: a file, or a library name.
func loadScenario(arg string) (lab.Scenario, error) {
	if arg == "" {
		return lab.Default(), nil
	}
	sc, err := lab.Resolve(arg)
	if err != nil {
		if errors.Is(err, lab.ErrScenario) {
			return sc, usageError("%v", err)
		}
		return sc, withCode(exitBadArgs, err)
	}
	return sc, nil
}

// outcomeCode maps a judged run to the exit status.
func outcomeCode(o lab.Outcome) error {
	switch o {
	case lab.Met:
		return nil
	case lab.NotMet:
		return withCode(exitInvalid, nil)
	}
	return withCode(exitUnknown, nil)
}

func newRunCmd() *cobra.Command {
	var f labFlags
	var plan bool
	cmd := &cobra.Command{
		Use:   "run [SCENARIO]",
		Short: "Run a scenario: cluster up, workload, faults, history, verdict, expectation",
		Long: `Run one scenario end to end: bring a cluster of coordinators and isrlab
brokers up (network namespaces by default), drive the workload (real kgo
producers and consumers), play the scenario's faults through the nemesis
(fixed faults and generated schedules, every kind 'isrlab fault' knows),
record every operation, fault and cluster-state change, drain, check the
history and judge it against the scenario's expectations.

SCENARIO is a file or the name of a library scenario ('isrlab scenarios'
lists them). Without one it runs the embedded default, leader-kill: 3
coordinators, 3 brokers, the safe preset (acks=all, min.insync.replicas=2),
the leader of partition 0 SIGKILLed and restarted mid-run.

Each run writes results/<scenario>/<start>-<run id>/: scenario.yaml (resolved,
with the seed), history.jsonl, verdict.json, outcome.json and the nodes'
logs and data; results/latest points at it. The cluster, its namespaces and
its fault rules are named after the run id, so runs can share a host.
Ctrl-C, SIGTERM, SIGHUP or a closed stdout heal every fault, tear the
cluster down and still check what was recorded (marked incomplete).

--hosts FILE runs the scenario on your own cluster over SSH instead (the
ssh backend, docs/external.md): the file lists the hosts, how to reach them
and how to control each node's process; the scenario's faults, workload and
checks are the same. Such a run first prints everything it will touch on the
hosts; --plan prints that (for any backend) and exits without touching
anything. 'isrlab clean --backend ssh' undoes what a killed run left.

Exit status: 0 the run met its expectations, 1 it did not, 2 the checker
could not decide, 254 bad arguments, 255 internal error.`,
		Example: `  isrlab run
  isrlab run zombie-leader/acks1
  isrlab run scenarios/follower-pause.yaml --seed 42
  isrlab run leader-kill --preset secured
  isrlab run restart-truncation/high-watermark --duration 60s --results /var/tmp/isrlab
  isrlab run follower-cut-from-leader --hosts kafka-hosts.yaml --plan
  isrlab run follower-cut-from-leader --hosts kafka-hosts.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			sc, err := loadScenario(arg)
			if err != nil {
				return err
			}
			if err := f.apply(&sc); err != nil {
				return err
			}
			if err := sc.Validate(); err != nil {
				return usageError("%v", err)
			}
			runID := compose.NewRunID()
			out := cmd.OutOrStdout()
			if plan {
				if err := writePlan(out, sc, runID, f.results); err != nil {
					return usageError("%v", err)
				}
				return nil
			}
			caps, _ := compose.CapabilitiesOf(sc.Cluster.Backend) // validated with the scenario
			if caps.UserHosts {
				// Said before anything is touched, every time.
				if err := writePlan(out, sc, runID, f.results); err != nil {
					return usageError("%v", err)
				}
				fmt.Fprintln(out)
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			// As a non-root user the netns backend runs everything inside a
			// user+network+mount namespace: re-execute this command there.
			if caps.Rootless {
				if handled, err := reexecRootless(ctx); handled {
					return err
				}
			}
			res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: f.results, Out: out, Live: isTerminal(out),
				Log: f.logger(cmd.ErrOrStderr()), RunID: runID})
			if err != nil {
				if errors.Is(err, lab.ErrScenario) {
					return usageError("%v", err)
				}
				return withCode(exitInternal, fmt.Errorf("run %s: %w", sc.Name, err))
			}
			return outcomeCode(res.Judgement.Outcome)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&plan, "plan", false, "print what the run would create, touch and run, and exit")
	return cmd
}

func newScenariosCmd() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "scenarios",
		Short: "List the scenario library, one line each with its expected outcome",
		Long: `List the scenarios embedded in isrlab (scenarios/ in the source tree):
each one's name, what it does and what the source documents say happens,
and the expectation 'isrlab run NAME' checks. A scenario renamed since the
library was named after its sources ends its description with "(was
OLD)"; the old name still works wherever a name does, an old directory
such as seed000/ naming the scenarios that were in it. Presets
(scenarios/presets) are listed with --verbose; 'isrlab scenarios show NAME'
prints a scenario's file.`,
		Example: `  isrlab scenarios
  isrlab scenarios show min-insync-replicas/refuses
  isrlab run min-insync-replicas/refuses`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ents, err := lab.List()
			out := cmd.OutOrStdout()
			w := 0
			for _, e := range ents {
				w = max(w, len(e.Name))
			}
			for _, e := range ents {
				fmt.Fprintf(out, "%-*s  expect %s\n", w, e.Name, e.Expect)
				if e.Description != "" {
					fmt.Fprintf(out, "%-*s    %s\n", w, "", e.Description)
				}
			}
			if verbose {
				fmt.Fprintf(out, "\npresets: %v\n", lab.Presets())
			}
			if err != nil {
				return withCode(exitInternal, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also list the presets")
	cmd.AddCommand(newVerifyCmd(), newTallyCmd(), newShowCmd())
	return cmd
}

func newShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Print a library scenario's file, with its comments",
		Long: `Print the file of library scenario NAME (an old name such as
seed000/partition-4-acks1 works too): the story in its comments, what the
source document says and what was measured, then the scenario itself. The
first line names the file in the source tree. Save it to run a variant
with 'isrlab run FILE'.`,
		Example: `  isrlab scenarios show zombie-leader/acks1
  isrlab scenarios show zombie-leader/acks1 > zombie.yaml && isrlab run zombie.yaml --duration 60s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, data, err := lab.Source(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# %s\n%s", file, data)
			return nil
		},
	}
}
