package lab

import (
	"context"
	"fmt"
	"strings"
)

// Seed 002's throughput-limit finder: for a fixed record size, binary-search
// the number of producers (each at a fixed rate, so traffic grows linearly)
// over [0, max] until the interval is small; a point that overloads the
// cluster becomes the new upper bound, one that does not the new lower
// bound. The safe lower bound is the limit.

// Signals are what one point's observation window showed.
type Signals struct {
	// HandlerIdle is the mean RequestHandlerAvgIdlePercent over the
	// brokers' samples (a fraction, 0..1); HandlerIdleMin the lowest.
	HandlerIdle    float64 `json:"handler_idle"`
	HandlerIdleMin float64 `json:"handler_idle_min"`
	// NoIdle: the brokers reported no handler idle metric.
	NoIdle bool `json:"no_idle_metric,omitempty"`
	// IsrChangeFraction is the fraction of the sampling intervals in which
	// some broker shrank or expanded an ISR.
	IsrChangeFraction float64 `json:"isr_change_fraction"`
	Intervals         int     `json:"intervals"`
	ProduceP99Ms      float64 `json:"produce_p99_ms"`
	AckedPerSec       float64 `json:"acked_per_s"`
	OfferedPerSec     float64 `json:"offered_per_s"`
	AckedBytesPerSec  float64 `json:"acked_bytes_per_s"`
}

// Thresholds decide when a point overloads.
type Thresholds struct {
	// HandlerIdle: overloaded when the mean handler idle drops below it
	// (default 0.20).
	HandlerIdle float64 `json:"handler_idle"`
	// IsrChangeFraction: overloaded when ISR changes happen in more than
	// this fraction of the sampling intervals (default 0.50).
	IsrChangeFraction float64 `json:"isr_change_fraction"`
	// ProduceP99Ms: overloaded when the worst interval's produce p99
	// exceeds it; 0 disables it.
	ProduceP99Ms float64 `json:"produce_p99_ms,omitempty"`
	// MinAckedRatio: overloaded when the acked rate falls below this
	// fraction of the offered rate (the cluster cannot keep up); 0
	// disables it.
	MinAckedRatio float64 `json:"min_acked_ratio,omitempty"`
}

// DefaultThresholds are seed 002's.
func DefaultThresholds() Thresholds {
	return Thresholds{HandlerIdle: 0.20, IsrChangeFraction: 0.50}
}

// Overloaded reports whether s overloads under t, and why.
func (t Thresholds) Overloaded(s Signals) (bool, []string) {
	var why []string
	if s.HandlerIdle < t.HandlerIdle {
		why = append(why, fmt.Sprintf("handler idle %.0f%% < %.0f%%", 100*s.HandlerIdle, 100*t.HandlerIdle))
	}
	if s.IsrChangeFraction > t.IsrChangeFraction {
		why = append(why, fmt.Sprintf("ISR changes in %.0f%% of intervals > %.0f%%", 100*s.IsrChangeFraction, 100*t.IsrChangeFraction))
	}
	if t.ProduceP99Ms > 0 && s.ProduceP99Ms > t.ProduceP99Ms {
		why = append(why, fmt.Sprintf("produce p99 %.0f ms > %.0f ms", s.ProduceP99Ms, t.ProduceP99Ms))
	}
	if t.MinAckedRatio > 0 && s.OfferedPerSec > 0 && s.AckedPerSec < t.MinAckedRatio*s.OfferedPerSec {
		why = append(why, fmt.Sprintf("acked %.0f/s < %.0f%% of offered %.0f/s", s.AckedPerSec, 100*t.MinAckedRatio, s.OfferedPerSec))
	}
	return len(why) > 0, why
}

// Probe measures one point: n producers at the search's per-producer rate
// and record size.
type Probe func(ctx context.Context, recordSize, producers int) (Signals, error)

// Point is one measured point of a search.
type Point struct {
	Producers  int      `json:"producers"`
	Signals    Signals  `json:"signals"`
	Overloaded bool     `json:"overloaded"`
	Why        []string `json:"why,omitempty"`
	Dir        string   `json:"dir,omitempty"`
}

// Search is one record size's binary search.
type Search struct {
	RecordSize int `json:"record_size"`
	// Lo is the largest producer count known safe (0: none measured
	// safe), Hi the smallest known to overload (MaxProducers+1 when none
	// did: the limit is at least Lo, the search's ceiling).
	Lo int `json:"lo"`
	Hi int `json:"hi"`
	// Ceiling is set when even MaxProducers did not overload.
	Ceiling bool `json:"ceiling,omitempty"`
	// Done is set when the interval closed; false when the search was
	// stopped (the bounds are what was measured).
	Done   bool    `json:"done"`
	Points []Point `json:"points"`
	// LimitPerSec and LimitBytesPerSec are the safe bound's offered
	// traffic (Lo producers × rate), in total and per broker.
	LimitPerSec               float64 `json:"limit_per_s"`
	LimitBytesPerSec          float64 `json:"limit_bytes_per_s"`
	LimitPerSecPerBroker      float64 `json:"limit_per_s_per_broker"`
	LimitBytesPerSecPerBroker float64 `json:"limit_bytes_per_s_per_broker"`
}

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

// SetLimit fills in the safe bound's traffic for a per-producer rate
// (records/s) on a cluster of brokers.
func (s *Search) SetLimit(rate float64, brokers int) {
	s.LimitPerSec = float64(s.Lo) * rate
	s.LimitBytesPerSec = s.LimitPerSec * float64(s.RecordSize)
	if brokers > 0 {
		s.LimitPerSecPerBroker = s.LimitPerSec / float64(brokers)
		s.LimitBytesPerSecPerBroker = s.LimitBytesPerSec / float64(brokers)
	}
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
