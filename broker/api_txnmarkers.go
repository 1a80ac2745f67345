package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/partition"
)

// WriteTxnMarkers came with transactions in Kafka 0.11; v1 (flexible) is
// 2.8's.
var _ = serve(27, "WriteTxnMarkers", 0, 1, markerHandler((*markerAPI).handleWriteTxnMarkers), notIn("0.10"), in("2.4", 0, 0), in("2.6", 0, 0), k40(1, 1))

// markerAPI appends transaction markers to the partitions this broker
// leads.
type markerAPI struct {
	partition func(topic string, idx int32) *partition.Partition
	// hook is the broker's txnMarkerHook.
	hook func(topic string, partition int32, producerID int64, producerEpoch int16, commit bool)
}

var markerHandler = handlerOn(func(b *Broker) *markerAPI { return b.api.markers })

// txnMarkerTimeout bounds the wait for a marker to be committed; the
// request has no timeout of its own (Kafka uses request.timeout.ms).
const txnMarkerTimeout = 30 * time.Second

// handleWriteTxnMarkers is the partition side of a transaction's end: the
// transaction coordinator asks each partition leader to append a commit or
// abort marker (a control batch) for a producer. Each marker is checked
// against the producer's epoch (INVALID_PRODUCER_EPOCH) and the
// coordinator epoch of its last marker (TRANSACTION_COORDINATOR_FENCED)
// and appended with acks=all: the response waits until every marker is
// below its partition's HW, as Kafka's KafkaApis.handleWriteTxnMarkersRequest
// does. A partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER,
// an unknown one UNKNOWN_TOPIC_OR_PARTITION, one below
// min.insync.replicas NOT_ENOUGH_REPLICAS. After a marker is committed the
// broker's txnMarkerHook is called.
func (a *markerAPI) handleWriteTxnMarkers(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	type written struct {
		mi, ti, pi int
		marker     kmsg.WriteTxnMarkersRequestMarker
		topic      string
		partition  int32
	}
	var waits []ackWait
	var done []written
	for mi, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for ti, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for pi, idx := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = idx
				p := a.partition(t.Topic, idx)
				if p == nil {
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else if res, err := p.AppendMarker(m.ProducerID, m.ProducerEpoch, klog.Marker{Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}); err != nil {
					rp.ErrorCode = errCode(err)
				} else {
					waits = append(waits, ackWait{part: p, nextOffset: res.LastOffset + 1})
					done = append(done, written{mi: mi, ti: ti, pi: pi, marker: m, topic: t.Topic, partition: idx})
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	for i := range waits {
		w := done[i]
		waits[i].code = &resp.Markers[w.mi].Topics[w.ti].Partitions[w.pi].ErrorCode
	}
	awaitAcksAll(ctx, waits, time.Now().Add(txnMarkerTimeout), func() {
		if hook := a.hook; hook != nil {
			for i, w := range done {
				if *waits[i].code == 0 {
					hook(w.topic, w.partition, w.marker.ProducerID, w.marker.ProducerEpoch, w.marker.Committed)
				}
			}
		}
		rq.respond(resp)
	})
}

// withTxnMarkerHook sets the broker's txnMarkerHook.
func withTxnMarkerHook(hook func(topic string, partition int32, producerID int64, producerEpoch int16, commit bool)) Option {
	return optFunc(func(b *Broker) { b.txnMarkerHook = hook })
}
