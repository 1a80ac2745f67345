package controller

import "slices"

// LeaderAndISR is a partition's leadership as stored on the coordinator.
type LeaderAndISR struct {
	Leader      int32
	LeaderEpoch int32
	ISR         []int32
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
	return ElectionResult{State: LeaderAndISR{Leader: pref, LeaderEpoch: cur.LeaderEpoch + 1, ISR: slices.Clone(cur.ISR)}, Changed: true}
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
