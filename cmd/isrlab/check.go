package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/results"
)

func init() { rootCmd.AddCommand(newCheckCmd()) }

func newCheckCmd() *cobra.Command {
	var (
		asJSON   bool
		linMode  string
		linTO    time.Duration
		linMax   int
		linPiece int
		examples int
		out      string
		html     string
		unavail  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check <history.jsonl | run-dir>",
		Short: "Check a history for lost, duplicated, reordered or phantom messages",
		Long: `check reads a history (JSONL, see the history package) and looks for the
anomalies of Jepsen's Kafka workload: lost-write, unseen, duplicate,
inconsistent-offsets, nonmonotonic-send, nonmonotonic-poll, poll-skip,
aborted-read and unexpected, and for the real-time orderings a log forbids:
future-read (a value read before its send was invoked), send-below-read (a
send landing at or below an offset read before it was invoked) and
nonmonotonic-send-realtime (a send landing at or below one acknowledged
before it was invoked). It also reports availability (ok fraction overall,
during faults, after healing), unavailability (per partition, the longest time
sends to it were attempted and none succeeded, counted when longer than
--unavailable-after; retried sends that end ok hide this from availability),
latency quantiles per operation, the unseen count and realtime lag over time,
and linearizability of every partition against a log model (porcupine), on
pieces of each partition's history cut where no operation was in flight,
checked in parallel in a second pass over the file. A piece longer than
--lin-max-piece-ops, or not decided within --lin-timeout, makes the answer
unknown, never a pass; the verdict names the piece and why.

Given a run directory it reads <dir>/history.jsonl, writes <dir>/verdict.json
and, when linearizability is illegal, <dir>/linearizability.html.

A history whose last line is torn (a run cut short) is checked up to that line
and marked truncated; its verdict is at best unknown. Any other malformed line
is an error naming the file and line.

Exit status: 0 valid, 1 invalid, 2 unknown, 254 bad arguments, 255 unreadable
or malformed history.`,
		Example: `  isrlab check results/latest
  isrlab check --json history.jsonl
  isrlab check --linearizable=off big-history.jsonl
  isrlab check gen --ops 10000000 --partitions 10 --seed 1 --out /tmp/h.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := checker.Options{LinTimeout: linTO, LinMaxOps: linMax, LinMaxPieceOps: linPiece, MaxExamples: examples, UnavailableAfter: unavail}
			switch linMode {
			case "auto":
				opt.Linearizable = checker.LinAuto
			case "on":
				opt.Linearizable = checker.LinOn
			case "off":
				opt.Linearizable = checker.LinOff
			default:
				return usageError("--linearizable must be auto, on or off, not %q", linMode)
			}
			if linTO < 0 || linMax < 0 || linPiece < 0 || examples < 0 {
				return usageError("--lin-timeout, --lin-max-ops, --lin-max-piece-ops and --examples must not be negative")
			}
			if unavail <= 0 {
				return usageError("--unavailable-after must be positive")
			}
			return runCheck(cmd.OutOrStdout(), args[0], opt, asJSON, out, html)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the verdict as JSON instead of a summary")
	f.StringVar(&linMode, "linearizable", "auto", "check linearizability: auto (when small enough), on, off")
	f.DurationVar(&linTO, "lin-timeout", checker.DefaultLinTimeout, "time budget of the linearizability check (its pass over the history included)")
	f.IntVar(&linMax, "lin-max-ops", 0, "with --linearizable=auto, skip linearizability for histories with more client operations (0: no limit)")
	f.IntVar(&linPiece, "lin-max-piece-ops", checker.DefaultLinMaxPieceOps, "largest piece of a partition's history (between quiescent points) to search; a larger one is unknown")
	f.IntVar(&examples, "examples", 5, "examples kept per anomaly")
	f.DurationVar(&unavail, "unavailable-after", checker.DefaultUnavailableAfter, "count a partition unavailable when sends to it went longer than this without a success")
	f.StringVar(&out, "out", "", "also write the verdict JSON to this file (default for a run dir: <dir>/verdict.json)")
	f.StringVar(&html, "html", "", "write porcupine's visualization here when linearizability is illegal (default for a run dir: <dir>/linearizability.html)")
	cmd.AddCommand(newCheckGenCmd())
	return cmd
}

func runCheck(w io.Writer, path string, opt checker.Options, asJSON bool, out, html string) error {
	st, err := os.Stat(path)
	if err != nil {
		return withCode(exitInternal, fmt.Errorf("read history: %w", err))
	}
	file := path
	if st.IsDir() {
		file = filepath.Join(path, results.HistoryFile)
		if out == "" {
			out = filepath.Join(path, results.VerdictFile)
		}
		if html == "" {
			html = filepath.Join(path, results.LinearizabilityFile)
		}
	}
	open := func() (io.ReadCloser, error) { return os.Open(file) }
	v, err := checker.Check(open, file, opt)
	if err != nil {
		return withCode(exitInternal, err)
	}
	if v.HasVisualization() && html != "" {
		if err := writeFile(html, v.Visualize); err != nil {
			return withCode(exitInternal, err)
		}
		v.Linearizable.Visualization = filepath.Base(html)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return withCode(exitInternal, fmt.Errorf("encode verdict: %w", err))
	}
	js = append(js, '\n')
	if out != "" {
		if err := writeFile(out, func(w io.Writer) error { _, err := w.Write(js); return err }); err != nil {
			return withCode(exitInternal, err)
		}
	}
	if asJSON {
		w.Write(js)
	} else {
		printSummary(w, file, v, out, html)
	}
	switch v.Valid {
	case checker.Valid:
		return nil
	case checker.Invalid:
		return withCode(exitInvalid, nil)
	}
	return withCode(exitUnknown, nil)
}

// writeFile writes through the run store's atomic write (a temporary file
// renamed over path), so a reader never sees half a verdict.
func writeFile(path string, write func(io.Writer) error) error {
	return results.WriteWith(path, write)
}

func printSummary(w io.Writer, file string, v *checker.Verdict, out, html string) {
	fmt.Fprintf(w, "history:      %s (%d ops, %d client ops, %d partitions)\n", file, v.Stats.Ops, v.Stats.ClientOps, v.Stats.Partitions)
	if v.TruncatedHistory {
		fmt.Fprintf(w, "truncated:    %s\n", v.Truncation)
	}
	fmt.Fprintf(w, "valid:        %s\n", v.Valid)
	for _, n := range v.Notes {
		fmt.Fprintf(w, "note:         %s\n", n)
	}
	fmt.Fprintf(w, "sends:        %d (ok %d, fail %d, info %d, pending %d; %d info sends were read)\n",
		v.Stats.Sends, v.Stats.SendsOK, v.Stats.SendsFail, v.Stats.SendsInfo, v.Stats.SendsPending, v.Stats.InfoRead)
	fmt.Fprintf(w, "polls:        %d (ok %d), %d records, %d distinct values read\n", v.Stats.Polls, v.Stats.PollsOK, v.Stats.Records, v.Stats.ReadValues)
	if t := v.Stats.Txn; t != nil {
		fmt.Fprintf(w, "transactions: %d (ok %d, fail %d, info %d, pending %d; %d unknown ones committed, as reads show), %d polls, %d of %d values read\n",
			t.Txns, t.OK, t.Fail, t.Info, t.Pending, t.InfoRead, t.Polls, t.ValuesRead, t.Values)
	}
	if len(v.Anomalies) == 0 {
		fmt.Fprintln(w, "anomalies:    none")
	} else {
		fmt.Fprintln(w, "anomalies:")
		for _, name := range checker.AnomalyNames {
			n := v.Anomalies[name]
			if n == 0 {
				continue
			}
			note := ""
			if exs := v.Examples[name]; len(exs) > 0 {
				note = "  e.g. " + exs[0].Note
			}
			fmt.Fprintf(w, "  %-26s %8d%s\n", name, n, note)
		}
	}
	a := v.Availability
	fmt.Fprintf(w, "availability: overall %s", pct(a.Overall))
	if a.Faults > 0 {
		fmt.Fprintf(w, ", during faults %s, after heal %s (%d faults)", pct(a.DuringFaults), pct(a.AfterHeal), a.Faults)
	}
	fmt.Fprintln(w)
	u := v.Unavailability
	if u.MaxPartition < 0 {
		fmt.Fprintf(w, "unavailable:  no partition over %s\n", secDur(u.ThresholdSeconds))
	} else {
		longest, _ := results.LongestUnavailable(u)
		fmt.Fprintf(w, "unavailable:  longest %s on partition %d (from %s to %s; windows over %s)\n", secDur(u.MaxWindow),
			u.MaxPartition, secDur(longest.LongestStart), secDur(longest.LongestEnd), secDur(u.ThresholdSeconds))
	}
	us, lag := v.Unseen.Overall, v.RealtimeLag.Overall.Quantiles
	fmt.Fprintf(w, "unseen:       %d acknowledged values never read (peak %d at %s)", us.Final, us.Peak, secText(us.PeakAt))
	if lag.Count > 0 {
		fmt.Fprintf(w, "; realtime lag p50 %s, p99 %s, max %s", dur(lag.P50), dur(lag.P99), dur(lag.Max))
	}
	fmt.Fprintln(w)
	if c := v.Cluster; c.Events > 0 {
		fmt.Fprintf(w, "cluster:      %d state events, %d leader changes, %d ISR shrinks, %d ISR expands\n", c.Events, c.LeaderChanges, c.ISRShrinks, c.ISRExpands)
	}
	fs := make([]string, 0, len(v.Latency))
	for f := range v.Latency {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	for _, f := range fs {
		q := v.Latency[f]
		fmt.Fprintf(w, "latency %-5s p50 %s, p90 %s, p99 %s, p99.9 %s, max %s (%d ok)\n", f+":",
			dur(q.P50), dur(q.P90), dur(q.P99), dur(q.P999), dur(q.Max), q.Count)
	}
	l := v.Linearizable
	line := l.Result
	if l.Result != "skipped" {
		line += fmt.Sprintf(" (%d ops, %d partitions, %d pieces, largest %d ops", l.Ops, l.Partitions, l.Pieces, l.LargestPiece)
		if l.IllegalPieces > 0 {
			line += fmt.Sprintf("; %d illegal", l.IllegalPieces)
		}
		if l.UnknownPieces > 0 {
			line += fmt.Sprintf("; %d unknown", l.UnknownPieces)
		}
		line += ")"
	}
	switch {
	case l.Reason != "" && l.Result == "skipped":
		line += " (" + l.Reason + ")"
	case l.Reason != "":
		line += ": " + l.Reason
	}
	if len(l.IllegalPartitions) > 0 {
		line += fmt.Sprintf("; illegal partitions %v", l.IllegalPartitions)
	}
	if len(l.Illegal) > 0 {
		p := l.Illegal[0]
		line += fmt.Sprintf("; first illegal: partition %d piece %d (%d ops, %s to %s)", p.Partition, p.Piece, p.Ops, secText(p.Start), secText(p.End))
	}
	if l.Visualization != "" {
		line += "; see " + html
	}
	fmt.Fprintf(w, "linearizable: %s\n", line)
	if out != "" {
		fmt.Fprintf(w, "verdict:      %s\n", out)
	}
}

// dur formats milliseconds with a unit that suits the size.
func dur(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond / 10).String()
}

// secText formats seconds from the start of the history as the checker's
// notes do.
func secText(s float64) string {
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

// secDur formats seconds to the millisecond.
func secDur(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func pct(r checker.Ratio) string {
	if r.Total == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%% (%d/%d)", 100*r.Fraction, r.OK, r.Total)
}

func newCheckGenCmd() *cobra.Command {
	var o history.SynthOptions
	var out string
	cmd := &cobra.Command{
		Use:   "gen --out FILE",
		Short: "Generate a synthetic history (for benchmarks and checker tests)",
		Long: `gen writes a deterministic synthetic history of a simulated log: producers
send unique values to random partitions (some ending fail or info), consumers
poll their assigned partitions in order, and a final drain reads everything.
The same flags give the same file. With --anomaly-every N it injects every
anomaly kind the checker knows, about once per N sends (and at least once
each); without it the history is valid.`,
		Example: `  isrlab check gen --ops 10000000 --partitions 10 --seed 1 --out /tmp/h10m.jsonl
  isrlab check gen --ops 100000 --partitions 10 --seed 1 --anomaly-every 20000 --faults --out /tmp/h.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError("--out is required")
			}
			if o.Ops <= 0 || o.Partitions <= 0 {
				return usageError("--ops and --partitions must be positive")
			}
			if o.InfoRate < 0 || o.FailRate < 0 || o.InfoRate+o.FailRate > 1 {
				return usageError("--info-rate and --fail-rate must be fractions that add up to at most 1")
			}
			return genHistory(cmd.OutOrStdout(), out, o)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.Ops, "ops", 1000000, "history lines to generate before the final drain")
	f.IntVar(&o.Partitions, "partitions", 10, "partitions")
	f.IntVar(&o.Producers, "producers", 8, "producer processes")
	f.IntVar(&o.Consumers, "consumers", 4, "consumer processes (at most --partitions are used)")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.Float64Var(&o.InfoRate, "info-rate", 0.01, "fraction of sends that end info (half of them are written)")
	f.Float64Var(&o.FailRate, "fail-rate", 0.01, "fraction of sends that fail")
	f.BoolVar(&o.Faults, "faults", false, "interleave nemesis and cluster-state events")
	f.Int64Var(&o.AnomalyEvery, "anomaly-every", 0, "inject anomalies about once per this many sends (0: none)")
	f.StringVar(&out, "out", "", "output file (required)")
	return cmd
}

func genHistory(w io.Writer, path string, o history.SynthOptions) error {
	if o.Consumers > o.Partitions {
		o.Consumers = o.Partitions
	}
	var stats history.SynthStats
	err := writeFile(path, func(f io.Writer) error {
		hw, err := history.NewWriter(f, history.Header{Run: "synthetic", Seed: int64(o.Seed), Topic: "isrlab", Partitions: o.Partitions})
		if err != nil {
			return err
		}
		if stats, err = history.Synthesize(hw, o); err != nil {
			return err
		}
		return hw.Flush()
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return withCode(exitBadArgs, err)
		}
		return err
	}
	var inj []string
	for k, n := range stats.Injected {
		inj = append(inj, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(inj)
	fmt.Fprintf(w, "wrote %s: %d lines, %d sends, %d polls", path, stats.Lines, stats.Sends, stats.Polls)
	if len(inj) > 0 {
		fmt.Fprintf(w, "; injected %s", strings.Join(inj, " "))
	}
	fmt.Fprintln(w)
	return nil
}
