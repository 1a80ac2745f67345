package coord

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestPartitionStateCAS(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)

	const parts = 300 // more than two Txns' worth
	assign := map[int32][]int32{}
	initial := map[int32]PartitionState{}
	for p := range int32(parts) {
		assign[p] = []int32{1, 2, 3}
		initial[p] = PartitionState{ControllerEpoch: l.Epoch(), Leader: 1, LeaderEpoch: 0, ISR: []int32{1, 2, 3}}
	}
	if err := c.CreateTopic(ctx, l, TopicSpec{Name: "big", Assignment: assign}, initial); err != nil {
		t.Fatal(err)
	}
	states, err := c.PartitionStates(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != parts {
		t.Fatalf("%d partition states, want %d", len(states), parts)
	}
	st0 := states[0]
	if !reflect.DeepEqual(st0.ISR, []int32{1, 2, 3}) || st0.Version == 0 {
		t.Fatalf("state 0: %+v", st0)
	}

	// The leader's own ISR shrink (no leadership) with the right version.
	shrunk := PartitionState{ControllerEpoch: l.Epoch(), Leader: 1, ISR: []int32{1, 2}}
	vs, err := c.SetPartitionStates(ctx, nil, []PartitionStateUpdate{{Topic: "big", Partition: 0, State: shrunk, ExpectedVersion: st0.Version}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.PartitionState(ctx, "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != vs[0] || got.Version <= st0.Version || !reflect.DeepEqual(got.ISR, []int32{1, 2}) {
		t.Fatalf("after shrink: %+v, returned version %d", got, vs[0])
	}

	// A stale version fails and names the partition; nothing changes.
	_, err = c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "big", Partition: 0, State: initial[0], ExpectedVersion: st0.Version}})
	var vm *VersionMismatchError
	if !errors.Is(err, ErrVersionMismatch) || !errors.As(err, &vm) {
		t.Fatalf("stale write: %v, want ErrVersionMismatch", err)
	}
	if want := (VersionMismatchError{Topic: "big", Partition: 0, Expected: st0.Version, Actual: got.Version}); *vm != want {
		t.Fatalf("mismatch %+v, want %+v", *vm, want)
	}

	// Batches larger than one Txn: a controller epoch bump for every
	// partition, in three Txns, returns one version per update.
	var ups []PartitionStateUpdate
	states, _ = c.PartitionStates(ctx, "big")
	for p := range int32(parts) {
		s := states[p]
		ups = append(ups, PartitionStateUpdate{Topic: "big", Partition: p, ExpectedVersion: s.Version,
			State: PartitionState{ControllerEpoch: l.Epoch(), Leader: 2, LeaderEpoch: s.LeaderEpoch + 1, ISR: s.ISR}})
	}
	vs, err = c.SetPartitionStates(ctx, l, ups)
	if err != nil {
		t.Fatal(err)
	}
	revs := map[int64]bool{}
	for _, v := range vs {
		revs[v] = true
	}
	if len(vs) != parts || len(revs) != 3 {
		t.Fatalf("%d versions in %d Txns, want %d in 3", len(vs), len(revs), parts)
	}

	// A mismatch in the second Txn leaves the first applied and says so.
	states, _ = c.PartitionStates(ctx, "big")
	ups = ups[:0]
	for p := range int32(200) {
		v := states[p].Version
		if p == 150 {
			v-- // stale
		}
		ups = append(ups, PartitionStateUpdate{Topic: "big", Partition: p, ExpectedVersion: v, State: states[p]})
	}
	vs, err = c.SetPartitionStates(ctx, l, ups)
	if !errors.As(err, &vm) || vm.Partition != 150 {
		t.Fatalf("partial batch: %v, want mismatch on big-150", err)
	}
	if vs[0] == 0 || vs[MaxTxnOps-2] == 0 || vs[MaxTxnOps-1] != 0 {
		t.Fatalf("partial batch versions: first Txn %d..%d, second %d", vs[0], vs[MaxTxnOps-2], vs[MaxTxnOps-1])
	}

	// The Txns of one call are pipelined: a mismatch in the first of three
	// leaves the other two applied, and the states read back are the
	// versions returned.
	states, _ = c.PartitionStates(ctx, "big")
	ups = ups[:0]
	for p := range int32(parts) {
		v := states[p].Version
		if p == 5 {
			v-- // stale
		}
		next := states[p]
		next.LeaderEpoch++
		ups = append(ups, PartitionStateUpdate{Topic: "big", Partition: p, ExpectedVersion: v, State: next})
	}
	vs, err = c.SetPartitionStates(ctx, l, ups)
	if !errors.As(err, &vm) || vm.Partition != 5 {
		t.Fatalf("first Txn stale: %v, want mismatch on big-5", err)
	}
	after, err := c.PartitionStates(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		first := p < MaxTxnOps-1
		switch {
		case first && (vs[p] != 0 || after[p].Version != states[p].Version):
			t.Fatalf("partition %d in the failed Txn: returned version %d, stored %+v (was %+v)", p, vs[p], after[p], states[p])
		case !first && (vs[p] == 0 || after[p].Version != vs[p] || after[p].LeaderEpoch != states[p].LeaderEpoch+1):
			t.Fatalf("partition %d in an applied Txn: returned version %d, stored %+v", p, vs[p], after[p])
		}
	}
}

func TestPartitionStatesOf(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	// More topics than one Txn reads; every third without states (an
	// admin create the controller has not initialized yet).
	const topics = MaxTxnOps + 10
	var names []string
	for i := range topics {
		name := fmt.Sprintf("t%03d", i)
		names = append(names, name)
		assign := map[int32][]int32{0: {1}, 1: {2}}
		var init map[int32]PartitionState
		lead := l
		if i%3 != 0 {
			init = map[int32]PartitionState{0: {Leader: 1, LeaderEpoch: int32(i), ISR: []int32{1}}, 1: {Leader: 2, ISR: []int32{2}}}
		} else {
			lead = nil
		}
		if err := c.CreateTopic(ctx, lead, TopicSpec{Name: name, Assignment: assign}, init); err != nil {
			t.Fatal(err)
		}
	}
	names = append(names, "absent")
	got, err := c.PartitionStatesOf(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		want, err := c.PartitionStates(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			if _, ok := got[name]; ok {
				t.Fatalf("%s without states in the result: %+v", name, got[name])
			}
			continue
		}
		if !reflect.DeepEqual(got[name], want) {
			t.Fatalf("%s: %+v, want %+v", name, got[name], want)
		}
	}
	if len(got) != 2*topics/3 {
		t.Fatalf("%d topics with states, want %d", len(got), 2*topics/3)
	}
}

func TestSetPartitionStatesInput(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	tests := []struct {
		name    string
		updates []PartitionStateUpdate
		wantErr error
	}{
		{"create when absent", []PartitionStateUpdate{{Topic: "x", Partition: 0}}, nil},
		{"create when present", []PartitionStateUpdate{{Topic: "x", Partition: 0}}, ErrVersionMismatch},
		{"missing state with a version", []PartitionStateUpdate{{Topic: "x", Partition: 9, ExpectedVersion: 5}}, ErrVersionMismatch},
		{"duplicate partition", []PartitionStateUpdate{{Topic: "x", Partition: 1}, {Topic: "x", Partition: 1}}, errDuplicate},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.SetPartitionStates(ctx, nil, tt.updates)
			switch {
			case tt.wantErr == errDuplicate:
				if err == nil {
					t.Fatal("duplicate accepted")
				}
			case !errors.Is(err, tt.wantErr) && fmt.Sprint(err) != fmt.Sprint(tt.wantErr):
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := c.PartitionState(ctx, "x", 1); !errors.Is(err, ErrPartitionNotFound) {
		t.Fatalf("state after refused duplicate: %v, want ErrPartitionNotFound", err)
	}
}

var errDuplicate = errors.New("duplicate")
