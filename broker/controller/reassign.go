package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// Partition reassignment (KIP-455), as Kafka's ZooKeeper-era controller
// does it (KafkaController.onPartitionReassignment). With RS the replica
// set, ORS the original replicas, TRS the target, AR = TRS - ORS the
// replicas added and RR = ORS - TRS the replicas removed:
//
//   - U: the topic's assignment on the coordinator becomes RS = TRS + ORS
//     with AR and RR, before anything else, so a new controller resumes
//     from there; replicas an earlier reassignment was adding that the new
//     one drops get StopReplica(delete).
//   - A (TRS not all in the ISR): the leader epoch is bumped and every
//     replica in RS gets LeaderAndIsr with the new replica set, which starts
//     the new replicas fetching; the leader adds them to the ISR once they
//     catch up.
//   - B (TRS within the ISR): the replica set becomes TRS; the leader moves
//     to the first live ISR member of TRS if it is leaving or down, the ISR
//     loses RR, the leader epoch is bumped (Kafka's B3 and B4 in one
//     write), TRS gets LeaderAndIsr, RR gets StopReplica(delete), and last
//     the topic's assignment becomes RS = TRS without AR and RR (the only
//     place ORS lived), then UpdateMetadata goes to every broker.
//
// Completion is checked after every ISR change the controller learns of
// (AlterPartition, ISR change notifications) and, as Kafka's partition
// state watch does, by reading the states of reassigning partitions on
// every ISR change propagation tick. On failover Run resumes every
// reassignment the coordinator records.

// reassignment is a partition's full replica assignment (Kafka's
// ReplicaAssignment).
type reassignment struct {
	replicas, adding, removing []int32
}

func (a reassignment) active() bool { return len(a.adding) > 0 || len(a.removing) > 0 }

// origin is ORS: the replicas the partition had before.
func (a reassignment) origin() []int32 { return diff(a.replicas, a.adding) }

// target is TRS: the replicas it will have.
func (a reassignment) target() []int32 { return diff(a.replicas, a.removing) }

// ReassignTo is Kafka's ReplicaAssignment.reassignTo: the full set lists
// the target first, then the original replicas not in it.
func reassignTo(cur reassignment, target []int32) reassignment {
	origin := cur.origin()
	full := slices.Clone(target)
	for _, r := range origin {
		if !slices.Contains(full, r) {
			full = append(full, r)
		}
	}
	return reassignment{replicas: full, adding: diff(full, origin), removing: diff(full, target)}
}

func (a reassignment) equal(b reassignment) bool {
	return slices.Equal(a.replicas, b.replicas) && slices.Equal(a.adding, b.adding) && slices.Equal(a.removing, b.removing)
}

// diff is a minus b, keeping a's order.
func diff(a, b []int32) []int32 {
	var out []int32
	for _, r := range a {
		if !slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

func (p *partition) assignment() reassignment {
	return reassignment{replicas: slices.Clone(p.replicas), adding: slices.Clone(p.adding), removing: slices.Clone(p.removing)}
}

func (p *partition) setAssignment(a reassignment) {
	p.replicas, p.adding, p.removing = slices.Clone(a.replicas), slices.Clone(a.adding), slices.Clone(a.removing)
}

// reassignmentComplete is Kafka's isReassignmentComplete: TRS is within
// the ISR.
func reassignmentComplete(p *partition) bool {
	a := p.assignment()
	if !a.active() {
		return true
	}
	if !p.hasState {
		return false
	}
	for _, r := range a.target() {
		if !slices.Contains(p.state.ISR, r) {
			return false
		}
	}
	return true
}

// ValidateReassignment checks a requested target replica list the way
// Kafka's controller does (validateReplicas): not empty, no duplicates, no
// negative ids, and every replica it adds is a live broker. It returns ""
// when the list is acceptable, else the reason for
// INVALID_REPLICA_ASSIGNMENT.
func ValidateReassignment(current, adding, target []int32, live func(int32) bool) string {
	switch {
	case len(target) == 0:
		return "Empty replica list specified in partition reassignment."
	case len(slices.Compact(slices.Sorted(slices.Values(target)))) != len(target):
		return fmt.Sprintf("Duplicate replica ids in partition reassignment replica list: %v", target)
	case slices.ContainsFunc(target, func(r int32) bool { return r < 0 }):
		return fmt.Sprintf("Invalid broker id in replica list: %v", target)
	}
	next := reassignTo(reassignment{replicas: current, adding: adding}, target)
	for _, r := range next.adding {
		if !live(r) {
			return fmt.Sprintf("Replica assignment has brokers that are not alive. Replica list: %v", next.adding)
		}
	}
	return ""
}

// AlterPartitionReassignments starts, changes or cancels (null replicas)
// reassignments (KIP-455). Per partition: INVALID_REPLICA_ASSIGNMENT for
// an unacceptable list, UNKNOWN_TOPIC_OR_PARTITION for an unknown
// partition or a topic being deleted, NO_REASSIGNMENT_IN_PROGRESS for a
// cancellation with nothing to cancel. A broker that is not the
// controller answers NOT_CONTROLLER.
func (c *Controller) AlterPartitionReassignments(ctx context.Context, req *kmsg.AlterPartitionAssignmentsRequest) *kmsg.AlterPartitionAssignmentsResponse {
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.SetVersion(req.GetVersion())
	type result struct {
		code int16
		msg  string
	}
	results := map[coord.TopicPartition]result{}
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		todo := map[coord.TopicPartition]reassignment{}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				tp := coord.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}
				p, ok := t.parts[tp]
				if !ok || t.topics[tp.Topic].MarkedForDeletion {
					results[tp] = result{kerr.UnknownTopicOrPartition.Code, "The partition does not exist."}
					continue
				}
				cur := p.assignment()
				if rp.Replicas == nil {
					if !cur.active() {
						results[tp] = result{kerr.NoReassignmentInProgress.Code, "No reassignment is in progress for this partition."}
						continue
					}
					todo[tp] = reassignTo(cur, cur.origin())
					continue
				}
				if why := ValidateReassignment(cur.replicas, cur.adding, rp.Replicas, t.live); why != "" {
					results[tp] = result{kerr.InvalidReplicaAssignment.Code, why}
					continue
				}
				todo[tp] = reassignTo(cur, rp.Replicas)
			}
		}
		var fatal error
		for _, tp := range sortedKeys(todo) {
			if fatal != nil {
				results[tp] = result{errCode(fatal), fatal.Error()}
				continue
			}
			if err := t.reassign(ctx, tp, todo[tp]); err != nil {
				t.log.Warn("partition reassignment failed", "topic", tp.Topic, "partition", tp.Partition, "err", err)
				results[tp] = result{errCode(err), err.Error()}
				fatal = err
				continue
			}
			results[tp] = result{}
		}
		return fatal
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
		return resp
	}
	for _, rt := range req.Topics {
		out := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		out.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			r := results[coord.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}]
			op := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			op.Partition, op.ErrorCode = rp.Partition, r.code
			if r.code != 0 {
				op.ErrorMessage = strp(r.msg)
			}
			out.Partitions = append(out.Partitions, op)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// ListPartitionReassignments lists the reassignments in progress, of the
// named partitions or (null topics) all of them.
func (c *Controller) ListPartitionReassignments(ctx context.Context, req *kmsg.ListPartitionReassignmentsRequest) *kmsg.ListPartitionReassignmentsResponse {
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	resp.SetVersion(req.GetVersion())
	ok := c.submit(ctx, func(ctx context.Context, t *term) error {
		var tps []coord.TopicPartition
		if req.Topics == nil {
			tps = t.reassigning()
		} else {
			for _, rt := range req.Topics {
				for _, p := range rt.Partitions {
					tps = append(tps, coord.TopicPartition{Topic: rt.Topic, Partition: p})
				}
			}
		}
		for _, tp := range tps {
			p, ok := t.parts[tp]
			if !ok || !p.assignment().active() {
				continue
			}
			if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != tp.Topic {
				rt := kmsg.NewListPartitionReassignmentsResponseTopic()
				rt.Topic = tp.Topic
				resp.Topics = append(resp.Topics, rt)
			}
			rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			rp.Partition = tp.Partition
			rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas = nonNil(p.replicas), nonNil(p.adding), nonNil(p.removing)
			last := &resp.Topics[len(resp.Topics)-1]
			last.Partitions = append(last.Partitions, rp)
		}
		return nil
	})
	if !ok {
		resp.ErrorCode = kerr.NotController.Code
		resp.Topics = nil
	}
	return resp
}

func sortedKeys(m map[coord.TopicPartition]reassignment) []coord.TopicPartition {
	tps := slices.Collect(maps.Keys(m))
	sortTPs(tps)
	return tps
}

// reassigning lists the partitions with a reassignment in progress.
func (t *term) reassigning() []coord.TopicPartition {
	var out []coord.TopicPartition
	for _, tp := range t.allTPs() {
		if t.parts[tp].assignment().active() {
			out = append(out, tp)
		}
	}
	return out
}

// reassign is onPartitionReassignment for one partition (see the top of
// this file).
func (t *term) reassign(ctx context.Context, tp coord.TopicPartition, next reassignment) error {
	p := t.parts[tp]
	cur := p.assignment()
	if !cur.equal(next) {
		// U1, U2: coordinator first, then memory.
		p.setAssignment(next)
		if err := t.writeAssignment(ctx, tp.Topic); err != nil {
			p.setAssignment(cur)
			return err
		}
		t.log.Info("partition reassignment", "topic", tp.Topic, "partition", tp.Partition,
			"replicas", next.replicas, "adding", next.adding, "removing", next.removing)
		// U3: replicas an earlier reassignment was adding and this one drops.
		t.stopReplicas(tp, diff(cur.replicas, next.replicas))
	}
	if !p.hasState {
		return nil // the partition gets its state (and replicas) when one is live
	}
	// A target that only reorders the replicas (nothing to add or remove)
	// is complete at once, and still goes through phase B: the new order
	// reaches the replicas and the metadata with a leader epoch bump.
	if next.active() && !reassignmentComplete(p) {
		// A1, A2: bump the leader epoch and send RS (new replicas included).
		_, err := t.bumpAndAnnounce(ctx, tp, keepLeader)
		return err
	}
	return t.completeReassignment(ctx, tp)
}

// completeReassignment is phase B.
func (t *term) completeReassignment(ctx context.Context, tp coord.TopicPartition) error {
	p := t.parts[tp]
	full := p.assignment()
	target := full.target()
	// B3 and B4 in one state: the leader moves if it leaves or is down
	// (Kafka's ReassignPartitionLeaderElectionStrategy), RR leaves the ISR.
	decide := func(cur coord.PartitionState) (coord.PartitionState, bool) {
		leader := cur.Leader
		if !slices.Contains(target, leader) || !t.live(leader) {
			i := slices.IndexFunc(target, func(r int32) bool { return t.live(r) && slices.Contains(cur.ISR, r) })
			if i < 0 {
				return cur, false
			}
			leader = target[i]
		}
		next := cur
		next.Leader, next.ISR, next.ELR = leader, intersectKeep(cur.ISR, target), intersectKeep(cur.ELR, target)
		return next, true
	}
	// B2: RS = TRS in memory, so LeaderAndIsr carries the target set.
	p.setAssignment(reassignment{replicas: target})
	done, err := t.bumpAndAnnounce(ctx, tp, decide)
	if err != nil || !done {
		p.setAssignment(full)
		if err == nil {
			t.log.Info("reassignment waits for a live target replica in the ISR", "topic", tp.Topic, "partition", tp.Partition, "target", target, "isr", p.state.ISR)
		}
		return err
	}
	// B4, B5: the removed replicas stop and delete their data.
	t.stopReplicas(tp, full.removing)
	// B6: the coordinator forgets ORS last.
	if err := t.writeAssignment(ctx, tp.Topic); err != nil {
		p.setAssignment(full)
		return err
	}
	t.log.Info("partition reassignment completed", "topic", tp.Topic, "partition", tp.Partition,
		"replicas", target, "leader", p.state.Leader, "isr", p.state.ISR)
	t.sendUpdateMetadata([]coord.TopicPartition{tp}, nil)
	return nil
}

// keepLeader is phase A's state change: only the leader epoch moves.
func keepLeader(cur coord.PartitionState) (coord.PartitionState, bool) { return cur, true }

// bumpAndAnnounce writes the state decide makes of the current one at the
// next leader epoch (re-reading it when a leader changed its ISR
// meanwhile) and sends it to the replicas and to every broker. done is
// false when decide found no acceptable state.
func (t *term) bumpAndAnnounce(ctx context.Context, tp coord.TopicPartition, decide func(coord.PartitionState) (coord.PartitionState, bool)) (done bool, err error) {
	p := t.parts[tp]
	for round := 0; ; round++ {
		next, ok := decide(p.state)
		if !ok {
			return false, nil
		}
		next.LeaderEpoch, next.ControllerEpoch = p.state.LeaderEpoch+1, t.epoch
		vs, err := t.c.cfg.Coord.SetPartitionStates(ctx, t.l, []coord.PartitionStateUpdate{
			{Topic: tp.Topic, Partition: tp.Partition, State: next, ExpectedVersion: p.state.Version},
		})
		if err == nil {
			next.Version = vs[0]
			p.state = next
			break
		}
		if !errors.Is(err, coord.ErrVersionMismatch) || round >= 2 {
			return false, err
		}
		st, rerr := t.c.cfg.Coord.PartitionState(ctx, tp.Topic, tp.Partition)
		if rerr != nil {
			return false, rerr
		}
		p.state = st
	}
	t.log.Info("partition state changed", "topic", tp.Topic, "partition", tp.Partition,
		"leader", p.state.Leader, "leader_epoch", p.state.LeaderEpoch, "isr", p.state.ISR, "version", p.state.Version)
	t.sendLeaderAndISR([]coord.TopicPartition{tp}, nil, nil)
	t.sendUpdateMetadata([]coord.TopicPartition{tp}, nil)
	return true, nil
}

func intersectKeep(a, keep []int32) []int32 {
	var out []int32
	for _, r := range a {
		if slices.Contains(keep, r) {
			out = append(out, r)
		}
	}
	return out
}

// stopReplicas sends StopReplica(delete) to the live brokers among ids.
func (t *term) stopReplicas(tp coord.TopicPartition, ids []int32) {
	for _, id := range ids {
		t.sendStopReplica(id, []coord.TopicPartition{tp}, true, nil)
	}
}

// writeAssignment writes a topic's cached assignment (with any adding and
// removing replicas) to the coordinator, fenced on the leadership and
// checked against the version last seen, so a partition added meanwhile
// (CreatePartitions) is never dropped: on a version change the topic is
// re-read, its other partitions refreshed, and the write tried again.
func (t *term) writeAssignment(ctx context.Context, topic string) error {
	for round := 0; ; round++ {
		spec := t.topics[topic]
		spec.Assignment, spec.Adding, spec.Removing = map[int32][]int32{}, map[int32][]int32{}, map[int32][]int32{}
		for tp, p := range t.parts {
			if tp.Topic != topic {
				continue
			}
			spec.Assignment[tp.Partition] = slices.Clone(p.replicas)
			if len(p.adding) > 0 {
				spec.Adding[tp.Partition] = slices.Clone(p.adding)
			}
			if len(p.removing) > 0 {
				spec.Removing[tp.Partition] = slices.Clone(p.removing)
			}
		}
		v, err := t.c.cfg.Coord.SetTopicAssignment(ctx, t.l, spec, spec.Version)
		if err == nil {
			spec.Version = v
			t.topics[topic] = spec
			return nil
		}
		if !errors.Is(err, coord.ErrTopicChanged) || round >= 2 {
			return err
		}
		fresh, rerr := t.c.cfg.Coord.Topic(ctx, topic)
		if rerr != nil {
			return rerr
		}
		// Keep this controller's view of partitions it is changing; take
		// partitions it does not know from the coordinator.
		for p, rs := range fresh.Assignment {
			tp := coord.TopicPartition{Topic: topic, Partition: p}
			if _, ok := t.parts[tp]; !ok {
				t.parts[tp] = &partition{tp: tp, replicas: slices.Clone(rs)}
			}
		}
		spec.Version = fresh.Version
		spec.Configs = fresh.Configs
		t.topics[topic] = spec
	}
}

// pollReassignments re-reads the states of reassigning partitions and
// completes those whose target replicas all joined the ISR.
func (t *term) pollReassignments(ctx context.Context) error {
	tps := t.reassigning()
	for _, tp := range tps {
		st, err := t.c.cfg.Coord.PartitionState(ctx, tp.Topic, tp.Partition)
		if errors.Is(err, coord.ErrPartitionNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		p := t.parts[tp]
		p.state, p.hasState = st, true
	}
	return t.maybeCompleteReassignments(ctx, tps)
}

// maybeCompleteReassignments runs phase B for those of tps that are being
// reassigned and whose target is within the ISR.
func (t *term) maybeCompleteReassignments(ctx context.Context, tps []coord.TopicPartition) error {
	for _, tp := range tps {
		p, ok := t.parts[tp]
		if !ok || !p.assignment().active() || !p.hasState || !reassignmentComplete(p) {
			continue
		}
		t.log.Info("target replicas caught up with the leader", "topic", tp.Topic, "partition", tp.Partition, "target", p.assignment().target())
		if err := t.completeReassignment(ctx, tp); err != nil {
			return err
		}
	}
	return nil
}

// resumeReassignments restarts every reassignment the coordinator records
// (on failover and after a resync), as Kafka's initializePartitionReassignments.
func (t *term) resumeReassignments(ctx context.Context) error {
	for _, tp := range t.reassigning() {
		p := t.parts[tp]
		t.log.Info("resuming partition reassignment", "topic", tp.Topic, "partition", tp.Partition,
			"replicas", p.replicas, "adding", p.adding, "removing", p.removing)
		if err := t.reassign(ctx, tp, p.assignment()); err != nil {
			return err
		}
	}
	return nil
}
