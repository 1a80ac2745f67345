package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/partition"
)

// DeleteRecords came with KIP-107 in Kafka 0.11; v1 is 2.0's, v2
// (flexible) 2.6's (sarama's requiredVersion).
var _ = serve(21, "DeleteRecords", 0, 2, (*Broker).handleDeleteRecords, notIn("0.10"), in("2.4", 0, 1), k40(0, 2))

// handleDeleteRecords moves the log start offset of partitions this
// broker leads (Kafka's ReplicaManager.deleteRecords): -1 means the HW,
// an offset above the HW is OFFSET_OUT_OF_RANGE, a partition led
// elsewhere NOT_LEADER_OR_FOLLOWER, an unknown one
// UNKNOWN_TOPIC_OR_PARTITION. The answer waits, as DelayedDeleteRecords
// does, until each partition's low watermark (the smallest log start of
// the leader and every live follower, which learn the new start from
// their fetch responses) reaches the new start, and gives that low
// watermark; after the request's timeout the partitions still waiting get
// REQUEST_TIMED_OUT with low watermark -1. Segments wholly below the new
// start go at the next retention pass.
func (b *Broker) handleDeleteRecords(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	type pending struct {
		ti, pi int
		p      *partition.Partition
		offset int64
	}
	var waiting []pending
	for ti, rt := range req.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		t, known := b.meta.topic(rt.Topic)
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition, sp.LowWatermark = rp.Partition, -1
			p := b.partition(rt.Topic, rp.Partition)
			switch {
			case p != nil:
				off, err := p.DeleteRecords(rp.Offset)
				if err != nil {
					sp.ErrorCode = errCode(err)
					break
				}
				waiting = append(waiting, pending{ti: ti, pi: pi, p: p, offset: off})
			case known && rp.Partition >= 0 && int(rp.Partition) < len(t.Partitions):
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			default:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	waits := make([]ackWait, len(waiting))
	for i, w := range waiting {
		sp := &resp.Topics[w.ti].Partitions[w.pi]
		waits[i] = ackWait{part: lowWatermarkWait{p: w.p, lw: &sp.LowWatermark}, nextOffset: w.offset, code: &sp.ErrorCode}
	}
	deadline := time.Now().Add(time.Duration(req.TimeoutMillis) * time.Millisecond)
	awaitAcksAll(ctx, waits, deadline, func() { rq.respond(resp) })
}

// lowWatermarkWait puts a DeleteRecords partition in the delayed-produce
// purgatory (one purgatory for both): complete when the partition's low
// watermark reaches the required offset, which it then writes to *lw.
type lowWatermarkWait struct {
	p  *partition.Partition
	lw *int64
}

func (w lowWatermarkWait) AcksAllStatus(requiredOffset int64) (bool, error) {
	done, lw, err := w.p.DeleteRecordsStatus(requiredOffset)
	if done && err == nil {
		*w.lw = lw
	}
	return done, err
}

func (w lowWatermarkWait) Changed() <-chan struct{} { return w.p.Changed() }
