// Package workloads drives real, unmodified franz-go (kgo) clients against a
// Kafka-compatible cluster and records every operation in a history.
//
// Two workloads, after Jepsen's Kafka workload:
//
//   - Log: producers send unique int64 values (decimal strings, keys spread
//     over partitions); consumers poll assigned or subscribed partitions; a
//     final Drain reads every partition to its end after the faults healed.
//   - Queue: a consumer group with auto or manual commit whose members
//     poll, process (processing.time) and commit, and crash and restart;
//     every poll, processed record and commit is recorded.
//
// Outcomes are classified the Jepsen way (Classify): ok when the broker
// acknowledged, fail only when the record was definitely not written (a
// refusal that holds on every attempt, or no Produce request that could
// carry it began to be written, counted on the producer's own connections
// before the first byte goes out), info when it is unknown. Seed brokers
// and extra kgo options (a kgo.Dialer that dials inside a network
// namespace, for example) come from the caller; producers wrap the
// caller's dialer to count their writes.
package workloads

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/history"
)

// Config holds a workload's knobs; Kafka's own names are in the comments.
// Zero values take the defaults listed.
type Config struct {
	Topic      string `yaml:"topic" json:"topic"`           // default "isrlab"
	Partitions int32  `yaml:"partitions" json:"partitions"` // default 3
	// Keys spread values over partitions: value v has key "k<v mod Keys>"
	// and goes to partition fnv32a(key) mod Partitions (default 64 keys).
	// The rate workload's n-th record of a producer has key "k<n mod
	// Keys>" and goes where Kafka's partitioner sends it (murmur2); without
	// Keys its records carry none.
	Keys int `yaml:"keys" json:"keys"`

	Producers int `yaml:"producers" json:"producers"` // default 2
	Consumers int `yaml:"consumers" json:"consumers"` // default 2
	// Sends stops the producers after this many sends in all (0: until ctx
	// is done).
	Sends int64 `yaml:"sends" json:"sends"`
	// SendInterval is each producer's pause between sends (default 0).
	SendInterval time.Duration `yaml:"send.interval" json:"send.interval"`

	Acks       string `yaml:"acks" json:"acks"`                             // "all" (default), "1" or "0"
	Idempotent bool   `yaml:"enable.idempotence" json:"enable.idempotence"` // needs acks=all
	// Retries is retries: 0 (default) retries until DeliveryTimeout, n > 0
	// retries n times, -1 sends each record once.
	Retries         int           `yaml:"retries" json:"retries"`
	Linger          time.Duration `yaml:"linger" json:"linger"`                     // linger.ms
	RequestTimeout  time.Duration `yaml:"request.timeout" json:"request.timeout"`   // request.timeout.ms of produce requests (default 10 s)
	DeliveryTimeout time.Duration `yaml:"delivery.timeout" json:"delivery.timeout"` // delivery.timeout.ms (default 30 s)
	// RequestTimeoutOverhead is how much longer than RequestTimeout the
	// franz-go client waits for an answer before it gives up on the
	// connection and retries (franz-go's RequestTimeoutOverhead, default
	// 10 s): with a lost response, the retry comes RequestTimeout plus
	// this after the send. The other clients wait their own request
	// timeout (request.timeout.ms).
	RequestTimeoutOverhead time.Duration `yaml:"request.timeout.overhead" json:"request.timeout.overhead"`

	// Subscribe makes Log consumers join a consumer group instead of
	// assigning partitions.
	Subscribe bool   `yaml:"subscribe" json:"subscribe"`
	Group     string `yaml:"group.id" json:"group.id"` // default "isrlab-<topic>"
	// ManualCommit commits after every poll instead of auto-committing
	// (enable.auto.commit=false).
	ManualCommit bool `yaml:"manual.commit" json:"manual.commit"`
	// IsolationLevel is the consumers' isolation.level: read_uncommitted
	// (the log and queue workloads' default, as Kafka's clients') or
	// read_committed (the txn workload's default and only level of its
	// read-process-write sessions). Under read_uncommitted a consumer also
	// reads the records of open and aborted transactions. The drain reads
	// as the workload's checker expects, whatever it is set to.
	IsolationLevel string `yaml:"isolation.level" json:"isolation.level"`
	// PollTimeout bounds one poll (default 500 ms).
	PollTimeout time.Duration `yaml:"poll.timeout" json:"poll.timeout"`
	// CrashEvery is the mean time between consumer crashes in Queue (0: no
	// crashes), counted from a process's first records. A crashed
	// consumer restarts as a new process.
	CrashEvery time.Duration `yaml:"crash.every" json:"crash.every"`
	// ProcessingTime is how long a Queue consumer works on each record it
	// polled before it is processed (default 0: processed once polled);
	// each record's time is uniform within ProcessingJitter of it
	// (default: half of ProcessingTime).
	ProcessingTime   time.Duration `yaml:"processing.time" json:"processing.time"`
	ProcessingJitter time.Duration `yaml:"processing.jitter" json:"processing.jitter"`
	// AutoCommitInterval is auto.commit.interval.ms of Queue consumers that
	// auto-commit (default 5 s).
	AutoCommitInterval time.Duration `yaml:"auto.commit.interval" json:"auto.commit.interval"`

	// The rate workload's keys (NewRate).
	//
	// Rate is each producer's records per second (default 10000), of
	// RecordSize bytes each (default 100).
	Rate       float64 `yaml:"rate" json:"rate"`
	RecordSize int     `yaml:"record.size" json:"record.size"`
	// BatchSize is batch.size, the largest record batch in bytes (default
	// kgo's 1000012); Compression is compression.type: none (default),
	// gzip, snappy, lz4 or zstd.
	BatchSize   int    `yaml:"batch.size" json:"batch.size"`
	Compression string `yaml:"compression.type" json:"compression.type"`
	// Payload is what the record values hold: random (default) bytes no
	// codec can shrink, as seed 002 measured with, or compressible: one
	// character repeated, the seed's comparison case.
	Payload string `yaml:"payload" json:"payload"`
	// MaxInFlight is max.in.flight.requests.per.connection (default the
	// client's: kgo's 1, with idempotence up to 5; sarama's 5, 1 with
	// idempotence), for the log and rate workloads; BufferMemory is
	// buffer.memory in bytes (default: kgo's limit of 50000 records only).
	MaxInFlight  int `yaml:"max.in.flight.requests.per.connection" json:"max.in.flight.requests.per.connection"`
	BufferMemory int `yaml:"buffer.memory" json:"buffer.memory"`
	// ConsumerGroups is how many consumer groups read the whole topic,
	// one member each: 0 means 1, -1 none.
	ConsumerGroups int `yaml:"consumer.groups" json:"consumer.groups"`
	// SampleInterval is how often throughput and latency are sampled
	// (default 1 s).
	SampleInterval time.Duration `yaml:"sample.interval" json:"sample.interval"`
	// RecordHistory also records every send and poll in the history, as
	// the log workload does (at most 64 records in flight per producer).
	RecordHistory bool `yaml:"history.records" json:"history.records"`

	// The txn workload's keys (NewTxn).
	TxnConfig `yaml:",inline"`

	// FirstProcess numbers this workload's processes from here, so several
	// workloads can share a history.
	FirstProcess int   `yaml:"first.process" json:"first.process"`
	Seed         int64 `yaml:"seed" json:"seed"`
}

// WithDefaults returns c with every unset key at its default.
func (c Config) WithDefaults() Config { return c.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Topic == "" {
		c.Topic = "isrlab"
	}
	if c.Partitions <= 0 {
		c.Partitions = 3
	}
	if c.Keys <= 0 {
		c.Keys = 64
	}
	if c.Producers <= 0 {
		c.Producers = 2
	}
	if c.Consumers <= 0 {
		c.Consumers = 2
	}
	if c.Acks == "" {
		c.Acks = "all"
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.DeliveryTimeout <= 0 {
		c.DeliveryTimeout = 30 * time.Second
	}
	if c.Group == "" {
		c.Group = "isrlab-" + c.Topic
	}
	if c.PollTimeout <= 0 {
		c.PollTimeout = 500 * time.Millisecond
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.RecordSize == 0 {
		c.RecordSize = DefaultRecordSize
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Second
	}
	return c
}

// Validate reports a configuration kgo would refuse.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch c.Acks {
	case "all", "-1", "1", "0":
	default:
		return fmt.Errorf("acks %q: want all, 1 or 0", c.Acks)
	}
	if c.Idempotent && c.Acks != "all" && c.Acks != "-1" {
		return errors.New("enable.idempotence needs acks=all")
	}
	switch c.Compression {
	case "", "none", "gzip", "snappy", "lz4", "zstd":
	default:
		return fmt.Errorf("compression.type %q: want none, gzip, snappy, lz4 or zstd", c.Compression)
	}
	switch c.IsolationLevel {
	case "", ReadCommitted, ReadUncommitted:
	default:
		return fmt.Errorf("isolation.level %q: want %s or %s", c.IsolationLevel, ReadCommitted, ReadUncommitted)
	}
	switch c.Payload {
	case "", PayloadRandom, PayloadCompressible:
	default:
		return fmt.Errorf("payload %q: want %s or %s", c.Payload, PayloadRandom, PayloadCompressible)
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %v: records per second per producer, positive", c.Rate)
	case c.RecordSize < 0 || c.RecordSize > 1<<20:
		return fmt.Errorf("record.size %d: 1 to %d bytes", c.RecordSize, 1<<20)
	case c.BatchSize != 0 && (c.BatchSize < 512 || c.BatchSize > 1<<30):
		return fmt.Errorf("batch.size %d: 512 bytes to 1 GiB", c.BatchSize)
	case c.ConsumerGroups < -1:
		return fmt.Errorf("consumer.groups %d: a count, or -1 for none", c.ConsumerGroups)
	case c.SampleInterval < 0 || c.MaxInFlight < 0 || c.BufferMemory < 0:
		return errors.New("sample.interval, max.in.flight.requests.per.connection and buffer.memory cannot be negative")
	case c.ProcessingTime < 0 || c.ProcessingJitter < 0 || c.AutoCommitInterval < 0:
		return errors.New("processing.time, processing.jitter and auto.commit.interval cannot be negative")
	case c.AutoCommitInterval > 0 && c.AutoCommitInterval < 100*time.Millisecond:
		return fmt.Errorf("auto.commit.interval %s: at least 100ms (the client's floor)", c.AutoCommitInterval)
	case c.ProcessingJitter > c.ProcessingTime:
		return fmt.Errorf("processing.jitter %s: at most processing.time (%s)", c.ProcessingJitter, c.ProcessingTime)
	}
	return nil
}

// The consumers' isolation levels (Config.IsolationLevel).
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// isolation is the kgo option of the consumers' isolation level, def when
// the config sets none.
func (c Config) isolation(def string) kgo.Opt {
	if c.IsolationLevel == ReadCommitted || (c.IsolationLevel == "" && def == ReadCommitted) {
		return kgo.FetchIsolationLevel(kgo.ReadCommitted())
	}
	return kgo.FetchIsolationLevel(kgo.ReadUncommitted())
}

// producerOpts turns the config into kgo producer options.
func (c Config) producerOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(c.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProduceRequestTimeout(c.RequestTimeout),
		kgo.RecordDeliveryTimeout(c.DeliveryTimeout),
		kgo.ProducerLinger(c.Linger),
	}
	if c.RequestTimeoutOverhead > 0 {
		opts = append(opts, kgo.RequestTimeoutOverhead(c.RequestTimeoutOverhead))
	}
	switch c.Acks {
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if !c.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	switch {
	case c.Retries < 0:
		opts = append(opts, kgo.RecordRetries(0))
	case c.Retries > 0:
		opts = append(opts, kgo.RecordRetries(c.Retries))
	}
	if c.MaxInFlight > 0 {
		// The log workload's producers send one record at a time: more
		// than one request in flight matters to the rate workload's.
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(c.MaxInFlight))
	}
	return append(opts, kgo.WithHooks(&staleMetadata{}))
}

// staleMetadata asks for new metadata when a record fails with an error
// that says the client's metadata is out of date, as Kafka's producer
// does (Sender.completeBatch requests a metadata update on any
// InvalidMetadataException, retried or not). kgo refreshes only to retry
// a batch: a record that may not be retried (retries -1) failed with
// NOT_LEADER_OR_FOLLOWER, and every later one went to the old leader until
// metadata.max.age (5 min). One per client (OnNewClient keeps it); asks
// at most once per retryBackoff.
type staleMetadata struct {
	cl   atomic.Pointer[kgo.Client]
	last atomic.Int64 // unix nanoseconds of the last request
}

// retryBackoff is Kafka's retry.backoff.ms default, the producer's least
// time between metadata refreshes.
const retryBackoff = 100 * time.Millisecond

// invalidMetadata are the Kafka errors whose exceptions are
// InvalidMetadataException in Kafka's client.
var invalidMetadata = []error{
	kerr.NotLeaderForPartition,
	kerr.UnknownTopicOrPartition,
	kerr.LeaderNotAvailable,
	kerr.NetworkException,
	kerr.KafkaStorageError,
	kerr.FencedLeaderEpoch,
	kerr.UnknownLeaderEpoch,
	kerr.UnknownTopicID,
	kerr.InconsistentTopicID,
}

func (h *staleMetadata) OnNewClient(cl *kgo.Client) { h.cl.Store(cl) }

func (h *staleMetadata) OnProduceRecordUnbuffered(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	stale := false
	for _, e := range invalidMetadata {
		stale = stale || errors.Is(err, e)
	}
	cl := h.cl.Load()
	if !stale || cl == nil {
		return
	}
	now, last := time.Now().UnixNano(), h.last.Load()
	if now-last < int64(retryBackoff) || !h.last.CompareAndSwap(last, now) {
		return
	}
	cl.ForceMetadataRefresh()
}

// PartitionOf returns the partition of a key under the workload's spread.
func PartitionOf(key string, partitions int32) int32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % uint32(partitions))
}

// refusals are errors with which a broker refuses a produce request for a
// reason that holds on every attempt, so nothing was appended, and errors
// the client raises before the record left it.
var refusals = []error{
	kerr.InvalidRequiredAcks,
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
	kerr.CorruptMessage,
	kerr.InvalidTopicException,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
	kgo.ErrMaxBuffered, // refused before it was buffered
	kgo.ErrAborting,    // buffered records aborted before they were sent
}

// attemptRefusals say "not appended" for the attempt that got them only: an
// earlier attempt that timed out may still have written the record.
var attemptRefusals = []error{
	kerr.NotEnoughReplicas,
	kerr.UnknownTopicOrPartition,
}

// Classify maps a produce error to an outcome: ok for nil; fail only when
// the record was definitely not written; info for everything else — a
// timeout, a disconnect, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND
// (already appended), NOT_LEADER_OR_FOLLOWER (a delayed produce is answered
// so when leadership moves after the append) — because the record may have
// been written. retried says whether the client may have sent the record
// more than once (retries != 0): then NOT_ENOUGH_REPLICAS on the last
// attempt says nothing about the earlier ones, and the outcome is info.
func Classify(err error, retried bool) history.Type {
	if err == nil {
		return history.OK
	}
	// A retried or timed-out record may have been written by an earlier
	// attempt, whatever the last error says.
	if errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries) {
		return history.Info
	}
	for _, d := range refusals {
		if errors.Is(err, d) {
			return history.Fail
		}
	}
	if !retried {
		for _, d := range attemptRefusals {
			if errors.Is(err, d) {
				return history.Fail
			}
		}
	}
	return history.Info
}

// errString names an error the way histories show it: the Kafka error code
// name when there is one.
func errString(err error) string {
	if err == nil {
		return ""
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && err == error(ke) {
		return ke.Message
	}
	return err.Error()
}

// values hands out unique values 0, 1, 2, ... across a workload's producers.
type values struct{ next atomic.Int64 }

func (v *values) take() int64 { return v.next.Add(1) - 1 }

// processes hands out process numbers; a crashed process never comes back
// under its old number.
type processes struct{ next atomic.Int64 }

func (p *processes) take() int { return int(p.next.Add(1) - 1) }

func encodeValue(v int64) []byte { return strconv.AppendInt(nil, v, 10) }

// pollOnce polls cl once and records the records it returned; it returns
// the recorded completion. The error is kgo.ErrClientClosed only.
func pollOnce(ctx context.Context, cl *kgo.Client, rec *history.Recorder, proc int, timeout time.Duration, f string) (history.Op, error) {
	return poll(ctx, kgoConsumer{cl}, rec, proc, timeout, f)
}

// poller is a kgo.Client or a kgo.GroupTransactSession.
type poller interface {
	PollFetches(context.Context) kgo.Fetches
}

// pollFetches polls cl once and returns its records per partition, in the
// order the client returned them (never nil), their number, and the first
// error other than the poll's own timeout.
func pollFetches(ctx context.Context, cl poller, timeout time.Duration) ([]history.PartitionRecords, int, error) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	fs := cl.PollFetches(pctx)
	cancel()
	var reads Reads
	fs.EachRecord(func(r *kgo.Record) { reads.Add(r.Partition, r.Offset, r.Value) })
	var firstErr error
	fs.EachError(func(_ string, _ int32, err error) {
		if firstErr == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			firstErr = err
		}
	})
	return reads.Records(), reads.N, firstErr
}

// Reads gathers a poll's records per partition, in the order the client
// returned them; N counts them.
type Reads struct {
	out    []history.PartitionRecords
	byPart map[int32]int
	N      int
}

// Add appends the record at offset of partition, whose value is a decimal
// int64 (history.BadValue, with the raw value kept, when it is not).
func (r *Reads) Add(partition int32, offset int64, value []byte) {
	i, ok := r.byPart[partition]
	if !ok {
		if r.byPart == nil {
			r.byPart = map[int32]int{}
		}
		i = len(r.out)
		r.byPart[partition] = i
		r.out = append(r.out, history.PartitionRecords{Partition: partition})
	}
	v, err := strconv.ParseInt(string(value), 10, 64)
	hr := history.Record{Offset: offset, Value: v}
	if err != nil || v == history.BadValue {
		hr.Value, hr.Raw = history.BadValue, string(value)
	}
	r.out[i].Records = append(r.out[i].Records, hr)
	r.N++
}

// Records returns the records per partition (never nil).
func (r *Reads) Records() []history.PartitionRecords {
	if r.out == nil {
		return []history.PartitionRecords{}
	}
	return r.out
}
