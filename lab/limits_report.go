package lab

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/isrlab/isrlab/results"
)

// LimitsReport is a limit search's output: limits.json, limits.txt,
// limits.svg and report.html in its directory.
type LimitsReport = results.Limits

// LimitsFiles are the report's file names.
const (
	LimitsJSON = results.LimitsFile
	LimitsText = results.LimitsTextFile
	LimitsSVG  = results.LimitsSVGFile
)

// WriteLimits writes the report's files into dir: limits.json, the table
// as limits.txt, the boundary plot as limits.svg and report.html.
func WriteLimits(dir string, r *LimitsReport) error {
	if err := results.WriteJSON(filepath.Join(dir, LimitsJSON), r); err != nil {
		return err
	}
	var t strings.Builder
	WriteLimitsTable(&t, r)
	if err := results.WriteFile(filepath.Join(dir, LimitsText), []byte(t.String())); err != nil {
		return err
	}
	if err := results.WriteFile(filepath.Join(dir, LimitsSVG), []byte(results.LimitsPlot(r))); err != nil {
		return err
	}
	return results.WriteLimitsReport(dir)
}

// WriteLimitsTable prints the boundary: per record size the safe and
// overloading producer counts, the limit per broker and the planning figure.
func WriteLimitsTable(w io.Writer, r *LimitsReport) {
	payload := r.Payload
	if payload == "" {
		payload = "random"
	}
	fmt.Fprintf(w, "throughput limit: %d brokers, %d consumer groups, %g records/s per producer, %gs windows, acks=%s, %s payloads\n",
		r.Brokers, r.ConsumerGroups, r.Rate, r.WindowSeconds, r.Acks, payload)
	fmt.Fprintf(w, "overload: handler idle < %.0f%% or ISR changes in > %.0f%% of intervals", 100*r.Thresholds.HandlerIdle, 100*r.Thresholds.IsrChangeFraction)
	if r.Thresholds.ProduceP99Ms > 0 {
		fmt.Fprintf(w, " or produce p99 > %g ms", r.Thresholds.ProduceP99Ms)
	}
	if r.Thresholds.MinAckedRatio > 0 {
		fmt.Fprintf(w, " or acked < %.0f%% of offered", 100*r.Thresholds.MinAckedRatio)
	}
	fmt.Fprintf(w, "; planning figure = limit x %.2f\n", r.Headroom)
	if r.Incomplete {
		fmt.Fprintln(w, "INCOMPLETE: stopped before every search closed; the bounds are what was measured")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "record B\tsafe producers\toverloads at\tpoints\tmsg/s/broker\tMB/s/broker\tplan msg/s/broker\tplan MB/s/broker\t")
	for _, s := range r.Searches {
		hi := fmt.Sprint(s.Hi)
		switch {
		case s.Ceiling:
			hi = fmt.Sprintf(">%d (never)", s.Lo)
		case !s.Done:
			hi += " (open)"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%.0f\t%.2f\t%.0f\t%.2f\t\n", s.RecordSize, s.Lo, hi, len(s.Points),
			s.LimitPerSecPerBroker, s.LimitBytesPerSecPerBroker/1e6, r.Headroom*s.LimitPerSecPerBroker, r.Headroom*s.LimitBytesPerSecPerBroker/1e6)
	}
	tw.Flush()
	for _, s := range r.Searches {
		fmt.Fprintf(w, "\n%d-byte records:\n", s.RecordSize)
		for _, p := range s.Points {
			verdict := "safe"
			if p.Overloaded {
				verdict = "OVERLOAD: " + strings.Join(p.Why, "; ")
			}
			fmt.Fprintf(w, "  %3d producers: %s -> %s\n", p.Producers, FormatSignals(p.Signals), verdict)
		}
	}
}
