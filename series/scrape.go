package series

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/isrlab/isrlab/clusterapi"
)

// Sink receives samples: a Writer, or a test's memory.
type Sink interface {
	Sample(src string, v map[string]float64)
}

// Target is one broker's Prometheus endpoint.
type Target struct {
	Name string // the sample's src: b1, b2, ...
	URL  string // http://host:port/metrics
	// API, if set, is the broker's side channel (clusterapi.BaseURL): the
	// replicas each ISR shrink it made as leader dropped are counted from
	// its events ("IsrDropped.<id>").
	API string
}

// Scrape reads every target's metrics every interval until ctx ends and
// writes one sample per target and interval (Convert's measures; a target
// that does not answer gets {"up": 0}). client carries the dialer (a
// network namespace's, in the lab).
func Scrape(ctx context.Context, sink Sink, targets []Target, client *http.Client, every time.Duration) {
	if every <= 0 {
		every = time.Second
	}
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scrapeOne(ctx, sink, t, client, every)
		}()
	}
	wg.Wait()
}

func scrapeOne(ctx context.Context, sink Sink, t Target, client *http.Client, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var prev *Snapshot
	var prevAt time.Time
	drops := &dropCounter{}
	for {
		at := time.Now()
		cur, err := fetch(ctx, client, t.URL, scrapeTimeout(every))
		var dropped map[int32]int
		if t.API != "" && err == nil {
			dropped, err = drops.poll(ctx, &clusterapi.Client{Base: t.API, HTTP: client}, scrapeTimeout(every))
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// The previous snapshot stays: the next answer's counters
			// cover the gap, so nothing counted in it is lost (a busy
			// broker's ISR shrinks are what a gap would hide).
			sink.Sample(t.Name, map[string]float64{"up": 0})
		case prev != nil:
			v := Convert(prev, cur, at.Sub(prevAt).Seconds())
			for id, n := range dropped {
				v["IsrDropped."+strconv.Itoa(int(id))] = float64(n)
			}
			sink.Sample(t.Name, v)
		}
		if err == nil {
			prev, prevAt = cur, at
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// dropCounter follows one broker's events and counts the replicas its
// ISR shrinks dropped: a change of a partition it leads, in the same
// leader epoch, to an ISR without them.
type dropCounter struct {
	seq    int64
	primed bool
	last   map[string]clusterapi.StateEvent
}

// poll reads the events since the last poll and returns the drops among
// them; the first poll only learns the current state.
func (d *dropCounter) poll(ctx context.Context, api *clusterapi.Client, timeout time.Duration) (map[int32]int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ev, err := api.Events(ctx, d.seq)
	if err != nil {
		return nil, err
	}
	return d.add(ev.Events), nil
}

// add applies events in order and returns the drops they show.
func (d *dropCounter) add(events []clusterapi.StateEvent) map[int32]int {
	if d.last == nil {
		d.last = map[string]clusterapi.StateEvent{}
	}
	out := map[int32]int{}
	for _, e := range events {
		d.seq = max(d.seq, e.Seq)
		key := e.Topic + "/" + strconv.Itoa(int(e.Partition))
		prev, ok := d.last[key]
		d.last[key] = e
		if !d.primed || !ok || prev.Role != "leader" || e.Role != "leader" || prev.LeaderEpoch != e.LeaderEpoch {
			continue
		}
		for _, id := range prev.ISR {
			if !slices.Contains(e.ISR, id) {
				out[id]++
			}
		}
	}
	d.primed = true
	return out
}

func fetch(ctx context.Context, client *http.Client, url string, timeout time.Duration) (*Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Snapshot is the part of one scrape the series uses: counters and gauges
// by series name, histograms by series name with their cumulative buckets.
type Snapshot struct {
	Values     map[string]float64
	Histograms map[string]Histogram
}

// Histogram is a Prometheus histogram's cumulative state.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets []Bucket // by upper bound, cumulative counts, +Inf last
}

// Bucket is one cumulative bucket.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// scraped maps the broker's metric names to the series' names. Histograms
// are keyed by name and the one label value that selects them.
var (
	counters = map[string]string{
		"kafka_server_IsrShrinksPerSec":       "IsrShrinksPerSec",
		"kafka_server_IsrExpandsPerSec":       "IsrExpandsPerSec",
		"kafka_server_FailedIsrUpdatesPerSec": "FailedIsrUpdatesPerSec",
		"kafka_server_MessagesInPerSec":       "MessagesInPerSec",
		"kafka_server_BytesInPerSec":          "BytesInPerSec",
		"kafka_server_BytesOutPerSec":         "BytesOutPerSec",
	}
	gauges = map[string]string{
		"kafka_server_RequestHandlerAvgIdlePercent":    "RequestHandlerAvgIdlePercent",
		"kafka_network_NetworkProcessorAvgIdlePercent": "NetworkProcessorAvgIdlePercent",
		"kafka_server_UnderReplicatedPartitions":       "UnderReplicatedPartitions",
		"kafka_cluster_UnderMinIsrPartitionCount":      "UnderMinIsrPartitionCount",
		"kafka_server_ReplicaFetcherManager_MaxLag":    "MaxLag",
		"kafka_server_StalledFollowerPartitions":       "StalledFollowerPartitions",
		"kafka_server_LeaderCount":                     "LeaderCount",
	}
	histograms = map[string]string{
		`kafka_network_RequestTotalTimeMs{request="FetchFollower"}`:           "FetchFollower",
		`kafka_network_RequestTotalTimeMs{request="FetchConsumer"}`:           "FetchConsumer",
		`kafka_network_RequestTotalTimeMs{request="Produce"}`:                 "Produce",
		`kafka_cluster_Partition_LeaderIsrUpdateLockWaitTimeMs{lock="read"}`:  "LockWait.read",
		`kafka_cluster_Partition_LeaderIsrUpdateLockWaitTimeMs{lock="write"}`: "LockWait.write",
	}
)

// ParseMetrics reads a Prometheus text exposition.
func ParseMetrics(r io.Reader) (*Snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	s := &Snapshot{Values: map[string]float64{}, Histograms: map[string]Histogram{}}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := seriesKey(name, m.GetLabel())
			switch {
			case m.Counter != nil:
				s.Values[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				s.Values[key] = m.Gauge.GetValue()
			case m.Untyped != nil:
				s.Values[key] = m.Untyped.GetValue()
			case m.Histogram != nil:
				h := Histogram{Count: float64(m.Histogram.GetSampleCount()), Sum: m.Histogram.GetSampleSum()}
				for _, b := range m.Histogram.GetBucket() {
					h.Buckets = append(h.Buckets, Bucket{UpperBound: b.GetUpperBound(), Count: float64(b.GetCumulativeCount())})
				}
				sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].UpperBound < h.Buckets[j].UpperBound })
				if n := len(h.Buckets); n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) {
					h.Buckets = append(h.Buckets, Bucket{UpperBound: math.Inf(1), Count: h.Count})
				}
				s.Histograms[key] = h
			}
		}
	}
	return s, nil
}

// seriesKey is name{k="v",...} with labels sorted, as Prometheus prints it.
func seriesKey(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	ls := make([]*dto.LabelPair, len(labels))
	copy(ls, labels)
	sort.Slice(ls, func(i, j int) bool { return ls[i].GetName() < ls[j].GetName() })
	out := name + "{"
	for i, l := range ls {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
	}
	return out + "}"
}

// Convert turns two scrapes dt seconds apart into one sample's measures:
// counters become per-second rates, gauges are taken from cur, histograms
// give the interval's p99 and mean from the difference of their buckets.
// A counter that went backwards (a restarted broker) is measured from 0.
func Convert(prev, cur *Snapshot, dt float64) map[string]float64 {
	v := map[string]float64{"up": 1}
	if dt <= 0 {
		dt = 1
	}
	delta := func(a, b float64) float64 {
		if b < a {
			return b
		}
		return b - a
	}
	for from, to := range counters {
		if c, ok := cur.Values[from]; ok {
			v[to] = delta(prev.Values[from], c) / dt
		}
	}
	for from, to := range gauges {
		if g, ok := cur.Values[from]; ok {
			v[to] = g
		}
	}
	for from, to := range histograms {
		c, ok := cur.Histograms[from]
		if !ok {
			continue
		}
		d := c.minus(prev.Histograms[from])
		switch to {
		case "LockWait.read", "LockWait.write":
			kind := to[len("LockWait."):]
			v["LockWaitMsPerSec."+kind] = d.Sum / dt
			v["LockWaitsPerSec."+kind] = d.Count / dt
			if d.Count > 0 {
				v["LockWaitP99Ms."+kind] = d.Quantile(0.99)
			}
		default:
			v[to+"RequestsPerSec"] = d.Count / dt
			if d.Count > 0 {
				v[to+"P99Ms"] = d.Quantile(0.99)
				v[to+"MeanMs"] = d.Sum / d.Count
			}
		}
	}
	return v
}

// minus is h's increase since p (all of h if it went backwards).
func (h Histogram) minus(p Histogram) Histogram {
	if p.Count > h.Count || len(p.Buckets) != len(h.Buckets) {
		return h
	}
	d := Histogram{Count: h.Count - p.Count, Sum: h.Sum - p.Sum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		d.Buckets[i] = Bucket{UpperBound: b.UpperBound, Count: b.Count - p.Buckets[i].Count}
	}
	return d
}

// Quantile estimates the q-quantile the way Prometheus's
// histogram_quantile does: linear within the bucket that holds it, the
// highest finite bound if it falls in +Inf.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Buckets) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for i, b := range h.Buckets {
		if b.Count >= rank {
			if math.IsInf(b.UpperBound, 1) {
				if i == 0 {
					return 0
				}
				return h.Buckets[i-1].UpperBound
			}
			in := b.Count - below
			if in <= 0 {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-below)/in
		}
		lower, below = b.UpperBound, b.Count
	}
	return lower
}

// scrapeTimeout bounds one scrape: at least 3 s, so that a broker slow to
// answer on a saturated machine still gives a sample (late) rather than
// none; the next scrape starts when this one ends.
func scrapeTimeout(every time.Duration) time.Duration {
	return max(every, 3*time.Second)
}
