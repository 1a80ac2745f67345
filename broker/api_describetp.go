package broker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeTopicPartitions (KIP-966, Kafka 3.8+) is Metadata's partition
// half with the eligible leader replicas, paged: at most
// ResponsePartitionLimit partitions per answer, the rest from NextCursor,
// topics in name order (Kafka's DescribeTopicPartitionsRequestHandler).
// Only the 4.0 profile advertises it. The ELR comes from the partition
// state the controller writes to the coordinators; a broker without them
// (standalone, or cut off) answers with empty ELRs.
var _ = serve(75, "DescribeTopicPartitions", 0, 0, handleDescribeTopicPartitions, notIn("0.10", "2.4", "2.6", "3.7"), k40(0, 0))

func handleDescribeTopicPartitions(b *Broker, ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeTopicPartitionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
	limit := int(req.ResponsePartitionLimit)
	if limit <= 0 || limit > 2000 {
		limit = 2000
	}
	var names []string
	if len(req.Topics) == 0 {
		names = b.meta.topicNames()
	} else {
		for _, t := range req.Topics {
			names = append(names, t.Topic)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	first := int32(0)
	if c := req.Cursor; c != nil {
		i, _ := slices.BinarySearch(names, c.Topic)
		names = names[i:]
		if len(names) > 0 && names[0] == c.Topic {
			first = c.Partition
		}
	}
	var elr map[string]map[int32][]int32
	if b.cluster != nil {
		elr = describeELR(ctx, b, names)
	}
	n := 0
	for ti, name := range names {
		rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
		nm := name
		rt.Topic = &nm
		t, ok := b.meta.topic(name)
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.TopicID, rt.IsInternal = t.ID, strings.HasPrefix(name, "__")
		start := int32(0)
		if ti == 0 {
			start = first
		}
		for i := start; i < int32(len(t.Partitions)); i++ {
			if n == limit {
				resp.Topics = append(resp.Topics, rt)
				cur := kmsg.NewDescribeTopicPartitionsResponseNextCursor()
				cur.Topic, cur.Partition = name, i
				resp.NextCursor = &cur
				rq.respond(resp)
				return
			}
			pm := t.Partitions[i]
			rp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
			rp.Partition, rp.LeaderID, rp.LeaderEpoch = i, pm.Leader, pm.LeaderEpoch
			rp.Replicas, rp.ISR, rp.OfflineReplicas = pm.Replicas, pm.ISR, pm.Offline
			rp.EligibleLeaderReplicas, rp.LastKnownELR = elr[name][i], []int32{}
			if rp.EligibleLeaderReplicas == nil {
				rp.EligibleLeaderReplicas = []int32{}
			}
			if rp.OfflineReplicas == nil {
				rp.OfflineReplicas = []int32{}
			}
			if pm.Leader < 0 {
				rp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
			n++
		}
		resp.Topics = append(resp.Topics, rt)
	}
	rq.respond(resp)
}

// describeELR reads the topics' eligible leader replicas from the
// coordinators; nil where they cannot be read.
func describeELR(ctx context.Context, b *Broker, topics []string) map[string]map[int32][]int32 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	states, err := b.cluster.coord.PartitionStatesOf(ctx, topics)
	if err != nil {
		b.log.Info("DescribeTopicPartitions: eligible leader replicas unknown", "err", err)
		return nil
	}
	out := make(map[string]map[int32][]int32, len(states))
	for topic, ps := range states {
		out[topic] = make(map[int32][]int32, len(ps))
		for p, st := range ps {
			out[topic][p] = st.ELR
		}
	}
	return out
}
