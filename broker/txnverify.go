package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	klog "github.com/isrlab/isrlab/broker/log"
)

// Transaction verification (KIP-890 part 1, Kafka 3.6+'s
// AddPartitionsToTxnManager): with transaction.partition.verification.enable
// a partition leader that receives a batch opening a transaction asks the
// producer's transaction coordinator, with an AddPartitionsToTxn v4
// request marked verify-only, whether the partition was added to the
// ongoing transaction, and appends only if it was. Without it a producer's
// late write after an abort opens a transaction that no marker will ever
// end (a hanging transaction), and the partition's LSO stays at it.
//
// Under transaction.version 2 (KIP-890 part 2) a produce request v12 does
// not follow an AddPartitionsToTxn from the producer: the leader's
// request (v5, not verify-only) adds the partitions itself, and
// TxnOffsetCommit v5 adds the group's __consumer_offsets partition the
// same way.

// txnVerifyTimeout bounds one verification round trip (Kafka uses
// request.timeout.ms, 30 s by default).
const txnVerifyTimeout = 30 * time.Second

// txnVerifier asks transaction coordinators whether partitions are in a
// transaction (and, under transaction.version 2, adds them).
type txnVerifier struct {
	// find locates a transactional id's coordinator; nil asks
	// coordinatorFor, the broker's FindCoordinator logic.
	find           func(transactionalID string) (id int32, addr string, code int16, msg string)
	coordinatorFor func(key string, keyType int8) (id int32, host string, port int32, code int16, msg string)
	// client is the broker's connection to another broker.
	client func(id int32, addr string) *brokerClient
	// add.partitions.to.txn.retry.backoff.ms and .max.ms
	retryBackoff, retryBackoffMax time.Duration
	log                           *slog.Logger
}

// findCoordinator locates transactionalID's coordinator: the leader of
// its __transaction_state partition, as FindCoordinator (key type 1)
// answers it.
func (v *txnVerifier) findCoordinator(txnID string) (int32, string, int16, string) {
	if v.find != nil {
		return v.find(txnID)
	}
	id, host, port, code, msg := v.coordinatorFor(txnID, 1)
	if code != 0 {
		return -1, "", code, msg
	}
	return id, net.JoinHostPort(host, strconv.Itoa(int(port))), 0, ""
}

// verifyPartitions verifies (or, with add, adds) the prepared
// partitions that carry a guard, one request per producer id and epoch (a
// produce request normally carries one), and marks the ones refused as
// failed with the error Kafka gives the producer.
func (v *txnVerifier) verifyPartitions(ctx context.Context, txnID string, resp *kmsg.ProduceResponse, prepared []producePart, add bool) {
	type producer struct {
		id    int64
		epoch int16
	}
	groups := map[producer][]int{}
	var order []producer
	for i, pp := range prepared {
		if pp.guard == nil {
			continue
		}
		h, err := klog.ParseBatchHeader(pp.records)
		if err != nil {
			continue // the append reports it
		}
		k := producer{h.ProducerID, h.ProducerEpoch}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		var tps []tp
		for _, i := range groups[k] {
			tps = append(tps, tp{resp.Topics[prepared[i].ti].Topic, resp.Topics[prepared[i].ti].Partitions[prepared[i].pi].Partition})
		}
		codes := v.verify(ctx, txnID, k.id, k.epoch, tps, add)
		for j, i := range groups[k] {
			code, msg := verificationError(codes[j])
			if code == 0 {
				continue
			}
			prepared[i].failed = true
			sp := &resp.Topics[prepared[i].ti].Partitions[prepared[i].pi]
			sp.ErrorCode = code
			if msg != "" {
				sp.ErrorMessage = &msg
			}
		}
	}
}

// verify sends the verify-only AddPartitionsToTxn v4 (with add, the
// adding v5 of KIP-890 part 2, retried while the coordinator answers
// CONCURRENT_TRANSACTIONS) and returns each partition's error code from
// the coordinator (NETWORK_EXCEPTION when it could not be asked).
func (v *txnVerifier) verify(ctx context.Context, txnID string, producerID int64, producerEpoch int16, tps []tp, add bool) []int16 {
	if !add {
		return v.ask(ctx, txnID, producerID, producerEpoch, tps, false)
	}
	return v.retryConcurrent(ctx, func() []int16 { return v.ask(ctx, txnID, producerID, producerEpoch, tps, true) })
}

// ask is one AddPartitionsToTxn round trip of verify.
func (v *txnVerifier) ask(ctx context.Context, txnID string, producerID int64, producerEpoch int16, tps []tp, add bool) []int16 {
	codes := make([]int16, len(tps))
	fill := func(code int16) []int16 {
		for i := range codes {
			codes[i] = code
		}
		return codes
	}
	id, addr, code, msg := v.findCoordinator(txnID)
	if code != 0 {
		v.log.Debug("transaction verification: no coordinator", "transactional_id", txnID, "code", code, "msg", msg)
		return fill(code)
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.SetVersion(4)
	if add {
		req.SetVersion(5)
	}
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = txnID, producerID, producerEpoch, !add
	byTopic := map[string]int{}
	for _, p := range tps {
		i, ok := byTopic[p.topic]
		if !ok {
			i = len(t.Topics)
			byTopic[p.topic] = i
			tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			tt.Topic = p.topic
			t.Topics = append(t.Topics, tt)
		}
		t.Topics[i].Partitions = append(t.Topics[i].Partitions, p.partition)
	}
	req.Transactions = append(req.Transactions, t)
	rctx, cancel := context.WithTimeout(ctx, txnVerifyTimeout)
	defer cancel()
	raw, err := v.client(id, addr).Request(rctx, req)
	if err != nil {
		v.log.Info("transaction verification failed", "transactional_id", txnID, "coordinator", id, "err", err)
		return fill(kerr.NetworkException.Code)
	}
	resp := raw.(*kmsg.AddPartitionsToTxnResponse)
	if resp.ErrorCode != 0 {
		return fill(resp.ErrorCode)
	}
	got := map[tp]int16{}
	for _, rt := range resp.Transactions {
		if rt.TransactionalID != txnID {
			continue
		}
		for _, tt := range rt.Topics {
			for _, p := range tt.Partitions {
				got[tp{tt.Topic, p.Partition}] = p.ErrorCode
			}
		}
	}
	for i, p := range tps {
		c, ok := got[p]
		if !ok {
			c = kerr.UnknownServerError.Code
		}
		codes[i] = c
	}
	return codes
}

// retryConcurrent calls call, and again while an answer is
// CONCURRENT_TRANSACTIONS, every add.partitions.to.txn.retry.backoff.ms
// for at most add.partitions.to.txn.retry.backoff.max.ms: right after an
// EndTxn v5 the producer's next transaction starts with its produce
// requests, while the coordinator is still writing the previous one's
// markers, and a retry by the client would cost its whole backoff.
func (v *txnVerifier) retryConcurrent(ctx context.Context, call func() []int16) []int16 {
	backoff := v.retryBackoff
	deadline := time.Now().Add(v.retryBackoffMax)
	codes := call()
	for slices.Contains(codes, kerr.ConcurrentTransactions.Code) && time.Now().Add(backoff).Before(deadline) {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return codes
		case <-t.C:
		}
		codes = call()
	}
	return codes
}

// verificationError translates the coordinator's answer into the produce
// error Kafka 3.7 returns (ReplicaManager.appendRecords): a partition not
// in the transaction is INVALID_TXN_STATE; errors older clients would not
// retry become NOT_ENOUGH_REPLICAS; a fenced producer gets
// INVALID_PRODUCER_EPOCH (AddPartitionsToTxnManager), as for its batches.
func verificationError(code int16) (int16, string) {
	switch code {
	case 0:
		return 0, ""
	case kerr.InvalidTxnState.Code:
		return code, "Partition was not added to the transaction"
	case kerr.ConcurrentTransactions.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code,
		kerr.NotCoordinator.Code, kerr.NetworkException.Code:
		return kerr.NotEnoughReplicas.Code, "Unable to verify the partition has been added to the transaction. Underlying error: " + errName(code)
	case kerr.ProducerFenced.Code:
		return kerr.InvalidProducerEpoch.Code, ""
	}
	return code, ""
}

// errName is a Kafka error code's name (NOT_COORDINATOR, say).
func errName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke.Message
	}
	return strconv.Itoa(int(code))
}

// withTxnCoordinator replaces how transaction coordinators are found.
func withTxnCoordinator(find func(transactionalID string) (id int32, addr string, code int16, msg string)) Option {
	return optFunc(func(b *Broker) { b.txnCoordinator = find })
}
