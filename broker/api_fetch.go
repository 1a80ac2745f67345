package broker

import (
	"context"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/partition"
)

var _ = serve(1, "Fetch", 4, 12, (*Broker).handleFetch)

// handleFetch reads every requested partition; when fewer than MinBytes
// are available it waits (off the handler thread) until a partition
// changes or MaxWaitMillis passes — Kafka's fetch purgatory. Fetch
// sessions (fetchsession.go) decide which partitions are read and which
// of them are answered.
func (b *Broker) handleFetch(ctx context.Context, rq *request) {
	sess, req := b.fetchSessions.open(rq.req.(*kmsg.FetchRequest))
	if resp, ok := sess.errorResponse(req); ok {
		rq.respond(resp)
		return
	}
	bufs := &bufSet{}
	resp, n, chans, anyErr := b.readFetch(req, bufs)
	if anyErr || n >= int(req.MinBytes) || req.MaxWaitMillis <= 0 || len(chans) == 0 {
		rq.respondReleasing(sess.finish(resp), bufs)
		return
	}
	deadline := time.Now().Add(time.Duration(req.MaxWaitMillis) * time.Millisecond)
	go func() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		cases := make([]reflect.SelectCase, 0, len(chans)+2)
		for {
			cases = cases[:0]
			cases = append(cases,
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
			for _, ch := range chans {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			}
			chosen, _, _ := reflect.Select(cases)
			bufs.release() // the last read is superseded
			switch chosen {
			case 1:
				return
			case 0:
				resp, _, _, _ = b.readFetch(req, bufs)
				rq.respondReleasing(sess.finish(resp), bufs)
				return
			}
			resp, n, chans, anyErr = b.readFetch(req, bufs)
			if anyErr || n >= int(req.MinBytes) || len(chans) == 0 {
				rq.respondReleasing(sess.finish(resp), bufs)
				return
			}
		}
	}()
}

// readFetch builds a fetch response from what is readable now. It returns
// the bytes read, the partitions' change channels (taken before reading, so
// no change is missed) and whether any partition had an error.
func (b *Broker) readFetch(req *kmsg.FetchRequest, bufs *bufSet) (*kmsg.FetchResponse, int, []<-chan struct{}, bool) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	budget := int(req.MaxBytes)
	if budget <= 0 {
		budget = 1 << 30
	}
	total := 0
	anyErr := false
	var chans []<-chan struct{}
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			sp.RecordBatches = []byte{}
			p := b.partition(rt.Topic, rp.Partition)
			if p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				anyErr = true
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			chans = append(chans, p.Changed())
			max := int(rp.PartitionMaxBytes)
			if max > budget {
				max = budget
			}
			// KIP-74: the first non-empty partition returns at least one
			// whole batch, whatever the limits, so a consumer never stalls.
			res, err := p.Read(partition.FetchRequest{
				ReplicaID: req.ReplicaID, Offset: rp.FetchOffset, MaxBytes: max,
				CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch, MinOneBatch: total == 0,
				Alloc: bufs.alloc,
			})
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
			if res.DivergingEpoch >= 0 {
				sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = res.DivergingEpoch, res.DivergingEndOffset
				anyErr = true // answer at once: the follower must truncate
			}
			if err != nil {
				sp.ErrorCode = errCode(err)
				anyErr = true
			} else {
				sp.RecordBatches = res.Records
				total += len(res.Records)
				budget -= len(res.Records)
				if budget < 0 {
					budget = 0
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, total, chans, anyErr
}
