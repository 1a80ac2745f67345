package results

import (
	"fmt"
	"io"
	"strings"

	"github.com/isrlab/isrlab/checker"
)

// WriteVerdict writes a finished run's verdict for people: the lines that
// end its report (isrlab run, and every run of replay, shrink, verify and
// a matrix, into its output or its cell's log). They are the series
// summary when o has one, validity and anomaly counts, availability, the
// longest unavailability, the transactions when the workload ran any, and
// the expectation's outcome with its reasons.
func WriteVerdict(w io.Writer, o *Outcome, v *checker.Verdict) {
	writeSeries(w, o.Series)
	fmt.Fprintf(w, "  verdict: valid=%v", v.Valid)
	if len(v.Anomalies) > 0 {
		fmt.Fprintf(w, " anomalies=%v", v.Anomalies)
	}
	frac := func(a checker.Ratio) string {
		if a.Total == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", a.Fraction)
	}
	fmt.Fprintf(w, "\n  availability: %s overall, %s during faults, %s after healing\n",
		frac(v.Availability.Overall), frac(v.Availability.DuringFaults), frac(v.Availability.AfterHeal))
	fmt.Fprintf(w, "  unavailability: %s\n", unavailabilityText(v.Unavailability))
	if t := v.Stats.Txn; t != nil {
		fmt.Fprintf(w, "  transactions: %d (ok %d, fail %d, info %d, pending %d; %d unknown ones committed, as reads show), %d polls\n",
			t.Txns, t.OK, t.Fail, t.Info, t.Pending, t.InfoRead, t.Polls)
	}
	fmt.Fprintf(w, "  %s\n", JudgementLine("expectation", o.Expect, o.Outcome, o.Reasons))
}

// JudgementLine gives an expectation's outcome as the verdict lines do:
// "label (expect): OUTCOME", then ": " and the reasons, "; " between them,
// when there are any.
func JudgementLine(label, expect, outcome string, reasons []string) string {
	s := fmt.Sprintf("%s (%s): %s", label, expect, strings.ToUpper(outcome))
	if len(reasons) > 0 {
		s += ": " + strings.Join(reasons, "; ")
	}
	return s
}

// LongestUnavailable is the partition with the longest window without a
// successful send (u.MaxPartition), if any partition had one.
func LongestUnavailable(u checker.Unavailability) (checker.PartitionUnavailability, bool) {
	for _, p := range u.Partitions {
		if u.MaxPartition >= 0 && p.Partition == u.MaxPartition {
			return p, true
		}
	}
	return checker.PartitionUnavailability{}, false
}

func unavailabilityText(u checker.Unavailability) string {
	if u.MaxPartition < 0 || u.MaxWindow == 0 {
		return fmt.Sprintf("no partition over %gs without a successful send", u.ThresholdSeconds)
	}
	if p, ok := LongestUnavailable(u); ok {
		return fmt.Sprintf("longest %.1fs on partition %d (%.1fs-%.1fs), %.1fs in all on it", p.Longest, p.Partition, p.LongestStart, p.LongestEnd, p.Total)
	}
	return fmt.Sprintf("longest %.1fs on partition %d", u.MaxWindow, u.MaxPartition)
}

// writeSeries writes the series summary's lines; nothing without one.
func writeSeries(w io.Writer, s *Series) {
	if s == nil || s.Summary == nil {
		return
	}
	b, d, a := s.Baseline, s.DuringFaults, s.AfterHeal
	if s.Faults == 0 {
		if b.Samples > 0 {
			fmt.Fprintf(w, "  throughput: %.0f/s (worst second %.0f/s), produce p99 up to %.0f ms; no faults\n", b.AckedPerSec, b.MinAckedPerSec, b.ProduceP99Ms)
		}
		return
	}
	if b.Samples > 0 {
		fmt.Fprintf(w, "  throughput: %.0f/s before the faults, %.0f/s during (%.2fx, worst second %.0f/s), %.0f/s after (%.2fx)\n",
			b.AckedPerSec, d.AckedPerSec, s.DuringRatio, d.MinAckedPerSec, a.AckedPerSec, s.AfterRatio)
	}
	fmt.Fprintf(w, "  ISR churn during the faults: %.0f shrinks (%.0f between brokers no fault touched), %.0f expands; handler idle %.0f%% (min %.0f%%), read-lock wait %.0f ms/s, follower fetch p99 up to %.0f ms\n",
		d.IsrShrinks, s.Collateral, d.IsrExpands, 100*d.HandlerIdle, 100*d.HandlerIdleMin, d.LockWaitMsPerSec, d.FetchFollowerP99Ms)
}
