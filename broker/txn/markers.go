package txn

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// MarkerSender is the broker's side of marker sending: partition leaders
// from its metadata, and WriteTxnMarkers requests over its inter-broker
// connections.
type MarkerSender interface {
	// Leader returns the broker leading a partition: -1 while it has
	// none; exists is false when the metadata has no such partition (a
	// deleted topic), whose marker is then skipped as Kafka skips it.
	Leader(topic string, partition int32) (leader int32, exists bool)
	// Send sends req to broker and calls done exactly once, from any
	// goroutine, with the response or the transport error.
	Send(broker int32, req *kmsg.WriteTxnMarkersRequest, done func(*kmsg.WriteTxnMarkersResponse, error))
}

// markerRun writes a prepared transaction's markers to its partitions'
// leaders (Kafka's TransactionMarkerChannelManager), retrying until every
// partition has answered, and then the Complete record.
type markerRun struct {
	t        *txnMeta
	o        *coordlog.Ownership
	commit   bool
	complete *transit // CompleteCommit or CompleteAbort, pending
	left     map[TopicPartition]bool
	inflight int   // requests sent and not answered
	retry    Timer // a scheduled resend
	stopped  bool
}

func (r *markerRun) stop() {
	r.stopped = true
	if r.retry != nil {
		r.retry.Stop()
	}
}

// startMarkersLocked starts the marker run of t, in PrepareCommit or
// PrepareAbort, with the coordinator epoch of o.
func (m *Manager) startMarkersLocked(t *txnMeta, o *coordlog.Ownership) {
	final := CompleteAbort
	if t.state == PrepareCommit {
		final = CompleteCommit
	}
	x, err := t.prepare(final, t.producerID, t.epoch, t.lastEpoch, t.timeoutMs, map[TopicPartition]bool{}, t.startMs, m.nowMs())
	if err != nil {
		m.logger.Error("start markers", "err", err)
		return
	}
	if t.tv2 {
		// Kafka's prepareComplete under transaction.version 2: the
		// markers carry the bumped epoch; after an exhausted epoch the
		// transactional id moves to the next producer id at epoch 0.
		x.tv2, x.lastEpoch, x.lastProducerID = true, t.epoch, t.producerID
		if t.nextProducerID >= 0 {
			x.producerID, x.epoch = t.nextProducerID, 0
		}
	}
	r := &markerRun{t: t, o: o, commit: final == CompleteCommit, complete: x, left: copyParts(t.partitions)}
	t.markers = r
	m.sendMarkersLocked(r)
}

func (m *Manager) runCurrentLocked(r *markerRun) bool {
	return !r.stopped && !m.closed && m.owned.Get(r.t.partition) == r.o && m.txns[r.t.id] == r.t && r.t.markers == r
}

// sendMarkersLocked sends the markers still due, one request per leader;
// partitions without a leader wait for the next retry.
func (m *Manager) sendMarkersLocked(r *markerRun) {
	if !m.runCurrentLocked(r) {
		return
	}
	byLeader := map[int32][]TopicPartition{}
	waiting := false
	for _, tp := range sortedPartitions(r.left) {
		leader, exists := m.markers.Leader(tp.Topic, tp.Partition)
		switch {
		case !exists:
			m.logger.Info("skip the marker of a partition that no longer exists", "transactional_id", r.t.id, "topic", tp.Topic, "partition", tp.Partition)
			delete(r.left, tp)
		case leader < 0:
			waiting = true
		default:
			byLeader[leader] = append(byLeader[leader], tp)
		}
	}
	if len(r.left) == 0 {
		m.later(func() { m.writeComplete(r) })
		return
	}
	leaders := make([]int32, 0, len(byLeader))
	for b := range byLeader {
		leaders = append(leaders, b)
	}
	sort.Slice(leaders, func(i, j int) bool { return leaders[i] < leaders[j] })
	for _, b := range leaders {
		req := m.markerRequest(r, byLeader[b])
		r.inflight++
		b := b
		m.later(func() {
			m.markers.Send(b, req, func(resp *kmsg.WriteTxnMarkersResponse, err error) { m.onMarkers(r, b, req, resp, err) })
		})
	}
	if waiting && r.inflight == 0 {
		m.retryLocked(r)
	}
}

// markerRequest is WriteTxnMarkers v1 for tps, carrying the coordinator
// epoch (the __transaction_state partition's leader epoch).
func (m *Manager) markerRequest(r *markerRun, tps []TopicPartition) *kmsg.WriteTxnMarkersRequest {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.SetVersion(1)
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed, mk.CoordinatorEpoch = r.t.producerID, r.t.epoch, r.commit, r.o.Epoch
	for _, tp := range tps {
		n := len(mk.Topics)
		if n == 0 || mk.Topics[n-1].Topic != tp.Topic {
			mk.Topics = append(mk.Topics, kmsg.WriteTxnMarkersRequestMarkerTopic{Topic: tp.Topic})
			n++
		}
		mk.Topics[n-1].Partitions = append(mk.Topics[n-1].Partitions, tp.Partition)
	}
	req.Markers = append(req.Markers, mk)
	return req
}

func (m *Manager) retryLocked(r *markerRun) {
	if r.retry != nil {
		r.retry.Stop()
	}
	r.retry = m.clock.AfterFunc(m.cfg.RetryBackoff, func() {
		m.mu.Lock()
		defer m.unlock()
		r.retry = nil
		m.sendMarkersLocked(r)
	})
}

// onMarkers handles a WriteTxnMarkers answer as Kafka's
// TransactionMarkerRequestCompletionHandler: written partitions are
// done; retriable errors (and a lost connection) are sent again after a
// backoff; a newer producer or coordinator epoch stops the run, because
// another coordinator or producer has moved on.
func (m *Manager) onMarkers(r *markerRun, broker int32, req *kmsg.WriteTxnMarkersRequest, resp *kmsg.WriteTxnMarkersResponse, err error) {
	m.mu.Lock()
	defer m.unlock()
	r.inflight--
	if !m.runCurrentLocked(r) {
		return
	}
	if err != nil {
		m.logger.Info("send transaction markers", "transactional_id", r.t.id, "broker", broker, "err", err)
		m.retryLocked(r)
		return
	}
	answered := map[TopicPartition]int16{}
	for _, mk := range resp.Markers {
		for _, t := range mk.Topics {
			for _, p := range t.Partitions {
				answered[TopicPartition{t.Topic, p.Partition}] = p.ErrorCode
			}
		}
	}
	retry := false
	for _, mk := range req.Markers {
		for _, t := range mk.Topics {
			for _, p := range t.Partitions {
				tp := TopicPartition{t.Topic, p}
				c, ok := answered[tp]
				if !ok {
					retry = true
					continue
				}
				switch kerr.ErrorForCode(c) {
				case nil, kerr.UnsupportedForMessageFormat, kerr.UnsupportedVersion:
					delete(r.left, tp)
				case kerr.InvalidProducerEpoch, kerr.TransactionCoordinatorFenced:
					m.logger.Warn("stop sending markers: a newer producer or coordinator epoch exists", "transactional_id", r.t.id, "topic", tp.Topic, "partition", tp.Partition, "error", kerr.ErrorForCode(c).Error())
					r.stop()
					return
				case kerr.UnknownTopicOrPartition, kerr.NotLeaderForPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut, kerr.KafkaStorageError:
					retry = true
				default:
					m.logger.Error("unexpected WriteTxnMarkers error; retrying", "transactional_id", r.t.id, "topic", tp.Topic, "partition", tp.Partition, "code", c)
					retry = true
				}
			}
		}
	}
	switch {
	case r.inflight > 0:
	case len(r.left) == 0:
		m.later(func() { m.writeComplete(r) })
	default:
		if retry {
			m.logger.Debug("markers to retry", "transactional_id", r.t.id, "partitions", len(r.left))
		}
		m.retryLocked(r)
	}
}

// writeComplete writes CompleteCommit or CompleteAbort once every marker
// is written, retrying while this broker coordinates the transaction.
func (m *Manager) writeComplete(r *markerRun) {
	m.mu.Lock()
	if !m.runCurrentLocked(r) || r.t.pending != r.complete {
		m.unlock()
		return
	}
	m.unlock()
	err := m.write(r.t.partition, r.t.id, encodeValue(r.complete.record(), m.cfg.valueVersion()))
	m.mu.Lock()
	defer m.unlock()
	if !m.runCurrentLocked(r) {
		return
	}
	if err != nil {
		if appendErr(err) == kerr.NotCoordinator {
			m.logger.Info("stop completing the transaction: no longer its coordinator", "transactional_id", r.t.id, "err", err)
			m.resignLocked(r.t.partition)
			return
		}
		m.logger.Info("write transaction completion; retrying", "transactional_id", r.t.id, "err", err)
		if r.retry != nil {
			r.retry.Stop()
		}
		r.retry = m.clock.AfterFunc(m.cfg.RetryBackoff, func() { m.writeComplete(r) })
		return
	}
	r.t.complete(r.complete)
	r.t.markers = nil
	m.logger.Info("transaction completed", "transactional_id", r.t.id, "producer_id", r.t.producerID, "producer_epoch", r.t.epoch, "state", r.t.state.String())
}
