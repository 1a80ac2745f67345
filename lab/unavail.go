package lab

import (
	"time"

	"github.com/isrlab/isrlab/checker"
)

// MERGE: replaced by the checker's unavailability measure.
func maxUnavailable(v *checker.Verdict) time.Duration { return 0 }

func unavailabilityLine(v *checker.Verdict) string { return "" }
