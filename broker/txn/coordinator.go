package txn

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// fencedCode is PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for requests
// older than KIP-588's versions (InitProducerId v4, AddPartitionsToTxn,
// AddOffsetsToTxn and EndTxn v2), as Kafka's KafkaApis answers them.
func fencedCode(e *kerr.Error, version, since int16) int16 {
	if e == kerr.ProducerFenced && version < since {
		return kerr.InvalidProducerEpoch.Code
	}
	return e.Code
}

func code(e *kerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}

// producerIDAndEpoch is the producer an InitProducerId (v3+, KIP-360)
// says it was.
type producerIDAndEpoch struct {
	id    int64
	epoch int16
}

// InitProducerID handles an InitProducerId with a transactional id: a
// new id gets a fresh producer id at epoch 0; a known one gets its epoch
// bumped, which fences the previous producer; an ongoing transaction of
// the previous producer is aborted first (the answer is then
// CONCURRENT_TRANSACTIONS and the producer retries); an exhausted epoch
// gets a new producer id.
func (m *Manager) InitProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	e := m.initProducerID(ctx, req, resp)
	resp.ErrorCode = 0
	if e != nil {
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		resp.ErrorCode = fencedCode(e, req.Version, 4)
	}
	return resp
}

func (m *Manager) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) *kerr.Error {
	if req.TransactionalID == nil || *req.TransactionalID == "" {
		return kerr.InvalidRequest
	}
	id := *req.TransactionalID
	timeout := time.Duration(req.TransactionTimeoutMillis) * time.Millisecond
	if req.TransactionTimeoutMillis <= 0 || timeout > m.cfg.MaxTimeout {
		return kerr.InvalidTransactionTimeout
	}
	var expected *producerIDAndEpoch
	if req.Version >= 3 {
		switch {
		case req.ProducerID == -1 && req.ProducerEpoch == -1:
		case req.ProducerID >= 0 && req.ProducerEpoch >= 0:
			expected = &producerIDAndEpoch{req.ProducerID, req.ProducerEpoch}
		default:
			return kerr.InvalidRequest
		}
	}
	newID := int64(-1) // a producer id allocated for this request
	allocate := func() *kerr.Error {
		pid, err := m.ids.NewProducerID(ctx)
		if err != nil {
			m.logger.Warn("allocate producer id", "transactional_id", id, "err", err)
			return kerr.CoordinatorLoadInProgress
		}
		newID = pid
		return nil
	}
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		o, e := m.ownerLocked(id)
		if e != nil {
			m.unlock()
			return e
		}
		t := m.txns[id]
		if t == nil && newID < 0 {
			m.unlock()
			if e := allocate(); e != nil {
				return e
			}
			continue
		}
		if t == nil {
			t = &txnMeta{id: id, partition: m.PartitionFor(id), producerID: newID, lastProducerID: noProducerID,
				epoch: noProducerEpoch, lastEpoch: noProducerEpoch, timeoutMs: req.TransactionTimeoutMillis,
				state: Empty, partitions: map[TopicPartition]bool{}, startMs: -1, updateMs: m.nowMs()}
			m.txns[id] = t
			newID = -1
		}
		x, fence, rotate, e := m.prepareInitLocked(t, req.TransactionTimeoutMillis, expected, newID)
		if rotate {
			m.unlock()
			if attempt > 2 {
				return kerr.ConcurrentTransactions
			}
			if e := allocate(); e != nil {
				return e
			}
			continue
		}
		m.unlock()
		if e != nil {
			return e
		}
		if fence {
			// Abort the previous producer's transaction at the bumped
			// epoch; the producer retries and then gets that epoch
			// bumped once more (Kafka never returns the fencing epoch).
			if e := m.endTxn(t, o, x.producerID, x.epoch, false, false); e != nil {
				return e
			}
			return kerr.ConcurrentTransactions
		}
		if e := m.writeTransit(t, o, x); e != nil {
			return e
		}
		resp.ProducerID, resp.ProducerEpoch = x.producerID, x.epoch
		m.logger.Info("initialized transactional producer", "transactional_id", id, "producer_id", x.producerID, "producer_epoch", x.epoch)
		return nil
	}
}

// prepareInitLocked is Kafka's prepareInitProducerIdTransit. rotate asks
// the caller for a new producer id (newID) and to call again; fence
// means x is a PrepareEpochFence to abort the ongoing transaction with.
func (m *Manager) prepareInitLocked(t *txnMeta, timeoutMs int32, expected *producerIDAndEpoch, newID int64) (x *transit, fence, rotate bool, e *kerr.Error) {
	now := m.nowMs()
	switch {
	case t.pending != nil:
		return nil, false, false, kerr.ConcurrentTransactions
	case expected != nil && !t.validProducer(*expected):
		return nil, false, false, kerr.ProducerFenced
	}
	switch t.state {
	case PrepareAbort, PrepareCommit:
		return nil, false, false, kerr.ConcurrentTransactions
	case CompleteAbort, CompleteCommit, Empty:
		if epochExhausted(t.epoch) && (expected == nil || expected.epoch == t.epoch) {
			if newID < 0 {
				return nil, false, true, nil
			}
			last := int16(noProducerEpoch)
			if expected != nil {
				last = t.epoch
			}
			x, err := t.prepare(Empty, newID, 0, last, timeoutMs, map[TopicPartition]bool{}, -1, now)
			return x, false, false, internal(m, err)
		}
		bumped := t.epoch + 1
		next, last := bumped, int16(noProducerEpoch)
		if expected != nil {
			switch {
			case t.epoch == noProducerEpoch || expected.epoch == t.epoch:
				last = t.epoch
			case expected.epoch == t.lastEpoch:
				// A retry of an InitProducerId that succeeded.
				next, last = t.epoch, t.lastEpoch
			default:
				m.logger.Info("fenced producer", "transactional_id", t.id, "expected_epoch", expected.epoch, "producer_epoch", t.epoch, "last_epoch", t.lastEpoch)
				return nil, false, false, kerr.ProducerFenced
			}
		}
		x, err := t.prepare(Empty, t.producerID, next, last, timeoutMs, map[TopicPartition]bool{}, -1, now)
		return x, false, false, internal(m, err)
	case Ongoing:
		x, err := t.prepareFence(now)
		return x, true, false, internal(m, err)
	}
	m.logger.Error("transactional id in a state InitProducerId cannot leave", "transactional_id", t.id, "state", t.state.String())
	return nil, false, false, kerr.UnknownServerError
}

// internal reports an impossible transition as UNKNOWN_SERVER_ERROR.
func internal(m *Manager, err error) *kerr.Error {
	if err == nil {
		return nil
	}
	m.logger.Error("transaction state", "err", err)
	return kerr.UnknownServerError
}

// validProducer is Kafka's isValidProducerId: a new id (no epoch yet),
// the current producer id, or the previous one at an exhausted epoch (a
// retry of the InitProducerId that rotated it).
func (t *txnMeta) validProducer(p producerIDAndEpoch) bool {
	return t.epoch == noProducerEpoch || p.id == t.producerID || (p.id == t.lastProducerID && epochExhausted(p.epoch))
}

// prepareFence bumps the epoch to fence the current producer
// (PrepareEpochFence), unless an earlier bump failed to be written.
func (t *txnMeta) prepareFence(nowMs int64) (*transit, error) {
	epoch := t.epoch
	if !t.failedFence && epoch < math.MaxInt16 {
		epoch++
	}
	return t.prepare(PrepareEpochFence, t.producerID, epoch, noProducerEpoch, t.timeoutMs, copyParts(t.partitions), t.startMs, t.updateMs)
}

// txnLocked finds id's metadata and checks the producer (Kafka's checks
// in handleAddPartitionsToTransaction).
func (m *Manager) txnLocked(id string, pid int64, epoch int16) (*txnMeta, *coordlog.Ownership, *kerr.Error) {
	if id == "" {
		return nil, nil, kerr.InvalidRequest
	}
	o, e := m.ownerLocked(id)
	if e != nil {
		return nil, nil, e
	}
	t := m.txns[id]
	switch {
	case t == nil || t.producerID != pid:
		return nil, nil, kerr.InvalidProducerIDMapping
	case t.epoch != epoch:
		return nil, nil, kerr.ProducerFenced
	}
	return t, o, nil
}

// addPartitions adds parts to id's transaction, starting it if none is
// ongoing.
func (m *Manager) addPartitions(id string, pid int64, epoch int16, parts []TopicPartition) *kerr.Error {
	m.mu.Lock()
	t, o, e := m.txnLocked(id, pid, epoch)
	if e != nil {
		m.unlock()
		return e
	}
	switch {
	case t.pending != nil, t.state == PrepareCommit, t.state == PrepareAbort:
		m.unlock()
		return kerr.ConcurrentTransactions
	}
	all := copyParts(t.partitions)
	added := false
	for _, tp := range parts {
		if !all[tp] {
			all[tp], added = true, true
		}
	}
	if t.state == Ongoing && !added {
		m.unlock()
		return nil
	}
	now := m.nowMs()
	start := t.startMs
	if t.state != Ongoing {
		start = now
	}
	x, err := t.prepare(Ongoing, t.producerID, t.epoch, t.lastEpoch, t.timeoutMs, all, start, now)
	m.unlock()
	if err != nil {
		return internal(m, err)
	}
	return m.writeTransit(t, o, x)
}

// AddPartitionsToTxn handles AddPartitionsToTxn: v0–v3 from a producer
// (one transaction), v4 (KIP-890) from a partition leader, several
// transactions per request, each either added to or, with VerifyOnly,
// checked against the ongoing transaction.
func (m *Manager) AddPartitionsToTxn(req *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version < 4 {
		resp.Topics = m.addPartitionsOne(req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, false, v3Topics(req.Topics))
		return resp
	}
	for _, tx := range req.Transactions {
		r := kmsg.NewAddPartitionsToTxnResponseTransaction()
		r.TransactionalID = tx.TransactionalID
		for _, t := range m.addPartitionsOne(req.Version, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly, v4Topics(tx.Topics)) {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.AddPartitionsToTxnResponseTransactionTopicPartition{Partition: p.Partition, ErrorCode: p.ErrorCode})
			}
			r.Topics = append(r.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, r)
	}
	return resp
}

type topicParts struct {
	topic string
	parts []int32
}

func v3Topics(ts []kmsg.AddPartitionsToTxnRequestTopic) []topicParts {
	out := make([]topicParts, 0, len(ts))
	for _, t := range ts {
		out = append(out, topicParts{t.Topic, t.Partitions})
	}
	return out
}

func v4Topics(ts []kmsg.AddPartitionsToTxnRequestTransactionTopic) []topicParts {
	out := make([]topicParts, 0, len(ts))
	for _, t := range ts {
		out = append(out, topicParts{t.Topic, t.Partitions})
	}
	return out
}

func (m *Manager) addPartitionsOne(version int16, id string, pid int64, epoch int16, verifyOnly bool, topics []topicParts) []kmsg.AddPartitionsToTxnResponseTopic {
	codes := map[TopicPartition]int16{}
	var parts []TopicPartition
	unknown := false
	for _, t := range topics {
		for _, p := range t.parts {
			tp := TopicPartition{t.topic, p}
			parts = append(parts, tp)
			if m.exists != nil && !m.exists(t.topic, p) && !verifyOnly {
				codes[tp] = kerr.UnknownTopicOrPartition.Code
				unknown = true
			}
		}
	}
	switch {
	case unknown:
		for _, tp := range parts {
			if codes[tp] == 0 {
				codes[tp] = kerr.OperationNotAttempted.Code
			}
		}
	case verifyOnly:
		codes = m.verify(id, pid, epoch, parts)
	default:
		c := fencedCode(orNone(m.addPartitions(id, pid, epoch, parts)), version, 2)
		for _, tp := range parts {
			codes[tp] = c
		}
	}
	out := []kmsg.AddPartitionsToTxnResponseTopic{}
	for _, t := range topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.topic
		for _, p := range t.parts {
			rt.Partitions = append(rt.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: codes[TopicPartition{t.topic, p}]})
		}
		out = append(out, rt)
	}
	return out
}

// none is a stand-in for a nil *kerr.Error where a code is read.
var none = &kerr.Error{Message: "NONE", Code: 0}

func orNone(e *kerr.Error) *kerr.Error {
	if e == nil {
		return none
	}
	return e
}

// verify answers KIP-890's VerifyOnly check (Kafka 3.7's
// handleVerifyPartitionsInTransaction): each partition is NONE when it is
// in the producer's ongoing transaction, INVALID_TXN_STATE when not.
func (m *Manager) verify(id string, pid int64, epoch int16, parts []TopicPartition) map[TopicPartition]int16 {
	out := map[TopicPartition]int16{}
	setAll := func(c int16) map[TopicPartition]int16 {
		for _, tp := range parts {
			out[tp] = c
		}
		return out
	}
	m.mu.Lock()
	defer m.unlock()
	t, _, e := m.txnLocked(id, pid, epoch)
	switch {
	case e != nil:
		return setAll(e.Code)
	case t.state == PrepareCommit || t.state == PrepareAbort:
		return setAll(kerr.ConcurrentTransactions.Code)
	}
	for _, tp := range parts {
		if t.partitions[tp] {
			out[tp] = 0
		} else {
			out[tp] = kerr.InvalidTxnState.Code
		}
	}
	return out
}

// AddOffsetsToTxn handles AddOffsetsToTxn: the group's __consumer_offsets
// partition (offsets) joins the transaction, so that the group
// coordinator's transactional offsets get the transaction's marker.
func (m *Manager) AddOffsetsToTxn(req *kmsg.AddOffsetsToTxnRequest, offsets TopicPartition) *kmsg.AddOffsetsToTxnResponse {
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	resp.ErrorCode = fencedCode(orNone(m.addPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch, []TopicPartition{offsets})), req.Version, 2)
	return resp
}

// EndTxn handles an EndTxn: it answers once PrepareCommit or PrepareAbort
// is written; the markers and CompleteCommit or CompleteAbort follow. A
// retry answers CONCURRENT_TRANSACTIONS while the markers are being
// written and NONE once the same outcome is complete.
func (m *Manager) EndTxn(req *kmsg.EndTxnRequest) *kmsg.EndTxnResponse {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	m.mu.Lock()
	t, o, e := m.endTxnLookupLocked(req.TransactionalID, req.ProducerID)
	m.unlock()
	if e == nil {
		e = m.endTxn(t, o, req.ProducerID, req.ProducerEpoch, req.Commit, true)
	}
	resp.ErrorCode = fencedCode(orNone(e), req.Version, 2)
	return resp
}

func (m *Manager) endTxnLookupLocked(id string, pid int64) (*txnMeta, *coordlog.Ownership, *kerr.Error) {
	if id == "" {
		return nil, nil, kerr.InvalidRequest
	}
	o, e := m.ownerLocked(id)
	if e != nil {
		return nil, nil, e
	}
	t := m.txns[id]
	if t == nil || t.producerID != pid {
		return nil, nil, kerr.InvalidProducerIDMapping
	}
	return t, o, nil
}

// endTxn is Kafka's endTransaction: fromClient requires the producer's
// exact epoch; the coordinator's own aborts (fencing, timeouts) carry the
// bumped epoch of a pending PrepareEpochFence.
func (m *Manager) endTxn(t *txnMeta, o *coordlog.Ownership, pid int64, epoch int16, commit, fromClient bool) *kerr.Error {
	m.mu.Lock()
	x, fence, e := m.prepareEndLocked(t, o, pid, epoch, commit, fromClient)
	if e != nil && t.pending != nil && t.pending.state == PrepareEpochFence {
		t.pending = nil // the fence is not written: nothing is pending
	}
	m.unlock()
	if e != nil || x == nil {
		return e
	}
	if e := m.writeTransit(t, o, x); e != nil {
		if fence {
			m.mu.Lock()
			t.failedFence = true
			m.unlock()
		}
		return e
	}
	m.mu.Lock()
	defer m.unlock()
	if m.owned.Get(t.partition) != o || m.txns[t.id] != t || t.state != x.state || t.producerID != pid || t.epoch != x.epoch {
		return kerr.NotCoordinator
	}
	t.failedFence = false
	m.logger.Info("transaction prepared", "transactional_id", t.id, "producer_id", pid, "producer_epoch", t.epoch, "state", t.state.String(), "partitions", len(t.partitions))
	m.startMarkersLocked(t, o)
	return nil
}

func (m *Manager) prepareEndLocked(t *txnMeta, o *coordlog.Ownership, pid int64, epoch int16, commit, fromClient bool) (x *transit, fence bool, e *kerr.Error) {
	if m.owned.Get(t.partition) != o || m.txns[t.id] != t {
		return nil, false, kerr.NotCoordinator
	}
	switch {
	case t.producerID != pid:
		return nil, false, kerr.InvalidProducerIDMapping
	case (fromClient && epoch != t.epoch) || epoch < t.epoch:
		return nil, false, kerr.ProducerFenced
	case t.pending != nil && t.pending.state != PrepareEpochFence:
		return nil, false, kerr.ConcurrentTransactions
	}
	want, prepared := CompleteAbort, PrepareAbort
	if commit {
		want, prepared = CompleteCommit, PrepareCommit
	}
	switch t.state {
	case Ongoing:
		if !commit && t.pending != nil && t.pending.state == PrepareEpochFence {
			fence = true
			t.pending = nil
			t.epoch, t.lastEpoch = epoch, noProducerEpoch
		}
		x, err := t.prepare(prepared, t.producerID, t.epoch, t.lastEpoch, t.timeoutMs, copyParts(t.partitions), t.startMs, m.nowMs())
		return x, fence, internal(m, err)
	case want:
		return nil, false, nil
	case prepared:
		return nil, false, kerr.ConcurrentTransactions
	case CompleteCommit, CompleteAbort, PrepareCommit, PrepareAbort, Empty:
		m.logger.Info("EndTxn in a state it cannot end", "transactional_id", t.id, "state", t.state.String(), "commit", commit)
		return nil, false, kerr.InvalidTxnState
	}
	m.logger.Error("EndTxn found an illegal state", "transactional_id", t.id, "state", t.state.String())
	return nil, false, kerr.UnknownServerError
}
