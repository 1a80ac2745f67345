package checker

import "math"

// UnseenOverTime is Jepsen's "unseen" analysis over time: how many acknowledged
// sends no poll had returned yet, per partition and overall. A value counts
// from its send's ok completion until the completion of the first poll that
// returns it; one that no poll ever returns counts to the end (Final).
// Values read before their send's ok came back never count. Sends without
// a partition count only in Overall.
//
// The series share one bucket: bucket i covers [i*BucketSeconds,
// (i+1)*BucketSeconds) seconds from the start of the history, for every
// bucket up to the last client operation. The bucket is 1 s, doubled as
// often as needed to keep at most 2000 buckets.
type UnseenOverTime struct {
	BucketSeconds float64      `json:"bucket_s"`
	Buckets       int          `json:"buckets"`
	Overall       UnseenSeries `json:"overall"`
	// Partitions lists the topic's partitions (from the history header or
	// Options.Partitions) and any other a send or poll named, in order,
	// up to partition 1023; OmittedPartitions counts those above.
	Partitions        []UnseenSeries `json:"partitions"`
	OmittedPartitions int            `json:"omitted_partitions,omitempty"`
}

// UnseenSeries is one partition's unseen count (Partition -1: all of them).
type UnseenSeries struct {
	Partition int32 `json:"partition"`
	// Count[i] is the count at the end of bucket i, Max[i] the highest it
	// reached within bucket i.
	Count []int64 `json:"count"`
	Max   []int64 `json:"max"`
	// Final is the count at the end of the history; Peak the highest count,
	// first reached at PeakAt seconds.
	Final  int64   `json:"final"`
	Peak   int64   `json:"peak"`
	PeakAt float64 `json:"peak_at_s"`
}

// RealtimeLag is Jepsen's realtime lag: for each acknowledged value that a
// poll returned, the time from its send's ok completion to the completion
// of the first poll that returned it (0 when that poll completed first),
// placed in the bucket of that poll's completion. Values never read have no
// lag; Unseen counts them. The buckets are those of UnseenOverTime.
type RealtimeLag struct {
	BucketSeconds     float64     `json:"bucket_s"`
	Buckets           int         `json:"buckets"`
	Overall           LagSeries   `json:"overall"`
	Partitions        []LagSeries `json:"partitions"`
	OmittedPartitions int         `json:"omitted_partitions,omitempty"`
}

// LagSeries is one partition's realtime lag (Partition -1: all of them).
type LagSeries struct {
	Partition int32 `json:"partition"`
	// Count[i] values were first read in bucket i, with a mean lag of
	// Mean[i] and a longest of Max[i] seconds (both 0 when Count[i] is 0).
	Count []int64   `json:"count"`
	Mean  []float64 `json:"mean_s"`
	Max   []float64 `json:"max_s"`
	// Quantiles are over every value of the series, in milliseconds.
	Quantiles Quantiles `json:"quantiles"`
}

const (
	queueBuckets = 2000
	// queuePartitions bounds the partitions with series of their own, so
	// that a corrupt history cannot allocate series for billions.
	queuePartitions = 1024
	queueMaxTime    = maxTimeline * bucketNanos
)

type qbucket struct {
	end, max             int64
	lagN, lagSum, lagMax int64
}

type qseries struct {
	listed      bool
	unseen      int64
	peak, peakT int64
	b           []qbucket
	lat         *histogram
}

// queueTracker keeps, per series, at most queueBuckets buckets: when time
// runs past them, the bucket width doubles and neighbours merge. Changes
// come in history order; one at an earlier time than a later bucket already
// holds lands in that later bucket.
type queueTracker struct {
	width   int64
	last    int64
	all     qseries
	parts   []*qseries
	omitted map[int32]struct{}
}

func newQueueTracker(partitions int) queueTracker {
	t := queueTracker{width: bucketNanos, last: -1}
	for p := range min(max(partitions, 0), queuePartitions) {
		t.series(int32(p)).listed = true
	}
	return t
}

// series returns the series of partition p, nil for none or one omitted.
func (t *queueTracker) series(p int32) *qseries {
	if p < 0 {
		return nil
	}
	if p >= queuePartitions {
		if len(t.omitted) < 1<<16 {
			if t.omitted == nil {
				t.omitted = map[int32]struct{}{}
			}
			t.omitted[p] = struct{}{}
		}
		return nil
	}
	for int(p) >= len(t.parts) {
		t.parts = append(t.parts, nil)
	}
	if t.parts[p] == nil {
		t.parts[p] = &qseries{}
	}
	t.parts[p].listed = true
	return t.parts[p]
}

// index returns the bucket of time ns, growing the width as needed; -1 for
// a time past 30 days (a corrupt history).
func (t *queueTracker) index(ns int64) int {
	if ns >= queueMaxTime {
		return -1
	}
	ns = max(ns, 0)
	for ns/t.width >= queueBuckets {
		t.width *= 2
		t.all.merge()
		for _, s := range t.parts {
			if s != nil {
				s.merge()
			}
		}
	}
	return int(ns / t.width)
}

func (s *qseries) merge() {
	n := (len(s.b) + 1) / 2
	for j := range n {
		m := s.b[2*j]
		if 2*j+1 < len(s.b) {
			c := s.b[2*j+1]
			m.end, m.max = c.end, max(m.max, c.max)
			m.lagN, m.lagSum, m.lagMax = m.lagN+c.lagN, m.lagSum+c.lagSum, max(m.lagMax, c.lagMax)
		}
		s.b[j] = m
	}
	s.b = s.b[:n]
}

// touch makes bucket i exist; buckets nothing changed in carry the count.
func (s *qseries) touch(i int) *qbucket {
	for len(s.b) <= i {
		s.b = append(s.b, qbucket{end: s.unseen, max: s.unseen})
	}
	return &s.b[i]
}

func (s *qseries) change(i int, ns, d int64) {
	i = max(i, len(s.b)-1)
	b := s.touch(i)
	s.unseen += d
	b.end, b.max = s.unseen, max(b.max, s.unseen)
	if s.unseen > s.peak {
		s.peak, s.peakT = s.unseen, ns
	}
}

func (s *qseries) sample(i int, lag int64) {
	lag = max(lag, 0)
	b := s.touch(i)
	b.lagN++
	b.lagSum += lag
	b.lagMax = max(b.lagMax, lag)
	if s.lat == nil {
		s.lat = &histogram{}
	}
	s.lat.add(lag)
}

// seen notes a client operation at time ns: the series run to the last one.
func (t *queueTracker) seen(ns int64) {
	if t.index(ns) >= 0 {
		t.last = max(t.last, max(ns, 0))
	}
}

// acked notes an ok send on part at ns whose value no poll returned yet.
func (t *queueTracker) acked(part int32, ns int64) {
	i := t.index(ns)
	if i < 0 {
		return
	}
	t.all.change(i, ns, 1)
	if s := t.series(part); s != nil {
		s.change(i, ns, 1)
	}
}

// firstRead notes the first poll, completed at ns, that returned a value
// counted by acked, lag after its ack.
func (t *queueTracker) firstRead(part int32, ns, lag int64) {
	i := t.index(ns)
	if i < 0 {
		return
	}
	t.all.change(i, ns, -1)
	t.all.sample(i, lag)
	if s := t.series(part); s != nil {
		s.change(i, ns, -1)
		s.sample(i, lag)
	}
}

// lag notes a lag sample alone, at the time of the read it belongs to (a
// value read before its ack came back).
func (t *queueTracker) lag(part int32, ns, lag int64) {
	i := t.index(ns)
	if i < 0 {
		return
	}
	t.all.sample(i, lag)
	if s := t.series(part); s != nil {
		s.sample(i, lag)
	}
}

func (t *queueTracker) result() (UnseenOverTime, RealtimeLag) {
	n := 0
	if t.last >= 0 {
		n = t.index(t.last) + 1
	}
	bucket := float64(t.width) / 1e9
	u := UnseenOverTime{BucketSeconds: bucket, Buckets: n, Overall: t.all.unseenSeries(-1, n), Partitions: []UnseenSeries{},
		OmittedPartitions: len(t.omitted)}
	l := RealtimeLag{BucketSeconds: bucket, Buckets: n, Overall: t.all.lagSeries(-1, n), Partitions: []LagSeries{},
		OmittedPartitions: len(t.omitted)}
	for p, s := range t.parts {
		if s == nil || !s.listed {
			continue
		}
		u.Partitions = append(u.Partitions, s.unseenSeries(int32(p), n))
		l.Partitions = append(l.Partitions, s.lagSeries(int32(p), n))
	}
	return u, l
}

func (s *qseries) unseenSeries(p int32, n int) UnseenSeries {
	out := UnseenSeries{Partition: p, Count: make([]int64, n), Max: make([]int64, n), Final: s.unseen, Peak: s.peak, PeakAt: secs(s.peakT)}
	carry := int64(0)
	for i := range n {
		if i < len(s.b) {
			out.Count[i], out.Max[i] = s.b[i].end, s.b[i].max
			carry = s.b[i].end
		} else {
			out.Count[i], out.Max[i] = carry, carry
		}
	}
	return out
}

func (s *qseries) lagSeries(p int32, n int) LagSeries {
	out := LagSeries{Partition: p, Count: make([]int64, n), Mean: make([]float64, n), Max: make([]float64, n)}
	for i := range min(n, len(s.b)) {
		b := s.b[i]
		out.Count[i] = b.lagN
		if b.lagN > 0 {
			out.Mean[i] = micros(float64(b.lagSum) / float64(b.lagN))
			out.Max[i] = micros(float64(b.lagMax))
		}
	}
	if s.lat != nil {
		out.Quantiles = s.lat.quantiles()
	}
	return out
}

// micros turns nanoseconds into seconds rounded to the microsecond, which
// keeps verdict.json short.
func micros(ns float64) float64 { return math.Round(ns/1e3) / 1e6 }
