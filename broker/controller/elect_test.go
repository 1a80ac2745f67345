package controller

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

func liveSet(ids ...int32) func(int32) bool {
	return func(id int32) bool { return slices.Contains(ids, id) }
}

func TestOfflineElection(t *testing.T) {
	a := []int32{1, 2, 3}
	for _, tc := range []struct {
		name    string
		cur     LeaderAndISR
		live    []int32
		unclean bool
		want    ElectionResult
	}{
		{"first live ISR replica in assignment order", LeaderAndISR{1, 4, []int32{3, 1, 2}, nil}, []int32{2, 3}, false,
			ElectionResult{State: LeaderAndISR{2, 5, []int32{3, 2}, nil}, Changed: true}},
		{"out-of-sync live replica not chosen when clean only", LeaderAndISR{1, 4, []int32{1}, nil}, []int32{2, 3}, false,
			ElectionResult{State: LeaderAndISR{NoLeader, 5, []int32{1}, nil}, Changed: true}},
		{"unclean election picks first live replica alone", LeaderAndISR{1, 4, []int32{1}, nil}, []int32{3, 2}, true,
			ElectionResult{State: LeaderAndISR{2, 5, []int32{2}, nil}, Unclean: true, Changed: true}},
		{"already offline stays put", LeaderAndISR{NoLeader, 5, []int32{1}, nil}, []int32{2}, false,
			ElectionResult{State: LeaderAndISR{NoLeader, 5, []int32{1}, nil}}},
		{"last ISR member returns and leads cleanly", LeaderAndISR{NoLeader, 5, []int32{1}, nil}, []int32{1, 2}, false,
			ElectionResult{State: LeaderAndISR{1, 6, []int32{1}, nil}, Changed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OfflineElection(a, tc.cur, liveSet(tc.live...), tc.unclean)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPreferredElection(t *testing.T) {
	a := []int32{1, 2, 3}
	if r := PreferredElection(a, LeaderAndISR{2, 3, []int32{2, 1}, nil}, liveSet(1, 2)); !r.Changed || r.State.Leader != 1 || r.State.LeaderEpoch != 4 {
		t.Fatalf("preferred in ISR: %+v", r)
	}
	if r := PreferredElection(a, LeaderAndISR{2, 3, []int32{2}, nil}, liveSet(1, 2)); r.Changed {
		t.Fatalf("preferred out of ISR must be a no-op: %+v", r)
	}
	if r := PreferredElection(a, LeaderAndISR{2, 3, []int32{2, 1}, nil}, liveSet(2)); r.Changed {
		t.Fatalf("dead preferred must be a no-op: %+v", r)
	}
}

func TestControlledShutdownElection(t *testing.T) {
	a := []int32{1, 2, 3}
	down := func(id int32) bool { return id == 1 }
	r := ControlledShutdownElection(a, LeaderAndISR{1, 0, []int32{1, 2, 3}, nil}, liveSet(1, 2, 3), down)
	if !r.Changed || r.State.Leader != 2 || !slices.Equal(r.State.ISR, []int32{2, 3}) || r.State.LeaderEpoch != 1 {
		t.Fatalf("leader moves: %+v", r)
	}
	r = ControlledShutdownElection(a, LeaderAndISR{2, 0, []int32{2, 1}, nil}, liveSet(1, 2, 3), down)
	if !r.Changed || r.State.Leader != 2 || !slices.Equal(r.State.ISR, []int32{2}) {
		t.Fatalf("follower leaves ISR: %+v", r)
	}
	r = ControlledShutdownElection(a, LeaderAndISR{1, 0, []int32{1}, nil}, liveSet(1, 2, 3), down)
	if r.Changed {
		t.Fatalf("sole ISR leader keeps leading: %+v", r)
	}
}

func TestRemoveFromISRNeverEmpties(t *testing.T) {
	r := RemoveFromISR(LeaderAndISR{1, 2, []int32{1, 2, 3}, nil}, liveSet(1, 3))
	if !r.Changed || !slices.Equal(r.State.ISR, []int32{1, 3}) || r.State.LeaderEpoch != 3 {
		t.Fatalf("%+v", r)
	}
	if r := RemoveFromISR(LeaderAndISR{1, 2, []int32{2}, nil}, liveSet(1)); r.Changed {
		t.Fatalf("ISR emptied: %+v", r)
	}
}

func TestImbalancedBrokers(t *testing.T) {
	// Seed 000's walk-through: every leader on broker 2 after 3 then 1 died.
	assign := [][]int32{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}, {1, 3, 2}}
	leaders := []int32{2, 2, 2, 2}
	if got := ImbalancedBrokers(assign, leaders, 10); !slices.Equal(got, []int32{1, 3}) {
		t.Fatalf("imbalanced = %v, want [1 3]", got)
	}
	if got := ImbalancedBrokers(assign, []int32{1, 2, 3, 1}, 10); len(got) != 0 {
		t.Fatalf("balanced cluster flagged: %v", got)
	}
}

func TestAssignReplicas(t *testing.T) {
	brokers := []int32{3, 1, 2}
	a, err := AssignReplicas(brokers, 6, 3, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int{}
	for p := int32(0); p < 6; p++ {
		r := a[p]
		if len(r) != 3 || r[0] == r[1] || r[1] == r[2] || r[0] == r[2] {
			t.Fatalf("partition %d replicas %v not distinct", p, r)
		}
		leaders[r[0]]++
	}
	for _, b := range brokers {
		if leaders[b] != 2 {
			t.Fatalf("preferred leaders not spread evenly: %v", leaders)
		}
	}
	// The same seed gives the same assignment.
	b, _ := AssignReplicas(brokers, 6, 3, rand.New(rand.NewSource(1)))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("assignment not reproducible from the seed")
	}
	if _, err := AssignReplicas(brokers, 1, 4, rand.New(rand.NewSource(1))); err == nil {
		t.Fatal("rf > brokers accepted")
	}
}

// TestAssignmentFormula pins the placement rule: with start=0 and shift=0
// on brokers 0..4, partition p's first replica is p%5 and its second is
// the next broker (KAFKA-SPEC §10).
func TestAssignmentFormula(t *testing.T) {
	for p := 0; p < 5; p++ {
		first := p % 5
		if got := replicaIndex(first, 0, 1, 5); got != (first+1)%5 {
			t.Fatalf("p%d second replica index %d", p, got)
		}
		if got := replicaIndex(first, 0, 2, 5); got != (first+2)%5 {
			t.Fatalf("p%d third replica index %d", p, got)
		}
	}
}

func TestNextELR(t *testing.T) {
	cur := LeaderAndISR{Leader: 1, ISR: []int32{1, 2, 3}, ELR: []int32{4}}
	for _, tc := range []struct {
		name    string
		isr     []int32
		minISR  int
		unclean []int32
		want    []int32
	}{
		{"ISR at min ISR: no ELR", []int32{1, 2}, 2, nil, nil},
		{"min ISR 1 never keeps an ELR", []int32{1}, 1, nil, nil},
		{"below min ISR: former ELR, then the ISR members that left", []int32{1}, 2, nil, []int32{4, 2, 3}},
		{"empty ISR: everyone", nil, 2, nil, []int32{4, 1, 2, 3}},
		{"unclean shutdowns are not eligible", []int32{1}, 3, []int32{3, 4}, []int32{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NextELR(cur, tc.isr, tc.minISR, func(r int32) bool { return slices.Contains(tc.unclean, r) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("NextELR(%v -> %v, min %d) = %v, want %v", cur.ISR, tc.isr, tc.minISR, got, tc.want)
			}
		})
	}
}

func TestOfflineElectionELR(t *testing.T) {
	a := []int32{1, 2, 3}
	// The ISR is the dead leader alone; both followers are eligible.
	cur := LeaderAndISR{Leader: 1, LeaderEpoch: 4, ISR: []int32{1}, ELR: []int32{3, 2}}
	r := OfflineElectionELR(a, cur, liveSet(2, 3), false, 2)
	want := LeaderAndISR{Leader: 2, LeaderEpoch: 5, ISR: []int32{2}, ELR: []int32{3, 1}}
	if !r.Changed || r.Unclean || !reflect.DeepEqual(r.State, want) {
		t.Errorf("from the ELR: %+v, want %+v", r, want)
	}
	// Without eligible replicas an unclean election empties the ELR.
	cur = LeaderAndISR{Leader: 1, LeaderEpoch: 4, ISR: []int32{1}, ELR: []int32{2}}
	r = OfflineElectionELR(a, cur, liveSet(3), true, 2)
	if want := (LeaderAndISR{Leader: 3, LeaderEpoch: 5, ISR: []int32{3}}); !r.Unclean || !reflect.DeepEqual(r.State, want) {
		t.Errorf("unclean: %+v, want %+v", r, want)
	}
	// Nobody to elect, unclean off: offline, ISR and ELR kept.
	r = OfflineElectionELR(a, cur, liveSet(3), false, 2)
	if want := (LeaderAndISR{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1}, ELR: []int32{2}}); !reflect.DeepEqual(r.State, want) {
		t.Errorf("offline: %+v, want %+v", r, want)
	}
	// Already offline with nothing new: no change.
	off := LeaderAndISR{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1}, ELR: []int32{2}}
	if r := OfflineElectionELR(a, off, liveSet(3), false, 2); r.Changed {
		t.Errorf("an offline partition with nobody eligible changed: %+v", r)
	}
	// WithoutUncleanShutdown leaves leadership and ISR.
	r = WithoutUncleanShutdown(LeaderAndISR{Leader: 2, LeaderEpoch: 5, ISR: []int32{2}, ELR: []int32{3, 1}}, func(id int32) bool { return id == 1 })
	if want := (LeaderAndISR{Leader: 2, LeaderEpoch: 5, ISR: []int32{2}, ELR: []int32{3}}); !r.Changed || !reflect.DeepEqual(r.State, want) {
		t.Errorf("unclean shutdown: %+v, want %+v", r, want)
	}
}
