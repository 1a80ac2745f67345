package controller

import "slices"

// LeaderAndISR is a partition's leadership as stored on the coordinator.
type LeaderAndISR struct {
	Leader      int32
	LeaderEpoch int32
	ISR         []int32
	// ELR are the eligible leader replicas (KIP-966), empty unless the
	// cluster keeps them.
	ELR []int32
}

// NoLeader marks an offline partition.
const NoLeader = -1

// ElectionResult says what an election decided.
type ElectionResult struct {
	State   LeaderAndISR
	Unclean bool // the new leader was not in the ISR
	Changed bool // false: nothing to write
}

// OfflineElection elects a leader for a partition whose leader is gone
// (KAFKA-SPEC §4.1): the first replica in assignment order that is live
// and in the ISR, with ISR = ISR ∩ live. If there is none and unclean
// election is allowed, the first live replica, alone in the ISR. If none at
// all, the partition goes offline with its ISR left as it was: the ISR is
// never emptied, so the last member can come back as a clean leader.
func OfflineElection(assignment []int32, cur LeaderAndISR, live func(int32) bool, uncleanAllowed bool) ElectionResult {
	newISR := make([]int32, 0, len(cur.ISR))
	for _, r := range cur.ISR {
		if live(r) {
			newISR = append(newISR, r)
		}
	}
	for _, r := range assignment {
		if live(r) && slices.Contains(newISR, r) {
			return ElectionResult{State: LeaderAndISR{Leader: r, LeaderEpoch: cur.LeaderEpoch + 1, ISR: newISR}, Changed: true}
		}
	}
	if uncleanAllowed {
		for _, r := range assignment {
			if live(r) {
				return ElectionResult{State: LeaderAndISR{Leader: r, LeaderEpoch: cur.LeaderEpoch + 1, ISR: []int32{r}}, Unclean: true, Changed: true}
			}
		}
	}
	if cur.Leader == NoLeader {
		return ElectionResult{State: cur}
	}
	return ElectionResult{State: LeaderAndISR{Leader: NoLeader, LeaderEpoch: cur.LeaderEpoch + 1, ISR: cur.ISR}, Changed: true}
}

// PreferredElection moves leadership to assignment[0] if it is live and in
// the ISR and not already leader (§4.3); otherwise nothing changes.
func PreferredElection(assignment []int32, cur LeaderAndISR, live func(int32) bool) ElectionResult {
	if len(assignment) == 0 {
		return ElectionResult{State: cur}
	}
	pref := assignment[0]
	if cur.Leader == pref || !live(pref) || !slices.Contains(cur.ISR, pref) {
		return ElectionResult{State: cur}
	}
	return ElectionResult{State: LeaderAndISR{Leader: pref, LeaderEpoch: cur.LeaderEpoch + 1, ISR: slices.Clone(cur.ISR), ELR: slices.Clone(cur.ELR)}, Changed: true}
}

// ControlledShutdownElection moves leadership off a broker that is
// shutting down to the first live ISR replica not shutting down, and
// removes the broker from the ISR (§4.5). A partition it leads with no
// other live ISR member keeps its leader (and the broker retries).
func ControlledShutdownElection(assignment []int32, cur LeaderAndISR, live func(int32) bool, shuttingDown func(int32) bool) ElectionResult {
	ok := func(r int32) bool { return live(r) && !shuttingDown(r) }
	newISR := make([]int32, 0, len(cur.ISR))
	for _, r := range cur.ISR {
		if !shuttingDown(r) {
			newISR = append(newISR, r)
		}
	}
	if !shuttingDown(cur.Leader) {
		if len(newISR) == len(cur.ISR) || len(newISR) == 0 {
			return ElectionResult{State: cur}
		}
		return ElectionResult{State: LeaderAndISR{Leader: cur.Leader, LeaderEpoch: cur.LeaderEpoch + 1, ISR: newISR}, Changed: true}
	}
	for _, r := range assignment {
		if ok(r) && slices.Contains(newISR, r) {
			return ElectionResult{State: LeaderAndISR{Leader: r, LeaderEpoch: cur.LeaderEpoch + 1, ISR: newISR}, Changed: true}
		}
	}
	return ElectionResult{State: cur}
}

// RemoveFromISR drops dead replicas from a live leader's ISR, as the
// controller does on broker death; the leader epoch is bumped (§1.7). The
// ISR is never emptied.
func RemoveFromISR(cur LeaderAndISR, live func(int32) bool) ElectionResult {
	newISR := make([]int32, 0, len(cur.ISR))
	for _, r := range cur.ISR {
		if live(r) {
			newISR = append(newISR, r)
		}
	}
	if len(newISR) == len(cur.ISR) || len(newISR) == 0 {
		return ElectionResult{State: cur}
	}
	return ElectionResult{State: LeaderAndISR{Leader: cur.Leader, LeaderEpoch: cur.LeaderEpoch + 1, ISR: newISR}, Changed: true}
}

// ImbalancedBrokers returns the brokers whose share of partitions led by
// someone other than their preferred replica exceeds percentage (§4.4).
// leaders maps each partition's assignment index to its current leader.
func ImbalancedBrokers(assignments [][]int32, leaders []int32, percentage int) []int32 {
	preferred := map[int32]int{}
	notLed := map[int32]int{}
	for i, a := range assignments {
		if len(a) == 0 {
			continue
		}
		preferred[a[0]]++
		if leaders[i] != a[0] {
			notLed[a[0]]++
		}
	}
	var out []int32
	for b, total := range preferred {
		if total > 0 && notLed[b]*100 > percentage*total {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// NextELR is a partition's eligible leader replicas once its ISR changes
// from cur.ISR to isr (KIP-966; Kafka's PartitionChangeBuilder
// .maybePopulateTargetElr): empty while isr has at least minISR members;
// below that, the former ELR and ISR members that are not in isr, less
// the replicas that shut down uncleanly. The order is assignment-free:
// former ELR members first, then former ISR members, each as listed.
func NextELR(cur LeaderAndISR, isr []int32, minISR int, uncleanShutdown func(int32) bool) []int32 {
	if len(isr) >= minISR {
		return nil
	}
	var out []int32
	for _, r := range slices.Concat(cur.ELR, cur.ISR) {
		if slices.Contains(isr, r) || slices.Contains(out, r) || (uncleanShutdown != nil && uncleanShutdown(r)) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// OfflineElectionELR is OfflineElection with eligible leader replicas
// (KIP-966; PartitionChangeBuilder.electAnyLeader and tryElection): the
// ISR loses its dead members and the ELR is updated (NextELR) first; the
// first live ISR replica in assignment order leads; with no live ISR
// member, the first live ELR replica in assignment order leads, alone in
// the ISR and out of the ELR; then, if allowed, an unclean election, which
// empties the ELR. With nobody to elect the partition goes offline with
// its ISR kept, the last leader standing for Kafka's last known leader
// (lastKnownElr), and its ELR as updated.
func OfflineElectionELR(assignment []int32, cur LeaderAndISR, live func(int32) bool, uncleanAllowed bool, minISR int) ElectionResult {
	newISR := make([]int32, 0, len(cur.ISR))
	for _, r := range cur.ISR {
		if live(r) {
			newISR = append(newISR, r)
		}
	}
	elr := NextELR(cur, newISR, minISR, nil)
	next := func(leader int32, isr, elr []int32) LeaderAndISR {
		return LeaderAndISR{Leader: leader, LeaderEpoch: cur.LeaderEpoch + 1, ISR: isr, ELR: elr}
	}
	for _, r := range assignment {
		if live(r) && slices.Contains(newISR, r) {
			return ElectionResult{State: next(r, newISR, elr), Changed: true}
		}
	}
	for _, r := range assignment {
		if live(r) && slices.Contains(elr, r) {
			rest := slices.DeleteFunc(slices.Clone(elr), func(e int32) bool { return e == r })
			return ElectionResult{State: next(r, []int32{r}, emptyToNil(rest)), Changed: true}
		}
	}
	if uncleanAllowed {
		for _, r := range assignment {
			if live(r) {
				return ElectionResult{State: next(r, []int32{r}, nil), Unclean: true, Changed: true}
			}
		}
	}
	elr = slices.DeleteFunc(elr, func(e int32) bool { return slices.Contains(cur.ISR, e) })
	if cur.Leader == NoLeader && slices.Equal(emptyToNil(elr), emptyToNil(cur.ELR)) {
		return ElectionResult{State: cur}
	}
	return ElectionResult{State: next(NoLeader, cur.ISR, emptyToNil(elr)), Changed: true}
}

// WithELR is r with the ELR that follows its ISR change from cur
// (NextELR); an unclean election empties it.
func WithELR(cur LeaderAndISR, r ElectionResult, minISR int) ElectionResult {
	if !r.Changed {
		return r
	}
	if r.Unclean {
		r.State.ELR = nil
		return r
	}
	r.State.ELR = NextELR(cur, r.State.ISR, minISR, nil)
	return r
}

// WithoutUncleanShutdown drops the replicas that restarted after an
// unclean shutdown from cur's ELR (KIP-966; Kafka's ReplicationControlManager
// .handleBrokerUncleanShutdown): they may lack what they acknowledged.
// Leadership and ISR are left; only the partition's version changes.
func WithoutUncleanShutdown(cur LeaderAndISR, unclean func(int32) bool) ElectionResult {
	elr := slices.DeleteFunc(slices.Clone(cur.ELR), unclean)
	if len(elr) == len(cur.ELR) {
		return ElectionResult{State: cur}
	}
	next := cur
	next.ELR = emptyToNil(elr)
	return ElectionResult{State: next, Changed: true}
}

func emptyToNil(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return s
}
