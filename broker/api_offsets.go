package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Special ListOffsets timestamps.
const (
	latestTimestamp   = -1
	earliestTimestamp = -2
)

var _ = serve(2, "ListOffsets", 1, 6, (*Broker).handleListOffsets)

// handleListOffsets answers earliest, latest (the HW: consumers never see
// past it) and by-timestamp lookups on the leader.
func (b *Broker) handleListOffsets(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			p := b.partition(rt.Topic, rp.Partition)
			if p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			s, err := p.ListOffsetsState(rp.CurrentLeaderEpoch)
			switch {
			case err != nil:
				sp.ErrorCode = errCode(err)
			default:
				sp.LeaderEpoch = s.LeaderEpoch
				replica := req.ReplicaID >= 0
				switch rp.Timestamp {
				case latestTimestamp:
					// Followers learn the leader's LEO; consumers the HW,
					// not before it reaches this leader's epoch (KIP-207).
					sp.Offset = s.HighWatermark
					if replica {
						sp.Offset = s.LogEndOffset
					} else if s.HighWatermark < s.EpochStartOffset {
						sp.ErrorCode, sp.Offset = kerr.OffsetNotAvailable.Code, -1
					}
				case earliestTimestamp:
					sp.Offset = s.LogStartOffset
				default:
					off, found, epoch := p.OffsetForTimestamp(rp.Timestamp)
					if found {
						sp.Offset, sp.Timestamp, sp.LeaderEpoch = off.Offset, off.Timestamp, epoch
					}
				}
				if req.Version == 0 {
					sp.OldStyleOffsets = []int64{sp.Offset}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}
