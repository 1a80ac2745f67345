// Package partition holds one partition's replica state on a broker: its
// log, role, leader epoch, ISR, high watermark, the followers' fetch state
// (on the leader), the idempotent-producer table and the
// leaderIsrUpdateLock that produce and fetch take for reading.
//
// It reproduces Kafka's replication rules (KAFKA-SPEC §1–§5, §7) and their
// version-dependent variants behind Switches. The package does no network
// I/O and starts no goroutines: time comes from an injected clock, ISR
// writes go through the ISRWriter the broker provides, and periodic work
// (MaybeShrinkISR) is driven by the caller.
package partition

import (
	"errors"
	"slices"
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

// ISR update modes (switch isr.update, KAFKA-SPEC §1.6 and §7).
const (
	// ISRSyncAlways: <= 2.4. The shrink check takes the write lock on every
	// tick and expansion on every fetch from a non-ISR follower; the
	// coordinator write happens while the lock is held.
	ISRSyncAlways = "sync-under-lock-always"
	// ISRSyncChecked: 2.5–2.6 (KAFKA-7538). Checks run under the read lock;
	// the write lock and the coordinator write only when the ISR changes.
	ISRSyncChecked = "sync-under-lock-checked"
	// ISRAsync: 2.7+. An AlterPartition request is queued to the controller;
	// no coordinator round trip under the lock.
	ISRAsync = "async-alter-partition"
)

// Truncation modes (switch replication.truncation, §5).
const (
	TruncateHW        = "hw"
	TruncateEpoch     = "epoch"
	TruncateDiverging = "diverging-epoch-fetch"
)

// Switches are the version-dependent replication behaviours.
type Switches struct {
	Truncation            string
	ISRUpdate             string
	ExpandNeedsEpochStart bool
	HWRequiresMinISR      bool
	ReplicaLagTimeMaxMs   int64
	// TxnVerification: transaction.partition.verification.enable (3.6+,
	// KIP-890 part 1). A transactional batch opening a transaction on this
	// partition is appended only after the transaction coordinator
	// confirmed the partition is in the transaction.
	TxnVerification bool
}

// LeaderAndISR is the partition state the coordinator stores.
type LeaderAndISR struct {
	Leader          int32
	LeaderEpoch     int32
	ISR             []int32
	ControllerEpoch int32
}

// ErrVersionMismatch: a conditional ISR write found a newer partition state.
var ErrVersionMismatch = errors.New("partition state version mismatch")

// ISRWriter is the broker's side of ISR changes made by a leader.
type ISRWriter interface {
	// WriteISR conditionally writes the state at expectedVersion and returns
	// the new version (sync modes). It blocks, retrying, until the
	// coordinator answers: Kafka's leader did the same while holding the
	// partition's write lock. ErrVersionMismatch when the state moved on.
	WriteISR(topic string, partition int32, state LeaderAndISR, expectedVersion int64) (int64, error)
	// NotifyISRChange queues the partition for the controller's lazy
	// propagation of leader-made ISR changes (sync modes).
	NotifyISRChange(topic string, partition int32)
	// AlterPartition sends the proposal to the controller without blocking
	// (async mode) and later calls p.CompleteAlterPartition with the result.
	AlterPartition(p *Partition, leaderEpoch int32, isr []int32, partitionEpoch int64)
}

// Stats counts ISR events for the broker's metrics.
type Stats interface {
	IsrShrink()
	IsrExpand()
	FailedIsrUpdate()
}

// LockStats is an optional capability of Stats: the time each acquisition
// of the leaderIsrUpdateLock waited, for reading (produce, fetch,
// ListOffsets) or writing (ISR and leadership changes). Kafka has no such
// metric; in the seed 004 incident only thread dumps showed the wait.
type LockStats interface {
	LockWait(write bool, d time.Duration)
}

// Role of this replica.
type Role int

// Roles.
const (
	None Role = iota
	Leader
	Follower
)

// remote is the leader's view of one follower (KAFKA-SPEC §1.1).
type remote struct {
	leo                int64 // -1: unknown since this replica became leader
	lastFetchTimeMs    int64
	lastFetchLeaderLEO int64
	lastCaughtUpTimeMs int64
	sinceMs            int64 // when this leader started tracking the follower
	logStart           int64 // the follower's log start offset from its last fetch; -1: unknown
}

// pendingAlter is an AlterPartition in flight (async mode).
type pendingAlter struct {
	isr    []int32
	expand bool
}

// Partition is one partition replica on this broker.
type Partition struct {
	Topic string
	Index int32

	self   int32
	log    *klog.Log
	now    func() time.Time
	sw     Switches
	writer ISRWriter
	stats  Stats
	locks  LockStats // nil: lock waits are not measured
	live   func(int32) bool
	meta   func() <-chan struct{} // closed at the broker's next metadata change; nil: none

	// leaderIsrUpdateLock: produce and fetch hold it for reading; changes
	// of leadership and ISR hold it for writing (§7).
	lock sync.RWMutex
	// appendMu orders appends with their producer-sequence checks.
	appendMu sync.Mutex

	mu              sync.Mutex
	cfg             Config
	role            Role
	leader          int32
	leaderEpoch     int32
	controllerEpoch int32
	version         int64 // the partition state's version (zkVersion / partition epoch)
	replicas        []int32
	isr             []int32
	pending         *pendingAlter
	// alterWait, when set, holds ISR proposals after the controller refused
	// one with a non-retriable error: they resume when it is closed (new
	// metadata) or a new partition state arrives (Kafka's leader waits for
	// new metadata instead of proposing the refused change again).
	alterWait  <-chan struct{}
	epochStart int64 // LEO when this replica became leader
	remotes    map[int32]*remote
	hw         int64
	changed    chan struct{}
}

// Options are a partition's collaborators.
type Options struct {
	Switches Switches
	Writer   ISRWriter
	Stats    Stats
	// Live reports whether a broker is alive and not shutting down, as the
	// broker last heard from the controller; nil means all are.
	Live func(int32) bool
	// MetadataChanged returns a channel closed at the broker's next
	// metadata change (an UpdateMetadata); nil: only a new partition state
	// ends a wait for new metadata.
	MetadataChanged func() <-chan struct{}
}

// New wraps an open log as a replica of topic/index on broker self. It
// starts with no role; MakeLeader or MakeFollower gives it one.
func New(topic string, index int32, self int32, lg *klog.Log, cfg Config, now func() time.Time, o Options) *Partition {
	if o.Switches.ReplicaLagTimeMaxMs <= 0 {
		o.Switches.ReplicaLagTimeMaxMs = 30000
	}
	if o.Switches.ISRUpdate == "" {
		o.Switches.ISRUpdate = ISRAsync
	}
	if o.Switches.Truncation == "" {
		o.Switches.Truncation = TruncateDiverging
	}
	p := &Partition{
		Topic: topic, Index: index, self: self, log: lg, now: now, cfg: cfg,
		sw: o.Switches, writer: o.Writer, stats: o.Stats, live: o.Live, meta: o.MetadataChanged,
		leader: -1, changed: make(chan struct{}),
		remotes: map[int32]*remote{},
	}
	p.locks, _ = o.Stats.(LockStats)
	return p
}

// Log returns the partition's log.
func (p *Partition) Log() *klog.Log { return p.log }

// Switches returns the replication switches.
func (p *Partition) Switches() Switches { return p.sw }

// SetConfig replaces the topic-level config.
func (p *Partition) SetConfig(cfg Config) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

func (p *Partition) nowMs() int64 { return p.now().UnixMilli() }

// rlock takes the leaderIsrUpdateLock for reading, reporting the wait.
func (p *Partition) rlock() {
	if p.locks == nil {
		p.lock.RLock()
		return
	}
	t := p.now()
	p.lock.RLock()
	p.locks.LockWait(false, p.now().Sub(t))
}

// wlock takes the leaderIsrUpdateLock for writing, reporting the wait.
func (p *Partition) wlock() {
	if p.locks == nil {
		p.lock.Lock()
		return
	}
	t := p.now()
	p.lock.Lock()
	p.locks.LockWait(true, p.now().Sub(t))
}

// State is a snapshot of the partition's replica state.
type State struct {
	Role                Role
	Leader, LeaderEpoch int32
	ControllerEpoch     int32
	Version             int64
	Replicas, ISR       []int32
	MaximalISR          []int32
	HighWatermark       int64
	LogStartOffset      int64
	LogEndOffset        int64
	EpochStartOffset    int64
	LastStableOffset    int64
}

// State returns a snapshot.
func (p *Partition) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return State{
		Role: p.role, Leader: p.leader, LeaderEpoch: p.leaderEpoch, ControllerEpoch: p.controllerEpoch, Version: p.version,
		Replicas: slices.Clone(p.replicas), ISR: slices.Clone(p.isr), MaximalISR: p.maximalISRLocked(),
		HighWatermark: p.hw, LogStartOffset: p.log.LogStartOffset(), LogEndOffset: p.log.LogEndOffset(),
		EpochStartOffset: p.epochStart, LastStableOffset: p.log.LastStableOffset(p.hw),
	}
}

// HighWatermark returns the HW.
func (p *Partition) HighWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw
}

// LeaderEpoch returns the current leader epoch.
func (p *Partition) LeaderEpoch() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leaderEpoch
}

// Changed returns a channel closed at the next change of the HW, the LEO or
// the role.
func (p *Partition) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

func (p *Partition) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// maximalISRLocked is the ISR used for the HW and acks=all: while an
// expansion is in flight it already includes the new member; while a shrink
// is in flight it is still the old ISR (§1.6b).
func (p *Partition) maximalISRLocked() []int32 {
	if p.pending != nil && p.pending.expand {
		return slices.Clone(p.pending.isr)
	}
	return slices.Clone(p.isr)
}

// minISRLocked is the effective min.insync.replicas: from 3.7 (the
// hw.requires-min-isr switch) it is capped at the replication factor.
func (p *Partition) minISRLocked() int {
	m := p.cfg.MinInsyncReplicas
	if p.sw.HWRequiresMinISR && len(p.replicas) > 0 && m > len(p.replicas) {
		m = len(p.replicas)
	}
	return m
}

// checkEpoch fences requests by leader epoch (KIP-320).
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
	case errors.Is(err, klog.ErrOffsetMismatch):
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

// MinInsyncReplicas returns the effective min.insync.replicas.
func (p *Partition) MinInsyncReplicas() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.minISRLocked()
}
