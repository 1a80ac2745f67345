package lab

import (
	"time"

	"github.com/isrlab/isrlab/checker"
)

// maxUnavailable is the longest window in which no send on some partition
// succeeded (checker.Unavailability), what `unavailability:` expectations
// compare against.
func maxUnavailable(v *checker.Verdict) time.Duration {
	return time.Duration(v.Unavailability.MaxWindow * float64(time.Second))
}
