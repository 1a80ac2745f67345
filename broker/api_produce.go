package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/msgset"
	"github.com/isrlab/isrlab/broker/partition"
)

var _ = serve(0, "Produce", 0, 10, (*Broker).handleProduce, in("0.10", 0, 2), in("2.4", 0, 8), in("2.6", 0, 8), withTV(12), k40(0, 12))

// handleProduce appends to each partition as leader. acks=0 gets no
// response (any error closes the connection); acks=1 is answered after the
// local append; acks=-1 waits, off the handler thread, until the HW covers
// the append (the delayed-produce purgatory, KAFKA-SPEC §3). With
// transaction.partition.verification.enable a batch that opens a
// transaction on a partition is first verified with the transaction
// coordinator (txnverify.go); under transaction.version 2 a v12 request's
// partitions are added to the transaction that way.
//
// Versions 0-2 carry legacy message sets (magic 0 or 1), up-converted to
// the log's v2 format with offsets assigned and timestamps kept; v3+ must
// carry exactly one v2 batch (ProduceRequest.validateRecords), and zstd
// only from v7. From v10 a NOT_LEADER_OR_FOLLOWER error carries the
// current leader and its endpoint (KIP-951).
func (b *Broker) handleProduce(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	acks := req.Acks

	// First every partition's records are checked; the ones that open a
	// transaction are verified with the transaction coordinator (off the
	// handler thread) before anything is appended, as Kafka's
	// ReplicaManager.appendRecords does.
	var prepared []producePart
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			sp.LogStartOffset = -1
			pp := producePart{ti: len(resp.Topics), pi: len(st.Partitions)}
			if acks != 0 && acks != 1 && acks != -1 {
				sp.ErrorCode = kerr.InvalidRequiredAcks.Code
			} else if p := b.partition(rt.Topic, rp.Partition); p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else if records, err := produceRecords(req.Version, p, rp.Records); err != nil {
				sp.ErrorCode = errCode(err)
				msg := err.Error()
				sp.ErrorMessage = &msg
			} else {
				pp.p, pp.records = p, records
				if req.TransactionID != nil {
					if g, ok := p.TxnVerificationNeeded(records); ok {
						pp.guard = &g
					}
				}
				prepared = append(prepared, pp)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if slices.ContainsFunc(prepared, func(pp producePart) bool { return pp.guard != nil }) {
		go func() {
			b.api.txnVerify.verifyPartitions(ctx, *req.TransactionID, resp, prepared, req.Version >= 12 && b.cfg.Int("transaction.version") >= 2)
			b.produceAppend(ctx, rq, req, resp, prepared)
		}()
		return
	}
	b.produceAppend(ctx, rq, req, resp, prepared)
}

// producePart is one partition of a produce request that passed the
// request checks.
type producePart struct {
	ti, pi  int // its place in the response
	p       *partition.Partition
	records []byte
	// guard is set when the batch opens a transaction and the
	// transaction coordinator must confirm it first; failed is set when
	// it did not.
	guard  *klog.TxnGuard
	failed bool
}

// produceAppend appends the prepared partitions and answers: acks=0 gets
// no response (any error closes the connection); acks=1 is answered after
// the local append; acks=-1 waits for the HW (the delayed produce).
func (b *Broker) produceAppend(ctx context.Context, rq *request, req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse, prepared []producePart) {
	acks := req.Acks
	var waits []ackWait
	for _, pp := range prepared {
		if pp.failed {
			continue
		}
		rt := &req.Topics[pp.ti]
		sp := &resp.Topics[pp.ti].Partitions[pp.pi]
		res, err := pp.p.AppendAsLeaderWith(pp.records, partition.AppendOptions{RequiredAcks: acks, TxnGuard: pp.guard})
		if err != nil {
			sp.ErrorCode = errCode(err)
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code && req.Version >= 10 {
				var ep *brokerEndpoint
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch, ep = b.currentLeader(rt.Topic, sp.Partition)
				ep = rq.onListener(ep)
				if ep != nil && !slices.ContainsFunc(resp.Brokers, func(x kmsg.ProduceResponseBroker) bool { return x.NodeID == ep.ID }) {
					nb := kmsg.NewProduceResponseBroker()
					nb.NodeID, nb.Host, nb.Port, nb.Rack = ep.ID, ep.Host, ep.Port, ep.Rack
					resp.Brokers = append(resp.Brokers, nb)
				}
			}
			continue
		}
		sp.BaseOffset = res.FirstOffset
		sp.LogStartOffset = res.LogStartOffset
		sp.LogAppendTime = res.LogAppendTime
		b.metrics.messagesIn.Add(float64(res.Records))
		if acks == -1 {
			waits = append(waits, ackWait{part: pp.p, nextOffset: res.LastOffset + 1, code: &sp.ErrorCode})
		}
	}
	anyErr := false
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			anyErr = anyErr || p.ErrorCode != 0
		}
	}
	switch {
	case acks == 0:
		if anyErr {
			rq.closeConn()
		} else {
			rq.noResponse()
		}
		return
	case acks != -1 || len(waits) == 0:
		rq.respond(resp)
		return
	}
	deadline := time.Now().Add(time.Duration(req.TimeoutMillis) * time.Millisecond)
	awaitAcksAll(ctx, waits, deadline, func() { rq.respond(resp) })
}

// ackWait is one partition append waiting for acks=-1: complete when the
// partition's HW reaches nextOffset; *code gets the outcome.
type ackWait struct {
	part       waitable
	nextOffset int64
	code       *int16
	done       bool
}

// awaitAcksAll is the delayed-produce purgatory: done is called (once)
// when every wait completed, the leadership changed, or the deadline
// passed (REQUEST_TIMED_OUT for the ones still pending); not at all if
// ctx ends first. It waits off the caller's goroutine unless everything
// is complete already.
func awaitAcksAll(ctx context.Context, waits []ackWait, deadline time.Time, done func()) {
	// check records every partition that completed and returns the first
	// one still pending (nil when all are done).
	check := func() waitable {
		var first waitable
		for i := range waits {
			w := &waits[i]
			if w.done {
				continue
			}
			complete, err := w.part.AcksAllStatus(w.nextOffset)
			switch {
			case err != nil:
				*w.code = errCode(err)
				w.done = true
			case complete:
				w.done = true
			case first == nil:
				first = w.part
			}
		}
		return first
	}
	if check() == nil {
		done()
		return
	}
	go func() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		for {
			// Take the change channel of a pending partition, then re-check:
			// a change between the two is not missed, and if that partition
			// completed meanwhile, the loop picks the next one.
			watched := check()
			if watched == nil {
				done()
				return
			}
			ch := watched.Changed()
			if check() != watched {
				continue
			}
			select {
			case <-ch:
			case <-timer.C:
				check()
				for _, w := range waits {
					if !w.done {
						*w.code = kerr.RequestTimedOut.Code
					}
				}
				done()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// produceRecords checks a partition's records as Kafka's
// ProduceRequest.validateRecords does and up-converts a legacy message set
// (versions 0-2) to a v2 batch; v0-2 may also carry v2 batches, which
// Kafka does not refuse there.
func produceRecords(version int16, p *partition.Partition, data []byte) ([]byte, error) {
	magic := msgset.Magic(data)
	if version < 3 {
		if magic == 0 || magic == 1 {
			return msgset.ToV2(data, p.Log().Config().LogAppendTime)
		}
		return data, nil
	}
	switch {
	case len(data) == 0:
		return nil, fmt.Errorf("produce v%d must have at least one record batch per partition: %w", version, kerr.InvalidRecord)
	case magic != 2:
		return nil, fmt.Errorf("produce v%d may only contain record batches with magic 2, not %d: %w", version, magic, kerr.InvalidRecord)
	case len(data) >= 12 && int64(int32(binary.BigEndian.Uint32(data[8:])))+12 < int64(len(data)):
		return nil, fmt.Errorf("produce v%d may only contain exactly one record batch per partition: %w", version, kerr.InvalidRecord)
	case version < 7 && len(data) > 22 && data[22]&0x07 == 4:
		return nil, fmt.Errorf("produce v%d may not use zstd (KIP-110): %w", version, kerr.UnsupportedCompressionType)
	}
	return data, nil
}

// currentLeader is KIP-951's hint with a NOT_LEADER_OR_FOLLOWER error:
// the partition's leader and epoch from the local replica or else the
// metadata cache (Kafka's getCurrentLeader), -1 when unknown, and the
// leader's endpoint if it is live.
func (b *Broker) currentLeader(topic string, idx int32) (leader, epoch int32, ep *brokerEndpoint) {
	leader, epoch = -1, -1
	if p := b.partition(topic, idx); p != nil {
		leader, epoch = p.Leader()
	} else if t, ok := b.meta.topic(topic); ok && int(idx) < len(t.Partitions) {
		leader, epoch = t.Partitions[idx].Leader, t.Partitions[idx].LeaderEpoch
	}
	for _, e := range b.meta.brokerList() {
		if e.ID == leader {
			return leader, epoch, &e
		}
	}
	return leader, epoch, nil
}

// waitable is a partition's side of the delayed-produce purgatory.
type waitable interface {
	AcksAllStatus(requiredOffset int64) (bool, error)
	Changed() <-chan struct{}
}

// errCode maps an error to a Kafka error code; anything that is not a Kafka
// error is a storage error.
func errCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.KafkaStorageError.Code
}
