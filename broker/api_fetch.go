package broker

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/msgset"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/kafkaconfig"
)

var _ = serve(1, "Fetch", 0, 16, (*Broker).handleFetch, in("0.10", 0, 3), in("2.4", 0, 11), in("2.6", 0, 11), k40(4, 17), serve40(17))

// handleFetch reads every requested partition; when fewer than MinBytes
// are available it waits (off the handler thread) until a partition
// changes or MaxWaitMillis passes — Kafka's fetch purgatory. Fetch
// sessions (KIP-227, replication/session.go) decide which partitions are read and
// which of them are answered.
//
// Kafka 3.7's version differences: v0-3 get the v2 batches down-converted
// to message format v0 (v0-1) or v1 (v2-3), unless
// message.downconversion.enable is false (UNSUPPORTED_VERSION); a topic
// with compression.type=zstd answers v0-9 with UNSUPPORTED_COMPRESSION_TYPE;
// v0-2 have a hard size limit (no KIP-74 first batch); v0-5 see
// KAFKA_STORAGE_ERROR as NOT_LEADER_OR_FOLLOWER; v13+ name topics by ID
// (UNKNOWN_TOPIC_ID); v15+ carry the replica id in ReplicaState; v16 adds
// the current leader to NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH
// (KIP-951). From v4 isolation_level=1 (read_committed) reads only up to
// the last stable offset and returns the aborted transactions overlapping
// the data; down-converted versions (v0-3) read uncommitted, without the
// control batches.
func (b *Broker) handleFetch(ctx context.Context, rq *request) {
	sess, req := b.fetchSessions.Open(rq.req.(*kmsg.FetchRequest))
	if resp, ok := sess.ErrorResponse(req); ok {
		rq.respond(resp)
		return
	}
	bufs := &bufSet{}
	resp, n, chans, anyErr := b.readFetch(req, bufs)
	if anyErr || n >= int(req.MinBytes) || req.MaxWaitMillis <= 0 || len(chans) == 0 {
		rq.respondReleasing(sess.Finish(brokersOn(b.meta, resp, rq.listener())), bufs)
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
				rq.respondReleasing(sess.Finish(brokersOn(b.meta, resp, rq.listener())), bufs)
				return
			}
			resp, n, chans, anyErr = b.readFetch(req, bufs)
			if anyErr || n >= int(req.MinBytes) || len(chans) == 0 {
				rq.respondReleasing(sess.Finish(brokersOn(b.meta, resp, rq.listener())), bufs)
				return
			}
		}
	}()
}

// brokersOn gives the KIP-951 leader endpoints of resp as clients of
// listener reach them.
func brokersOn(m *metadata, resp *kmsg.FetchResponse, listener string) *kmsg.FetchResponse {
	for i := range resp.Brokers {
		nb := &resp.Brokers[i]
		nb.Host, nb.Port = m.addrOn(nb.NodeID, listener, nb.Host, nb.Port)
	}
	return resp
}

// readFetch builds a fetch response from what is readable now. It returns
// the bytes read, the partitions' change channels (taken before reading, so
// no change is missed) and whether any partition had an error.
func (b *Broker) readFetch(req *kmsg.FetchRequest, bufs *bufSet) (*kmsg.FetchResponse, int, []<-chan struct{}, bool) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	budget := int(req.MaxBytes)
	if budget <= 0 || req.Version < 3 {
		budget = 1 << 30
	}
	replicaID := req.ReplicaID
	if req.Version >= 15 {
		replicaID = req.ReplicaState.ID
	}
	downTo := int8(-1) // the magic old fetchers need
	switch {
	case req.Version <= 1:
		downTo = 0
	case req.Version <= 3:
		downTo = 1
	}
	// v4+ carry the isolation level: read_committed consumers read up to
	// the LSO and get the aborted transactions of what they read; older
	// fetchers (and followers) read uncommitted.
	isolation := int8(0)
	if req.Version >= 4 && replicaID < 0 && req.IsolationLevel == 1 {
		isolation = 1
	}
	total := 0
	anyErr := false
	var chans []<-chan struct{}
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		name, known := rt.Topic, true
		if req.Version >= 13 {
			name, known = b.meta.topicByID(rt.TopicID)
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			sp.RecordBatches = []byte{}
			fail := func(e *kerr.Error) {
				sp.ErrorCode = e.Code
				anyErr = true
				st.Partitions = append(st.Partitions, sp)
			}
			p := b.partition(name, rp.Partition)
			switch {
			case !known:
				fail(kerr.UnknownTopicID)
				continue
			case p == nil:
				fail(kerr.UnknownTopicOrPartition)
				continue
			case req.Version < 10 && b.topicValue(name, "compression.type") == "zstd":
				fail(kerr.UnsupportedCompressionType)
				continue
			case downTo >= 0 && replicaID < 0 && b.topicValue(name, "message.downconversion.enable") != "true":
				fail(kerr.UnsupportedVersion)
				continue
			}
			chans = append(chans, p.Changed())
			max := int(rp.PartitionMaxBytes)
			if max > budget {
				max = budget
			}
			// KIP-74: the first non-empty partition returns at least one
			// whole batch, whatever the limits, so a consumer never stalls;
			// v0-2 keep the hard limit.
			res, err := p.Read(partition.FetchRequest{
				ReplicaID: replicaID, Offset: rp.FetchOffset, MaxBytes: max,
				CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch, MinOneBatch: total == 0 && req.Version > 2,
				Isolation: isolation, Alloc: bufs.alloc, LogStartOffset: rp.LogStartOffset,
			})
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
			if res.AbortedTxns != nil {
				sp.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(res.AbortedTxns))
				for _, t := range res.AbortedTxns {
					a := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					a.ProducerID, a.FirstOffset = t.ProducerID, t.FirstOffset
					sp.AbortedTransactions = append(sp.AbortedTransactions, a)
				}
			}
			if res.DivergingEpoch >= 0 {
				sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = res.DivergingEpoch, res.DivergingEndOffset
				anyErr = true // answer at once: the follower must truncate
			}
			if err == nil && downTo >= 0 && len(res.Records) > 0 {
				var converted []byte
				if converted, err = msgset.FromV2(res.Records, downTo, rp.FetchOffset); err == nil {
					total += len(res.Records) // limits count the stored bytes, as Kafka's do
					budget -= len(res.Records)
					res.Records = nil
					sp.RecordBatches = converted
				}
			}
			if err != nil {
				sp.ErrorCode = errCode(err)
				if sp.ErrorCode == kerr.KafkaStorageError.Code && req.Version <= 5 {
					sp.ErrorCode = kerr.NotLeaderForPartition.Code // older clients would not retry
				}
				if req.Version >= 16 && (sp.ErrorCode == kerr.NotLeaderForPartition.Code || sp.ErrorCode == kerr.FencedLeaderEpoch.Code) {
					var ep *brokerEndpoint
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch, ep = b.currentLeader(name, rp.Partition)
					if ep != nil && !slices.ContainsFunc(resp.Brokers, func(x kmsg.FetchResponseBroker) bool { return x.NodeID == ep.ID }) {
						nb := kmsg.NewFetchResponseBroker()
						nb.NodeID, nb.Host, nb.Port, nb.Rack = ep.ID, ep.Host, ep.Port, ep.Rack
						resp.Brokers = append(resp.Brokers, nb)
					}
				}
				anyErr = true
			} else if res.Records != nil {
				sp.RecordBatches = res.Records
				total += len(res.Records)
				budget -= len(res.Records)
			}
			if budget < 0 {
				budget = 0
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, total, chans, anyErr
}

// topicValue is a topic config's effective value: the topic's override,
// else the broker default it inherits.
func (b *Broker) topicValue(topic, key string) string {
	if v, ok := b.meta.topicConfigs(topic)[key]; ok {
		return v
	}
	return b.cfg.String(kafkaconfig.TopicToBroker[key])
}
