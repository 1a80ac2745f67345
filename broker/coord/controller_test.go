package coord

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestControllerElection(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	a := tc.dial(t, WithSessionTimeout(2*time.Second))
	b := tc.dial(t, WithSessionTimeout(2*time.Second))

	if _, _, err := a.Controller(ctx); !errors.Is(err, ErrNoController) {
		t.Fatalf("Controller before any election: %v, want ErrNoController", err)
	}
	watch := b.WatchController(ctx)
	if ev := recv(t, watch, 5*time.Second); ev.BrokerID != -1 {
		t.Fatalf("initial controller event %+v, want none", ev)
	}

	ra, err := a.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "a", Port: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	la, err := ra.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, epoch, err := b.Controller(ctx); err != nil || id != 1 || epoch != la.Epoch() {
		t.Fatalf("Controller() = %d, %d, %v; want 1, %d", id, epoch, err, la.Epoch())
	}
	waitController(t, watch, 1)

	// Broker 2 campaigns and waits while 1 leads.
	type result struct {
		l   *Leadership
		err error
	}
	won := make(chan result, 1)
	go func() {
		l, err := b.Campaign(ctx, 2)
		won <- result{l, err}
	}()
	// Wait until its candidate key exists; it must not have won.
	proctest.Eventually(t, 5*time.Second, "condition", func() error {
		resp, err := b.Etcd().Get(ctx, controllerPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count != 2 {
			return fmt.Errorf("%d candidates", resp.Count)
		}
		return nil
	})
	select {
	case r := <-won:
		t.Fatalf("broker 2 elected while broker 1 leads: %+v", r)
	default:
	}
	if id, _, err := b.Controller(ctx); err != nil || id != 1 {
		t.Fatalf("controller with a waiting candidate: %d, %v; want 1", id, err)
	}

	// Broker 1's process dies: no resign, no revoke. Its session expires
	// and broker 2 takes over with a larger epoch.
	a.Close()
	closedWithin(t, la.Done(), time.Second, "leadership Done after client close")
	r := recv(t, won, 10*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	lb := r.l
	if lb.Epoch() <= la.Epoch() || lb.BrokerID() != 2 {
		t.Fatalf("new controller %d epoch %d, old epoch %d", lb.BrokerID(), lb.Epoch(), la.Epoch())
	}
	waitController(t, watch, 2)

	// Resign hands over at once and is idempotent.
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	closedWithin(t, lb.Done(), time.Second, "Done after Resign")
	waitController(t, watch, -1)
}

// TestFencing checks that a deposed controller that has not noticed yet
// cannot write: every fenced operation fails with ErrNotController.
func TestFencing(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	zombie := tc.dial(t)
	other := tc.dial(t)

	lz, err := zombie.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	spec := TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1, 2}}}
	if err := zombie.CreateTopic(ctx, lz, spec, map[int32]PartitionState{0: {ControllerEpoch: lz.Epoch(), Leader: 1, ISR: []int32{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	st, err := zombie.PartitionState(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Depose: the zombie's lease is revoked behind its back (its session
	// expired on the coordinator), and another broker is elected.
	if _, err := other.Etcd().Revoke(ctx, lz.session.Lease()); err != nil {
		t.Fatal(err)
	}
	lo, err := other.Campaign(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Resign(ctx)
	// The zombie has not noticed yet: the same leadership with Done still
	// open, so only the coordinator's fence can refuse its writes.
	unaware := &Leadership{c: zombie, brokerID: lz.brokerID, key: lz.key, rev: lz.rev, done: make(chan struct{})}

	writes := []struct {
		name string
		do   func(zl *Leadership) error
	}{
		{"SetPartitionStates", func(zl *Leadership) error {
			_, err := zombie.SetPartitionStates(ctx, zl, []PartitionStateUpdate{{Topic: "t", Partition: 0, State: PartitionState{Leader: 2, LeaderEpoch: 1, ISR: []int32{2}}, ExpectedVersion: st.Version}})
			return err
		}},
		{"CreateTopic", func(zl *Leadership) error {
			return zombie.CreateTopic(ctx, zl, TopicSpec{Name: "u", Assignment: map[int32][]int32{0: {1}}}, nil)
		}},
		{"DeleteTopic", func(zl *Leadership) error { return zombie.DeleteTopic(ctx, zl, "t") }},
		{"SetTopicConfig", func(zl *Leadership) error {
			return zombie.SetTopicConfig(ctx, zl, "t", map[string]string{"min.insync.replicas": "2"})
		}},
		{"DeleteISRChangeNotifications", func(zl *Leadership) error {
			return zombie.DeleteISRChangeNotifications(ctx, zl, []string{isrChangeSeqPrefix + "x"})
		}},
	}
	closedWithin(t, lz.Done(), 5*time.Second, "zombie's Done")
	for _, w := range writes {
		for name, zl := range map[string]*Leadership{"unaware": unaware, "noticed": lz} {
			t.Run(w.name+"/"+name, func(t *testing.T) {
				if err := w.do(zl); !errors.Is(err, ErrNotController) {
					t.Fatalf("got %v, want ErrNotController", err)
				}
			})
		}
	}
	// Nothing the zombie tried is visible; the new controller can write.
	got, err := other.PartitionState(ctx, "t", 0)
	if err != nil || got.Version != st.Version {
		t.Fatalf("state after fenced write: %+v, %v; want version %d", got, err, st.Version)
	}
	if _, err := other.Topic(ctx, "u"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("topic u: %v, want ErrTopicNotFound", err)
	}
	if _, err := other.SetPartitionStates(ctx, lo, []PartitionStateUpdate{{Topic: "t", Partition: 0, State: PartitionState{ControllerEpoch: lo.Epoch(), Leader: 2, LeaderEpoch: 1, ISR: []int32{2}}, ExpectedVersion: st.Version}}); err != nil {
		t.Fatalf("new controller's write: %v", err)
	}
}

func waitController(t *testing.T, ch <-chan ControllerEvent, id int32) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("controller watch closed")
			}
			if ev.BrokerID == id {
				return
			}
		case <-deadline:
			t.Fatalf("controller never became %d", id)
		}
	}
}

// TestCampaignThroughOutage: a waiting candidate keeps waiting through a
// coordinator outage and wins once the old controller's session expires;
// a candidate whose ctx ends while no coordinator runs returns promptly.
func TestCampaignThroughOutage(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	old, err := Dial(ctx, tc.endpoints(), WithSessionTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	lo, err := old.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter := tc.dial(t, WithSessionTimeout(15*time.Second), WithCallTimeout(time.Second))
	quitter := tc.dial(t, WithSessionTimeout(15*time.Second), WithCallTimeout(time.Second))
	type result struct {
		l   *Leadership
		err error
	}
	won := make(chan result, 1)
	go func() {
		l, err := waiter.Campaign(ctx, 2)
		won <- result{l, err}
	}()
	qctx, quit := context.WithCancel(ctx)
	quitDone := make(chan error, 1)
	go func() {
		_, err := quitter.Campaign(qctx, 3)
		quitDone <- err
	}()
	proctest.Eventually(t, 5*time.Second, "condition", func() error {
		resp, err := waiter.Etcd().Get(ctx, controllerPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 3 {
			return fmt.Errorf("%v candidates, err %v", resp, err)
		}
		return nil
	})

	tc.stop(0) // outage
	quit()
	if err := recv(t, quitDone, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("campaign canceled during the outage: %v, want context.Canceled", err)
	}
	old.Close() // the old controller dies during the outage
	closedWithin(t, lo.Done(), time.Second, "old leadership")
	if err := tc.start(0); err != nil {
		t.Fatal(err)
	}
	// The canceled candidate's key goes once the coordinator is back, not
	// a session timeout (15 s) later.
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		resp, err := waiter.Etcd().Get(ctx, fmt.Sprintf("%s/", controllerPrefix), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == "3" {
				return fmt.Errorf("canceled candidate's key %s still there", kv.Key)
			}
		}
		return nil
	})
	r := recv(t, won, 20*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Epoch() <= lo.Epoch() {
		t.Fatalf("new epoch %d not above %d", r.l.Epoch(), lo.Epoch())
	}
	if id, _, err := waiter.Controller(ctx); err != nil || id != 2 {
		t.Fatalf("controller after outage: %d, %v", id, err)
	}
}
