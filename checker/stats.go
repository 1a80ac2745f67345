package checker

import (
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/history"
)

// Availability is the ok fraction of send and poll operations.
type Availability struct {
	Overall      Ratio `json:"overall"`
	DuringFaults Ratio `json:"during_faults"`
	// AfterHeal counts operations invoked after the last fault was healed;
	// it is empty when the history had no faults.
	AfterHeal Ratio `json:"after_heal"`
	Faults    int   `json:"faults"`
}

// Ratio is ok out of total.
type Ratio struct {
	OK       int64   `json:"ok"`
	Total    int64   `json:"total"`
	Fraction float64 `json:"fraction"`
}

func (r *Ratio) add(ok bool) {
	r.Total++
	if ok {
		r.OK++
	}
}

func (r Ratio) done() Ratio {
	if r.Total > 0 {
		r.Fraction = float64(r.OK) / float64(r.Total)
	}
	return r
}

// availTracker follows fault windows. A fault "start-X" is active from its
// invocation until a "stop-X" (or "heal") completes; operations are placed
// by their invocation time.
type availTracker struct {
	active    map[string]int64 // fault name -> start time
	faults    int
	healed    bool
	overall   Ratio
	during    Ratio
	sinceHeal Ratio
	// windows of [start, end) times, for ops whose invoke preceded events
	// recorded later (ops are placed at completion, by invoke time).
	windows []window
	named   []FaultWindow
}

// maxFaultWindows bounds the fault windows kept for the timeline.
const maxFaultWindows = 10000

// FaultWindow is one fault's time in effect, in seconds from the run's
// start; End is -1 when it was never healed.
type FaultWindow struct {
	Name  string  `json:"name"`
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type window struct{ start, end int64 }

func (t *availTracker) fault(op *history.Op) {
	if t.active == nil {
		t.active = map[string]int64{}
	}
	switch {
	case strings.HasPrefix(op.F, "start-") && op.Type == history.Invoke:
		name := strings.TrimPrefix(op.F, "start-")
		if _, on := t.active[name]; !on {
			t.active[name] = op.Time
			t.faults++
			if len(t.active) == 1 {
				t.windows = append(t.windows, window{start: op.Time, end: math.MaxInt64})
			}
		}
	case (strings.HasPrefix(op.F, "stop-") || op.F == history.FHeal) && op.Type != history.Invoke && op.Type != history.Fail:
		stop := func(name string, start int64) {
			if len(t.named) < maxFaultWindows {
				t.named = append(t.named, FaultWindow{Name: name, Start: secs(start), End: secs(op.Time)})
			}
			delete(t.active, name)
		}
		if op.F == history.FHeal {
			for _, name := range sortedKeys(t.active) {
				stop(name, t.active[name])
			}
		} else if start, on := t.active[strings.TrimPrefix(op.F, "stop-")]; on {
			stop(strings.TrimPrefix(op.F, "stop-"), start)
		}
		if len(t.active) == 0 && len(t.windows) > 0 && t.windows[len(t.windows)-1].end == math.MaxInt64 {
			t.windows[len(t.windows)-1].end = op.Time
			t.sinceHeal = Ratio{}
			t.healed = true
		}
	}
}

// record counts an operation invoked at time inv.
func (t *availTracker) record(inv int64, ok bool) {
	t.overall.add(ok)
	if t.inFault(inv) {
		t.during.add(ok)
		return
	}
	if t.healed && inv >= t.windows[len(t.windows)-1].end {
		t.sinceHeal.add(ok)
	}
}

func (t *availTracker) inFault(at int64) bool {
	// Windows are in time order; ops complete soon after invoking, so the
	// last windows are the ones to look at.
	for i := len(t.windows) - 1; i >= 0; i-- {
		w := t.windows[i]
		if at >= w.end {
			return false
		}
		if at >= w.start {
			return true
		}
	}
	return false
}

// faultWindows returns the windows of every fault, still-active ones open.
func (t *availTracker) faultWindows() []FaultWindow {
	out := append([]FaultWindow(nil), t.named...)
	for _, name := range sortedKeys(t.active) {
		out = append(out, FaultWindow{Name: name, Start: secs(t.active[name]), End: -1})
	}
	return out
}

// Timeline is what happened per time bucket, for plots: outcomes of sends
// and polls by completion time, and the fault windows.
type Timeline struct {
	BucketSeconds float64       `json:"bucket_s"`
	Buckets       []TimeBucket  `json:"buckets"`
	Faults        []FaultWindow `json:"faults,omitempty"`
}

// TimeBucket counts completions in [T, T+BucketSeconds).
type TimeBucket struct {
	T         float64 `json:"t_s"`
	SendOK    int64   `json:"send_ok"`
	SendFail  int64   `json:"send_fail"`
	SendInfo  int64   `json:"send_info"`
	PollOK    int64   `json:"poll_ok"`
	PollOther int64   `json:"poll_other"`
	Records   int64   `json:"records"`
}

// timeline buckets completions by second; result() merges buckets so that
// a long run has at most maxBuckets.
type timeline struct {
	buckets []TimeBucket
}

const (
	bucketNanos = int64(1e9)
	maxBuckets  = 2000
	// maxTimeline stops bucketing past 30 days, against corrupt times.
	maxTimeline = 30 * 24 * 3600
)

func (tl *timeline) add(op *history.Op, records int) {
	if op.Time < 0 {
		return
	}
	i := op.Time / bucketNanos
	if i >= maxTimeline {
		return
	}
	for int64(len(tl.buckets)) <= i {
		tl.buckets = append(tl.buckets, TimeBucket{T: float64(len(tl.buckets))})
	}
	b := &tl.buckets[i]
	switch {
	case op.F == history.FSend && op.Type == history.OK:
		b.SendOK++
	case op.F == history.FSend && op.Type == history.Fail:
		b.SendFail++
	case op.F == history.FSend:
		b.SendInfo++
	case op.Type == history.OK:
		b.PollOK++
	default:
		b.PollOther++
	}
	b.Records += int64(records)
}

func (tl *timeline) result(faults []FaultWindow) Timeline {
	k := (len(tl.buckets) + maxBuckets - 1) / maxBuckets
	if k < 1 {
		k = 1
	}
	out := Timeline{BucketSeconds: float64(k), Faults: faults, Buckets: []TimeBucket{}}
	for i, b := range tl.buckets {
		if i%k == 0 {
			out.Buckets = append(out.Buckets, TimeBucket{T: float64(i)})
		}
		m := &out.Buckets[len(out.Buckets)-1]
		m.SendOK += b.SendOK
		m.SendFail += b.SendFail
		m.SendInfo += b.SendInfo
		m.PollOK += b.PollOK
		m.PollOther += b.PollOther
		m.Records += b.Records
	}
	return out
}

func (t *availTracker) result() Availability {
	a := Availability{Overall: t.overall.done(), DuringFaults: t.during.done(), Faults: t.faults}
	if t.healed && len(t.active) == 0 {
		a.AfterHeal = t.sinceHeal.done()
	}
	return a
}

// histogram is a log-linear latency histogram: 16 sub-buckets per power of
// two (about 6% resolution), fixed memory, deterministic.
type histogram struct {
	counts [64 * 16]int64
	n      int64
	sum    float64
	min    int64
	max    int64
}

func bucketOf(v int64) int {
	if v < 16 {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // 4..62
	sub := int(v>>(e-4)) & 15
	return (e-3)*16 + sub
}

func bucketMid(b int) float64 {
	if b < 16 {
		return float64(b)
	}
	e := b/16 + 3
	sub := b % 16
	lo := float64(int64(16+sub) << (e - 4))
	hi := float64(int64(17+sub) << (e - 4))
	return (lo + hi) / 2
}

func (h *histogram) add(ns int64) {
	if h.n == 0 || ns < h.min {
		h.min = ns
	}
	if ns > h.max {
		h.max = ns
	}
	h.n++
	h.sum += float64(ns)
	h.counts[bucketOf(ns)]++
}

// Quantiles of a latency distribution, in milliseconds.
type Quantiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func (h *histogram) q(p float64) float64 {
	rank := int64(math.Ceil(p * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			v := bucketMid(b)
			v = math.Max(v, float64(h.min))
			return math.Min(v, float64(h.max)) / 1e6
		}
	}
	return float64(h.max) / 1e6
}

func (h *histogram) quantiles() Quantiles {
	if h.n == 0 {
		return Quantiles{}
	}
	return Quantiles{Count: h.n, Mean: h.sum / float64(h.n) / 1e6, Min: float64(h.min) / 1e6,
		P50: h.q(0.5), P90: h.q(0.9), P99: h.q(0.99), P999: h.q(0.999), Max: float64(h.max) / 1e6}
}

// ClusterSummary counts changes in the observed cluster state: leader
// changes, ISR shrinks and expands, and the highest leader epoch, in all
// and per partition.
type ClusterSummary struct {
	Events        int64                    `json:"events"`
	LeaderChanges int64                    `json:"leader_changes"`
	ISRShrinks    int64                    `json:"isr_shrinks"`
	ISRExpands    int64                    `json:"isr_expands"`
	Partitions    map[string]PartitionFlux `json:"partitions,omitempty"`
}

// PartitionFlux is one partition's share of a ClusterSummary.
type PartitionFlux struct {
	LeaderChanges int64 `json:"leader_changes"`
	ISRShrinks    int64 `json:"isr_shrinks"`
	ISRExpands    int64 `json:"isr_expands"`
	MaxEpoch      int32 `json:"max_epoch"`
	MaxHW         int64 `json:"max_hw"`
}

type partView struct {
	seen   bool
	leader int32
	isr    map[int32]bool
	flux   PartitionFlux
}

type clusterTracker struct {
	events int64
	parts  map[int32]*partView
}

func (c *clusterTracker) add(op *history.Op) {
	if op.Partition < 0 {
		return
	}
	c.events++
	if c.parts == nil {
		c.parts = map[int32]*partView{}
	}
	pv := c.parts[op.Partition]
	if pv == nil {
		pv = &partView{flux: PartitionFlux{MaxEpoch: -1, MaxHW: -1}}
		c.parts[op.Partition] = pv
	}
	if op.Leader >= 0 {
		if pv.seen && op.Leader != pv.leader {
			pv.flux.LeaderChanges++
		}
		pv.leader, pv.seen = op.Leader, true
	}
	if op.ISR != nil {
		next := make(map[int32]bool, len(op.ISR))
		for _, r := range op.ISR {
			next[r] = true
		}
		if pv.isr != nil {
			for r := range pv.isr {
				if !next[r] {
					pv.flux.ISRShrinks++
					break
				}
			}
			for r := range next {
				if !pv.isr[r] {
					pv.flux.ISRExpands++
					break
				}
			}
		}
		pv.isr = next
	}
	pv.flux.MaxEpoch = max(pv.flux.MaxEpoch, op.Epoch)
	pv.flux.MaxHW = max(pv.flux.MaxHW, op.HW)
}

func (c *clusterTracker) result() ClusterSummary {
	s := ClusterSummary{Events: c.events}
	if len(c.parts) == 0 {
		return s
	}
	s.Partitions = map[string]PartitionFlux{}
	for p, pv := range c.parts {
		s.LeaderChanges += pv.flux.LeaderChanges
		s.ISRShrinks += pv.flux.ISRShrinks
		s.ISRExpands += pv.flux.ISRExpands
		s.Partitions[strconv.Itoa(int(p))] = pv.flux
	}
	return s
}
