// Package txn is the transaction coordinator (KIP-98): transactional ids,
// their producer ids and epochs, and the two-phase commit of each
// transaction (Ongoing, PrepareCommit or PrepareAbort, the markers, then
// CompleteCommit or CompleteAbort), as Kafka 3.7's TransactionCoordinator
// and TransactionStateManager keep them.
//
// A Manager holds the transactional ids of the __transaction_state
// partitions this broker leads. It does no network I/O of its own: it
// persists through the Log the broker provides (acks=-1 appends to
// __transaction_state), reloads from it when it becomes a partition's
// leader, asks ProducerIDs for new producer ids, and hands the
// WriteTxnMarkers requests of a committing or aborting transaction to a
// MarkerSender, which answers through a callback. Time comes from an
// injected Clock: transaction timeouts, transactional id expiry and
// marker retries are timers on it, so tests drive them without sleeping.
//
// Requests block until their record is written (at most
// Config.WriteTimeout); EndTxn answers once PrepareCommit or PrepareAbort
// is written, and the markers and the Complete record follow.
package txn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/broker/coordlog"
	"github.com/isrlab/isrlab/broker/group"
)

// Topic is the name of the transaction state topic.
const Topic = "__transaction_state"

// Log is the broker's side of persistence: __transaction_state
// partitions this broker leads.
type Log interface {
	// Append appends one record batch with acks=-1 and returns the offset
	// of its first record; errors are Kafka errors from kerr where Kafka
	// has one.
	Append(ctx context.Context, partition int32, batch []byte) (int64, error)
	// Read returns whole batches from offset from (the log start when from
	// is below it) up to the log end; an empty result means the end.
	Read(ctx context.Context, partition int32, from int64) ([]byte, error)
}

// ProducerIDs hands out producer ids no other broker of the cluster
// hands out.
type ProducerIDs interface {
	NewProducerID(ctx context.Context) (int64, error)
}

// Clock is the manager's time source.
type Clock = coordlog.Clock

// Timer is a scheduled callback.
type Timer = coordlog.Timer

// Config holds the coordinator settings, under Kafka's names.
type Config struct {
	// Partitions is transaction.state.log.num.partitions.
	Partitions int
	// MaxTimeout is transaction.max.timeout.ms.
	MaxTimeout time.Duration
	// AbortInterval is
	// transaction.abort.timed.out.transaction.cleanup.interval.ms.
	AbortInterval time.Duration
	// IDExpiration is transactional.id.expiration.ms and RemoveInterval
	// transaction.remove.expired.transaction.cleanup.interval.ms.
	IDExpiration, RemoveInterval time.Duration
	// WriteTimeout bounds a __transaction_state append (Kafka's
	// coordinator uses request.timeout.ms).
	WriteTimeout time.Duration
	// RetryBackoff spaces marker and Complete-record retries.
	RetryBackoff time.Duration
	// TransactionVersion is Kafka 4.0's transaction.version feature: 0
	// (Kafka 3.7's coordinator), 1 (TransactionLogValue v1, flexible) or 2
	// (KIP-890 part 2: EndTxn v5 bumps the epoch of every transaction, and
	// a partition leader's AddPartitionsToTxn adds the partitions a
	// produce request implies).
	TransactionVersion int16
}

// valueVersion is the TransactionLogValue version written (Kafka's
// TransactionVersion.transactionLogValueVersion).
func (c Config) valueVersion() int16 {
	if c.TransactionVersion >= 1 {
		return 1
	}
	return 0
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		Partitions:     50,
		MaxTimeout:     15 * time.Minute,
		AbortInterval:  10 * time.Second,
		IDExpiration:   7 * 24 * time.Hour,
		RemoveInterval: time.Hour,
		WriteTimeout:   30 * time.Second,
		RetryBackoff:   100 * time.Millisecond,
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

// WithTopicCheck makes AddPartitionsToTxn refuse partitions for which
// exists is false with UNKNOWN_TOPIC_OR_PARTITION, as Kafka checks its
// metadata.
func WithTopicCheck(exists func(topic string, partition int32) bool) Option {
	return optFunc(func(m *Manager) { m.exists = exists })
}

// Manager coordinates the transactional ids of the __transaction_state
// partitions this broker leads.
type Manager struct {
	cfg     Config
	log     Log
	ids     ProducerIDs
	markers MarkerSender
	clock   Clock
	logger  *slog.Logger
	exists  func(topic string, partition int32) bool

	mu     sync.Mutex
	owned  coordlog.Partitions
	txns   map[string]*txnMeta
	queue  coordlog.Queue // run after mu is released
	closed bool
	abort  Timer // the next timed-out transaction check
	expire Timer // the next transactional id expiry

}

// New returns a Manager that owns no partition yet.
func New(cfg Config, l Log, ids ProducerIDs, markers MarkerSender, opts ...Option) *Manager {
	d := DefaultConfig()
	if cfg.Partitions <= 0 {
		cfg.Partitions = d.Partitions
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = d.MaxTimeout
	}
	if cfg.AbortInterval <= 0 {
		cfg.AbortInterval = d.AbortInterval
	}
	if cfg.IDExpiration <= 0 {
		cfg.IDExpiration = d.IDExpiration
	}
	if cfg.RemoveInterval <= 0 {
		cfg.RemoveInterval = d.RemoveInterval
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = d.WriteTimeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = d.RetryBackoff
	}
	m := &Manager{cfg: cfg, log: l, ids: ids, markers: markers, clock: coordlog.RealClock, logger: slog.Default(), txns: map[string]*txnMeta{}}
	for _, o := range opts {
		o.apply(m)
	}
	return m
}

// Partition is the __transaction_state partition of a transactional id:
// abs(hashCode) % partitions, as for groups.
func Partition(id string, partitions int) int32 { return group.Partition(id, partitions) }

// PartitionFor returns the __transaction_state partition of id.
func (m *Manager) PartitionFor(id string) int32 { return Partition(id, m.cfg.Partitions) }

// unlock releases mu and then runs the work queued under it.
func (m *Manager) unlock() { m.queue.Unlock(&m.mu) }

func (m *Manager) later(f func()) { m.queue.Later(f) }

func (m *Manager) nowMs() int64 { return m.clock.Now().UnixMilli() }

// OnBecomeLeader makes this broker the coordinator of the transactional
// ids of __transaction_state partition p at leaderEpoch (the coordinator
// epoch): they are reloaded in the background, and requests for them get
// COORDINATOR_LOAD_IN_PROGRESS until the load completes. Transactions
// found in PrepareCommit or PrepareAbort get their markers sent again.
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
	if m.abort == nil {
		m.abort = m.clock.AfterFunc(m.cfg.AbortInterval, m.abortTimedOut)
	}
	if m.expire == nil {
		m.expire = m.clock.AfterFunc(m.cfg.RemoveInterval, m.expireIDs)
	}
	m.owned.Start(p, leaderEpoch, func(ctx context.Context, o *coordlog.Ownership) { m.load(ctx, p, o) })
}

// OnResign drops the transactional ids of partition p: another broker
// coordinates them now; marker runs stop.
func (m *Manager) OnResign(p int32) {
	m.mu.Lock()
	defer m.unlock()
	m.resignLocked(p)
}

func (m *Manager) resignLocked(p int32) {
	if !m.owned.Drop(p) {
		return
	}
	n := 0
	for id, t := range m.txns {
		if t.partition != p {
			continue
		}
		n++
		if t.markers != nil {
			t.markers.stop()
		}
		delete(m.txns, id)
	}
	m.logger.Info("resigned as transaction coordinator", "partition", p, "transactional_ids", n)
}

// Close resigns every partition and waits for loaders. It is idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	if m.abort != nil {
		m.abort.Stop()
	}
	if m.expire != nil {
		m.expire.Stop()
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

// ownerLocked is the coordinator check every request starts with.
func (m *Manager) ownerLocked(id string) (*coordlog.Ownership, *kerr.Error) {
	o := m.owned.Get(m.PartitionFor(id))
	switch {
	case o == nil:
		return nil, kerr.NotCoordinator
	case o.Loading:
		return nil, kerr.CoordinatorLoadInProgress
	}
	return o, nil
}

// load replays partition p of __transaction_state.
func (m *Manager) load(ctx context.Context, p int32, o *coordlog.Ownership) {
	start := m.clock.Now()
	loaded := map[string]record{}
	records, err := coordlog.Replay(ctx, m.log, p, 200*time.Millisecond, m.logger, func(b coordlog.Batch, off int64, r coordlog.Record) {
		if b.Control {
			return
		}
		id, err := parseKey(r.Key)
		if err != nil {
			m.logger.Warn("skip unreadable transaction log key", "partition", p, "offset", off, "err", err)
			return
		}
		if r.Value == nil {
			delete(loaded, id)
			return
		}
		v, err := parseValue(r.Value)
		if err != nil {
			m.logger.Warn("skip unreadable transaction log value", "partition", p, "offset", off, "transactional_id", id, "err", err)
			return
		}
		loaded[id] = v
	})
	if err != nil {
		return
	}

	m.mu.Lock()
	defer m.unlock()
	if m.owned.Get(p) != o {
		return
	}
	resumed := 0
	for id, r := range loaded {
		t := &txnMeta{
			id: id, partition: p, producerID: r.producerID, lastProducerID: r.lastProducerID,
			epoch: r.epoch, lastEpoch: noProducerEpoch, timeoutMs: r.timeoutMs, state: r.state,
			partitions: r.partitions, startMs: r.startMs, updateMs: r.updateMs,
			tv2: r.tv2, nextProducerID: r.nextProducerID,
		}
		m.txns[id] = t
		if t.state == PrepareCommit || t.state == PrepareAbort {
			resumed++
			m.startMarkersLocked(t, o)
		}
	}
	o.Loading = false
	m.logger.Info("loaded transaction state partition", "partition", p, "coordinator_epoch", o.Epoch, "records", records, "transactional_ids", len(loaded), "resumed_markers", resumed, "took", m.clock.Now().Sub(start).String())
}

// appendErr maps an append error to the code Kafka's coordinator answers
// with (TransactionStateManager.appendTransactionToLog).
func appendErr(err error) *kerr.Error {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		switch ke {
		case kerr.UnknownTopicOrPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut:
			return kerr.CoordinatorNotAvailable
		case kerr.NotLeaderForPartition, kerr.KafkaStorageError:
			return kerr.NotCoordinator
		case kerr.MessageTooLarge, kerr.RecordListTooLarge:
			return kerr.UnknownServerError
		}
		return ke
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.CoordinatorNotAvailable
	}
	return kerr.UnknownServerError
}

// write appends one transaction record for id to partition p.
func (m *Manager) write(p int32, id string, value []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.WriteTimeout)
	defer cancel()
	batch := coordlog.Encode([]coordlog.Record{{Key: encodeKey(id), Value: value}}, m.nowMs(), coordlog.NoProducer)
	_, err := m.log.Append(ctx, p, batch)
	return err
}

// writeTransit writes t's pending transition x and applies it when the
// write succeeded and this broker still coordinates t at the same epoch;
// otherwise the transition is dropped. It returns the error to answer
// with. mu is not held.
func (m *Manager) writeTransit(t *txnMeta, o *coordlog.Ownership, x *transit) *kerr.Error {
	err := m.write(t.partition, t.id, encodeValue(x.record(), m.cfg.valueVersion()))
	m.mu.Lock()
	defer m.unlock()
	current := m.owned.Get(t.partition) == o && m.txns[t.id] == t && t.pending == x
	if err != nil {
		ke := appendErr(err)
		m.logger.Info("transaction state write failed", "transactional_id", t.id, "state", x.state.String(), "err", err)
		if current {
			t.pending = nil
		}
		if errors.Is(err, kerr.NotLeaderForPartition) && m.owned.Get(t.partition) == o {
			m.resignLocked(t.partition)
		}
		return ke
	}
	if !current {
		return kerr.NotCoordinator
	}
	t.complete(x)
	return nil
}
