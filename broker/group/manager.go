// Package group is the consumer-group coordinator: group membership
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), generations, rebalance
// and session timeouts, and committed offsets (KAFKA-SPEC §9); and
// consumer groups of the KIP-848 protocol (ConsumerGroupHeartbeat,
// server-side assignors, member epochs; consumer.go).
//
// A Manager holds the groups of the __consumer_offsets partitions this
// broker leads. It does no network I/O: it persists group metadata and
// offsets through the Log the broker provides (an acks=-1 append to
// __consumer_offsets) and reloads them from it when it becomes a
// partition's leader. Time comes from an injected Clock, so tests drive
// session expiry and rebalance delays without sleeping. Responses to
// requests that wait (JoinGroup until the rebalance completes, SyncGroup
// until the leader's assignment is stored) are delivered through
// callbacks, each called exactly once.
package group

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// Topic is the name of the offsets topic.
const Topic = "__consumer_offsets"

// Log is the broker's side of persistence: __consumer_offsets partitions
// this broker leads.
type Log interface {
	// Submit queues one record batch for appending with acks=-1 behind
	// every batch submitted before it and returns at once; the Pending
	// gives the offset of its first record. Errors are Kafka errors from
	// kerr where Kafka has one. The manager submits under its lock, so its
	// records reach the log in the order of the state changes they record
	// (two rebalances' group records written the other way round would
	// reload the older generation).
	Submit(partition int32, batch []byte) coordlog.Pending
	// Read returns whole batches from offset from (the log start when from
	// is below it) up to the log end; an empty result means the end.
	Read(ctx context.Context, partition int32, from int64) ([]byte, error)
}

// Clock is the manager's time source.
type Clock = coordlog.Clock

// Timer is a scheduled callback.
type Timer = coordlog.Timer

// Config holds the coordinator settings, under Kafka's names.
type Config struct {
	// Partitions is offsets.topic.num.partitions.
	Partitions int
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout are
	// group.min.session.timeout.ms (6000) and group.max.session.timeout.ms
	// (1800000).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// CommitTimeout is offsets.commit.timeout.ms.
	CommitTimeout time.Duration
	// MaxMetadataBytes is offset.metadata.max.bytes (4096).
	MaxMetadataBytes int
	// OffsetsRetention is offsets.retention.minutes (7 days) and
	// RetentionCheckInterval offsets.retention.check.interval.ms (10 min):
	// offsets expire as in Kafka 2.1+ (KIP-211), see expireOffsets.
	OffsetsRetention, RetentionCheckInterval time.Duration
	// ConsumerSessionTimeout is group.consumer.session.timeout.ms (45000)
	// and ConsumerHeartbeatInterval group.consumer.heartbeat.interval.ms
	// (5000): the session and heartbeat interval of consumer groups
	// (KIP-848), set by the broker rather than by each member.
	ConsumerSessionTimeout, ConsumerHeartbeatInterval time.Duration
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		Partitions:             50,
		InitialRebalanceDelay:  3 * time.Second,
		MinSessionTimeout:      6 * time.Second,
		MaxSessionTimeout:      30 * time.Minute,
		CommitTimeout:          5 * time.Second,
		MaxMetadataBytes:       4096,
		OffsetsRetention:       7 * 24 * time.Hour,
		RetentionCheckInterval: 10 * time.Minute,

		ConsumerSessionTimeout:    45 * time.Second,
		ConsumerHeartbeatInterval: 5 * time.Second,
	}
}

// Option configures a Manager.
type Option interface{ apply(*Manager) }

type optFunc func(*Manager)

func (f optFunc) apply(m *Manager) { f(m) }

// WithClock injects the clock.
func WithClock(c Clock) Option { return optFunc(func(m *Manager) { m.clock = c }) }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return optFunc(func(m *Manager) { m.logger = l }) }

// WithMemberIDs sets how member ids are made (tests make them predictable);
// the default is clientID-<uuid>, as Kafka.
func WithMemberIDs(f func(clientID string) string) Option {
	return optFunc(func(m *Manager) { m.newID = f })
}

// WithTopicCheck makes commits to partitions for which exists is false
// fail with UNKNOWN_TOPIC_OR_PARTITION, as Kafka checks its metadata.
func WithTopicCheck(exists func(topic string, partition int32) bool) Option {
	return optFunc(func(m *Manager) { m.exists = exists })
}

// Manager coordinates the groups of the __consumer_offsets partitions
// this broker leads.
type Manager struct {
	cfg    Config
	log    Log
	clock  Clock
	logger *slog.Logger
	newID  func(clientID string) string
	exists func(topic string, partition int32) bool
	topics Topics

	mu     sync.Mutex
	owned  coordlog.Partitions
	groups map[string]*groupState
	// markersWhileLoading are the transaction completions of partitions
	// still loading: their markers may be past what the load reads, so
	// they are applied when it completes.
	markersWhileLoading map[int32][]txnCompletion
	queue               coordlog.Queue // run after mu is released
	closed              bool
	expiry              Timer // the next offset expiry run, armed while partitions are owned

}

// New returns a Manager that owns no partition yet.
func New(cfg Config, l Log, opts ...Option) *Manager {
	d := DefaultConfig()
	if cfg.Partitions <= 0 {
		cfg.Partitions = d.Partitions
	}
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = d.MinSessionTimeout
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = d.MaxSessionTimeout
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = d.CommitTimeout
	}
	if cfg.MaxMetadataBytes <= 0 {
		cfg.MaxMetadataBytes = d.MaxMetadataBytes
	}
	if cfg.OffsetsRetention <= 0 {
		cfg.OffsetsRetention = d.OffsetsRetention
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = d.RetentionCheckInterval
	}
	if cfg.ConsumerSessionTimeout <= 0 {
		cfg.ConsumerSessionTimeout = d.ConsumerSessionTimeout
	}
	if cfg.ConsumerHeartbeatInterval <= 0 {
		cfg.ConsumerHeartbeatInterval = d.ConsumerHeartbeatInterval
	}
	m := &Manager{cfg: cfg, log: l, clock: coordlog.RealClock, logger: slog.Default(), newID: randomMemberID, groups: map[string]*groupState{}}
	for _, o := range opts {
		o.apply(m)
	}
	return m
}

func randomMemberID(clientID string) string {
	var b [16]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", clientID, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// PartitionFor returns the __consumer_offsets partition of groupID.
func (m *Manager) PartitionFor(groupID string) int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.partitionLocked(groupID)
}

func (m *Manager) partitionLocked(groupID string) int32 { return Partition(groupID, m.cfg.Partitions) }

// unlock releases mu and then runs the work queued under it.
func (m *Manager) unlock() { m.queue.Unlock(&m.mu) }

func (m *Manager) later(f func()) { m.queue.Later(f) }

func (m *Manager) nowMs() int64 { return m.clock.Now().UnixMilli() }

// OnBecomeLeader makes this broker the coordinator of the groups of
// __consumer_offsets partition p at leaderEpoch: they are reloaded from
// the log in the background, and requests for them get
// COORDINATOR_LOAD_IN_PROGRESS until the load completes. Calling it again
// for the same epoch does nothing.
func (m *Manager) OnBecomeLeader(p int32, leaderEpoch int32) {
	m.mu.Lock()
	defer m.unlock()
	if m.closed {
		return
	}
	if o := m.owned.Get(p); o != nil {
		if o.Epoch == leaderEpoch {
			return
		}
		m.resignLocked(p)
	}
	if m.expiry == nil {
		m.expiry = m.clock.AfterFunc(m.cfg.RetentionCheckInterval, m.expireOffsets)
	}
	m.owned.Start(p, leaderEpoch, func(ctx context.Context, o *coordlog.Ownership) { m.load(ctx, p, o) })
}

// OnResign drops the groups of partition p: another broker coordinates
// them now. Waiting requests get NOT_COORDINATOR.
func (m *Manager) OnResign(p int32) {
	m.mu.Lock()
	defer m.unlock()
	m.resignLocked(p)
}

func (m *Manager) resignLocked(p int32) {
	delete(m.markersWhileLoading, p)
	if !m.owned.Drop(p) {
		return
	}
	n := 0
	for id, g := range m.groups {
		if g.partition != p {
			continue
		}
		n++
		m.dropGroupLocked(g, kerr.NotCoordinator.Code)
		delete(m.groups, id)
	}
	if n > 0 {
		m.logger.Info("resigned as group coordinator", "partition", p, "groups", n)
	}
}

// dropGroupLocked ends everything a group waits on with code.
func (m *Manager) dropGroupLocked(g *groupState, code int16) {
	if g.joinTimer != nil {
		g.joinTimer.Stop()
	}
	for _, t := range g.pending {
		t.Stop()
	}
	if g.cg != nil {
		for _, mem := range g.cg.members {
			for _, t := range []Timer{mem.session, mem.rebalance} {
				if t != nil {
					t.Stop()
				}
			}
		}
	}
	for _, mem := range g.sorted() {
		if mem.timer != nil {
			mem.timer.Stop()
		}
		m.failJoinLocked(mem, code)
		m.failSyncLocked(mem, code)
	}
	g.state = Dead
}

// Close resigns every partition and waits for loaders. It is idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	if m.expiry != nil {
		m.expiry.Stop()
	}
	for _, p := range m.owned.List() {
		m.resignLocked(p)
	}
	m.unlock()
	m.owned.Wait()
}

// Owned returns the partitions this manager coordinates and whether each
// is still loading.
func (m *Manager) Owned() map[int32]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owned.Status()
}

// checkLocked is the coordinator check every group request starts with.
func (m *Manager) checkLocked(groupID string) *kerr.Error {
	if groupID == "" {
		return kerr.InvalidGroupID
	}
	o := m.owned.Get(m.partitionLocked(groupID))
	switch {
	case o == nil:
		return kerr.NotCoordinator
	case o.Loading:
		return kerr.CoordinatorLoadInProgress
	}
	return nil
}

// load replays partition p of __consumer_offsets into groups and offsets.
func (m *Manager) load(ctx context.Context, p int32, o *coordlog.Ownership) {
	start := m.clock.Now()
	type loaded struct {
		meta    *groupRecord
		cg      *loadedCG
		deleted bool
		offsets map[TopicPartition]Offset
	}
	groups := map[string]*loaded{}
	get := func(id string) *loaded {
		l := groups[id]
		if l == nil {
			l = &loaded{offsets: map[TopicPartition]Offset{}}
			groups[id] = l
		}
		return l
	}
	// Transactional offsets wait for their producer's marker, as Kafka's
	// GroupMetadataManager loads them: producer -> group -> offsets.
	pending := map[int64]map[string]map[TopicPartition]Offset{}
	records, err := coordlog.Replay(ctx, m.log, p, 200*time.Millisecond, m.logger, func(b coordlog.Batch, off int64, r record) {
		if b.Control {
			typ, err := coordlog.ControlType(r.Key)
			if err != nil {
				m.logger.Warn("skip unreadable control record", "partition", p, "offset", off, "err", err)
				return
			}
			if typ == coordlog.ControlCommit {
				for id, offs := range pending[b.Producer.ID] {
					applyNewer(get(id).offsets, offs)
				}
			}
			delete(pending, b.Producer.ID)
			return
		}
		if len(r.Key) >= 2 && int16(binary.BigEndian.Uint16(r.Key)) >= cgMetadataKeyVersion {
			c, err := parseCGKey(r.Key)
			if err == nil && c.version != 4 && c.version <= currentAssignmentKeyVersion {
				c.value = r.Value
				l := get(c.group)
				if l.cg == nil {
					l.cg = &loadedCG{members: map[string]*cmember{}, target: map[string]assignment{}}
				}
				if c.version == cgMetadataKeyVersion && r.Value == nil {
					l.cg = nil // the group was deleted
					return
				}
				err = m.applyCGRecord(l.cg, c)
			}
			if err != nil {
				m.logger.Warn("skip unreadable consumer group record", "partition", p, "offset", off, "err", err)
			}
			return
		}
		k, err := parseKey(r.Key)
		if err != nil {
			m.logger.Warn("skip unreadable record", "partition", p, "offset", off, "err", err)
			return
		}
		if b.Producer.Transactional && k.isOffset {
			byGroup := pending[b.Producer.ID]
			if byGroup == nil {
				byGroup = map[string]map[TopicPartition]Offset{}
				pending[b.Producer.ID] = byGroup
			}
			if byGroup[k.group] == nil {
				byGroup[k.group] = map[TopicPartition]Offset{}
			}
			if r.Value == nil {
				delete(byGroup[k.group], k.tp)
				return
			}
			v, err := parseOffsetValue(r.Value)
			if err != nil {
				m.logger.Warn("skip unreadable offset", "partition", p, "offset", off, "err", err)
				return
			}
			v.logOffset = off
			byGroup[k.group][k.tp] = v
			return
		}
		l := get(k.group)
		switch {
		case k.isOffset && r.Value == nil:
			delete(l.offsets, k.tp)
		case k.isOffset:
			v, err := parseOffsetValue(r.Value)
			if err != nil {
				m.logger.Warn("skip unreadable offset", "partition", p, "offset", off, "err", err)
				return
			}
			v.logOffset = off
			l.offsets[k.tp] = v
		case r.Value == nil:
			l.meta, l.deleted = nil, true
		default:
			gr, err := parseGroupValue(r.Value)
			if err != nil {
				m.logger.Warn("skip unreadable group metadata", "partition", p, "offset", off, "err", err)
				return
			}
			l.meta, l.deleted = gr, false
		}
		return
	})
	if err != nil {
		return
	}
	for _, byGroup := range pending {
		for id := range byGroup {
			get(id)
		}
	}

	m.mu.Lock()
	defer m.unlock()
	if m.owned.Get(p) != o {
		return
	}
	now := m.clock.Now()
	for id, l := range groups {
		var open map[int64]map[TopicPartition]Offset
		for pid, byGroup := range pending {
			if offs := byGroup[id]; len(offs) > 0 {
				if open == nil {
					open = map[int64]map[TopicPartition]Offset{}
				}
				open[pid] = offs
			}
		}
		if l.meta == nil && l.cg == nil && len(l.offsets) == 0 && open == nil {
			continue
		}
		g := newGroupState(id, p)
		g.offsets = l.offsets
		if open != nil {
			g.pendingTxn = open
		}
		g.stateSince = now.UnixMilli()
		if gr := l.meta; gr != nil {
			g.protocolType, g.protocol, g.generation, g.leader = gr.protocolType, gr.protocol, gr.generation, gr.leader
			if gr.stateSince >= 0 {
				g.stateSince = gr.stateSince
			}
			for _, mem := range gr.members {
				mem.deadline = now.Add(time.Duration(mem.sessionTimeoutMs) * time.Millisecond)
				g.members[mem.id] = mem
				g.order = append(g.order, mem.id)
				if mem.instanceID != nil {
					g.static[*mem.instanceID] = mem.id
				}
				m.armMemberLocked(g, mem)
			}
			if len(g.members) > 0 {
				g.state = Stable
			}
		}
		if l.cg != nil {
			m.restoreConsumerGroupLocked(g, l.cg)
		}
		m.groups[id] = g
	}
	o.Loading = false
	for _, c := range m.markersWhileLoading[p] {
		m.completeTxnLocked(p, c)
	}
	delete(m.markersWhileLoading, p)
	if records > 0 {
		m.logger.Info("loaded group partition", "partition", p, "records", records, "groups", len(groups), "took", m.clock.Now().Sub(start).String())
	}
}

// appendErr maps an append error to the code Kafka's coordinator answers
// with (KAFKA-SPEC §9.3).
func appendErr(err error, offsets bool) int16 {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		switch ke {
		case kerr.UnknownTopicOrPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut:
			return kerr.CoordinatorNotAvailable.Code
		case kerr.NotLeaderForPartition, kerr.KafkaStorageError:
			return kerr.NotCoordinator.Code
		case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidFetchSize:
			if offsets {
				return kerr.InvalidCommitOffsetSize.Code
			}
			return kerr.UnknownServerError.Code
		}
		return kerr.UnknownServerError.Code
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.CoordinatorNotAvailable.Code
	}
	return kerr.UnknownServerError.Code
}

// lostLeadership resigns partition p when an append found this broker no
// longer its leader (a StopReplica, or a LeaderAndIsr not yet seen), so
// requests get NOT_COORDINATOR instead of stale state.
func (m *Manager) lostLeadershipLocked(p int32, o *coordlog.Ownership, err error) {
	if errors.Is(err, kerr.NotLeaderForPartition) && m.owned.Get(p) == o {
		m.logger.Info("no longer leader of the group partition", "partition", p)
		m.resignLocked(p)
	}
}

// submitLocked queues recs for partition p; call it under mu, where the
// records were made, and wait outside it.
func (m *Manager) submitLocked(p int32, recs []record) coordlog.Pending {
	return m.log.Submit(p, coordlog.Encode(recs, m.nowMs(), coordlog.NoProducer))
}

// wait waits for a submitted append with the commit timeout.
func (m *Manager) wait(pending coordlog.Pending) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CommitTimeout)
	defer cancel()
	return pending(ctx)
}
