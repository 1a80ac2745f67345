// Package partition holds one partition's replica state on a broker: its
// log, leader epoch, ISR, high watermark, idempotent-producer table and the
// leaderIsrUpdateLock that produce and fetch take for reading.
package partition

import (
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// Config is the topic-level configuration a partition needs.
type Config struct {
	MinInsyncReplicas int
	MaxMessageBytes   int
}

// Partition is one partition replica on this broker.
type Partition struct {
	Topic string
	Index int32

	self int32
	log  *klog.Log
	now  func() time.Time

	// leaderIsrUpdateLock: produce and fetch hold it for reading; changes
	// of leadership and ISR hold it for writing (KAFKA-SPEC §7).
	lock sync.RWMutex
	// appendMu orders appends with their producer-sequence checks.
	appendMu sync.Mutex

	mu          sync.Mutex
	cfg         Config
	leader      int32
	leaderEpoch int32
	replicas    []int32
	isr         []int32
	hw          int64
	producers   *Producers
	changed     chan struct{}
}

// New wraps an open log as a replica of topic/index on broker self.
func New(topic string, index int32, self int32, lg *klog.Log, cfg Config, now func() time.Time) *Partition {
	return &Partition{
		Topic: topic, Index: index, self: self, log: lg, now: now, cfg: cfg,
		leader: -1, producers: NewProducers(), changed: make(chan struct{}),
	}
}

// Log returns the partition's log.
func (p *Partition) Log() *klog.Log { return p.log }

// SetConfig replaces the topic-level config.
func (p *Partition) SetConfig(cfg Config) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

// MakeLeader makes this replica the leader at epoch with the given
// assignment and ISR. The HW starts at the checkpointed value, clamped to
// the log, and (with no followers) moves to the LEO.
func (p *Partition) MakeLeader(epoch int32, replicas, isr []int32, checkpointHW int64) error {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leader, p.leaderEpoch = p.self, epoch
	p.replicas, p.isr = append([]int32(nil), replicas...), append([]int32(nil), isr...)
	if _, err := p.log.Epochs().Assign(epoch, p.log.LogEndOffset()); err != nil {
		return err
	}
	p.hw = clamp(checkpointHW, p.log.LogStartOffset(), p.log.LogEndOffset())
	p.maybeIncrementHWLocked()
	p.notifyLocked()
	return nil
}

// State is a snapshot of the partition's leadership state.
type State struct {
	Leader, LeaderEpoch int32
	Replicas, ISR       []int32
	HighWatermark       int64
	LogStartOffset      int64
	LogEndOffset        int64
}

// State returns a snapshot.
func (p *Partition) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return State{
		Leader: p.leader, LeaderEpoch: p.leaderEpoch,
		Replicas: append([]int32(nil), p.replicas...), ISR: append([]int32(nil), p.isr...),
		HighWatermark: p.hw, LogStartOffset: p.log.LogStartOffset(), LogEndOffset: p.log.LogEndOffset(),
	}
}

// HighWatermark returns the HW.
func (p *Partition) HighWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw
}

// Changed returns a channel closed at the next change of the HW or LEO.
func (p *Partition) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

func (p *Partition) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// maybeIncrementHWLocked advances the HW to the smallest LEO among the ISR;
// it never moves backwards (KAFKA-SPEC §2.1). With no followers tracked yet
// the ISR's LEO is the leader's.
func (p *Partition) maybeIncrementHWLocked() bool {
	candidate := p.log.LogEndOffset()
	if candidate > p.hw {
		p.hw = candidate
		return true
	}
	return false
}

// AppendResult describes a leader append.
type AppendResult struct {
	FirstOffset, LastOffset int64
	LogStartOffset          int64
	Records                 int
	Duplicate               bool
}

// AppendAsLeader validates and appends a produce payload. Errors are
// Kafka errors from kerr.
func (p *Partition) AppendAsLeader(data []byte, requiredAcks int16) (AppendResult, error) {
	p.lock.RLock()
	defer p.lock.RUnlock()

	p.mu.Lock()
	leader, epoch, cfg, isrLen := p.leader, p.leaderEpoch, p.cfg, len(p.isr)
	p.mu.Unlock()
	if leader != p.self {
		return AppendResult{}, kerr.NotLeaderForPartition
	}
	batches, err := klog.ParseBatches(data, cfg.MaxMessageBytes)
	if err != nil {
		return AppendResult{}, kafkaError(err)
	}
	if len(batches) == 0 {
		return AppendResult{}, kerr.CorruptMessage
	}
	if requiredAcks == -1 && isrLen < cfg.MinInsyncReplicas {
		return AppendResult{}, kerr.NotEnoughReplicas
	}

	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	first := batches[0]
	var records int
	for _, bi := range batches {
		records += int(bi.LastOffset-bi.BaseOffset) + 1
	}
	if first.ProducerID >= 0 && len(batches) == 1 {
		lastSeq := first.BaseSequence + int32(first.LastOffset-first.BaseOffset)
		df, dl, dup, err := p.producers.Check(first.ProducerID, first.ProducerEpoch, first.BaseSequence, lastSeq)
		if err != nil {
			return AppendResult{}, err
		}
		if dup {
			return AppendResult{FirstOffset: df, LastOffset: dl, LogStartOffset: p.log.LogStartOffset(), Duplicate: true}, nil
		}
	}
	res, err := p.log.AppendAsLeader(data, epoch)
	if err != nil {
		return AppendResult{}, kafkaError(err)
	}
	if first.ProducerID >= 0 && len(batches) == 1 {
		lastSeq := first.BaseSequence + int32(first.LastOffset-first.BaseOffset)
		p.producers.Record(first.ProducerID, first.ProducerEpoch, first.BaseSequence, lastSeq, res.FirstOffset, res.LastOffset)
	}
	p.mu.Lock()
	p.maybeIncrementHWLocked()
	p.notifyLocked()
	p.mu.Unlock()
	return AppendResult{FirstOffset: res.FirstOffset, LastOffset: res.LastOffset, LogStartOffset: p.log.LogStartOffset(), Records: records}, nil
}

// ReadResult is what a fetch gets from one partition.
type ReadResult struct {
	Records          []byte
	HighWatermark    int64
	LogStartOffset   int64
	LastStableOffset int64
	LogEndOffset     int64
}

// Read returns batches from offset. Consumers (replica=false) read up to
// the HW, followers up to the LEO (KAFKA-SPEC §2.4). currentLeaderEpoch
// (-1: not given) fences stale or future leaders (KIP-320).
func (p *Partition) Read(offset int64, maxBytes int, replica bool, currentLeaderEpoch int32, minOneBatch bool) (ReadResult, error) {
	p.lock.RLock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	leader, epoch, hw := p.leader, p.leaderEpoch, p.hw
	p.mu.Unlock()
	if err := checkEpoch(currentLeaderEpoch, epoch); err != nil {
		return ReadResult{}, err
	}
	if leader != p.self {
		return ReadResult{}, kerr.NotLeaderForPartition
	}
	res := ReadResult{HighWatermark: hw, LastStableOffset: hw, LogStartOffset: p.log.LogStartOffset(), LogEndOffset: p.log.LogEndOffset()}
	max := hw
	if replica {
		max = res.LogEndOffset
	}
	if offset > res.LogEndOffset || offset < res.LogStartOffset {
		return res, kerr.OffsetOutOfRange
	}
	if offset >= max {
		res.Records = []byte{}
		return res, nil
	}
	rr, err := p.log.Read(offset, maxBytes, max, minOneBatch)
	if err != nil {
		return res, kafkaError(err)
	}
	res.Records = rr.Records
	if res.Records == nil {
		res.Records = []byte{}
	}
	return res, nil
}

func checkEpoch(requested, current int32) error {
	switch {
	case requested < 0:
		return nil
	case requested < current:
		return kerr.FencedLeaderEpoch
	case requested > current:
		return kerr.UnknownLeaderEpoch
	}
	return nil
}

// kafkaError maps log errors to Kafka's.
func kafkaError(err error) error {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return ke
	case errors.Is(err, klog.ErrRecordTooLarge):
		return kerr.MessageTooLarge
	case errors.Is(err, klog.ErrCorruptMessage), errors.Is(err, klog.ErrUnsupportedMagic):
		return kerr.CorruptMessage
	case errors.Is(err, klog.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange
	}
	return kerr.KafkaStorageError
}

func clamp(v, lo, hi int64) int64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// AcksAllStatus reports whether an acks=-1 append ending before
// requiredOffset is complete: the HW covers it. A completed append whose
// ISR has fallen below min.insync.replicas gets
// NOT_ENOUGH_REPLICAS_AFTER_APPEND (the data stays committed); a lost
// leadership gets NOT_LEADER_OR_FOLLOWER (KAFKA-SPEC §3.4).
func (p *Partition) AcksAllStatus(requiredOffset int64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader != p.self {
		return true, kerr.NotLeaderForPartition
	}
	if p.hw < requiredOffset {
		return false, nil
	}
	if len(p.isr) < p.cfg.MinInsyncReplicas {
		return true, kerr.NotEnoughReplicasAfterAppend
	}
	return true, nil
}

// TimestampOffset is the answer to a ListOffsets lookup by time.
type TimestampOffset struct{ Offset, Timestamp int64 }

// OffsetForTimestamp finds the first offset whose batch has a timestamp at
// or after ts, below the HW, and the leader epoch of that offset.
func (p *Partition) OffsetForTimestamp(ts int64) (TimestampOffset, bool, int32) {
	p.lock.RLock()
	defer p.lock.RUnlock()
	hw := p.HighWatermark()
	off, t, ok := p.log.OffsetForTimestamp(ts)
	if !ok || off >= hw {
		return TimestampOffset{}, false, -1
	}
	epoch := int32(-1)
	for _, e := range p.log.Epochs().Entries() {
		if e.StartOffset <= off {
			epoch = e.Epoch
		}
	}
	return TimestampOffset{Offset: off, Timestamp: t}, true, epoch
}
