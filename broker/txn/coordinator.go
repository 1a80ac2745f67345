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
			if _, e := m.endTxn(t, o, x.producerID, x.epoch, false, false, false); e != nil {
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
// in handleAddPartitionsToTransaction): its current id at its current
// epoch.
func (m *Manager) txnLocked(id string, pid int64, epoch int16) (*txnMeta, *coordlog.Ownership, *kerr.Error) {
	t, o, e := m.lookupLocked(id, pid, epoch)
	switch {
	case e != nil:
		return nil, nil, e
	case t.producerID != pid:
		return nil, nil, kerr.InvalidProducerIDMapping
	case t.epoch != epoch:
		return nil, nil, kerr.ProducerFenced
	}
	return t, o, nil
}

// addPartitions adds parts to id's transaction, starting it if none is
// ongoing. tv2 marks the implicit add of a partition leader under
// transaction.version 2 (the transaction is then a TV_2 one).
func (m *Manager) addPartitions(id string, pid int64, epoch int16, parts []TopicPartition, tv2 bool) *kerr.Error {
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
	if err == nil {
		x.tv2 = tv2
	}
	m.unlock()
	if err != nil {
		return internal(m, err)
	}
	return m.writeTransit(t, o, x)
}

// AddPartitionsToTxn handles AddPartitionsToTxn: v0–v3 from a producer
// (one transaction), v4+ (KIP-890) from a partition leader, several
// transactions per request, each either checked against the ongoing
// transaction (VerifyOnly, part 1) or added to it (part 2: the partitions
// a produce request v12 implies, under transaction.version 2).
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
		c := fencedCode(orNone(m.addPartitions(id, pid, epoch, parts, version >= 4 && m.cfg.TransactionVersion >= 2)), version, 2)
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
	resp.ErrorCode = fencedCode(orNone(m.addPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch, []TopicPartition{offsets}, false)), req.Version, 2)
	return resp
}

// EndTxn handles an EndTxn: it answers once PrepareCommit or PrepareAbort
// is written; the markers and CompleteCommit or CompleteAbort follow. A
// retry answers CONCURRENT_TRANSACTIONS while the markers are being
// written and NONE once the same outcome is complete.
//
// EndTxn v5 under transaction.version 2 (KIP-890 part 2) bumps the
// producer epoch: PrepareX and the markers carry epoch+1, which fences
// every write of the transaction that arrives late, and the response
// gives the producer id and epoch of the next transaction (a new
// producer id at epoch 0 when the epoch is exhausted).
func (m *Manager) EndTxn(req *kmsg.EndTxnRequest) *kmsg.EndTxnResponse {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	tv2 := req.Version >= 5 && m.cfg.TransactionVersion >= 2
	m.mu.Lock()
	t, o, e := m.lookupLocked(req.TransactionalID, req.ProducerID, req.ProducerEpoch)
	m.unlock()
	var next producerIDAndEpoch
	if e == nil {
		next, e = m.endTxn(t, o, req.ProducerID, req.ProducerEpoch, req.Commit, true, tv2)
	}
	resp.ErrorCode = fencedCode(orNone(e), req.Version, 2)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if e == nil {
		resp.ProducerID, resp.ProducerEpoch = next.id, next.epoch
	}
	return resp
}

// lookupLocked finds id's metadata for producer pid: its current one, or
// the previous one retrying the EndTxn that moved the id to a new
// producer id (the epoch is EndTxn's to check).
func (m *Manager) lookupLocked(id string, pid int64, epoch int16) (*txnMeta, *coordlog.Ownership, *kerr.Error) {
	if id == "" {
		return nil, nil, kerr.InvalidRequest
	}
	o, e := m.ownerLocked(id)
	if e != nil {
		return nil, nil, e
	}
	t := m.txns[id]
	if t == nil || (t.producerID != pid && !t.retryOnOverflow(pid, epoch)) {
		return nil, nil, kerr.InvalidProducerIDMapping
	}
	return t, o, nil
}

// epochBumps reports whether t's last transition came from a
// transaction.version 2 client and no fence is pending: then every EndTxn
// bumps the epoch, and the epoch check looks at the epoch before the bump
// (Kafka's currentTxnMetadataIsAtLeastTransactionsV2).
func (t *txnMeta) epochBumps() bool {
	return t.tv2 && (t.pending == nil || t.pending.state != PrepareEpochFence)
}

// retryOnEpochBump: an EndTxn at epoch is a retry of one that bumped it.
func (t *txnMeta) retryOnEpochBump(epoch int16) bool {
	return t.epochBumps() && int32(t.epoch) == int32(epoch)+1
}

// retryOnOverflow: an EndTxn by the previous producer id at the last
// epoch is a retry of the one that moved the id to the next producer id.
func (t *txnMeta) retryOnOverflow(pid int64, epoch int16) bool {
	return t.epochBumps() && t.lastProducerID == pid && epoch == math.MaxInt16-1 && t.epoch == 0
}

// endTxn is Kafka's endTransaction: fromClient requires the producer's
// exact epoch; the coordinator's own aborts (fencing, timeouts) carry the
// bumped epoch of a pending PrepareEpochFence. tv2 is an EndTxn v5 under
// transaction.version 2. It returns the producer id and epoch the
// producer continues with.
func (m *Manager) endTxn(t *txnMeta, o *coordlog.Ownership, pid int64, epoch int16, commit, fromClient, tv2 bool) (producerIDAndEpoch, *kerr.Error) {
	nextID := int64(noProducerID)
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		x, fence, needID, e := m.prepareEndLocked(t, o, pid, epoch, commit, fromClient, tv2, nextID)
		if e != nil && t.pending != nil && t.pending.state == PrepareEpochFence {
			t.pending = nil // the fence is not written: nothing is pending
		}
		current := producerIDAndEpoch{t.producerID, t.epoch}
		m.unlock()
		if needID {
			if attempt > 2 {
				return producerIDAndEpoch{}, kerr.ConcurrentTransactions
			}
			id, err := m.ids.NewProducerID(context.Background())
			if err != nil {
				m.logger.Warn("allocate producer id", "transactional_id", t.id, "err", err)
				return producerIDAndEpoch{}, kerr.CoordinatorLoadInProgress
			}
			nextID = id
			continue
		}
		if e != nil || x == nil {
			return current, e
		}
		if e := m.writeTransit(t, o, x); e != nil {
			if fence {
				m.mu.Lock()
				t.failedFence = true
				m.unlock()
			}
			return producerIDAndEpoch{}, e
		}
		m.mu.Lock()
		defer m.unlock()
		if m.owned.Get(t.partition) != o || m.txns[t.id] != t || t.state != x.state || t.producerID != pid || t.epoch != x.epoch {
			return producerIDAndEpoch{}, kerr.NotCoordinator
		}
		t.failedFence = false
		m.logger.Info("transaction prepared", "transactional_id", t.id, "producer_id", pid, "producer_epoch", t.epoch, "state", t.state.String(), "partitions", len(t.partitions))
		m.startMarkersLocked(t, o)
		if t.nextProducerID >= 0 {
			return producerIDAndEpoch{t.nextProducerID, 0}, nil
		}
		return producerIDAndEpoch{t.producerID, t.epoch}, nil
	}
}

// prepareEndLocked prepares PrepareCommit or PrepareAbort. needID asks
// the caller for a producer id (nextID) and to call again: an EndTxn v5
// found the epoch exhausted.
func (m *Manager) prepareEndLocked(t *txnMeta, o *coordlog.Ownership, pid int64, epoch int16, commit, fromClient, tv2 bool, nextID int64) (x *transit, fence, needID bool, e *kerr.Error) {
	if m.owned.Get(t.partition) != o || m.txns[t.id] != t {
		return nil, false, false, kerr.NotCoordinator
	}
	overflowRetry := t.retryOnOverflow(pid, epoch)
	bumps := t.epochBumps()
	// With epoch bumps a retry carries the epoch before the bump; the
	// current epoch in a Complete state is the next transaction's EndTxn.
	retry := bumps && (t.retryOnEpochBump(epoch) || overflowRetry)
	var validEpoch bool
	switch {
	case bumps:
		switch t.state {
		case PrepareCommit, PrepareAbort:
			validEpoch = retry
		case CompleteCommit, CompleteAbort:
			validEpoch = retry || epoch == t.epoch
		default:
			validEpoch = epoch == t.epoch
		}
	default:
		validEpoch = (!fromClient || epoch == t.epoch) && epoch >= t.epoch
	}
	switch {
	case t.producerID != pid && !overflowRetry:
		return nil, false, false, kerr.InvalidProducerIDMapping
	case !validEpoch:
		return nil, false, false, kerr.ProducerFenced
	case t.pending != nil && t.pending.state != PrepareEpochFence:
		return nil, false, false, kerr.ConcurrentTransactions
	}
	want, prepared := CompleteAbort, PrepareAbort
	if commit {
		want, prepared = CompleteCommit, PrepareCommit
	}
	// An abort with nothing to abort is legal under transaction.version
	// 2 and bumps the epoch like any other (Kafka 4.0): a producer whose
	// produce requests all failed may have had partitions added by them.
	emptyAbort := tv2 && !commit && fromClient && !retry &&
		(t.state == Empty || t.state == CompleteCommit || t.state == CompleteAbort)
	switch {
	case t.state == Ongoing || emptyAbort:
		fencing := t.pending != nil && t.pending.state == PrepareEpochFence
		bump := tv2 && !fencing
		if bump && epochExhausted(t.epoch) && nextID < 0 {
			return nil, false, true, nil
		}
		if !commit && fencing {
			fence = true
			t.pending = nil
			t.epoch, t.lastEpoch = epoch, noProducerEpoch
		}
		newEpoch, lastEpoch := t.epoch, t.lastEpoch
		if bump {
			newEpoch, lastEpoch = t.epoch+1, t.epoch
		}
		start := t.startMs
		if emptyAbort {
			start = m.nowMs()
		}
		x, err := t.prepare(prepared, t.producerID, newEpoch, lastEpoch, t.timeoutMs, copyParts(t.partitions), start, m.nowMs())
		if err == nil && bump {
			x.tv2 = true
			if epochExhausted(t.epoch) {
				x.nextProducerID = nextID
			}
		}
		return x, fence, false, internal(m, err)
	case t.state == want && (retry || !bumps):
		return nil, false, false, nil
	case t.state == prepared:
		return nil, false, false, kerr.ConcurrentTransactions
	}
	switch t.state {
	case CompleteCommit, CompleteAbort, PrepareCommit, PrepareAbort, Empty:
		m.logger.Info("EndTxn in a state it cannot end", "transactional_id", t.id, "state", t.state.String(), "commit", commit)
		return nil, false, false, kerr.InvalidTxnState
	}
	m.logger.Error("EndTxn found an illegal state", "transactional_id", t.id, "state", t.state.String())
	return nil, false, false, kerr.UnknownServerError
}
