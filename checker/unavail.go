package checker

import (
	"math"
	"slices"
	"time"
)

// Unavailability is, per partition, how long sends to it were attempted
// without any succeeding. Availability ratios miss this: a client that
// retries through a 15 s outage still ends every send ok.
//
// A window on a partition starts when a client starts waiting on it: at
// the earliest invocation of a send on the partition that completed (or was
// still pending) after the previous ok completion on it, but not before
// that ok. It ends at the next ok completion on the partition, or, when
// there is none, at the end of the send phase: the time of the history's
// last send invocation or completion, on any partition (the final drain
// comes after it). Time in which nobody sent to a partition after a success
// does not count; once a send is waiting, the partition counts as
// unavailable until one succeeds, since nothing shows it recovered before.
// A partition where sends were attempted and none succeeded is thus
// unavailable from its first send to the end of the send phase.
//
// Only windows longer than the threshold (Options.UnavailableAfter) count,
// so that ordinary latency does not. Sends whose partition neither the
// invocation nor the completion names are not counted. Times are seconds
// from the start of the history.
type Unavailability struct {
	ThresholdSeconds float64 `json:"threshold_s"`
	// MaxWindow is the longest window of any partition; MaxPartition is
	// that partition (the lowest on a tie), -1 when no window counted.
	MaxWindow    float64 `json:"max_window_s"`
	MaxPartition int32   `json:"max_partition"`
	// Partitions lists, in order, the topic's partitions (from the history
	// header or Options.Partitions) and any other partition a send named.
	Partitions []PartitionUnavailability `json:"partitions"`
}

// PartitionUnavailability is one partition's share of Unavailability.
// Longest, LongestStart and LongestEnd are 0 when Windows is 0.
type PartitionUnavailability struct {
	Partition int32 `json:"partition"`
	// Sends counts the sends on the partition that completed (ok, fail or
	// info), SendsOK the ok ones, SendsPending those never completed.
	Sends        int64 `json:"sends"`
	SendsOK      int64 `json:"sends_ok"`
	SendsPending int64 `json:"sends_pending"`
	// Windows is the number of windows above the threshold.
	Windows      int64   `json:"windows"`
	Longest      float64 `json:"longest_s"`
	LongestStart float64 `json:"longest_start_s"`
	LongestEnd   float64 `json:"longest_end_s"`
	// Total is the sum of the windows above the threshold.
	Total float64 `json:"total_s"`
}

// DefaultUnavailableAfter is the default Options.UnavailableAfter.
const DefaultUnavailableAfter = time.Second

const (
	noStart = math.MaxInt64 // no open window
	noEnd   = math.MinInt64 // no send yet
)

// partGap is one partition's state: the last ok, the attempts since, and
// the windows so far.
type partGap struct {
	listed bool
	hasOK  bool
	lastOK int64
	// from is the earliest invocation of a send that completed, or was
	// pending at the end, since lastOK: the start of the open window.
	from    int64
	sends   int64
	ok      int64
	pending int64
	windows int64
	longest [2]int64
	total   int64
}

// unavailTracker keeps O(partitions) state and O(1) work per send.
type unavailTracker struct {
	threshold int64
	parts     []partGap
	far       map[int32]*partGap // partitions >= 1<<16
	end       int64              // latest send invocation or completion
}

func newUnavailTracker(threshold time.Duration, partitions int) unavailTracker {
	t := unavailTracker{threshold: int64(threshold), end: noEnd}
	// A corrupt header must not allocate: partitions past the slice's range
	// are listed only when a send names them.
	for p := range min(partitions, 1<<16) {
		t.part(int32(p)).listed = true
	}
	return t
}

func (t *unavailTracker) part(p int32) *partGap {
	if p >= 1<<16 {
		g := t.far[p]
		if g == nil {
			if t.far == nil {
				t.far = map[int32]*partGap{}
			}
			g = &partGap{from: noStart}
			t.far[p] = g
		}
		return g
	}
	for int(p) >= len(t.parts) {
		t.parts = append(t.parts, partGap{from: noStart})
	}
	return &t.parts[p]
}

// invoked notes a send invocation at time at, for the end of the send phase.
func (t *unavailTracker) invoked(at int64) {
	t.end = max(t.end, at)
}

// completed notes a send on partition part invoked at inv and completed at
// done; ok says whether it succeeded.
func (t *unavailTracker) completed(part int32, inv, done int64, ok bool) {
	t.end = max(t.end, done)
	if part < 0 {
		return
	}
	g := t.part(part)
	g.listed = true
	g.sends++
	g.from = min(g.from, inv)
	if !ok {
		return
	}
	g.ok++
	t.window(g, done)
	if !g.hasOK || done > g.lastOK {
		g.lastOK = done
	}
	g.hasOK = true
	g.from = noStart
}

// window counts the window that ends at end, if it passes the threshold.
func (t *unavailTracker) window(g *partGap, end int64) {
	if g.from == noStart {
		return
	}
	start := g.from
	if g.hasOK {
		start = max(start, g.lastOK)
	}
	if end-start <= t.threshold {
		return
	}
	g.windows++
	g.total += end - start
	if end-start > g.longest[1]-g.longest[0] {
		g.longest = [2]int64{start, end}
	}
}

// pendingAt notes a send on part invoked at inv that never completed.
func (t *unavailTracker) pendingAt(part int32, inv int64) {
	if part < 0 {
		return
	}
	g := t.part(part)
	g.listed = true
	g.pending++
	g.from = min(g.from, inv)
}

func (t *unavailTracker) result() Unavailability {
	u := Unavailability{ThresholdSeconds: secs(t.threshold), MaxPartition: -1, Partitions: []PartitionUnavailability{}}
	// g is a copy: closing the open window leaves the tracker as it was.
	add := func(p int32, g partGap) {
		if !g.listed {
			return
		}
		t.window(&g, t.end)
		pu := PartitionUnavailability{Partition: p, Sends: g.sends, SendsOK: g.ok, SendsPending: g.pending,
			Windows: g.windows, Total: secs(g.total)}
		if g.windows > 0 {
			pu.Longest = secs(g.longest[1] - g.longest[0])
			pu.LongestStart, pu.LongestEnd = secs(g.longest[0]), secs(g.longest[1])
			if pu.Longest > u.MaxWindow {
				u.MaxWindow, u.MaxPartition = pu.Longest, p
			}
		}
		u.Partitions = append(u.Partitions, pu)
	}
	for i, g := range t.parts {
		add(int32(i), g)
	}
	far := make([]int32, 0, len(t.far))
	for p := range t.far {
		far = append(far, p)
	}
	slices.Sort(far)
	for _, p := range far {
		add(p, *t.far[p])
	}
	return u
}
