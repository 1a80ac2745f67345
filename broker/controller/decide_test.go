package controller

import (
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/broker/coord"
)

func TestBrokerDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		prev, cur     map[int32]int64
		dead, started []int32
	}{
		{"no change", map[int32]int64{1: 10, 2: 11}, map[int32]int64{1: 10, 2: 11}, nil, nil},
		{"death", map[int32]int64{1: 10, 2: 11}, map[int32]int64{2: 11}, ids(1), nil},
		{"startup", map[int32]int64{2: 11}, map[int32]int64{1: 12, 2: 11}, nil, ids(1)},
		{"bounce with a new epoch is both", map[int32]int64{1: 10, 2: 11}, map[int32]int64{1: 15, 2: 11}, ids(1), ids(1)},
		{"first snapshot", nil, map[int32]int64{3: 1, 1: 2}, nil, ids(1, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dead, started := brokerDiff(tc.prev, tc.cur)
			if !slices.Equal(dead, tc.dead) || !slices.Equal(started, tc.started) {
				t.Fatalf("dead %v started %v, want %v %v", dead, started, tc.dead, tc.started)
			}
		})
	}
}

func TestLivenessDecision(t *testing.T) {
	st := func(leader, epoch int32, isr ...int32) coord.PartitionState {
		return coord.PartitionState{ControllerEpoch: 3, Leader: leader, LeaderEpoch: epoch, ISR: isr, Version: 40}
	}
	for _, tc := range []struct {
		name      string
		p         partition
		live      []int32
		unclean   bool
		want      coord.PartitionState
		changed   bool
		isNew     bool
		isUnclean bool
	}{
		{name: "new partition: first live replica leads, live replicas in assignment order",
			p: partition{replicas: ids(3, 1, 2)}, live: ids(1, 2),
			want: coord.PartitionState{ControllerEpoch: 7, Leader: 1, ISR: ids(1, 2)}, changed: true, isNew: true},
		{name: "new partition without live replicas waits",
			p: partition{replicas: ids(3, 1)}, live: ids(2)},
		{name: "dead leader: first live ISR replica in assignment order",
			p: partition{replicas: ids(1, 2, 3), state: st(1, 4, 3, 1, 2), hasState: true}, live: ids(2, 3),
			want: coord.PartitionState{ControllerEpoch: 7, Leader: 2, LeaderEpoch: 5, ISR: ids(3, 2)}, changed: true},
		{name: "dead follower leaves the ISR with an epoch bump",
			p: partition{replicas: ids(1, 2, 3), state: st(1, 4, 1, 2, 3), hasState: true}, live: ids(1, 3),
			want: coord.PartitionState{ControllerEpoch: 7, Leader: 1, LeaderEpoch: 5, ISR: ids(1, 3)}, changed: true},
		{name: "healthy partition is left alone",
			p: partition{replicas: ids(1, 2), state: st(1, 4, 1, 2), hasState: true}, live: ids(1, 2)},
		{name: "no live ISR member: offline, ISR kept",
			p: partition{replicas: ids(1, 2), state: st(1, 4, 1), hasState: true}, live: ids(2),
			want: coord.PartitionState{ControllerEpoch: 7, Leader: NoLeader, LeaderEpoch: 5, ISR: ids(1)}, changed: true},
		{name: "no live ISR member, unclean allowed",
			p: partition{replicas: ids(1, 2), state: st(1, 4, 1), hasState: true}, live: ids(2), unclean: true,
			want: coord.PartitionState{ControllerEpoch: 7, Leader: 2, LeaderEpoch: 5, ISR: ids(2)}, changed: true, isUnclean: true},
		{name: "offline partition's last ISR member returns",
			p: partition{replicas: ids(1, 2), state: st(NoLeader, 5, 1), hasState: true}, live: ids(1, 2),
			want: coord.PartitionState{ControllerEpoch: 7, Leader: 1, LeaderEpoch: 6, ISR: ids(1)}, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.tp = coord.TopicPartition{Topic: "t", Partition: 0}
			ch, ok := livenessDecision(liveSet(tc.live...), liveSet(tc.live...), func(string) bool { return tc.unclean }, elrPolicy{}, 7)(&tc.p)
			if ok != tc.changed {
				t.Fatalf("changed %v, want %v (%+v)", ok, tc.changed, ch)
			}
			if !ok {
				return
			}
			if !reflect.DeepEqual(ch.New, tc.want) || ch.IsNew != tc.isNew || ch.Unclean != tc.isUnclean {
				t.Fatalf("got %+v new=%v unclean=%v, want %+v new=%v unclean=%v", ch.New, ch.IsNew, ch.Unclean, tc.want, tc.isNew, tc.isUnclean)
			}
			if !tc.isNew && ch.Old.Version != 40 {
				t.Fatalf("expected version %d, want the cached 40", ch.Old.Version)
			}
		})
	}
}

func TestImbalancedPartitions(t *testing.T) {
	mk := func(p int32, leader int32, replicas ...int32) *partition {
		return &partition{tp: coord.TopicPartition{Topic: "t", Partition: p}, replicas: replicas,
			state: coord.PartitionState{Leader: leader, ISR: replicas}, hasState: true}
	}
	// Seed 000 after both restarts: every leader on broker 2.
	parts := []*partition{mk(0, 2, 1, 2, 3), mk(1, 2, 2, 3, 1), mk(2, 2, 3, 1, 2), mk(3, 2, 1, 2, 3)}
	got := imbalancedPartitions(parts, 10)
	want := []coord.TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 2}, {Topic: "t", Partition: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// One of broker 1's two preferred partitions led elsewhere is 50%:
	// under a 60% threshold nothing moves.
	parts = []*partition{mk(0, 2, 1, 2), mk(1, 1, 1, 2), mk(2, 2, 2, 1)}
	if got := imbalancedPartitions(parts, 60); len(got) != 0 {
		t.Fatalf("under threshold: %v", got)
	}
	if got := imbalancedPartitions(parts, 49); len(got) != 1 || got[0].Partition != 0 {
		t.Fatalf("over threshold: %v", got)
	}
}

func TestValidateAlterPartition(t *testing.T) {
	cur := coord.PartitionState{Leader: 1, LeaderEpoch: 5, ISR: ids(1, 2), Version: 100}
	replicas := ids(1, 2, 3)
	epochs := map[int32]int64{1: 10, 2: 11, 3: 12}
	live := func(except ...int32) func(int32) (int64, bool) {
		return func(id int32) (int64, bool) {
			e, ok := epochs[id]
			return e, ok && !slices.Contains(except, id)
		}
	}
	none := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = -1
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		broker         int32
		leaderEpoch    int32
		partitionEpoch int32
		isr            []int32
		epochs         []int64
		live           func(int32) (int64, bool)
		code           int16
		write          bool
	}{
		{"expand", 1, 5, 100, ids(1, 2, 3), nil, live(), 0, true},
		{"shrink", 1, 5, 100, ids(1), nil, live(), 0, true},
		{"same ISR is idempotent even with an old partition epoch", 1, 5, 90, ids(1, 2), nil, live(), 0, false},
		{"old leader epoch", 1, 4, 100, ids(1), nil, live(), kerr.FencedLeaderEpoch.Code, false},
		{"newer leader epoch: controller is behind", 1, 6, 100, ids(1), nil, live(), kerr.NotController.Code, false},
		{"newer partition epoch: controller is behind", 1, 5, 101, ids(1), nil, live(), kerr.NotController.Code, false},
		{"old partition epoch", 1, 5, 99, ids(1), nil, live(), kerr.InvalidUpdateVersion.Code, false},
		{"not the leader", 2, 5, 100, ids(2), nil, live(), kerr.NotLeaderForPartition.Code, false},
		{"ISR without the leader", 1, 5, 100, ids(2, 3), nil, live(), kerr.InvalidRequest.Code, false},
		{"ISR member not a replica", 1, 5, 100, ids(1, 4), nil, live(), kerr.InvalidRequest.Code, false},
		{"duplicate member", 1, 5, 100, ids(1, 2, 2), nil, live(), kerr.InvalidRequest.Code, false},
		{"dead replica cannot join", 1, 5, 100, ids(1, 2, 3), nil, live(3), kerr.IneligibleReplica.Code, false},
		{"dead member may stay while another joins", 1, 5, 100, ids(1, 2, 3), nil, live(2), 0, true},
		{"joining replica with the wrong broker epoch", 1, 5, 100, ids(1, 2, 3), []int64{10, 11, 9}, live(), kerr.IneligibleReplica.Code, false},
		{"joining replica with its broker epoch", 1, 5, 100, ids(1, 2, 3), []int64{10, 11, 12}, live(), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.epochs
			if e == nil {
				e = none(len(tc.isr))
			}
			code, write := ValidateAlterPartition(tc.broker, replicas, cur, tc.leaderEpoch, tc.partitionEpoch, tc.isr, e, tc.live)
			if code != tc.code || write != tc.write {
				t.Fatalf("got %v write=%v, want %v write=%v", kerr.ErrorForCode(code), write, kerr.ErrorForCode(tc.code), tc.write)
			}
		})
	}
}
