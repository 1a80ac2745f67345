package controller

import (
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// Election types of ElectLeaders (KIP-460).
const (
	ElectPreferred int8 = 0
	ElectUnclean   int8 = 1
)

// errCode maps a coordinator failure to the code a request gets.
func errCode(err error) int16 {
	if errors.Is(err, coord.ErrNotController) {
		return kerr.NotController.Code
	}
	return kerr.RequestTimedOut.Code
}

func strp(s string) *string { return &s }

// ElectLeaders runs PREFERRED (0) or UNCLEAN (1) elections for the listed
// partitions, or for all partitions when Topics is null (§4.3). Per
// partition: ELECTION_NOT_NEEDED when the wanted leader already leads,
// PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when
// nobody can be elected, UNKNOWN_TOPIC_OR_PARTITION for unknown ones. A
// broker that is not the controller gets NOT_CONTROLLER.
func (c *Controller) ElectLeaders(ctx context.Context, req *kmsg.ElectLeadersRequest) *kmsg.ElectLeadersResponse {
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	resp.SetVersion(req.GetVersion())
	results := map[coord.TopicPartition]int16{}
	var order []coord.TopicPartition
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		if req.Topics == nil {
			order = t.allTPs()
		} else {
			for _, rt := range req.Topics {
				for _, p := range rt.Partitions {
					order = append(order, coord.TopicPartition{Topic: rt.Topic, Partition: p})
				}
			}
		}
		var todo []coord.TopicPartition
		for _, tp := range order {
			p, ok := t.parts[tp]
			if !ok || !p.hasState {
				results[tp] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			todo = append(todo, tp)
		}
		var decide decision
		if req.ElectionType == ElectUnclean {
			decide = uncleanDecision(t.live, t.up, t.epoch)
		} else {
			decide = preferredDecision(t.live, t.epoch)
		}
		chs, err := t.apply(ctx, todo, decide)
		t.announce(chs)
		for _, tp := range todo {
			if _, ok := results[tp]; ok {
				continue
			}
			p := t.parts[tp]
			switch {
			case slices.ContainsFunc(chs, func(ch stateChange) bool { return ch.TP == tp }):
				results[tp] = 0
			case err != nil:
				results[tp] = errCode(err)
			case req.ElectionType == ElectUnclean && p.state.Leader != NoLeader && t.up(p.state.Leader):
				results[tp] = kerr.ElectionNotNeeded.Code
			case req.ElectionType == ElectUnclean:
				results[tp] = kerr.EligibleLeadersNotAvailable.Code
			case len(p.replicas) > 0 && p.state.Leader == p.replicas[0]:
				results[tp] = kerr.ElectionNotNeeded.Code
			default:
				results[tp] = kerr.PreferredLeaderNotAvailable.Code
			}
		}
		return err
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
		for _, rt := range req.Topics {
			r := kmsg.NewElectLeadersResponseTopic()
			r.Topic = rt.Topic
			for _, p := range rt.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, kerr.NotController.Code
				r.Partitions = append(r.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, r)
		}
		return resp
	}
	for _, tp := range order {
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != tp.Topic {
			r := kmsg.NewElectLeadersResponseTopic()
			r.Topic = tp.Topic
			resp.Topics = append(resp.Topics, r)
		}
		rp := kmsg.NewElectLeadersResponseTopicPartition()
		rp.Partition, rp.ErrorCode = tp.Partition, results[tp]
		if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
			rp.ErrorMessage = strp(e.Error())
		}
		last := &resp.Topics[len(resp.Topics)-1]
		last.Partitions = append(last.Partitions, rp)
	}
	return resp
}

// ControlledShutdown handles a broker's request to shut down (§4.5): its
// leaderships move to the first live ISR replica that is not shutting down,
// it leaves every ISR (leader epoch + 1), its follower replicas get
// StopReplica, and the response lists the partitions it still leads. An
// epoch older than the registration's is STALE_BROKER_EPOCH; an unknown
// broker BROKER_NOT_AVAILABLE.
func (c *Controller) ControlledShutdown(ctx context.Context, req *kmsg.ControlledShutdownRequest) *kmsg.ControlledShutdownResponse {
	resp := req.ResponseKind().(*kmsg.ControlledShutdownResponse)
	resp.SetVersion(req.GetVersion())
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		id := req.BrokerID
		b, ok := t.brokers[id]
		if !ok {
			resp.ErrorCode = kerr.BrokerNotAvailable.Code
			return nil
		}
		if req.BrokerEpoch != -1 && req.BrokerEpoch < b.Epoch {
			resp.ErrorCode = kerr.StaleBrokerEpoch.Code
			return nil
		}
		t.shuttingDown[id] = true
		t.log.Info("controlled shutdown", "broker", id)
		var hosted []coord.TopicPartition
		for _, tp := range t.allTPs() {
			if slices.Contains(t.parts[tp].replicas, id) {
				hosted = append(hosted, tp)
			}
		}
		shutting := func(r int32) bool { return t.shuttingDown[r] }
		chs, err := t.apply(ctx, hosted, shutdownDecision(t.live, shutting, t.epoch))
		t.announce(chs)
		var followers []coord.TopicPartition
		for _, tp := range hosted {
			p := t.parts[tp]
			if p.hasState && p.state.Leader == id {
				r := kmsg.NewControlledShutdownResponsePartitionsRemaining()
				r.Topic, r.Partition = tp.Topic, tp.Partition
				resp.PartitionsRemaining = append(resp.PartitionsRemaining, r)
			} else if len(p.replicas) > 1 {
				followers = append(followers, tp)
			}
		}
		t.sendStopReplica(id, followers, false, nil)
		if err != nil {
			resp.ErrorCode = errCode(err)
		}
		return err
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
	}
	return resp
}

// AlterPartition applies ISR changes requested by partition leaders (§1.6
// b, KIP-497). The request's broker epoch must be the registered one
// (STALE_BROKER_EPOCH); per partition the leader epoch must be current
// (FENCED_LEADER_EPOCH; a newer one means this controller is behind:
// NOT_CONTROLLER), the requester must lead (NOT_LEADER_OR_FOLLOWER), the
// partition epoch (= state version) must match (INVALID_UPDATE_VERSION),
// the ISR must hold the leader and only assigned replicas (INVALID_REQUEST)
// and every added member must be live with the epoch given
// (INELIGIBLE_REPLICA). An ISR equal to the current one is answered with
// the current state. The leader epoch is not bumped. Accepted changes are
// written with compare-and-swap and sent to every broker with
// UpdateMetadata; the response carries the new partition epoch. A leader
// in controlled shutdown has its change applied and then loses the
// leadership: NEW_LEADER_ELECTED.
func (c *Controller) AlterPartition(ctx context.Context, req *kmsg.AlterPartitionRequest) *kmsg.AlterPartitionResponse {
	resp := req.ResponseKind().(*kmsg.AlterPartitionResponse)
	resp.SetVersion(req.GetVersion())
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		b, ok := t.brokers[req.BrokerID]
		if !ok || (req.BrokerEpoch != -1 && req.BrokerEpoch != b.Epoch) {
			resp.ErrorCode = kerr.StaleBrokerEpoch.Code
			return nil
		}
		var changed []coord.TopicPartition
		var fatal error
		for _, rt := range req.Topics {
			out := kmsg.NewAlterPartitionResponseTopic()
			out.Topic, out.TopidID = rt.Topic, rt.TopicID
			name, known := rt.Topic, true
			if req.Version >= 2 { // v2+ names topics by ID (KIP-841)
				name, known = t.topicName(rt.TopicID)
			}
			for _, rp := range rt.Partitions {
				tp := coord.TopicPartition{Topic: name, Partition: rp.Partition}
				pr := kmsg.NewAlterPartitionResponseTopicPartition()
				pr.Partition = rp.Partition
				if fatal != nil {
					pr.ErrorCode = errCode(fatal)
					out.Partitions = append(out.Partitions, pr)
					continue
				}
				if !known {
					pr.ErrorCode = kerr.UnknownTopicID.Code
					out.Partitions = append(out.Partitions, pr)
					continue
				}
				p, ok := t.parts[tp]
				if !ok || !p.hasState {
					pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
					out.Partitions = append(out.Partitions, pr)
					continue
				}
				isr, epochs := requestedISR(rp)
				code, write := ValidateAlterPartition(req.BrokerID, p.replicas, p.state, rp.LeaderEpoch, rp.PartitionEpoch, isr, epochs, t.liveEpoch)
				if code == 0 && write {
					next := p.state
					next.ISR = isr
					next.ControllerEpoch = t.epoch
					vs, err := t.c.cfg.Coord.SetPartitionStates(ctx, t.l, []coord.PartitionStateUpdate{
						{Topic: tp.Topic, Partition: tp.Partition, State: next, ExpectedVersion: p.state.Version},
					})
					switch {
					case err == nil:
						next.Version = vs[0]
						p.state = next
						changed = append(changed, tp)
						t.log.Info("ISR altered", "topic", tp.Topic, "partition", tp.Partition, "isr", isr, "version", next.Version)
						if t.shuttingDown[req.BrokerID] {
							shutting := func(r int32) bool { return t.shuttingDown[r] }
							chs, err := t.apply(ctx, []coord.TopicPartition{tp}, shutdownDecision(t.live, shutting, t.epoch))
							t.announce(chs)
							if err != nil {
								fatal = err
							} else if p.state.Leader != req.BrokerID {
								code = kerr.NewLeaderElected.Code
							}
						}
					case errors.Is(err, coord.ErrVersionMismatch):
						code = kerr.InvalidUpdateVersion.Code
						if st, rerr := t.c.cfg.Coord.PartitionState(ctx, tp.Topic, tp.Partition); rerr == nil {
							p.state = st
						}
					default:
						code = errCode(err)
						fatal = err
					}
				}
				pr.ErrorCode = code
				if code == 0 {
					pr.LeaderID = p.state.Leader
					pr.LeaderEpoch = p.state.LeaderEpoch
					pr.ISR = nonNil(p.state.ISR)
					pr.PartitionEpoch = int32(p.state.Version)
				}
				out.Partitions = append(out.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, out)
		}
		if len(changed) > 0 {
			t.sendUpdateMetadata(changed, nil)
			if fatal == nil {
				fatal = t.maybeCompleteReassignments(ctx, changed)
			}
		}
		return fatal
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
		resp.Topics = nil
	}
	return resp
}

// topicName resolves a topic ID; the zero ID never resolves.
func (t *term) topicName(id [16]byte) (string, bool) {
	if id == ([16]byte{}) {
		return "", false
	}
	for name, spec := range t.topics {
		if spec.ID == id {
			return name, true
		}
	}
	return "", false
}

// requestedISR reads the new ISR of either request layout; epochs holds -1
// where the request carries no broker epoch.
func requestedISR(rp kmsg.AlterPartitionRequestTopicPartition) (isr []int32, epochs []int64) {
	if len(rp.NewEpochISR) > 0 {
		for _, m := range rp.NewEpochISR {
			isr = append(isr, m.BrokerID)
			epochs = append(epochs, m.BrokerEpoch)
		}
		return isr, epochs
	}
	for _, r := range rp.NewISR {
		isr = append(isr, r)
		epochs = append(epochs, -1)
	}
	return isr, epochs
}

// liveEpoch returns a broker's registration epoch if it is live and not
// shutting down.
func (t *term) liveEpoch(id int32) (int64, bool) {
	b, ok := t.brokers[id]
	if !ok || t.shuttingDown[id] {
		return 0, false
	}
	return b.Epoch, true
}

// ValidateAlterPartition checks one AlterPartition entry against the current
// state (the order of the checks is Kafka's). It returns the error code
// (0 for success) and whether a write is needed (false when the requested
// ISR is already current).
func ValidateAlterPartition(brokerID int32, replicas []int32, cur coord.PartitionState, leaderEpoch, partitionEpoch int32,
	isr []int32, epochs []int64, liveEpoch func(int32) (int64, bool)) (int16, bool) {
	version := int32(cur.Version)
	switch {
	case partitionEpoch > version || leaderEpoch > cur.LeaderEpoch:
		return kerr.NotController.Code, false
	case leaderEpoch < cur.LeaderEpoch:
		return kerr.FencedLeaderEpoch.Code, false
	case cur.Leader != brokerID:
		return kerr.NotLeaderForPartition.Code, false
	case slices.Equal(isr, cur.ISR):
		return 0, false
	case partitionEpoch < version:
		return kerr.InvalidUpdateVersion.Code, false
	}
	if !slices.Contains(isr, brokerID) {
		return kerr.InvalidRequest.Code, false
	}
	for i, r := range isr {
		if !slices.Contains(replicas, r) || slices.Index(isr, r) != i {
			return kerr.InvalidRequest.Code, false
		}
		if slices.Contains(cur.ISR, r) {
			continue
		}
		e, ok := liveEpoch(r)
		if !ok || (epochs[i] != -1 && epochs[i] != e) {
			return kerr.IneligibleReplica.Code, false
		}
	}
	return 0, true
}
