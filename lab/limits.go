package lab

import (
	"context"
	"fmt"
	"strings"

	"github.com/isrlab/isrlab/results"
)

// Seed 002's throughput-limit finder: for a fixed record size, binary-search
// the number of producers (each at a fixed rate, so traffic grows linearly)
// over [0, max] until the interval is small; a point that overloads the
// cluster becomes the new upper bound, one that does not the new lower
// bound. The safe lower bound is the limit.

// The search's data are results' (limits.json is the results package's
// to read and report).
type (
	// Signals are what one point's observation window showed.
	Signals = results.LimitSignals
	// Thresholds decide when a point overloads.
	Thresholds = results.LimitThresholds
	// Point is one measured point of a search.
	Point = results.LimitPoint
	// Search is one record size's binary search.
	Search = results.LimitSearch
)

// DefaultThresholds are seed 002's.
func DefaultThresholds() Thresholds {
	return Thresholds{HandlerIdle: 0.20, IsrChangeFraction: 0.50}
}

// Probe measures one point: n producers at the search's per-producer rate
// and record size.
type Probe func(ctx context.Context, recordSize, producers int) (Signals, error)

// SearchOptions configure FindLimit.
type SearchOptions struct {
	MaxProducers int
	// Resolution stops the search when Hi-Lo <= Resolution (default 1).
	Resolution int
	Thresholds Thresholds
	// OnPoint is called before (sig == nil) and after each point.
	OnPoint func(s *Search, producers int, p *Point)
}

// FindLimit binary-searches the number of producers for one record size.
// Max is probed first (it should overload; if it does not, the limit is at
// least max and the search stops there). A probe error or a cancelled ctx
// stops the search and returns what was measured with the error.
func FindLimit(ctx context.Context, recordSize int, probe Probe, o SearchOptions) (*Search, error) {
	if o.MaxProducers < 1 {
		return nil, fmt.Errorf("max producers %d: must be at least 1", o.MaxProducers)
	}
	if o.Resolution < 1 {
		o.Resolution = 1
	}
	s := &Search{RecordSize: recordSize, Lo: 0, Hi: o.MaxProducers + 1}
	measure := func(n int) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if o.OnPoint != nil {
			o.OnPoint(s, n, nil)
		}
		sig, err := probe(ctx, recordSize, n)
		if err != nil {
			return false, err
		}
		if err := ctx.Err(); err != nil {
			// A point cut short is not a measurement.
			return false, err
		}
		over, why := o.Thresholds.Overloaded(sig)
		s.Points = append(s.Points, Point{Producers: n, Signals: sig, Overloaded: over, Why: why})
		if over {
			s.Hi = n
		} else {
			s.Lo = n
		}
		if o.OnPoint != nil {
			o.OnPoint(s, n, &s.Points[len(s.Points)-1])
		}
		return over, nil
	}
	over, err := measure(o.MaxProducers)
	if err != nil {
		return s, err
	}
	if !over {
		s.Ceiling, s.Done = true, true
		return s, nil
	}
	for s.Hi-s.Lo > o.Resolution {
		mid := s.Lo + (s.Hi-s.Lo)/2
		if _, err := measure(mid); err != nil {
			return s, err
		}
	}
	s.Done = true
	return s, nil
}

// FormatSignals is one line of a point's signals for progress output.
func FormatSignals(s Signals) string {
	idle := "n/a"
	if !s.NoIdle {
		idle = fmt.Sprintf("%.0f%% (min %.0f%%)", 100*s.HandlerIdle, 100*s.HandlerIdleMin)
	}
	return strings.Join([]string{
		"handler idle " + idle,
		fmt.Sprintf("ISR changes in %.0f%% of %d intervals", 100*s.IsrChangeFraction, s.Intervals),
		fmt.Sprintf("acked %.0f/s of %.0f/s offered", s.AckedPerSec, s.OfferedPerSec),
		fmt.Sprintf("produce p99 %.0f ms", s.ProduceP99Ms),
	}, ", ")
}
