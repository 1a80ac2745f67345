package nemesis

import (
	"context"
	"errors"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/isrlab/isrlab/compose"
)

// TestReassignResolve: each form of the reassign fault resolves to moves
// against the live replica sets; bad specs are refused before a cluster
// is touched.
func TestReassignResolve(t *testing.T) {
	c := fakeCluster()
	c.Nodes = append(c.Nodes, &compose.Node{NodeSpec: compose.NodeSpec{Name: "b4", Role: compose.RoleBroker, ID: 4,
		Addr: netip.MustParseAddr("10.0.0.1")}, SwitchPort: "p-b4"})
	v := View{Controller: 1, Partitions: map[string]PartitionView{
		"t/0": {Leader: 2, Replicas: []int32{2, 3, 1}, ISR: []int32{2, 3, 1}},
		"t/1": {Leader: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}},
		"u/0": {Leader: 3, Replicas: []int32{3, 2}, ISR: []int32{3, 2}},
	}}
	env := &Env{Cluster: c, Resolver: fixedView(v), Rand: rand.New(rand.NewSource(1))}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		spec string
		want []ReassignMove
	}{
		{"explicit replicas", `{"kind":"reassign","partition":"t/1","replicas":[3,4]}`,
			[]ReassignMove{{Topic: "t", Partition: 1, From: []int32{1, 2}, To: []int32{3, 4}}}},
		{"leader moves off", `{"kind":"reassign","partition":"t/0","move-from":"leader:t/0"}`,
			[]ReassignMove{{Topic: "t", Partition: 0, From: []int32{2, 3, 1}, To: []int32{4, 3, 1}}}},
		{"all of a broker's replicas", `{"kind":"reassign","broker":"b2"}`, nil},
		{"a broker's replicas in one topic", `{"kind":"reassign","broker":"b2","topics":["u"]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseUserSpec([]byte(tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			r := f.NewRun()
			if err := r.Resolve(ctx, env); err != nil {
				t.Fatal(err)
			}
			moves := r.(*reassignRun).Moves
			if tc.want != nil && !reflect.DeepEqual(moves, tc.want) {
				t.Fatalf("moves %+v, want %+v", moves, tc.want)
			}
			for _, m := range moves {
				if slices.Contains(m.To, 2) && tc.want == nil {
					t.Fatalf("broker 2 keeps a replica: %+v", m)
				}
				if len(m.To) != len(m.From) || len(slices.Compact(slices.Sorted(slices.Values(m.To)))) != len(m.To) {
					t.Fatalf("bad target %+v", m)
				}
			}
			if tc.want == nil {
				wantN := 3
				if tc.name == "a broker's replicas in one topic" {
					wantN = 1
				}
				if len(moves) != wantN {
					t.Fatalf("%d moves, want %d: %+v", len(moves), wantN, moves)
				}
			}
		})
	}
	for _, bad := range []string{
		`{"kind":"reassign"}`,
		`{"kind":"reassign","partition":"t/0"}`,
		`{"kind":"reassign","partition":"t/0","replicas":[1],"move-from":"b1"}`,
		`{"kind":"reassign","broker":"b1","partition":"t/0"}`,
		`{"kind":"reassign","partition":"t/0","topics":["t"],"replicas":[1]}`,
		`{"kind":"reassign","partition":"t","replicas":[1]}`,
	} {
		f, err := ParseUserSpec([]byte(bad))
		if err == nil {
			err = f.NewRun().Resolve(ctx, env)
		}
		if !errors.Is(err, ErrBadFault) {
			t.Errorf("%s: err = %v, want ErrBadFault", bad, err)
		}
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"reassign","broker":"b2","moves":[]}`)); !errors.Is(err, ErrBadFault) {
		t.Errorf("a spec setting moves: err = %v", err)
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"reassign","broker":"leader:"}`)); err == nil {
		t.Error("a malformed target expression was accepted")
	}
	// A broker on every replica set's neighbours has nowhere to go.
	full := View{Partitions: map[string]PartitionView{"t/0": {Replicas: []int32{1, 2, 3, 4}}}}
	if _, err := PlanReassign(full, []string{"t/0"}, 1, []int32{1, 2, 3, 4}, rand.New(rand.NewSource(1))); !errors.Is(err, ErrBadFault) {
		t.Errorf("no free broker: %v", err)
	}
}
