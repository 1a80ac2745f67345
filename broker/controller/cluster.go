package controller

import (
	"slices"

	"github.com/isrlab/isrlab/broker/coord"
)

// partition is the controller's cached view of one partition.
type partition struct {
	tp       coord.TopicPartition
	replicas []int32 // the full replica set (RS), with adding ones during a reassignment
	adding   []int32 // AR of a reassignment in progress
	removing []int32 // RR of a reassignment in progress
	state    coord.PartitionState
	hasState bool // false until the partition state exists on the coordinator
}

// stateChange is one partition state transition decided by the controller.
// Old.Version is the expected version of the compare-and-swap (0 for a
// partition that has no state yet); after a successful write New.Version
// holds the new version.
type stateChange struct {
	TP       coord.TopicPartition
	Replicas []int32
	Old      coord.PartitionState
	New      coord.PartitionState
	IsNew    bool // the partition state was created by this change
	Unclean  bool // the new leader was not in the ISR (§4.1)
}

// decision computes a partition's next state, or false for no change.
type decision func(p *partition) (stateChange, bool)

// plan applies decide to every partition and returns the changes, in the
// order of parts.
func plan(parts []*partition, decide decision) []stateChange {
	var out []stateChange
	for _, p := range parts {
		if ch, ok := decide(p); ok {
			out = append(out, ch)
		}
	}
	return out
}

func toLAI(s coord.PartitionState) LeaderAndISR {
	return LeaderAndISR{Leader: s.Leader, LeaderEpoch: s.LeaderEpoch, ISR: slices.Clone(s.ISR), ELR: slices.Clone(s.ELR)}
}

func change(p *partition, r ElectionResult, ctrlEpoch int64) stateChange {
	return stateChange{
		TP: p.tp, Replicas: p.replicas, Old: p.state, Unclean: r.Unclean,
		New: coord.PartitionState{ControllerEpoch: ctrlEpoch, Leader: r.State.Leader, LeaderEpoch: r.State.LeaderEpoch, ISR: r.State.ISR, ELR: r.State.ELR},
	}
}

// elrPolicy is how decisions keep eligible leader replicas (KIP-966):
// off (the zero value: every ELR is empty), or on, with each topic's
// min.insync.replicas.
type elrPolicy struct {
	on     bool
	minISR func(topic string) int
}

// offline is the election for a partition whose leader is gone.
func (e elrPolicy) offline(p *partition, cur LeaderAndISR, live func(int32) bool, unclean bool) ElectionResult {
	if !e.on {
		return OfflineElection(p.replicas, cur, live, unclean)
	}
	return OfflineElectionELR(p.replicas, cur, live, unclean, e.minISR(p.tp.Topic))
}

// keep gives r, an election or ISR change that leaves the leader to the
// ISR, the ELR that follows (none when off).
func (e elrPolicy) keep(p *partition, cur LeaderAndISR, r ElectionResult) ElectionResult {
	if !e.on {
		return r
	}
	return WithELR(cur, r, e.minISR(p.tp.Topic))
}

// InitialState is a new partition's first state: the first live replica in
// assignment order leads, the live replicas in assignment order form the
// ISR, leader epoch 0. ok is false when no replica is live: the partition
// then stays without state until one is (Kafka's NewPartition state).
func InitialState(replicas []int32, live func(int32) bool, ctrlEpoch int64) (coord.PartitionState, bool) {
	var isr []int32
	for _, r := range replicas {
		if live(r) {
			isr = append(isr, r)
		}
	}
	if len(isr) == 0 {
		return coord.PartitionState{}, false
	}
	return coord.PartitionState{ControllerEpoch: ctrlEpoch, Leader: isr[0], LeaderEpoch: 0, ISR: isr}, true
}

// livenessDecision brings a partition in line with the brokers: a
// partition without state is initialized, a partition whose leader is down
// gets an offline election (§4.1), a running leader's ISR loses its down
// members (§1.7, epoch bump). up reports registered brokers; live, the ones
// that may be elected (up and not in controlled shutdown). A leader that is
// up but shutting down keeps its partitions until its session ends, as in
// Kafka, where only a dead replica's removal writes leader -1.
func livenessDecision(live, up func(int32) bool, unclean func(topic string) bool, elr elrPolicy, ctrlEpoch int64) decision {
	return func(p *partition) (stateChange, bool) {
		if !p.hasState {
			st, ok := InitialState(p.replicas, live, ctrlEpoch)
			if !ok {
				return stateChange{}, false
			}
			return stateChange{TP: p.tp, Replicas: p.replicas, New: st, IsNew: true}, true
		}
		cur := toLAI(p.state)
		var r ElectionResult
		if cur.Leader == NoLeader || !up(cur.Leader) {
			r = elr.offline(p, cur, live, unclean(p.tp.Topic))
		} else {
			r = elr.keep(p, cur, RemoveFromISR(cur, up))
		}
		if !r.Changed {
			return stateChange{}, false
		}
		return change(p, r, ctrlEpoch), true
	}
}

// preferredDecision moves leadership to the preferred replica (§4.3).
func preferredDecision(live func(int32) bool, ctrlEpoch int64) decision {
	return func(p *partition) (stateChange, bool) {
		if !p.hasState {
			return stateChange{}, false
		}
		r := PreferredElection(p.replicas, toLAI(p.state), live)
		if !r.Changed {
			return stateChange{}, false
		}
		return change(p, r, ctrlEpoch), true
	}
}

// uncleanDecision is ElectLeaders(UNCLEAN): an offline partition gets a
// leader even from outside the ISR; a partition whose leader is up is left.
func uncleanDecision(live, up func(int32) bool, elr elrPolicy, ctrlEpoch int64) decision {
	return func(p *partition) (stateChange, bool) {
		if !p.hasState || (p.state.Leader != NoLeader && up(p.state.Leader)) {
			return stateChange{}, false
		}
		r := elr.offline(p, toLAI(p.state), live, true)
		if !r.Changed || r.State.Leader == NoLeader {
			return stateChange{}, false
		}
		return change(p, r, ctrlEpoch), true
	}
}

// shutdownDecision moves leadership and ISR membership off brokers in
// controlled shutdown (§4.5). Partitions with one replica are left alone,
// as Kafka does.
func shutdownDecision(live, shuttingDown func(int32) bool, elr elrPolicy, ctrlEpoch int64) decision {
	return func(p *partition) (stateChange, bool) {
		if !p.hasState || len(p.replicas) < 2 {
			return stateChange{}, false
		}
		cur := toLAI(p.state)
		r := elr.keep(p, cur, ControlledShutdownElection(p.replicas, cur, live, shuttingDown))
		if !r.Changed {
			return stateChange{}, false
		}
		return change(p, r, ctrlEpoch), true
	}
}

// uncleanShutdownDecision drops brokers that restarted after an unclean
// shutdown from every ELR (KIP-966).
func uncleanShutdownDecision(unclean func(int32) bool, ctrlEpoch int64) decision {
	return func(p *partition) (stateChange, bool) {
		if !p.hasState || len(p.state.ELR) == 0 {
			return stateChange{}, false
		}
		r := WithoutUncleanShutdown(toLAI(p.state), unclean)
		if !r.Changed {
			return stateChange{}, false
		}
		return change(p, r, ctrlEpoch), true
	}
}

// brokerDiff compares two broker snapshots (id -> epoch). A broker whose
// epoch changed was bounced: it appears in both dead and started, so its
// leaderships move before it is treated as new (KAFKA-7235).
func brokerDiff(prev, cur map[int32]int64) (dead, started []int32) {
	for id, e := range prev {
		if ce, ok := cur[id]; !ok || ce != e {
			dead = append(dead, id)
		}
	}
	for id, e := range cur {
		if pe, ok := prev[id]; !ok || pe != e {
			started = append(started, id)
		}
	}
	slices.Sort(dead)
	slices.Sort(started)
	return dead, started
}

// imbalancedPartitions returns the partitions to run preferred elections
// on during an auto rebalance (§4.4): those whose preferred replica belongs
// to a broker over the imbalance percentage and does not lead.
func imbalancedPartitions(parts []*partition, percentage int) []coord.TopicPartition {
	var assignments [][]int32
	var leaders []int32
	for _, p := range parts {
		if !p.hasState {
			continue
		}
		assignments = append(assignments, p.replicas)
		leaders = append(leaders, p.state.Leader)
	}
	bad := ImbalancedBrokers(assignments, leaders, percentage)
	var out []coord.TopicPartition
	for _, p := range parts {
		if p.hasState && len(p.replicas) > 0 && slices.Contains(bad, p.replicas[0]) && p.state.Leader != p.replicas[0] {
			out = append(out, p.tp)
		}
	}
	return out
}

// offline reports whether a partition's leader is missing or down
// (OfflinePartitionsCount).
func offline(p *partition, up func(int32) bool) bool {
	return p.hasState && (p.state.Leader == NoLeader || !up(p.state.Leader))
}

func sortTPs(tps []coord.TopicPartition) {
	slices.SortFunc(tps, func(a, b coord.TopicPartition) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
}
