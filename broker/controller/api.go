package controller

import (
	"context"
	"errors"
	"maps"
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
			decide = uncleanDecision(t.live, t.up, t.elr(), t.epoch)
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
		remaining, err := t.controlledShutdown(ctx, id)
		for _, tp := range remaining {
			r := kmsg.NewControlledShutdownResponsePartitionsRemaining()
			r.Topic, r.Partition = tp.Topic, tp.Partition
			resp.PartitionsRemaining = append(resp.PartitionsRemaining, r)
		}
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

// controlledShutdown moves broker id's leaderships away and takes it out
// of its partitions' ISRs (§4.5), and returns the partitions it still
// leads. Its follower replicas are stopped.
func (t *term) controlledShutdown(ctx context.Context, id int32) ([]coord.TopicPartition, error) {
	if !t.shuttingDown[id] {
		t.log.Info("controlled shutdown", "broker", id)
	}
	t.shuttingDown[id] = true
	var hosted []coord.TopicPartition
	for _, tp := range t.allTPs() {
		if slices.Contains(t.parts[tp].replicas, id) {
			hosted = append(hosted, tp)
		}
	}
	shutting := func(r int32) bool { return t.shuttingDown[r] }
	chs, err := t.apply(ctx, hosted, shutdownDecision(t.live, shutting, t.elr(), t.epoch))
	t.announce(chs)
	var remaining, followers []coord.TopicPartition
	for _, tp := range hosted {
		p := t.parts[tp]
		if p.hasState && p.state.Leader == id {
			remaining = append(remaining, tp)
		} else if len(p.replicas) > 1 {
			followers = append(followers, tp)
		}
	}
	t.sendStopReplica(id, followers, false, nil)
	return remaining, err
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
		// Validate every entry first, then write the accepted changes
		// together (pipelined Txns instead of one round trip each: a
		// broker rejoining thousands of ISRs sends them in one request).
		type slot struct{ topic, part int }
		var writes []isrWrite
		var current []isrWrite // accepted without a write: answered with the current state
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
				at := slot{len(resp.Topics), len(out.Partitions)}
				p, exists := t.parts[tp]
				switch {
				case !known:
					pr.ErrorCode = kerr.UnknownTopicID.Code
				case !exists || !p.hasState:
					pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				default:
					isr, epochs := requestedISR(rp)
					code, write := ValidateAlterPartition(req.BrokerID, p.replicas, p.state, rp.LeaderEpoch, rp.PartitionEpoch, isr, epochs, t.liveEpoch)
					pr.ErrorCode = code
					switch {
					case code == 0 && write:
						writes = append(writes, isrWrite{tp: tp, isr: isr, expected: p.state.Version, topic: at.topic, part: at.part})
					case code == 0:
						current = append(current, isrWrite{tp: tp, topic: at.topic, part: at.part})
					}
				}
				out.Partitions = append(out.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, out)
		}
		changed, fatal := t.writeISRs(ctx, writes)
		// A leader in controlled shutdown has its change applied, then
		// loses the leadership.
		if t.shuttingDown[req.BrokerID] && len(changed) > 0 && fatal == nil {
			shutting := func(r int32) bool { return t.shuttingDown[r] }
			chs, err := t.apply(ctx, changed, shutdownDecision(t.live, shutting, t.elr(), t.epoch))
			t.announce(chs)
			fatal = err
		}
		for _, w := range writes {
			pr := &resp.Topics[w.topic].Partitions[w.part]
			pr.ErrorCode = w.code
			if w.code == 0 && fatal == nil && t.shuttingDown[req.BrokerID] && t.parts[w.tp].state.Leader != req.BrokerID {
				pr.ErrorCode = kerr.NewLeaderElected.Code
			}
		}
		for _, w := range append(writes, current...) {
			pr := &resp.Topics[w.topic].Partitions[w.part]
			if pr.ErrorCode == 0 {
				st := t.parts[w.tp].state
				pr.LeaderID = st.Leader
				pr.LeaderEpoch = st.LeaderEpoch
				pr.ISR = nonNil(st.ISR)
				pr.PartitionEpoch = int32(st.Version)
			}
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

// isrWrite is one accepted ISR change of an AlterPartition request and
// where its answer goes.
type isrWrite struct {
	tp          coord.TopicPartition
	isr         []int32
	expected    int64 // the partition epoch (state version) the leader had
	topic, part int   // response indexes
	code        int16 // the answer once written
}

// writeISRs writes accepted ISR changes with compare-and-swap, all in one
// SetPartitionStates call. A Txn that failed on another partition's
// mismatch is tried again for the partitions whose versions did not
// change; a changed version is INVALID_UPDATE_VERSION (the cache then
// holds the state read). It returns the partitions written, in topic and
// partition order, and the error that ends the term's work (not a
// mismatch).
func (t *term) writeISRs(ctx context.Context, writes []isrWrite) ([]coord.TopicPartition, error) {
	var changed []coord.TopicPartition
	pending := make([]int, len(writes))
	for i := range writes {
		pending[i] = i
	}
	elr := t.elr()
	for round := 0; len(pending) > 0; round++ {
		ups := make([]coord.PartitionStateUpdate, len(pending))
		for j, i := range pending {
			w := writes[i]
			next := t.parts[w.tp].state
			next.ISR, next.ELR = w.isr, nil
			if elr.on {
				next.ELR = NextELR(toLAI(t.parts[w.tp].state), w.isr, elr.minISR(w.tp.Topic), nil)
			}
			next.ControllerEpoch = t.epoch
			ups[j] = coord.PartitionStateUpdate{Topic: w.tp.Topic, Partition: w.tp.Partition, State: next, ExpectedVersion: w.expected}
		}
		vs, err := t.c.cfg.Coord.SetPartitionStates(ctx, t.l, ups)
		var failed []int
		for j, i := range pending {
			if vs[j] == 0 {
				failed = append(failed, i)
				continue
			}
			w := &writes[i]
			p := t.parts[w.tp]
			p.state = ups[j].State
			p.state.Version = vs[j]
			changed = append(changed, w.tp)
			t.log.Info("ISR altered", "topic", w.tp.Topic, "partition", w.tp.Partition, "isr", w.isr, "elr", p.state.ELR, "version", vs[j])
		}
		pending = nil
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrVersionMismatch) {
			for _, i := range failed {
				writes[i].code = errCode(err)
			}
			sortTPs(changed)
			return changed, err
		}
		byTopic := map[string][]int32{}
		for _, i := range failed {
			byTopic[writes[i].tp.Topic] = append(byTopic[writes[i].tp.Topic], writes[i].tp.Partition)
		}
		names := slices.Sorted(maps.Keys(byTopic))
		fresh, rerr := t.c.cfg.Coord.PartitionStatesOf(ctx, names)
		for _, i := range failed {
			w := &writes[i]
			w.code = kerr.InvalidUpdateVersion.Code
			if rerr != nil {
				continue
			}
			if st, ok := fresh[w.tp.Topic][w.tp.Partition]; ok {
				t.parts[w.tp].state = st
				if st.Version == w.expected && round < 2 {
					pending = append(pending, i) // failed with another partition's Txn
				}
			}
		}
	}
	sortTPs(changed)
	return changed, nil
}

// topicName resolves a topic ID; the zero ID never resolves.
func (t *term) topicName(id [16]byte) (string, bool) {
	if id == ([16]byte{}) {
		return "", false
	}
	name, ok := t.topicIDs[id]
	if !ok || t.topics[name].ID != id {
		return "", false
	}
	return name, true
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
