package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Special ListOffsets timestamps.
const (
	latestTimestamp        = -1
	earliestTimestamp      = -2
	maxTimestamp           = -3 // v7+, KIP-734
	earliestLocalTimestamp = -4 // v8+, KIP-405: the log start without tiered storage
	latestTieredTimestamp  = -5 // v9+, KIP-1005: the highest offset in remote storage
)

// debuggingReplica is the ListOffsets replica id that may ask a follower.
const debuggingReplica = -2

var _ = serve(2, "ListOffsets", 0, 8, (*Broker).handleListOffsets, in("0.10", 0, 1), in("2.4", 0, 5), in("2.6", 0, 5), k40(1, 10), serve40(10))

// handleListOffsets answers earliest, latest (the HW: consumers never see
// past it; the LSO for read_committed), max-timestamp and by-timestamp
// lookups (bounded likewise) on the leader; latest-tiered (v9+) has no
// offset without tiered storage, and v10's TimeoutMs bounds remote
// lookups only, so it changes nothing here. v0 is
// the old-style list of up to MaxNumOffsets segment offsets, which Burrow
// and old sarama still send.
func (b *Broker) handleListOffsets(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	if req.Version == 0 {
		b.listOffsetsV0(req, resp)
		rq.respond(resp)
		return
	}
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
				// read_committed (v2+) sees up to the LSO.
				committed := !replica && req.Version >= 2 && req.IsolationLevel == 1
				switch rp.Timestamp {
				case latestTimestamp:
					// Followers learn the leader's LEO; consumers the HW,
					// not before it reaches this leader's epoch (KIP-207);
					// read_committed consumers the LSO.
					sp.Offset = s.HighWatermark
					if committed {
						sp.Offset = s.LastStableOffset
					}
					if replica {
						sp.Offset = s.LogEndOffset
					} else if s.HighWatermark < s.EpochStartOffset {
						sp.ErrorCode, sp.Offset = kerr.OffsetNotAvailable.Code, -1
					}
				case earliestTimestamp, earliestLocalTimestamp:
					sp.Offset = s.LogStartOffset
				case latestTieredTimestamp:
					// Without tiered storage: no offset (UnifiedLog's
					// fetchOffsetByTimestamp when remote storage is off).
					if req.Version >= 9 {
						sp.LeaderEpoch = -1
						break
					}
					if off, found, epoch := p.OffsetForTimestamp(rp.Timestamp, committed); found {
						sp.Offset, sp.Timestamp, sp.LeaderEpoch = off.Offset, off.Timestamp, epoch
					} else {
						sp.LeaderEpoch = -1
					}
				case maxTimestamp:
					sp.LeaderEpoch = -1
					if off, found, epoch := p.MaxTimestampOffset(committed); found {
						sp.Offset, sp.Timestamp, sp.LeaderEpoch = off.Offset, off.Timestamp, epoch
					}
				default:
					sp.LeaderEpoch = -1
					if off, found, epoch := p.OffsetForTimestamp(rp.Timestamp, committed); found {
						sp.Offset, sp.Timestamp, sp.LeaderEpoch = off.Offset, off.Timestamp, epoch
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}

// listOffsetsV0 answers the old-style request (Kafka's
// handleListOffsetRequestV0): any replica id but the debugging one needs
// the leader, and a consumer's list is bounded by the HW.
func (b *Broker) listOffsetsV0(req *kmsg.ListOffsetsRequest, resp *kmsg.ListOffsetsResponse) {
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.OldStyleOffsets = []int64{}
			if p := b.partition(rt.Topic, rp.Partition); p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else if offs, err := p.LegacyOffsets(rp.Timestamp, int(rp.MaxNumOffsets), req.ReplicaID == -1, req.ReplicaID != debuggingReplica); err != nil {
				sp.ErrorCode = errCode(err)
			} else {
				sp.OldStyleOffsets = offs
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
}
