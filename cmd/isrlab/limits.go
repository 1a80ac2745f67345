package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/workloads"
)

func init() { rootCmd.AddCommand(newLimitsCmd()) }

func newLimitsCmd() *cobra.Command {
	var (
		sizes     string
		c         lab.LimitsConfig
		th        = lab.DefaultThresholds()
		maxProd   int
		headroom  float64
		resultsTo string
		verbose   bool
	)
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Find the cluster's throughput limit per record size (Dropbox's throughput-limit method: a binary search over producers)",
		Long: `Find the throughput the cluster sustains before it overloads, the way
Dropbox measured theirs. For each record size, binary-search the number of
producers over [0, --max-producers], each producer at the fixed
--producer-rate, so traffic grows linearly with their number. Every point
is one rate run on a fresh cluster of --brokers brokers: a topic of 10
partitions per broker (each broker the preferred leader of exactly 10) at
replication factor 3, --consumer-groups groups reading it all (5: reads =
5 x writes, the seed's validity condition), observed for --window after a
warmup. A point overloads when the brokers' request-handler idle share
drops below --idle, or ISR changes happen in more than --isr-fraction of
the sampling intervals (optionally: produce p99 above --p99, acked below
--acked-ratio of the offered rate). An overloading point becomes the upper
bound, a safe one the lower bound; the search stops when they are adjacent,
and the safe bound is the limit. --max-producers is probed first: if it
does not overload, the limit is reported as at least that.

Output, in --results/limits/<start>/: limits.json (every point and its
signals), limits.txt (the table), limits.svg (messages/s and MB/s per
broker against record size, with the planning figure: the limit x
--headroom, 0.8 tolerating 20% of the brokers offline) and report.html
(all of it on one self-contained page, each point linking to its run's
report; isrlab report DIR writes it again); the points' run directories
are under points/. Ctrl-C stops the point under test and writes what was
measured (marked incomplete).

Payloads are random bytes by default (--payload random: incompressible,
as the seed measured, so the limit is the conservative one); --payload
compressible sends one character repeated, the seed's comparison case.
Either goes uncompressed unless --compression is set.

Exit status: 0 done, 2 stopped early (Ctrl-C, SIGTERM, SIGHUP: what was
measured is kept), 254 bad arguments, 255 internal error.`,
		Example: `  isrlab limits --record-sizes 100 --producer-rate 5000 --max-producers 16 --window 10s
  isrlab limits --record-sizes 100,1000,10000 --brokers 3 --window 60s --results /var/tmp/isrlab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var recordSizes []int
			for _, f := range strings.Split(sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return usageError("--record-sizes: %q is not a positive number of bytes", f)
				}
				recordSizes = append(recordSizes, n)
			}
			switch {
			case c.Brokers < 1:
				return usageError("--brokers must be at least 1")
			case c.ConsumerGroups < 0:
				return usageError("--consumer-groups must not be negative")
			case c.Rate <= 0:
				return usageError("--producer-rate must be positive")
			case maxProd < 1:
				return usageError("--max-producers must be at least 1")
			case c.Window < time.Second:
				return usageError("--window must be at least 1s")
			case headroom <= 0 || headroom > 1:
				return usageError("--headroom must be in (0, 1]")
			case c.Payload != workloads.PayloadRandom && c.Payload != workloads.PayloadCompressible:
				return usageError("--payload: %q: use %s or %s", c.Payload, workloads.PayloadRandom, workloads.PayloadCompressible)
			}
			caps, err := compose.CapabilitiesOf(c.Backend)
			if err != nil || caps.UserHosts {
				return usageError("--backend: %q: use netns or docker (a limit search lays out its own clusters)", c.Backend)
			}
			if c.ConsumerGroups == 0 {
				c.ConsumerGroups = -1 // the rate workload's "none"
			}
			ctx, stop := runContext(cmd.Context())
			defer stop()
			if caps.Rootless {
				if handled, err := reexecRootless(ctx); handled {
					return err
				}
			}
			out := cmd.OutOrStdout()
			start := time.Now()
			dir, err := filepath.Abs(filepath.Join(resultsTo, "limits", start.UTC().Format("20060102T150405Z")+"-"+compose.NewRunID()))
			if err != nil {
				return withCode(exitInternal, err)
			}
			c.ResultsDir = filepath.Join(dir, "points")
			if err := os.MkdirAll(c.ResultsDir, 0o755); err != nil {
				return withCode(exitInternal, err)
			}
			groups := max(c.ConsumerGroups, 0)
			rep := &lab.LimitsReport{Started: start.UTC().Format(time.RFC3339), Brokers: c.Brokers, ConsumerGroups: groups, Rate: c.Rate,
				WindowSeconds: c.Window.Seconds(), MaxProducers: maxProd, Acks: c.Acks, Compression: c.Compression, Payload: c.Payload, Thresholds: th, Headroom: headroom}
			if rep.Acks == "" {
				rep.Acks = "1"
			}
			fmt.Fprintf(out, "isrlab limits: %d brokers, %d consumer groups, %g records/s per producer, up to %d producers, %s windows\n  results: %s\n",
				c.Brokers, groups, c.Rate, maxProd, c.Window, dir)
			var lastDir string
			probe := lab.LimitProbe(c, lab.Options{Log: limitsLog(verbose).logger(cmd.ErrOrStderr())}, func(d string) { lastDir = d })
			var stopErr error
			for _, size := range recordSizes {
				s, err := lab.FindLimit(ctx, size, probe, lab.SearchOptions{MaxProducers: maxProd, Thresholds: th,
					OnPoint: func(s *lab.Search, n int, p *lab.Point) {
						if p == nil {
							fmt.Fprintf(out, "[%s] %d B: bounds [%d, %d): trying %d producers (%.0f records/s, %.1f MB/s)\n",
								time.Since(start).Round(time.Second), size, s.Lo, s.Hi, n, float64(n)*c.Rate, float64(n)*c.Rate*float64(size)/1e6)
							return
						}
						p.Dir = lastDir
						verdict := "safe"
						if p.Overloaded {
							verdict = "OVERLOAD (" + strings.Join(p.Why, "; ") + ")"
						}
						fmt.Fprintf(out, "    %d producers: %s -> %s\n", n, lab.FormatSignals(p.Signals), verdict)
					}})
				if s != nil {
					s.SetLimit(c.Rate, c.Brokers)
					rep.Searches = append(rep.Searches, s)
				}
				if err != nil {
					stopErr = err
					break
				}
				fmt.Fprintf(out, "  %d B: limit %d producers = %.0f msg/s, %.2f MB/s per broker (plan %.2f MB/s)\n",
					size, s.Lo, s.LimitPerSecPerBroker, s.LimitBytesPerSecPerBroker/1e6, headroom*s.LimitBytesPerSecPerBroker/1e6)
			}
			rep.Incomplete = stopErr != nil
			if err := lab.WriteLimits(dir, rep); err != nil {
				return withCode(exitInternal, err)
			}
			fmt.Fprintln(out)
			lab.WriteLimitsTable(out, rep)
			fmt.Fprintf(out, "\nwrote %s, %s, %s and %s in %s\n", lab.LimitsJSON, lab.LimitsText, lab.LimitsSVG, results.ReportFile, dir)
			if stopErr != nil {
				if ctx.Err() != nil && errors.Is(stopErr, ctx.Err()) {
					fmt.Fprintf(out, "stopped early: kept what was measured\n")
					return withCode(exitUnknown, nil)
				}
				return withCode(exitInternal, stopErr)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&sizes, "record-sizes", "100,1000,10000", "record sizes in bytes, comma-separated")
	fl.IntVar(&c.Brokers, "brokers", 3, "brokers in the cluster")
	fl.IntVar(&c.ConsumerGroups, "consumer-groups", 5, "consumer groups reading the topic")
	fl.Float64Var(&c.Rate, "producer-rate", 1000, "records/s of each producer")
	fl.DurationVar(&c.Window, "window", 30*time.Second, "observation window of each point (after a 5s warmup)")
	fl.IntVar(&maxProd, "max-producers", 64, "the search's upper end: a number of producers that surely overloads")
	fl.StringVar(&c.Backend, "backend", "", "cluster backend: netns (default) or docker")
	fl.BoolVar(&c.Secured, "secured", false, "run every point on a secured cluster (SASL_SSL with SCRAM-SHA-512, as --preset secured; netns or docker backend)")
	fl.StringVar(&c.Acks, "acks", "1", "producers' acks: 1 or all")
	fl.StringVar(&c.Payload, "payload", workloads.PayloadRandom, "record values: random (incompressible) or compressible (one character repeated)")
	fl.StringVar(&c.Compression, "compression", "", "producers' compression: gzip, snappy, lz4 or zstd (default none)")
	fl.Float64Var(&th.HandlerIdle, "idle", th.HandlerIdle, "overload when the mean request-handler idle share drops below this")
	fl.Float64Var(&th.IsrChangeFraction, "isr-fraction", th.IsrChangeFraction, "overload when ISR changes happen in more than this fraction of the intervals")
	fl.Float64Var(&th.ProduceP99Ms, "p99", 0, "overload when the worst produce p99 exceeds this many ms (0: off)")
	fl.Float64Var(&th.MinAckedRatio, "acked-ratio", 0, "overload when acked falls below this fraction of the offered rate (0: off)")
	fl.Float64Var(&headroom, "headroom", 0.8, "planning figure = limit x this (0.8 tolerates 20% of brokers offline)")
	fl.StringVar(&resultsTo, "results", "results", "directory for results")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log cluster bring-up and teardown")
	return cmd
}

// limitsLog wraps the verbose flag in labFlags for its logger.
func limitsLog(verbose bool) *labFlags { return &labFlags{verbose: verbose} }
