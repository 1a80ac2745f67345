package workloads

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
)

// samples is a Sampler in memory.
type samples struct {
	mu sync.Mutex
	vs []map[string]float64
}

func (s *samples) Sample(src string, v map[string]float64) {
	if src != SrcRate {
		panic("src " + src)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vs = append(s.vs, v)
}

func (s *samples) all() []map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]float64(nil), s.vs...)
}

// sum adds one measure over the samples, weighting rates by the interval.
func (s *samples) sum(k string, interval time.Duration) float64 {
	t := 0.0
	for _, v := range s.all() {
		t += v[k] * interval.Seconds()
	}
	return t
}

// TestRateWorkloadAgainstKfake: the producers' records are acknowledged
// and read back by every group, the samples say so, and nothing goes into
// the history (the rate workload samples instead).
func TestRateWorkloadAgainstKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 3, "rate")
	m, rec := recorder()
	sink := &samples{}
	const interval = 200 * time.Millisecond
	cfg := Config{Topic: "rate", Partitions: 3, Producers: 2, Rate: 500, RecordSize: 64, ConsumerGroups: 2,
		Acks: "1", Linger: 2 * time.Millisecond, Compression: "lz4", SampleInterval: interval, Seed: 3}
	w, err := NewRate(cfg, rec, sink, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	proctest.Eventually(t, 30*time.Second, "10 samples and traffic", func() error {
		if len(sink.all()) < 10 || w.consumed.Load() == 0 && w.ackedTotal.Load() == 0 {
			return fmt.Errorf("samples: %v", sink.all())
		}
		return nil
	})
	// Both groups read everything acknowledged so far.
	acked := w.ackedTotal.Load()
	proctest.Eventually(t, 30*time.Second, "both groups read every acknowledged record", func() error {
		if got := sink.sum("consumed_per_s", interval); got < 2*float64(acked)*0.999 {
			return fmt.Errorf("consumed %.0f of 2 x %d", got, acked)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if f := sink.sum("failed_per_s", interval); f != 0 {
		t.Errorf("%.0f records failed", f)
	}
	last := sink.all()[len(sink.all())-1]
	for _, k := range []string{"offered_per_s", "sent_per_s", "acked_per_s", "acked_bytes_per_s", "consumed_per_s", "backlog", "buffered", "produce_p50_ms", "produce_p99_ms", "produce_max_ms", "e2e_p99_ms"} {
		if _, ok := last[k]; !ok {
			t.Errorf("the last sample has no %s: %v", k, last)
		}
	}
	if b := sink.sum("acked_bytes_per_s", interval); math.Abs(b-64*sink.sum("acked_per_s", interval)) > 1 {
		t.Errorf("acked bytes %.0f for %.0f records of 64 bytes", b, sink.sum("acked_per_s", interval))
	}
	if len(m.Ops) != 0 {
		t.Errorf("%d history ops; the rate workload samples instead", len(m.Ops))
	}
	if err := w.Drain(context.Background()); err != nil || len(m.Ops) != 0 {
		t.Errorf("drain without history: %v, %d ops", err, len(m.Ops))
	}
}

// TestRateWorkloadRecordHistory: asked to, the rate workload records every
// send and poll, and the history checks as valid, drain included.
func TestRateWorkloadRecordHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 3, "rh")
	m, rec := recorder()
	cfg := Config{Topic: "rh", Partitions: 3, Producers: 2, Rate: 400, RecordSize: 100, RecordHistory: true, Acks: "all", Seed: 5}
	w, err := NewRate(cfg, rec, nil, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	run := func(context.Context) error { return w.Run(ctx) }
	v := runAndCheck(t, run, w.Drain, m)
	if v.Valid != checker.Valid {
		t.Fatalf("verdict %s: anomalies %v examples %v", v.Valid, v.Anomalies, v.Examples)
	}
	if v.Stats.SendsOK < 100 || v.Stats.ReadValues < v.Stats.SendsOK {
		t.Errorf("sends ok %d, values read %d", v.Stats.SendsOK, v.Stats.ReadValues)
	}
	var drained bool
	for _, op := range m.Ops {
		drained = drained || op.F == history.FDrained
	}
	if !drained {
		t.Error("no drain recorded")
	}
}

func TestRateConfig(t *testing.T) {
	var cfg Config
	doc := "rate: 25000\nrecord.size: 100\nbatch.size: 65536\ncompression.type: zstd\nconsumer.groups: -1\nsample.interval: 500ms\nhistory.records: true\nmax.in.flight.requests.per.connection: 5\nbuffer.memory: 33554432\nlinger: 5ms\nacks: \"1\"\n"
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{Rate: 25000, RecordSize: 100, BatchSize: 65536, Compression: "zstd", ConsumerGroups: -1, SampleInterval: 500 * time.Millisecond,
		RecordHistory: true, MaxInFlight: 5, BufferMemory: 32 << 20, Linger: 5 * time.Millisecond, Acks: "1"}
	if cfg != want {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}
	for _, tc := range []struct {
		kind string
		cfg  Config
		err  string // "" for ok
	}{
		{"rate", cfg, ""},
		{"rate", Config{}, ""},
		{"rate", Config{Consumers: 2}, "consumers is not a key of the rate workload"},
		{"rate", Config{SendInterval: time.Millisecond}, "send.interval is not a key"},
		{"log", Config{Rate: 5}, "rate is not a key of the log workload"},
		{"", Config{ConsumerGroups: 2}, "consumer.groups is not a key of the log workload"},
		{"queue", Config{Compression: "lz4"}, "compression.type is not a key of the queue workload"},
		{"rate", Config{Compression: "brotli"}, "compression.type"},
		{"rate", Config{Rate: -1}, "rate -1"},
		{"rate", Config{BatchSize: 100}, "batch.size 100"},
		{"rate", Config{RecordSize: 2 << 20}, "record.size"},
		{"rate", Config{ConsumerGroups: -2}, "consumer.groups -2"},
		{"rate", Config{Acks: "1", Idempotent: true}, "enable.idempotence"},
		{"bulk", Config{}, "workload type"},
	} {
		err := tc.cfg.ValidateFor(tc.kind)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ValidateFor(%q, %+v) = %v, want %q", tc.kind, tc.cfg, err, tc.err)
		}
	}
}

func TestLatencies(t *testing.T) {
	var l latencies
	for i := 1; i <= 1000; i++ {
		l.observe(time.Duration(i) * time.Millisecond / 10) // 0.1 .. 100 ms
	}
	s := l.take()
	if s.n != 1000 || s.max != 100 {
		t.Fatalf("n %d max %v", s.n, s.max)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {1, 100}} {
		// Buckets are 10% wide: the quantile is at most 10% high.
		if got := s.quantile(c.q); got < c.want || got > c.want*1.1 {
			t.Errorf("q%v = %v, want %v..%v", c.q, got, c.want, c.want*1.1)
		}
	}
	if s := l.take(); s.n != 0 || s.max != 0 {
		t.Errorf("take did not reset: %+v", s.n)
	}
	l.observe(time.Hour) // past the last bucket: counted there
	if s := l.take(); s.n != 1 || s.quantile(0.99) != 3600_000 {
		t.Errorf("an hour: n %d q %v", s.n, s.quantile(0.99))
	}
}
