package workloads

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/history"
)

// Sampler receives the rate workload's measures once per sample interval
// (src "workload"); the lab's series writer is one.
type Sampler interface {
	Sample(src string, v map[string]float64)
}

// SrcRate is the src of the rate workload's samples.
const SrcRate = "workload"

// Rate is the rate workload: Producers clients each send Rate records a
// second of RecordSize bytes on a fixed schedule, and ConsumerGroups
// groups each read the whole topic. Every SampleInterval it hands the
// Sampler the interval's throughput and latency histograms' quantiles
// instead of recording each record, so it can run at the cluster's limit;
// with RecordHistory every send and poll is also recorded in the history,
// as the log workload does, at a cost of two lines per record and an
// in-flight limit per producer.
//
// The schedule is open-loop: a producer whose client's buffer is full
// blocks, and the records its schedule called for meanwhile are sent as
// soon as it can (the backlog), the way a replicator that must not drop
// its binlog catches up.
type Rate struct {
	*base
	sink Sampler

	// start is when the schedules began (unix ns, 0 before); sent is
	// cumulative over all producers; the others are reset by every sample,
	// except the totals.
	start, sent             atomic.Int64
	acked, failed, consumed atomic.Int64
	ackedBytes              atomic.Int64
	ackedTotal, settled     atomic.Int64 // settled: acked, failed or aborted
	produceLat, endToEndLat latencies
	payloads                payloads
	keys                    [][]byte  // nil: records carry no key
	pool                    sync.Pool // *kgo.Record, recycled by the promise
	groups                  int
}

// Rate workload defaults.
const (
	DefaultRate       = 10000
	DefaultRecordSize = 100
	// recordSlots bounds the records in flight per producer when every
	// record goes into the history: each slot is one history process.
	recordSlots = 64
	// pace is how often a producer catches up with its schedule.
	pace = 2 * time.Millisecond
)

// Payload kinds (the payload key).
const (
	PayloadRandom       = "random"
	PayloadCompressible = "compressible"
)

// payloadPool is the least size of the random pool record values are cut
// from (and at least 8 records): larger than a record batch (kgo's default
// batch.size, 1 MB), so that the records of one batch never repeat each
// other and a codec finds nothing to shrink.
const payloadPool = 4 << 20

// payloads are the record values: consecutive windows of size bytes of
// one pool generated once from the seed, so that a record costs no random
// numbers. A random pool is ChaCha8's stream; a compressible one is one
// character repeated, and every value is the same.
type payloads struct {
	pool []byte
	size int
}

func newPayloads(kind string, size int, seed int64) payloads {
	if kind == PayloadCompressible {
		return payloads{pool: bytes.Repeat([]byte{'a'}, size), size: size}
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], uint64(seed))
	copy(key[8:], "isrlab rate payload")
	p := make([]byte, max(payloadPool, 8*size)+size)
	rand.NewChaCha8(key).Read(p)
	return payloads{pool: p, size: size}
}

// value is the nth record's value: the pool's nth window (wrapping around).
func (p payloads) value(n int) []byte {
	span := len(p.pool) - p.size + 1
	off := int((int64(n) * int64(p.size)) % int64(span))
	return p.pool[off : off+p.size : off+p.size]
}

// NewRate returns a Rate workload sampling into sink (which may be nil);
// rec receives the history when cfg.RecordHistory is set. See NewLog for
// seeds and opts.
func NewRate(cfg Config, rec *history.Recorder, sink Sampler, seeds []string, opts ...kgo.Opt) (*Rate, error) {
	if err := cfg.ValidateFor("rate"); err != nil {
		return nil, err
	}
	b, err := newBase(cfg, rec, seeds, opts)
	if err != nil {
		return nil, err
	}
	w := &Rate{base: b, sink: sink, groups: b.cfg.ConsumerGroups}
	for i := 0; i < cfg.Keys; i++ {
		w.keys = append(w.keys, []byte("k"+strconv.Itoa(i)))
	}
	if w.groups == 0 {
		w.groups = 1
	} else if w.groups < 0 {
		w.groups = 0
	}
	w.payloads = newPayloads(b.cfg.Payload, b.cfg.RecordSize, b.cfg.Seed)
	return w, nil
}

// rateOpts are the producer options of the rate workload; keyed says
// whether the records carry keys.
func (c Config) rateOpts(keyed bool) []kgo.Opt {
	// Keyed records go to murmur2(key) mod partitions, as Kafka's
	// DefaultPartitioner sends them; records without a key get kgo's
	// default, Kafka 3.3's adaptive uniform sticky partitioner (KIP-794),
	// which steers records away from a slow broker. Either replaces the
	// log workload's manual partitioner.
	part := kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	if keyed {
		part = kgo.StickyKeyPartitioner(nil)
	}
	opts := append(c.producerOpts(), kgo.RecordPartitioner(part),
		kgo.ProducerBatchCompression(compressionCodec(c.Compression)))
	if c.BatchSize > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(c.BatchSize)))
	}
	if c.BufferMemory > 0 {
		opts = append(opts, kgo.MaxBufferedBytes(c.BufferMemory))
	}
	return opts
}

func compressionCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// Run runs the producers, the consumer groups and the sampler until ctx is
// done.
func (w *Rate) Run(ctx context.Context) error {
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var side errgroup.Group
	for g := 0; g < w.groups; g++ {
		side.Go(func() error { return w.consume(cctx, g) })
	}
	side.Go(func() error { w.sample(cctx); return nil })
	err := w.produce(ctx)
	stop()
	if serr := side.Wait(); err == nil {
		err = serr
	}
	return err
}

// Drain reads every partition to its end into the history when every
// record is recorded there; otherwise there is nothing to check and it
// returns at once.
func (w *Rate) Drain(ctx context.Context) error {
	if !w.cfg.RecordHistory {
		return nil
	}
	return w.base.Drain(ctx)
}

type rateProducer struct {
	cl    *kgo.Client
	slots chan int // history processes free to send (RecordHistory)
}

func (w *Rate) produce(ctx context.Context) error {
	var ps []*rateProducer
	defer func() {
		for _, p := range ps {
			p.cl.Close()
		}
	}()
	for i := 0; i < w.cfg.Producers; i++ {
		cl, err := w.clientFrom(w.seeds, w.cfg.rateOpts(w.keys != nil)...)
		if err != nil {
			return err
		}
		p := &rateProducer{cl: cl}
		if w.cfg.RecordHistory {
			p.slots = make(chan int, recordSlots)
			for j := 0; j < recordSlots; j++ {
				p.slots <- w.procs.take()
			}
		}
		ps = append(ps, p)
	}
	start := time.Now()
	w.start.Store(start.UnixNano())
	var g errgroup.Group
	for _, p := range ps {
		g.Go(func() error { w.schedule(ctx, p, start); return nil })
	}
	return g.Wait()
}

// scheduled is how many records the producers' schedules called for by t.
func (w *Rate) scheduled(t time.Time) int64 {
	s := w.start.Load()
	if s == 0 {
		return 0
	}
	return int64(w.cfg.Rate*t.Sub(time.Unix(0, s)).Seconds()) * int64(w.cfg.Producers)
}

// schedule sends records as the schedule calls for them: Rate per second
// from start, caught up every pace.
func (w *Rate) schedule(ctx context.Context, p *rateProducer, start time.Time) {
	tick := time.NewTicker(pace)
	defer tick.Stop()
	var sent int64
	n := 0
	for {
		due := int64(w.cfg.Rate * time.Since(start).Seconds())
		for sent < due && ctx.Err() == nil {
			if !w.send(ctx, p, n) {
				return
			}
			n++
			sent++
			w.sent.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// send hands one record to the client; it reports false when ctx ended
// first.
func (w *Rate) send(ctx context.Context, p *rateProducer, n int) bool {
	r, _ := w.pool.Get().(*kgo.Record)
	if r == nil {
		r = &kgo.Record{}
	}
	*r = kgo.Record{Topic: w.cfg.Topic, Value: w.payloads.value(n), Timestamp: time.Now()}
	if w.keys != nil {
		r.Key = w.keys[n%len(w.keys)]
	}
	if p.slots == nil {
		p.cl.Produce(ctx, r, w.done)
		return true
	}
	var proc int
	select {
	case proc = <-p.slots:
	case <-ctx.Done():
		w.pool.Put(r)
		return false
	}
	v := w.vals.take()
	r.Value = encodeValue(v)
	if pad := w.cfg.RecordSize - len(r.Value); pad > 0 {
		// The value is the history's decimal; the rest of the record's
		// size rides in a header.
		r.Headers = []kgo.RecordHeader{{Key: "pad", Value: w.payloads.value(n)[:pad]}}
	}
	inv := history.NewOp(proc, history.Invoke, history.FSend)
	inv.Value, inv.HasValue = v, true
	w.rec.Record(inv)
	p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		done := inv
		done.Type = Classify(err, w.cfg.Retries >= 0)
		done.Error = errString(err)
		if done.Type == history.OK {
			done.Partition = r.Partition
			if w.cfg.Acks != "0" {
				done.Offset = r.Offset
			}
		}
		w.rec.Record(done)
		w.done(r, err)
		p.slots <- proc
	})
	return true
}

// done is every record's promise: it counts the outcome and the latency.
// Records aborted because the workload stops are not failures.
func (w *Rate) done(r *kgo.Record, err error) {
	w.settled.Add(1)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrAborting):
	case err != nil:
		w.failed.Add(1)
	default:
		w.acked.Add(1)
		w.ackedTotal.Add(1)
		w.ackedBytes.Add(int64(len(r.Value)))
		w.produceLat.observe(time.Since(r.Timestamp))
	}
	*r = kgo.Record{}
	w.pool.Put(r)
}

// consume is consumer group g: one member reading the whole topic from the
// start, counting records and their end-to-end latency.
func (w *Rate) consume(ctx context.Context, g int) error {
	group := w.cfg.Group + "-" + strconv.Itoa(g)
	proc := w.procs.take()
	var cl *kgo.Client
	var err error
	if w.cfg.RecordHistory {
		cl, err = w.subscriberTo(ctx, proc, group)
	} else {
		cl, err = w.client(kgo.ConsumeTopics(w.cfg.Topic), kgo.ConsumerGroup(group),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(w.cfg.PollTimeout/2))
	}
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		if w.cfg.RecordHistory {
			// The history's polls carry no timestamps: end-to-end latency
			// is measured without RecordHistory only.
			done, err := pollOnce(ctx, cl, w.rec, proc, w.cfg.PollTimeout, history.FPoll)
			if err != nil {
				return nil
			}
			for _, pr := range done.Reads {
				w.consumed.Add(int64(len(pr.Records)))
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, w.cfg.PollTimeout)
		fs := cl.PollRecords(pctx, 0)
		cancel()
		if errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			return nil
		}
		now := time.Now()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			w.endToEndLat.observe(now.Sub(r.Timestamp))
		})
		w.consumed.Add(int64(n))
	}
	return nil
}

// sample hands the sink one sample per interval until ctx ends.
func (w *Rate) sample(ctx context.Context) {
	if w.sink == nil {
		return
	}
	every := w.cfg.SampleInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := time.Now()
	var lastScheduled, lastSent int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			last = now
			// Sent before scheduled: the backlog is never negative.
			sent := w.sent.Load()
			scheduled := max(w.scheduled(now), sent)
			v := map[string]float64{
				"offered_per_s":     float64(scheduled-lastScheduled) / dt,
				"sent_per_s":        float64(sent-lastSent) / dt,
				"acked_per_s":       float64(w.acked.Swap(0)) / dt,
				"failed_per_s":      float64(w.failed.Swap(0)) / dt,
				"acked_bytes_per_s": float64(w.ackedBytes.Swap(0)) / dt,
				"consumed_per_s":    float64(w.consumed.Swap(0)) / dt,
				"backlog":           float64(scheduled - sent),
				"buffered":          float64(sent - w.settled.Load()),
			}
			lastScheduled, lastSent = scheduled, sent
			p := w.produceLat.take()
			if p.n > 0 {
				v["produce_p50_ms"], v["produce_p99_ms"], v["produce_max_ms"] = p.quantile(0.5), p.quantile(0.99), p.max
			}
			if e := w.endToEndLat.take(); e.n > 0 {
				v["e2e_p50_ms"], v["e2e_p99_ms"] = e.quantile(0.5), e.quantile(0.99)
			}
			w.sink.Sample(SrcRate, v)
		}
	}
}

// latencies is a lock-free histogram of durations in buckets 10% wide from
// 50 µs up (about 160 buckets to two minutes); take reads and resets it.
type latencies struct {
	buckets [latBuckets]atomic.Int64
	maxUs   atomic.Int64
}

const (
	latBuckets = 160
	latFirstMs = 0.05
	latGrowth  = 1.1
)

var logGrowth = math.Log(latGrowth)

func (l *latencies) observe(d time.Duration) {
	ms := float64(d) / 1e6
	i := 0
	if ms > latFirstMs {
		i = min(latBuckets-1, int(math.Ceil(math.Log(ms/latFirstMs)/logGrowth)))
	}
	l.buckets[i].Add(1)
	us := d.Microseconds()
	for {
		m := l.maxUs.Load()
		if us <= m || l.maxUs.CompareAndSwap(m, us) {
			break
		}
	}
}

// latencySnapshot is one interval's histogram.
type latencySnapshot struct {
	counts [latBuckets]int64
	n      int64
	max    float64 // ms
}

func (l *latencies) take() latencySnapshot {
	var s latencySnapshot
	for i := range l.buckets {
		s.counts[i] = l.buckets[i].Swap(0)
		s.n += s.counts[i]
	}
	s.max = float64(l.maxUs.Swap(0)) / 1000
	return s
}

// quantile returns the upper bound of the bucket holding the q-quantile (at
// most 10% above the true value), capped at the interval's maximum.
func (s latencySnapshot) quantile(q float64) float64 {
	rank := int64(math.Ceil(q * float64(s.n)))
	var seen int64
	for i, c := range s.counts {
		seen += c
		if seen >= rank && c > 0 {
			if i == latBuckets-1 { // the overflow bucket
				return s.max
			}
			return min(s.max, latFirstMs*math.Pow(latGrowth, float64(i)))
		}
	}
	return s.max
}

// ValidateFor reports a configuration kgo would refuse or that sets keys
// the workload kind (log, queue or rate) does not use.
func (c Config) ValidateFor(kind string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	rateOnly := map[string]bool{
		"rate": c.Rate != 0, "record.size": c.RecordSize != 0, "batch.size": c.BatchSize != 0,
		"compression.type": c.Compression != "", "payload": c.Payload != "", "consumer.groups": c.ConsumerGroups != 0,
		"sample.interval": c.SampleInterval != 0, "history.records": c.RecordHistory,
		"buffer.memory": c.BufferMemory != 0,
	}
	logOnly := map[string]bool{
		"consumers": c.Consumers != 0, "sends": c.Sends != 0, "send.interval": c.SendInterval != 0,
		"subscribe": c.Subscribe, "manual.commit": c.ManualCommit, "crash.every": c.CrashEvery != 0,
	}
	unused := rateOnly
	switch kind {
	case "rate":
		unused = logOnly
	case "", "log", "queue":
	default:
		return fmt.Errorf("workload type %q: want log, queue or rate", kind)
	}
	for _, k := range slices.Sorted(maps.Keys(unused)) {
		if unused[k] {
			if kind == "" {
				kind = "log"
			}
			return fmt.Errorf("%s is not a key of the %s workload", k, kind)
		}
	}
	return nil
}
