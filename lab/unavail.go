package lab

import (
	"fmt"
	"time"

	"github.com/isrlab/isrlab/checker"
)

// maxUnavailable is the longest window in which no send on some partition
// succeeded (checker.Unavailability), what `unavailability:` expectations
// compare against.
func maxUnavailable(v *checker.Verdict) time.Duration {
	return time.Duration(v.Unavailability.MaxWindow * float64(time.Second))
}

func unavailabilityLine(v *checker.Verdict) string {
	u := v.Unavailability
	if u.MaxPartition < 0 || u.MaxWindow == 0 {
		return fmt.Sprintf("no partition over %gs without a successful send", u.ThresholdSeconds)
	}
	for _, p := range u.Partitions {
		if p.Partition == u.MaxPartition {
			return fmt.Sprintf("longest %.1fs on partition %d (%.1fs-%.1fs), %.1fs in all on it", p.Longest, p.Partition, p.LongestStart, p.LongestEnd, p.Total)
		}
	}
	return fmt.Sprintf("longest %.1fs on partition %d", u.MaxWindow, u.MaxPartition)
}
