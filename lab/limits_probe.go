package lab

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/isrlab/isrlab/series"
	"github.com/isrlab/isrlab/workloads"
)

// LimitsConfig is the cluster and traffic every point of a limit search
// shares: only the record size and the number of producers vary.
type LimitsConfig struct {
	Brokers        int
	ConsumerGroups int     // default 5: reads = 5 × writes (seed 002)
	Rate           float64 // records/s per producer
	// Window is each point's observation window, after Warmup (default
	// 5 s) of connecting and batching that is left out.
	Window      time.Duration
	Warmup      time.Duration
	Acks        string // default "1"
	Linger      time.Duration
	Compression string // "" none: the payloads go to the brokers as they are
	// Payload is the rate workload's payload: random (default) or
	// compressible.
	Payload string
	Backend string
	// Secured runs every point on a secured cluster (TLS and SASL, as the
	// secured preset): the cost of encryption and authentication is part
	// of the limit.
	Secured    bool
	ResultsDir string // the points' run directories go here
	Out        func(string, ...any)
}

func (c LimitsConfig) withDefaults() LimitsConfig {
	if c.Brokers == 0 {
		c.Brokers = 3
	}
	if c.ConsumerGroups == 0 {
		c.ConsumerGroups = 5
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.Window == 0 {
		c.Window = 20 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 5 * time.Second
	}
	if c.Acks == "" {
		c.Acks = "1"
	}
	if c.Payload == "" {
		c.Payload = workloads.PayloadRandom
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Millisecond
	}
	return c
}

// LimitScenario is the rate scenario of one point: partitions = 10 ×
// brokers at replication factor min(3, brokers). The brokers place new
// topics as Kafka does (a preferred leader per partition round-robin over
// the brokers), so each broker leads exactly 10 partitions.
func LimitScenario(c LimitsConfig, recordSize, producers int) (Scenario, error) {
	c = c.withDefaults()
	rf := min(3, c.Brokers)
	comp := ""
	if c.Compression != "" {
		comp = fmt.Sprintf("\n  compression.type: %q", c.Compression)
	}
	backend := ""
	if c.Backend != "" {
		backend = fmt.Sprintf("\n  backend: %s", c.Backend)
	}
	if c.Secured {
		backend += "\n  secured: true"
	}
	y := fmt.Sprintf(`name: limits/size-%d/producers-%d
description: limit search point, %d producers x %g records/s of %d bytes, %d consumer groups
cluster:
  coordinators: 1
  brokers: %d%s
topic:
  partitions: %d
  replication.factor: %d
workload:
  type: rate
  producers: %d
  rate: %g
  record.size: %d
  payload: %q
  linger: %s
  acks: %q
  consumer.groups: %d%s
duration: %s
expect:
  valid: any
`, recordSize, producers, producers, c.Rate, recordSize, c.ConsumerGroups,
		c.Brokers, backend, 10*c.Brokers, rf, producers, c.Rate, recordSize, c.Payload, c.Linger, c.Acks, c.ConsumerGroups, comp, c.Warmup+c.Window)
	return Parse("", "limits", []byte(y))
}

// LimitProbe returns the probe that runs each point as a lab.Run of its
// generated rate scenario and reads the signals from its metrics.jsonl.
// dirs, if not nil, receives each point's run directory.
func LimitProbe(c LimitsConfig, o Options, dirs func(string)) Probe {
	c = c.withDefaults()
	if o.ResultsDir == "" {
		o.ResultsDir = c.ResultsDir
	}
	return func(ctx context.Context, recordSize, producers int) (Signals, error) {
		if producers == 0 {
			// No traffic cannot overload.
			return Signals{HandlerIdle: 1, HandlerIdleMin: 1}, nil
		}
		sc, err := LimitScenario(c, recordSize, producers)
		if err != nil {
			return Signals{}, err
		}
		res, err := Run(ctx, sc, o)
		if dirs != nil && res.Dir != "" {
			dirs(res.Dir)
		}
		if err != nil {
			return Signals{}, err
		}
		if err := ctx.Err(); err != nil {
			return Signals{}, err
		}
		_, ss, err := series.ReadFile(filepath.Join(res.Dir, series.FileName))
		if err != nil {
			return Signals{}, fmt.Errorf("%w: %v", ErrInternal, err)
		}
		return PointSignals(ss, c.Warmup.Seconds(), recordSize), nil
	}
}

// PointSignals sums up a point's samples after warmup (seconds from the
// start): the handler idle over the brokers' samples, the fraction of the
// sampling intervals (whole seconds) in which any broker changed an ISR,
// and the workload's throughput and worst produce p99.
func PointSignals(ss []series.Sample, warmup float64, recordSize int) Signals {
	sum := series.Summarize(ss, nil, series.Options{Warmup: warmup})
	b := sum.Baseline
	sig := Signals{HandlerIdle: b.HandlerIdle, HandlerIdleMin: b.HandlerIdleMin, ProduceP99Ms: b.ProduceP99Ms,
		AckedPerSec: b.AckedPerSec, OfferedPerSec: b.OfferedPerSec, AckedBytesPerSec: b.AckedPerSec * float64(recordSize)}
	dts := series.Intervals(ss)
	changed := map[int64]bool{}
	for i, s := range ss {
		if s.Src == series.SrcWorkload || s.Values["up"] != 1 {
			continue
		}
		mid := s.T - dts[i]/2
		if mid < warmup {
			continue
		}
		k := int64(math.Floor(mid))
		c := s.Values["IsrShrinksPerSec"] + s.Values["IsrExpandsPerSec"]
		changed[k] = changed[k] || c*dts[i] > 0.5
	}
	n := 0
	for _, c := range changed {
		if c {
			n++
		}
	}
	sig.Intervals = len(changed)
	if len(changed) > 0 {
		sig.IsrChangeFraction = float64(n) / float64(len(changed))
	}
	if _, ok := firstIdle(ss); !ok {
		// No idle metric: never read as overloaded by it.
		sig.HandlerIdle, sig.HandlerIdleMin, sig.NoIdle = 1, 1, true
	}
	return sig
}

func firstIdle(ss []series.Sample) (float64, bool) {
	for _, s := range ss {
		if v, ok := s.Values["RequestHandlerAvgIdlePercent"]; ok {
			return v, true
		}
	}
	return 0, false
}
