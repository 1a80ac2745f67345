package broker

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
	"github.com/isrlab/isrlab/broker/group"
	"github.com/isrlab/isrlab/broker/txn"
)

// Transactions (KIP-98). The transaction coordinator is broker/txn: the
// leader of a transactional id's __transaction_state partition
// coordinates it. The handlers below wait for acks=-1 appends to
// __transaction_state, so they answer off the handler thread, like a
// delayed produce. Kafka 0.10.2 had none of these APIs; the 2.4 and 2.6
// ranges are those releases' message JSON.

// txnManagers holds each broker's transaction coordinator, made on first
// use.
var txnManagers sync.Map // *Broker -> *txnEntry

type txnEntry struct {
	m      *txn.Manager
	sender *markerSender
	closer atomic.Bool
}

// txns returns the broker's transaction coordinator. It is closed when
// the broker stops serving.
func (b *Broker) txns() *txn.Manager {
	v, ok := txnManagers.Load(b)
	if !ok {
		cfg := txn.DefaultConfig()
		cfg.Partitions = b.cfg.Int("transaction.state.log.num.partitions")
		cfg.MaxTimeout = time.Duration(b.cfg.Int("transaction.max.timeout.ms")) * time.Millisecond
		cfg.AbortInterval = time.Duration(b.cfg.Int("transaction.abort.timed.out.transaction.cleanup.interval.ms")) * time.Millisecond
		cfg.RemoveInterval = time.Duration(b.cfg.Int("transaction.remove.expired.transaction.cleanup.interval.ms")) * time.Millisecond
		cfg.IDExpiration = time.Duration(b.cfg.Int("transactional.id.expiration.ms")) * time.Millisecond
		cfg.TransactionVersion = int16(b.cfg.Int("transaction.version"))
		s := &markerSender{b: b}
		e := &txnEntry{sender: s, m: txn.New(cfg, newCoordinatorLog(b, txn.Topic), txnProducerIDs{b}, s,
			txn.WithLogger(b.log.With("component", "transaction-coordinator")), txn.WithTopicCheck(b.partitionExists),
			txn.WithClock(brokerClock{b.now}))}
		var loaded bool
		if v, loaded = txnManagers.LoadOrStore(b, e); loaded {
			e.m.Close()
		}
	}
	e := v.(*txnEntry)
	if b.runCtx != context.Background() && e.closer.CompareAndSwap(false, true) {
		context.AfterFunc(b.runCtx, func() {
			e.m.Close()
			e.sender.wait()
			txnManagers.Delete(b)
		})
	}
	return e.m
}

// txnProducerIDs gives the coordinator ids from the broker's
// cluster-unique block allocator.
type txnProducerIDs struct{ b *Broker }

func (p txnProducerIDs) NewProducerID(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, producerIDTimeout)
	defer cancel()
	return p.b.producerIDs.allocate(ctx)
}

// markerSender sends the coordinator's WriteTxnMarkers to partition
// leaders over the broker's inter-broker connections; leaders come from
// the metadata the controller keeps current, so a retry sees a new
// leader as soon as this broker has heard of it.
type markerSender struct {
	b  *Broker
	wg sync.WaitGroup // requests in flight
}

// markerTimeout bounds one WriteTxnMarkers round trip.
const markerTimeout = 30 * time.Second

func (s *markerSender) Leader(topic string, p int32) (int32, bool) {
	m := s.b.meta
	m.mu.RLock()
	t, ok := m.topics[topic]
	if !ok || p < 0 || int(p) >= len(t.Partitions) {
		m.mu.RUnlock()
		return -1, false
	}
	leader := t.Partitions[p].Leader
	m.mu.RUnlock()
	if _, ok := m.brokerAddr(leader); !ok {
		return -1, true
	}
	return leader, true
}

func (s *markerSender) Send(broker int32, req *kmsg.WriteTxnMarkersRequest, done func(*kmsg.WriteTxnMarkersResponse, error)) {
	addr, ok := s.b.meta.brokerAddr(broker)
	if !ok {
		done(nil, &txnSendError{broker: broker})
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.b.runCtx, markerTimeout)
		defer cancel()
		raw, err := s.b.brokerClient(broker, addr).Request(ctx, req)
		if err != nil {
			done(nil, err)
			return
		}
		done(raw.(*kmsg.WriteTxnMarkersResponse), nil)
	}()
}

func (s *markerSender) wait() { s.wg.Wait() }

// txnSendError is a marker request to a broker this one has no address of.
type txnSendError struct{ broker int32 }

func (e *txnSendError) Error() string {
	return "send markers: broker " + strconv.Itoa(int(e.broker)) + " is not live"
}

// txnTopicConfigs: as for __consumer_offsets, records are kept by never
// deleting by time (only cleanup.policy=delete exists).
func (b *Broker) txnTopicConfigs(rf int) map[string]string {
	minISR := b.cfg.Int("transaction.state.log.min.isr")
	if minISR > rf {
		b.log.Warn("transaction.state.log.min.isr is larger than the replication factor of "+txn.Topic+"; using the replication factor", "configured", minISR, "replication_factor", rf)
		minISR = rf
	}
	return map[string]string{
		"retention.ms":        "-1",
		"segment.bytes":       strconv.Itoa(b.cfg.Int("transaction.state.log.segment.bytes")),
		"min.insync.replicas": strconv.Itoa(minISR),
	}
}

// ensureTxnTopic creates __transaction_state on first use, with
// transaction.state.log.replication.factor clamped to the live brokers.
func (b *Broker) ensureTxnTopic() {
	rf := b.clampRF(txn.Topic, "transaction.state.log.replication.factor")
	b.ensureInternalTopic(txn.Topic, b.cfg.Int("transaction.state.log.num.partitions"), rf, b.txnTopicConfigs(rf))
}

// onTxnMarker is called by the partition side once a transaction marker
// is written to a partition this broker leads: transactional offsets in
// __consumer_offsets become visible or are dropped.
func (b *Broker) onTxnMarker(topic string, partition int32, producerID int64, producerEpoch int16, commit bool) {
	if topic != group.Topic {
		return
	}
	b.groups().CompleteTxn(partition, producerID, producerEpoch, commit)
}

// txnAPI answers the transaction coordinator's requests, and
// TxnOffsetCommit for the group coordinator.
type txnAPI struct {
	txns               func() *txn.Manager
	groups             func() *group.Manager
	verify             *txnVerifier
	offsetsPartitions  int // offsets.topic.num.partitions
	transactionVersion int // transaction.version
}

var txnHandler = handlerOn(func(b *Broker) *txnAPI { return b.api.txn })

var _ = serve(24, "AddPartitionsToTxn", 0, 4, txnHandler((*txnAPI).handleAddPartitionsToTxn), notIn("0.10"), in("2.4", 0, 1), in("2.6", 0, 1), withTV(5), k40(0, 5))

func (a *txnAPI) handleAddPartitionsToTxn(_ context.Context, rq *request) {
	m := a.txns()
	go func() { rq.respond(m.AddPartitionsToTxn(rq.req.(*kmsg.AddPartitionsToTxnRequest))) }()
}

var _ = serve(25, "AddOffsetsToTxn", 0, 3, txnHandler((*txnAPI).handleAddOffsetsToTxn), notIn("0.10"), in("2.4", 0, 1), in("2.6", 0, 1), withTV(4), k40(0, 4))

// handleAddOffsetsToTxn adds the group's __consumer_offsets partition to
// the transaction.
func (a *txnAPI) handleAddOffsetsToTxn(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.AddOffsetsToTxnRequest)
	m := a.txns()
	offsets := txn.TopicPartition{Topic: group.Topic, Partition: group.Partition(req.Group, a.offsetsPartitions)}
	go func() { rq.respond(m.AddOffsetsToTxn(req, offsets)) }()
}

var _ = serve(26, "EndTxn", 0, 3, txnHandler((*txnAPI).handleEndTxn), notIn("0.10"), in("2.4", 0, 1), in("2.6", 0, 1), withTV(5), k40(0, 5))

func (a *txnAPI) handleEndTxn(_ context.Context, rq *request) {
	m := a.txns()
	go func() { rq.respond(m.EndTxn(rq.req.(*kmsg.EndTxnRequest))) }()
}

var _ = serve(28, "TxnOffsetCommit", 0, 3, txnHandler((*txnAPI).handleTxnOffsetCommit), notIn("0.10"), in("2.4", 0, 2), withTV(5), k40(0, 5))

// handleTxnOffsetCommit is the group coordinator's: the offsets are
// written as the producer's transactional batch and wait for its marker.
// Under transaction.version 2 a v5 request first adds the group's
// __consumer_offsets partition to the transaction (the producer sent no
// AddOffsetsToTxn, KIP-890 part 2); a refusal is answered for every
// partition, the retriable ones as COORDINATOR_NOT_AVAILABLE, as Kafka
// 4.0's group coordinator normalizes them.
func (a *txnAPI) handleTxnOffsetCommit(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.TxnOffsetCommitRequest)
	m := a.groups()
	go func() {
		if req.Version >= 5 && a.transactionVersion >= 2 {
			offsets := tp{group.Topic, group.Partition(req.Group, a.offsetsPartitions)}
			if code := txnOffsetAddError(a.verify.verify(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, []tp{offsets}, true)[0]); code != 0 {
				resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
				for _, t := range req.Topics {
					rt := kmsg.NewTxnOffsetCommitResponseTopic()
					rt.Topic = t.Topic
					for _, p := range t.Partitions {
						rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
						rp.Partition, rp.ErrorCode = p.Partition, code
						rt.Partitions = append(rt.Partitions, rp)
					}
					resp.Topics = append(resp.Topics, rt)
				}
				rq.respond(resp)
				return
			}
		}
		rq.respond(m.TxnOffsetCommit(req))
	}()
}

// txnOffsetAddError is what TxnOffsetCommit answers when adding the
// offsets partition to the transaction failed with code.
func txnOffsetAddError(code int16) int16 {
	switch code {
	case kerr.ConcurrentTransactions.Code, kerr.NetworkException.Code, kerr.CoordinatorLoadInProgress.Code,
		kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
		return kerr.CoordinatorNotAvailable.Code
	case kerr.ProducerFenced.Code:
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}

var _ = serve(65, "DescribeTransactions", 0, 0, txnHandler((*txnAPI).handleDescribeTransactions), notIn("0.10", "2.4", "2.6"), k40(0, 0))

func (a *txnAPI) handleDescribeTransactions(_ context.Context, rq *request) {
	rq.respond(a.txns().DescribeTransactions(rq.req.(*kmsg.DescribeTransactionsRequest)))
}

var _ = serve(66, "ListTransactions", 0, 0, txnHandler((*txnAPI).handleListTransactions), notIn("0.10", "2.4", "2.6"), k40(0, 1), serve40(1))

func (a *txnAPI) handleListTransactions(_ context.Context, rq *request) {
	rq.respond(a.txns().ListTransactions(rq.req.(*kmsg.ListTransactionsRequest)))
}

// initTransactional answers an InitProducerId with a transactional id.
func (a *txnAPI) initTransactional(ctx context.Context, rq *request, req *kmsg.InitProducerIDRequest) {
	m := a.txns()
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 2*producerIDTimeout)
		defer cancel()
		rq.respond(m.InitProducerID(ctx, req))
	}()
}

// brokerClock is the broker's wall clock (b.now: a clock fault's skew
// included) for the transaction coordinator, whose timeouts compare
// wall-clock times as Kafka's TransactionStateManager does (a
// transaction's start against time.milliseconds()); its timers keep real
// durations.
type brokerClock struct{ now func() time.Time }

func (c brokerClock) Now() time.Time { return c.now() }

func (c brokerClock) AfterFunc(d time.Duration, f func()) coordlog.Timer {
	return coordlog.RealClock.AfterFunc(d, f)
}
