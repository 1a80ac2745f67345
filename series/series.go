// Package series is a run's time series: the rate workload's per-interval
// samples and the brokers' metrics, scraped every second, side by side on
// the history's clock, so that throughput can be read next to ISR churn,
// handler idleness, partition-lock waits and follower fetch latency.
//
// # Format (version 1)
//
// metrics.jsonl in a run directory is JSON Lines. The first line is a
// header, every other line one Sample:
//
//	{"isrlab_series":1,"run":"r1","start":"2025-01-02T03:04:05Z"}
//	{"t":3.001,"src":"workload","v":{"acked_per_s":99870,"produce_p99_ms":4.2}}
//	{"t":3.010,"src":"b1","v":{"IsrShrinksPerSec":0,"RequestHandlerAvgIdlePercent":0.93}}
//
// t is seconds since the run's start, the clock of history.jsonl (whose op
// times are nanoseconds since the same start), so fault windows from the
// history line up with the samples. src names who measured: "workload" or a
// broker. A sample describes the interval that ends at t and began at the
// previous sample of the same src. v holds the measures; readers ignore
// names they do not know, so the set can grow without a new version. Names
// are listed in Measures.
//
// The package keeps no clocks or goroutines of its own in what it computes:
// Summarize and Plot are pure functions of the samples and fault windows;
// Writer takes its clock from the caller, Scrape runs on the caller's ctx.
package series

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
)

// Version is the series format version written in the header.
const Version = 1

// FileName is the series file of a run directory.
const FileName = "metrics.jsonl"

// SrcWorkload is the src of the workload's samples.
const SrcWorkload = "workload"

// Header is the first line of a series file.
type Header struct {
	Version int    `json:"isrlab_series"`
	Run     string `json:"run,omitempty"`
	// Start is the wall-clock start of the run (RFC 3339), for humans.
	Start string `json:"start,omitempty"`
}

// Sample is one source's measures over the interval ending at T.
type Sample struct {
	T      float64            `json:"t"`
	Src    string             `json:"src"`
	Values map[string]float64 `json:"v"`
}

// Measures names what the samples carry and what each means. Rates are
// per second of the sample's interval; quantiles are interpolated within
// the histogram bucket that holds them, as Prometheus's histogram_quantile
// does, and absent when the interval saw no observation.
var Measures = map[string]string{
	// The rate workload (src "workload").
	"offered_per_s":     "records the producers' schedules called for",
	"sent_per_s":        "records handed to the clients (below offered while a client's buffer is full)",
	"acked_per_s":       "records acknowledged by the brokers: the throughput",
	"failed_per_s":      "records whose produce failed or timed out",
	"acked_bytes_per_s": "value bytes acknowledged",
	"consumed_per_s":    "records read, summed over the consumer groups",
	"backlog":           "records the schedules called for and not yet handed to a client, at the end of the interval",
	"buffered":          "records handed to the clients and not yet acknowledged or failed, at the end of the interval",
	"produce_p50_ms":    "median time from send to acknowledgement of the records acknowledged in the interval",
	"produce_p99_ms":    "99th percentile of the same",
	"produce_max_ms":    "largest of the same",
	"e2e_p50_ms":        "median time from send to consumption of the records consumed in the interval",
	"e2e_p99_ms":        "99th percentile of the same",

	// A broker (src "b1", ...), from its /metrics (Kafka's names).
	"up":                             "1 if the broker's metrics answered, else 0 (and nothing else is in the sample)",
	"IsrShrinksPerSec":               "ISR shrinks made by this broker as leader",
	"IsrExpandsPerSec":               "ISR expansions made by this broker as leader",
	"FailedIsrUpdatesPerSec":         "ISR updates skipped on a stale partition state",
	"MessagesInPerSec":               "records appended as leader",
	"BytesInPerSec":                  "bytes received from clients",
	"BytesOutPerSec":                 "bytes sent to clients",
	"RequestHandlerAvgIdlePercent":   "fraction of the last second the request handler threads were idle (0..1)",
	"NetworkProcessorAvgIdlePercent": "fraction of the last second the network threads were idle (0..1)",
	"UnderReplicatedPartitions":      "led partitions whose ISR is smaller than the replica set",
	"UnderMinIsrPartitionCount":      "led partitions whose ISR is below min.insync.replicas",
	"LeaderCount":                    "partitions this broker leads",
	"MaxLag":                         "largest lag in records of a partition this broker follows (ReplicaFetcherManager MaxLag)",
	"StalledFollowerPartitions":      "led partitions with a follower alive and registered but not fetching for longer than replica.lag.time.max.ms: a wedged broker, not a configuration's anomaly",
	"LockWaitMsPerSec.read":          "milliseconds spent waiting for partition locks for reading (produce, fetch), summed over waiters",
	"LockWaitMsPerSec.write":         "the same for writing (ISR and leadership changes)",
	"LockWaitsPerSec.read":           "read acquisitions of partition locks",
	"LockWaitsPerSec.write":          "write acquisitions of partition locks",
	"LockWaitP99Ms.read":             "99th percentile of one read acquisition's wait",
	"LockWaitP99Ms.write":            "99th percentile of one write acquisition's wait",
	"FetchFollowerRequestsPerSec":    "follower Fetch requests this broker answered as leader",
	"FetchFollowerP99Ms":             "99th percentile of their total time (long-poll wait included)",
	"FetchFollowerMeanMs":            "mean of the same",
	"FetchConsumerRequestsPerSec":    "consumer Fetch requests answered",
	"FetchConsumerP99Ms":             "99th percentile of their total time",
	"FetchConsumerMeanMs":            "mean of the same",
	"ProduceRequestsPerSec":          "Produce requests answered",
	"ProduceP99Ms":                   "99th percentile of their total time",
	"ProduceMeanMs":                  "mean of the same",
	"IsrDropped.<id>":                "times an ISR shrink this broker made as leader dropped broker <id> (from /v1/events)",
}

// Writer writes samples to a series file as they come; it is safe for
// concurrent use. A write error is kept and returned by Close: the run
// goes on without its series rather than stopping.
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	clock  func() time.Duration
	err    error
	closed bool
}

// Create creates a series file at path with header h; clock gives the time
// since the run's start (the history's clock) stamped on each sample.
func Create(path string, h Header, clock func() time.Duration) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create series: %w", err)
	}
	h.Version = Version
	b, err := json.Marshal(h)
	if err != nil {
		f.Close()
		return nil, err
	}
	w := &Writer{f: f, w: bufio.NewWriter(f), clock: clock}
	w.w.Write(b)
	if err := w.w.WriteByte('\n'); err != nil {
		f.Close()
		return nil, fmt.Errorf("write series header: %w", err)
	}
	return w, nil
}

// Sample writes one sample of src stamped now. It implements the rate
// workload's sink and is what Scrape writes to.
func (w *Writer) Sample(src string, v map[string]float64) {
	w.write(Sample{T: w.clock().Seconds(), Src: src, Values: v})
}

func (w *Writer) write(s Sample) {
	for k, x := range s.Values {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			delete(s.Values, k) // JSON has no NaN; absent means not measured
			continue
		}
		s.Values[k] = round(x)
	}
	b, err := json.Marshal(s)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.err != nil {
		return
	}
	if err != nil {
		w.err = fmt.Errorf("encode sample: %w", err)
		return
	}
	w.w.Write(b)
	w.w.WriteByte('\n')
	// A few lines a second: flushing each keeps the file whole if the
	// run is killed.
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("write series: %w", err)
	}
}

// Close flushes and closes the file; it returns the first write error. It
// is safe to call twice.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	w.closed = true
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = fmt.Errorf("write series: %w", err)
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("close series: %w", err)
	}
	return w.err
}

// round keeps 6 significant digits: more than any measure here carries,
// and a third of the bytes of a full float.
func round(x float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	if err != nil {
		return x
	}
	return r
}

// ErrNotSeries marks a file that is not a series file.
var ErrNotSeries = errors.New("not an isrlab series file")

// Read reads a series: its header and samples in file order. A torn last
// line (a killed run) is dropped.
func Read(r io.Reader) (Header, []Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var h Header
	var out []Sample
	line := 0
	var pendingErr error
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if pendingErr != nil {
			return h, out, pendingErr
		}
		if line == 1 {
			if err := json.Unmarshal(b, &h); err != nil || h.Version == 0 {
				return h, nil, fmt.Errorf("%w: line 1 is no series header", ErrNotSeries)
			}
			if h.Version > Version {
				return h, nil, fmt.Errorf("series version %d is newer than this isrlab's %d", h.Version, Version)
			}
			continue
		}
		var s Sample
		if err := json.Unmarshal(b, &s); err != nil {
			// Only the last line may be torn.
			pendingErr = fmt.Errorf("series line %d: %v", line, err)
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return h, out, err
	}
	if line == 0 {
		return h, nil, fmt.Errorf("%w: empty", ErrNotSeries)
	}
	return h, out, nil
}

// ReadFile reads the series file at path.
func ReadFile(path string) (Header, []Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, err
	}
	defer f.Close()
	return Read(f)
}
