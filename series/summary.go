package series

import (
	"math"
	"sort"
	"strings"
)

// Window is one fault's time in effect, in seconds from the run's start
// (the checker's fault windows); End < 0 means it was never healed.
type Window struct {
	Name  string
	Start float64
	End   float64
}

// Options tune Summarize.
type Options struct {
	// Warmup is left out at the start of the baseline, while clients
	// connect and batches grow (default 3 s).
	Warmup float64
}

// Phase is what the samples show over one stretch of a run. Throughput
// and latency come from the workload's samples, the rest from the
// brokers'. A sample belongs to the phase that holds its interval's
// middle.
type Phase struct {
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
	// Samples is the number of workload samples in the phase,
	// BrokerSamples the number of brokers' samples that answered: without
	// any, the phase says nothing of ISR churn, handler idle or lock waits.
	Samples        int     `json:"samples"`
	BrokerSamples  int     `json:"broker_samples"`
	AckedPerSec    float64 `json:"acked_per_s"`     // mean throughput
	MinAckedPerSec float64 `json:"min_acked_per_s"` // the worst interval
	OfferedPerSec  float64 `json:"offered_per_s"`
	ProduceP99Ms   float64 `json:"produce_p99_ms"` // the worst interval's
	// IsrShrinks and IsrExpands are counted over every broker.
	IsrShrinks       float64 `json:"isr_shrinks"`
	IsrExpands       float64 `json:"isr_expands"`
	FailedIsrUpdates float64 `json:"failed_isr_updates"`
	// HandlerIdle is the mean of RequestHandlerAvgIdlePercent over the
	// brokers' samples, HandlerIdleMin the lowest one.
	HandlerIdle    float64 `json:"handler_idle"`
	HandlerIdleMin float64 `json:"handler_idle_min"`
	// LockWaitMsPerSec is the mean over intervals of the read-lock wait
	// summed over brokers; WriteLockWaitMsPerSec the same for the write lock.
	LockWaitMsPerSec      float64 `json:"lock_wait_ms_per_s"`
	WriteLockWaitMsPerSec float64 `json:"write_lock_wait_ms_per_s"`
	// FetchFollowerP99Ms is the worst interval's p99 on any broker, and
	// FetchFollowerMeanMs the mean of the brokers' interval means.
	FetchFollowerP99Ms  float64 `json:"fetch_follower_p99_ms"`
	FetchFollowerMeanMs float64 `json:"fetch_follower_mean_ms"`
	MaxLag              float64 `json:"max_lag"`
	// StalledFollowerPartitions is the most any broker reported at once:
	// above 0 the system under test wedged (a follower stopped fetching
	// without a fault to explain it), whatever the verdict says.
	StalledFollowerPartitions float64 `json:"stalled_follower_partitions,omitempty"`
	// IsrDrops counts, per leader and dropped replica ("b1>b2"), how often
	// an ISR shrink dropped the replica.
	IsrDrops map[string]float64 `json:"isr_drops,omitempty"`
}

// Summary compares the fault period with the baseline before it.
type Summary struct {
	// Faults is the number of fault windows.
	Faults int `json:"faults"`
	// Baseline runs from Warmup to the first fault's start.
	Baseline Phase `json:"baseline"`
	// DuringFaults runs from the first fault's start to the last fault's
	// end: an intermittent fault's gaps are part of it, as churn goes on
	// between its bursts.
	DuringFaults Phase `json:"during_faults"`
	// AfterHeal runs from the last fault's end to the last sample.
	AfterHeal Phase `json:"after_heal"`
	// DuringRatio and AfterRatio are the phases' mean throughput over the
	// baseline's; 0 when either side has no workload samples.
	DuringRatio float64 `json:"during_ratio"`
	AfterRatio  float64 `json:"after_ratio"`
}

// HasThroughput reports whether the summary can compare throughput: the
// workload's samples cover the baseline and the fault period.
func (s *Summary) HasThroughput() bool {
	return s != nil && s.Baseline.Samples > 0 && s.DuringFaults.Samples > 0 && s.Baseline.AckedPerSec > 0
}

// Summarize splits the samples at the fault windows and sums up each part.
// It is a pure function of its inputs.
func Summarize(samples []Sample, faults []Window, o Options) Summary {
	if o.Warmup <= 0 {
		o.Warmup = 3
	}
	end := 0.0
	for _, s := range samples {
		end = max(end, s.T)
	}
	var sum Summary
	sum.Faults = len(faults)
	first, last := math.Inf(1), math.Inf(-1)
	for _, w := range faults {
		first = min(first, w.Start)
		e := w.End
		if e < 0 {
			e = end
		}
		last = max(last, e)
	}
	if len(faults) == 0 {
		first, last = end, end
	}
	sum.Baseline = summarize(samples, o.Warmup, first)
	sum.DuringFaults = summarize(samples, first, last)
	sum.AfterHeal = summarize(samples, last, end)
	if sum.Baseline.Samples > 0 && sum.Baseline.AckedPerSec > 0 {
		if sum.DuringFaults.Samples > 0 {
			sum.DuringRatio = sum.DuringFaults.AckedPerSec / sum.Baseline.AckedPerSec
		}
		if sum.AfterHeal.Samples > 0 {
			sum.AfterRatio = sum.AfterHeal.AckedPerSec / sum.Baseline.AckedPerSec
		}
	}
	return sum
}

// Intervals returns each sample with its interval's length: the time since
// the previous answered sample of the same src (for the first, the median
// of the others, or 1 s). A scrape that got no answer ("up" 0) does not
// end an interval: the next answer's rates cover the gap, as the scraper
// computes them from the last answer before it.
func Intervals(samples []Sample) []float64 {
	out := make([]float64, len(samples))
	last := map[string]float64{}
	var firsts []int
	var all []float64
	for i, s := range samples {
		if up, ok := s.Values["up"]; ok && up == 0 {
			if t, ok := last[s.Src]; ok && s.T > t {
				out[i] = s.T - t
			}
			continue
		}
		if t, ok := last[s.Src]; ok && s.T > t {
			out[i] = s.T - t
			all = append(all, out[i])
		} else {
			firsts = append(firsts, i)
		}
		last[s.Src] = s.T
	}
	typical := 1.0
	if len(all) > 0 {
		sort.Float64s(all)
		typical = all[len(all)/2]
	}
	for _, i := range firsts {
		out[i] = typical
	}
	return out
}

func summarize(samples []Sample, from, to float64) Phase {
	p := Phase{From: from, To: to, HandlerIdleMin: math.NaN()}
	if to <= from {
		p.HandlerIdleMin = 0
		return p
	}
	dts := Intervals(samples)
	var acked, offered float64
	var idleSum float64
	var idleN int
	var lockSum, wlockSum, ffMeanSum float64
	var ffMeanN int
	brokerSamples := map[string]int{}
	for i, s := range samples {
		dt := dts[i]
		mid := s.T - dt/2
		if mid < from || mid >= to {
			continue
		}
		v := s.Values
		if s.Src == SrcWorkload {
			p.Samples++
			a := v["acked_per_s"]
			acked += a
			offered += v["offered_per_s"]
			if p.Samples == 1 || a < p.MinAckedPerSec {
				p.MinAckedPerSec = a
			}
			p.ProduceP99Ms = max(p.ProduceP99Ms, v["produce_p99_ms"])
			continue
		}
		if v["up"] != 1 {
			continue
		}
		brokerSamples[s.Src]++
		p.BrokerSamples++
		p.IsrShrinks += v["IsrShrinksPerSec"] * dt
		p.IsrExpands += v["IsrExpandsPerSec"] * dt
		p.FailedIsrUpdates += v["FailedIsrUpdatesPerSec"] * dt
		if idle, ok := v["RequestHandlerAvgIdlePercent"]; ok {
			idleSum += idle
			idleN++
			if math.IsNaN(p.HandlerIdleMin) || idle < p.HandlerIdleMin {
				p.HandlerIdleMin = idle
			}
		}
		lockSum += v["LockWaitMsPerSec.read"]
		wlockSum += v["LockWaitMsPerSec.write"]
		p.FetchFollowerP99Ms = max(p.FetchFollowerP99Ms, v["FetchFollowerP99Ms"])
		if m, ok := v["FetchFollowerMeanMs"]; ok {
			ffMeanSum += m
			ffMeanN++
		}
		p.MaxLag = max(p.MaxLag, v["MaxLag"])
		p.StalledFollowerPartitions = max(p.StalledFollowerPartitions, v["StalledFollowerPartitions"])
		for k, n := range v {
			if id, ok := strings.CutPrefix(k, "IsrDropped."); ok && n > 0 {
				if p.IsrDrops == nil {
					p.IsrDrops = map[string]float64{}
				}
				p.IsrDrops[s.Src+">b"+id] += n
			}
		}
	}
	if p.Samples > 0 {
		p.AckedPerSec = acked / float64(p.Samples)
		p.OfferedPerSec = offered / float64(p.Samples)
	}
	if idleN > 0 {
		p.HandlerIdle = idleSum / float64(idleN)
	} else {
		p.HandlerIdleMin = 0
	}
	// The brokers' waits add up per interval: the mean per broker sample
	// times the number of brokers.
	if n := len(brokerSamples); n > 0 {
		total := 0
		for _, c := range brokerSamples {
			total += c
		}
		perBroker := float64(total) / float64(n)
		p.LockWaitMsPerSec = lockSum / perBroker
		p.WriteLockWaitMsPerSec = wlockSum / perBroker
	}
	if ffMeanN > 0 {
		p.FetchFollowerMeanMs = ffMeanSum / float64(ffMeanN)
	}
	return p
}
