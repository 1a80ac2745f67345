package nemesis

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
)

// TestReassignFaultOnRealCluster injects the reassign fault on isrlab's
// own brokers (every replica of t/0's leader moves away) and heals it
// (the partition moves back), with acks=all writes succeeding on both
// sides of each move.
func TestReassignFaultOnRealCluster(t *testing.T) {
	requireLab(t)
	bin := proctest.Binary(t)
	d := t.TempDir()
	top, err := compose.Build(compose.Options{Name: "nemreas", RunDir: filepath.Join(d, "run"), Binary: bin,
		Coordinators: 1, Brokers: 3, Clients: 1, NoDefaults: true,
		BrokerConfig: []compose.KV{{Key: "coordinator.session.timeout.ms", Value: "3000"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	b := &netns.Backend{StateDir: filepath.Join(d, "state"), NSDir: filepath.Join(d, "netns"),
		Grace: 3 * time.Second, ReadyTimeout: 30 * time.Second}
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })

	cl := kafkaClient(t, c)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 2, nil, "t"); err != nil {
		t.Fatal(err)
	}
	res := &LiveResolver{Cluster: c}
	settled := func(want func(PartitionView) error) func() error {
		return func() error {
			ras, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"t": {0: {}}})
			if err != nil {
				return err
			}
			if len(ras["t"]) > 0 {
				return fmt.Errorf("still reassigning: %+v", ras["t"])
			}
			v, err := res.View(ctx, []string{"t"})
			if err != nil {
				return err
			}
			p := v.Partitions["t/0"]
			if p.Leader < 0 || len(p.Replicas) == 0 || len(p.ISR) != len(p.Replicas) {
				return fmt.Errorf("t/0 %+v", p)
			}
			return want(p)
		}
	}
	var before []int32
	var leader int32
	proctest.Eventually(t, 30*time.Second, "t/0 fully replicated", settled(func(p PartitionView) error {
		before, leader = p.Replicas, p.Leader
		return nil
	}))
	produce := func(what string) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		defer pcancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(what)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", what, err)
		}
	}
	produce("before")

	mem := &history.Memory{}
	begin := time.Now()
	n := &Nemesis{Env: &Env{Cluster: c, Resolver: res},
		Recorder: history.NewRecorder(mem, func() time.Duration { return time.Since(begin) })}
	f, err := ParseUserSpec([]byte(`{"kind":"reassign","broker":"leader:t/0"}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := n.Inject(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	moves := a.Fault.Run.(*reassignRun).Moves
	if len(moves) != 1 || slices.Contains(moves[0].To, leader) || !slices.Equal(moves[0].From, before) {
		t.Fatalf("moves %+v (leader %d, replicas %v)", moves, leader, before)
	}
	proctest.Eventually(t, 60*time.Second, "t/0 moved off its leader", settled(func(p PartitionView) error {
		if !slices.Equal(p.Replicas, moves[0].To) {
			return fmt.Errorf("replicas %v, want %v", p.Replicas, moves[0].To)
		}
		return nil
	}))
	produce("moved")
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 60*time.Second, "t/0 moved back", settled(func(p PartitionView) error {
		if !slices.Equal(p.Replicas, before) {
			return fmt.Errorf("replicas %v, want %v", p.Replicas, before)
		}
		return nil
	}))
	produce("healed")
	// Heal is safe to repeat.
	if err := a.Fault.Run.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}
}
