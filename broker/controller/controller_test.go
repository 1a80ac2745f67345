package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
)

func TestTopicCreationInitializesStates(t *testing.T) {
	e := newEnv(t, 1, 2, 3, 4)
	e.kill(4)
	c := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}, 2: {4, 3, 1}}, nil)

	want := map[int32]struct {
		leader int32
		isr    []int32
	}{0: {1, ids(1, 2, 3)}, 1: {2, ids(2, 3, 1)}, 2: {3, ids(3, 1)}}
	for p, w := range want {
		w.isr = slices.Clone(w.isr)
		st := e.waitState(tp("t", p), w.leader, w.isr, 0)
		if st.ControllerEpoch != c.l.Epoch() {
			t.Errorf("partition %d: controller epoch %d, want %d", p, st.ControllerEpoch, c.l.Epoch())
		}
		for _, r := range w.isr {
			ps := e.waitLAI(r, tp("t", p), w.leader, w.isr, 0)
			if !ps.IsNew || ps.ZKVersion != int32(st.Version) || ps.ControllerEpoch != int32(c.l.Epoch()) {
				t.Errorf("broker %d partition %d: IsNew %v zkVersion %d controller epoch %d, want true %d %d",
					r, p, ps.IsNew, ps.ZKVersion, ps.ControllerEpoch, st.Version, c.l.Epoch())
			}
		}
		for _, r := range []int32{1, 2, 3} {
			e.waitUM(r, tp("t", p), w.leader, w.isr)
		}
	}
	// The request header fields the brokers fence on.
	for _, r := range []int32{1, 2, 3} {
		_, lai, _ := e.brokers[r].lastLAI(tp("t", 0))
		if lai.ControllerID != 100 || lai.ControllerEpoch != int32(c.l.Epoch()) || lai.BrokerEpoch != e.regs[r].Epoch() {
			t.Errorf("broker %d: LeaderAndIsr controller %d epoch %d broker epoch %d", r, lai.ControllerID, lai.ControllerEpoch, lai.BrokerEpoch)
		}
		_, um, _ := e.brokers[r].lastUM(tp("t", 0))
		var live []int32
		for _, b := range um.LiveBrokers {
			live = append(live, b.ID)
		}
		if !slices.Equal(live, ids(1, 2, 3)) || um.BrokerEpoch != e.regs[r].Epoch() {
			t.Errorf("broker %d: UpdateMetadata live brokers %v broker epoch %d", r, live, um.BrokerEpoch)
		}
	}
	if n := len(e.brokers[4].requests()); n != 0 {
		t.Errorf("dead broker 4 received %d requests", n)
	}
}

func TestBrokerDeath(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	reg := prometheus.NewRegistry()
	c := e.startController(100, func(cfg *Config) { cfg.Registerer = reg })
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}, 1: {2, 1, 3}}, nil)
	e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)
	e.waitState(tp("t", 1), 2, ids(2, 1, 3), 0)

	e.kill(1)
	// Led by 1: first live ISR replica in assignment order, epoch + 1.
	e.waitState(tp("t", 0), 2, ids(2, 3), 1)
	// 1 was only a follower: removed from the ISR, epoch + 1 (§1.7).
	e.waitState(tp("t", 1), 2, ids(2, 3), 1)
	for _, r := range []int32{2, 3} {
		e.waitLAI(r, tp("t", 0), 2, ids(2, 3), 1)
		e.waitLAI(r, tp("t", 1), 2, ids(2, 3), 1)
		e.waitUM(r, tp("t", 0), 2, ids(2, 3))
	}
	if got := metricValue(c.ctrl.metrics.active); got != 1 {
		t.Errorf("ActiveControllerCount %v", got)
	}
	proctest.Eventually(t, 5*time.Second, "condition", func() error {
		if got := metricValue(c.ctrl.metrics.imbalance); got != 1 {
			return fmt.Errorf("PreferredReplicaImbalanceCount %v, want 1 (t-0 led by 2)", got)
		}
		return nil
	})
	// A second controller on the same registry (brokers in one process)
	// shares the collectors instead of panicking.
	if other := New(Config{BrokerID: 7, Registerer: reg}); other.metrics.global != c.ctrl.metrics.global {
		t.Error("second controller did not share the registered collectors")
	}

	// Losing every replica leaves the partition offline with its last ISR.
	e.kill(2)
	e.waitState(tp("t", 0), 3, ids(3), 2)
	e.kill(3)
	e.waitState(tp("t", 0), NoLeader, ids(3), 3)
	proctest.Eventually(t, 5*time.Second, "condition", func() error {
		if got := metricValue(c.ctrl.metrics.offline); got != 2 {
			return fmt.Errorf("OfflinePartitionsCount %v, want 2", got)
		}
		return nil
	})
	// The last ISR member comes back and leads cleanly.
	e.start(3)
	e.waitState(tp("t", 0), 3, ids(3), 4)
	e.waitLAI(3, tp("t", 0), 3, ids(3), 4)
	if got := metricValue(c.ctrl.metrics.unclean); got != 0 {
		t.Errorf("UncleanLeaderElectionsPerSec %v, want 0", got)
	}
}

func TestUncleanElection(t *testing.T) {
	for _, tc := range []struct {
		name         string
		topicConfig  map[string]string
		brokerValue  string
		enableLater  bool
		electUnclean bool
	}{
		{name: "disallowed stays offline"},
		{name: "topic config allows", topicConfig: map[string]string{"unclean.leader.election.enable": "true"}},
		{name: "broker default allows", brokerValue: "true"},
		{name: "topic config turned on later", enableLater: true},
		{name: "ElectLeaders UNCLEAN", electUnclean: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, 2)
			c := e.startController(100, func(cfg *Config) {
				if tc.brokerValue != "" {
					cfg.Broker.Set("unclean.leader.election.enable", tc.brokerValue)
				}
			})
			e.createTopic("t", map[int32][]int32{0: {1, 2}}, tc.topicConfig)
			e.waitState(tp("t", 0), 1, ids(1, 2), 0)
			e.kill(2)
			e.waitState(tp("t", 0), 1, ids(1), 1)
			e.start(2) // back, but out of sync: nobody adds it to the ISR
			e.waitLAI(2, tp("t", 0), 1, ids(1), 1)
			e.kill(1)
			allowed := tc.topicConfig != nil || tc.brokerValue == "true"
			if !allowed {
				e.waitState(tp("t", 0), NoLeader, ids(1), 2)
				if got := metricValue(c.ctrl.metrics.unclean); got != 0 {
					t.Fatalf("UncleanLeaderElectionsPerSec %v, want 0", got)
				}
				switch {
				case tc.enableLater:
					if err := e.admin.SetTopicConfig(context.Background(), nil, "t", map[string]string{"unclean.leader.election.enable": "true"}); err != nil {
						t.Fatal(err)
					}
				case tc.electUnclean:
					req := kmsg.NewPtrElectLeadersRequest()
					req.SetVersion(2)
					req.ElectionType = ElectUnclean
					req.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "t", Partitions: []int32{0, 7}}}
					resp := c.ctrl.ElectLeaders(context.Background(), req)
					got := fmt.Sprint(resp.Topics[0].Partitions[0].ErrorCode, resp.Topics[0].Partitions[1].ErrorCode)
					if want := fmt.Sprint(0, kerr.UnknownTopicOrPartition.Code); got != want {
						t.Fatalf("ElectLeaders UNCLEAN codes %s, want %s", got, want)
					}
					// Once the partition has a live leader there is nothing to do.
					resp = c.ctrl.ElectLeaders(context.Background(), req)
					if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.ElectionNotNeeded.Code {
						t.Fatalf("second ElectLeaders UNCLEAN: %v", kerr.ErrorForCode(code))
					}
				default:
					return
				}
				e.waitState(tp("t", 0), 2, ids(2), 3)
			} else {
				e.waitState(tp("t", 0), 2, ids(2), 2)
			}
			// The counter moves right after the write the state shows.
			proctest.Eventually(t, 5*time.Second, "condition", func() error {
				if got := metricValue(c.ctrl.metrics.unclean); got != 1 {
					return fmt.Errorf("UncleanLeaderElectionsPerSec %v, want 1", got)
				}
				return nil
			})
		})
	}
}

// expandISR plays the leader of p catching its followers up: through
// AlterPartition (Kafka 2.7+) for even partitions, through its own
// compare-and-swap plus an ISR change notification (ZooKeeper era) for
// odd ones.
func expandISR(t *testing.T, e *env, c *Controller, p coord.TopicPartition, isr []int32) {
	t.Helper()
	st, err := e.admin.PartitionState(context.Background(), p.Topic, p.Partition)
	if err != nil {
		t.Fatal(err)
	}
	if p.Partition%2 == 0 {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.SetVersion(1)
		req.BrokerID, req.BrokerEpoch = st.Leader, e.regs[st.Leader].Epoch()
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.Topic = p.Topic
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.NewISR, rp.PartitionEpoch = p.Partition, st.LeaderEpoch, isr, int32(st.Version)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := c.AlterPartition(context.Background(), req)
		if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("AlterPartition %v: %+v", p, resp)
		}
		if got := resp.Topics[0].Partitions[0].PartitionEpoch; got <= int32(st.Version) {
			t.Fatalf("AlterPartition %v: partition epoch %d not above %d", p, got, st.Version)
		}
	} else {
		st.ISR = isr
		if _, err := e.admin.SetPartitionStates(context.Background(), nil, []coord.PartitionStateUpdate{
			{Topic: p.Topic, Partition: p.Partition, State: st, ExpectedVersion: st.Version},
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.admin.NotifyISRChange(context.Background(), []coord.TopicPartition{p}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []int32{1, 2, 3} {
		e.waitUMISR(r, p, isr)
	}
}

// TestSeed000 is SEEDS.md 000's walk-through at the controller level.
func TestSeed000(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto-rebalance=%v", auto), func(t *testing.T) {
			e := newEnv(t, 1, 2, 3)
			c := e.startController(100, func(cfg *Config) {
				if auto {
					cfg.Broker.Set("auto.leader.rebalance.enable", "true")
					cfg.ImbalanceCheckInterval = 100 * time.Millisecond
				}
			})
			// Partition i on broker i mod n, replica j on (i+j) mod n.
			assign := map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}, 2: {3, 1, 2}, 3: {1, 2, 3}}
			e.createTopic("t", assign, nil)
			for p, a := range assign {
				e.waitState(tp("t", p), a[0], a, 0)
			}
			e.kill(3)
			e.waitState(tp("t", 2), 1, ids(1, 2), 1) // broker 3's leadership moved
			e.waitState(tp("t", 0), 1, ids(1, 2), 1)
			e.kill(1)
			for p := range int32(4) {
				e.waitState(tp("t", p), 2, ids(2), 2) // every leader on broker 2
			}
			e.start(1)
			e.start(3)
			for p := range int32(4) {
				e.waitLAI(1, tp("t", p), 2, ids(2), 2)
				e.waitLAI(3, tp("t", p), 2, ids(2), 2)
			}
			// Back as followers; leaders stay on 2 until they are in sync.
			for p := range int32(4) {
				e.waitState(tp("t", p), 2, ids(2), 2)
			}
			for p, a := range assign {
				expandISR(t, e, c.ctrl, tp("t", p), append(ids(2), slices.DeleteFunc(slices.Clone(a), func(r int32) bool { return r == 2 })...))
			}
			if !auto {
				req := kmsg.NewPtrElectLeadersRequest()
				req.SetVersion(2)
				req.ElectionType = ElectPreferred
				resp := c.ctrl.ElectLeaders(context.Background(), req)
				codes := map[int32]int16{}
				for _, rt := range resp.Topics {
					for _, rp := range rt.Partitions {
						codes[rp.Partition] = rp.ErrorCode
					}
				}
				want := map[int32]int16{0: 0, 1: kerr.ElectionNotNeeded.Code, 2: 0, 3: 0}
				if fmt.Sprint(codes) != fmt.Sprint(want) {
					t.Errorf("ElectLeaders codes %v, want %v", codes, want)
				}
			}
			for p, a := range assign {
				st, err := e.admin.PartitionState(context.Background(), "t", p)
				if err != nil {
					t.Fatal(err)
				}
				epoch := int32(2)
				if a[0] != 2 {
					epoch = 3
				}
				e.waitState(tp("t", p), a[0], st.ISR, epoch)
				for _, r := range a {
					if a[0] != 2 {
						e.waitLAI(r, tp("t", p), a[0], st.ISR, epoch)
					}
					e.waitUM(r, tp("t", p), a[0], st.ISR)
				}
			}
		})
	}
}

func TestControllerFailover(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	first := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}, nil)
	e.waitLAI(3, tp("t", 1), 2, ids(2, 3, 1), 0)

	// A second controller campaigns and waits behind the first.
	cl := coordtest.Dial(t, e.srv)
	second := New(Config{BrokerID: 101, Coord: cl, RetryBackoff: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected := make(chan *coord.Leadership, 1)
	go func() {
		l, err := cl.Campaign(ctx, 101)
		if err != nil {
			t.Error(err)
			close(elected)
			return
		}
		elected <- l
	}()
	ended := time.Now()
	if err := first.l.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
		if first.err != nil {
			t.Fatalf("first controller: Run returned %v, want nil", first.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first controller still running after its leadership ended")
	}
	if first.ctrl.Active() {
		t.Error("first controller still active")
	}
	l := <-elected
	if l == nil {
		t.FailNow()
	}
	runDone := make(chan error, 1)
	go func() { runDone <- second.Run(ctx, l) }()
	defer func() { cancel(); <-runDone }()

	// The new controller re-sends everything with its own epoch.
	var latest time.Time
	for _, r := range []int32{1, 2, 3} {
		proctest.Eventually(t, 10*time.Second, "condition", func() error {
			for _, rc := range e.brokers[r].requests() {
				if lai, ok := rc.req.(*kmsg.LeaderAndISRRequest); ok && lai.ControllerEpoch == int32(l.Epoch()) && lai.ControllerID == 101 {
					if rc.at.After(latest) {
						latest = rc.at
					}
					return nil
				}
			}
			return fmt.Errorf("broker %d: no LeaderAndIsr from the new controller", r)
		})
		e.waitUM(r, tp("t", 0), 1, ids(1, 2, 3))
	}
	t.Logf("controller failover: leadership ended -> LeaderAndIsr from the new controller at every broker in %v", latest.Sub(ended))

	// Nothing changed, so no partition state was rewritten.
	e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)
	// The new controller acts on broker death.
	e.kill(1)
	e.waitState(tp("t", 0), 2, ids(2, 3), 1)
	st, _ := e.admin.PartitionState(context.Background(), "t", 0)
	if st.ControllerEpoch != l.Epoch() {
		t.Errorf("controller epoch %d, want %d", st.ControllerEpoch, l.Epoch())
	}
}

func TestDeposedController(t *testing.T) {
	e := newEnv(t, 1, 2)
	c := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2}}, nil)
	e.waitState(tp("t", 0), 1, ids(1, 2), 0)

	// A write with the leadership after it ended is fenced.
	tm := &term{c: c.ctrl, l: c.l, epoch: c.l.Epoch(), log: c.ctrl.log, brokers: map[int32]coord.BrokerInfo{},
		parts: map[coord.TopicPartition]*partition{}, shuttingDown: map[int32]bool{}}
	st, _ := e.admin.PartitionState(context.Background(), "t", 0)
	tm.parts[tp("t", 0)] = &partition{tp: tp("t", 0), replicas: ids(1, 2), state: st, hasState: true}
	tm.brokers[2] = e.brokers[2].info()
	// Delete the election key behind the controller's back, as a newer
	// controller's takeover after a session expiry would.
	if _, err := e.admin.Etcd().Delete(context.Background(), "/controller/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	_, err := tm.apply(context.Background(), []coord.TopicPartition{tp("t", 0)}, livenessDecision(tm.live, tm.up, func(string) bool { return false }, elrPolicy{}, tm.epoch))
	if !errors.Is(err, coord.ErrNotController) {
		t.Fatalf("write after deposition: %v, want ErrNotController", err)
	}
	select {
	case <-c.done:
		if c.err != nil && !errors.Is(c.err, coord.ErrNotController) {
			t.Fatalf("Run returned %v", c.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deposed controller still running")
	}
	// Requests to a controller that is not running get NOT_CONTROLLER.
	req := kmsg.NewPtrElectLeadersRequest()
	req.SetVersion(2)
	if resp := c.ctrl.ElectLeaders(context.Background(), req); resp.ErrorCode != kerr.NotController.Code {
		t.Errorf("ElectLeaders on a deposed controller: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	st2, _ := e.admin.PartitionState(context.Background(), "t", 0)
	if st2.Version != st.Version {
		t.Errorf("deposed controller changed the state: %+v", st2)
	}
}

func TestControlledShutdown(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	c := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}, 1: {2, 1, 3}, 2: {1}}, nil)
	e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)
	e.waitState(tp("t", 1), 2, ids(2, 1, 3), 0)
	e.waitState(tp("t", 2), 1, ids(1), 0)

	shutdown := func(epoch int64) *kmsg.ControlledShutdownResponse {
		req := kmsg.NewPtrControlledShutdownRequest()
		req.SetVersion(3)
		req.BrokerID, req.BrokerEpoch = 1, epoch
		return c.ctrl.ControlledShutdown(context.Background(), req)
	}
	if resp := shutdown(e.regs[1].Epoch() - 1); resp.ErrorCode != kerr.StaleBrokerEpoch.Code {
		t.Fatalf("old epoch: %v, want STALE_BROKER_EPOCH", kerr.ErrorForCode(resp.ErrorCode))
	}
	resp := shutdown(e.regs[1].Epoch())
	if resp.ErrorCode != 0 {
		t.Fatalf("controlled shutdown: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	var remaining []string
	for _, p := range resp.PartitionsRemaining {
		remaining = append(remaining, fmt.Sprintf("%s-%d", p.Topic, p.Partition))
	}
	if !slices.Equal(remaining, []string{"t-2"}) {
		t.Errorf("partitions remaining %v, want [t-2] (single replica)", remaining)
	}
	e.waitState(tp("t", 0), 2, ids(2, 3), 1)
	e.waitState(tp("t", 1), 2, ids(2, 3), 1)
	e.waitLAI(3, tp("t", 0), 2, ids(2, 3), 1)
	// Broker 1 stops its follower replica.
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		for _, rc := range e.brokers[1].requests() {
			if sr, ok := rc.req.(*kmsg.StopReplicaRequest); ok {
				for _, rt := range sr.Topics {
					for _, ps := range rt.PartitionStates {
						if rt.Topic == "t" && !ps.Delete && (ps.Partition == 0 || ps.Partition == 1) {
							return nil
						}
					}
				}
			}
		}
		return errors.New("no StopReplica to the broker shutting down")
	})
	// While it shuts down it is not elected: broker 2 dies, 3 takes over.
	e.kill(2)
	e.waitState(tp("t", 0), 3, ids(3), 2)
}

func TestTopicDeletion(t *testing.T) {
	e := newEnv(t, 1, 2)
	c := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2}, 1: {2, 1}}, nil)
	e.waitLAI(2, tp("t", 1), 2, ids(2, 1), 0)
	if err := e.admin.MarkTopicForDeletion(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if _, err := e.admin.Topic(context.Background(), "t"); !errors.Is(err, coord.ErrTopicNotFound) {
			return fmt.Errorf("topic still there: %v", err)
		}
		return nil
	})
	for _, r := range []int32{1, 2} {
		proctest.Eventually(t, 10*time.Second, "condition", func() error {
			deleted := map[int32]bool{}
			for _, rc := range e.brokers[r].requests() {
				if sr, ok := rc.req.(*kmsg.StopReplicaRequest); ok {
					for _, rt := range sr.Topics {
						for _, ps := range rt.PartitionStates {
							if rt.Topic == "t" && ps.Delete {
								deleted[ps.Partition] = true
							}
						}
					}
				}
			}
			if !deleted[0] || !deleted[1] {
				return fmt.Errorf("broker %d: StopReplica(delete) for %v", r, deleted)
			}
			return nil
		})
		proctest.Eventually(t, 10*time.Second, "condition", func() error {
			if ps, _, _ := e.brokers[r].lastUM(tp("t", 0)); ps.Leader != leaderDuringDelete {
				return fmt.Errorf("broker %d: UpdateMetadata leader %d, want %d", r, ps.Leader, leaderDuringDelete)
			}
			return nil
		})
	}
	_ = c
}

func TestAlterPartitionThroughController(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	c := e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}}, nil)
	st := e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)

	alter := func(brokerEpoch int64, isr []int32, partitionEpoch int32) *kmsg.AlterPartitionResponse {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.SetVersion(1)
		req.BrokerID, req.BrokerEpoch = 1, brokerEpoch
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.NewISR, rp.PartitionEpoch = 0, 0, isr, partitionEpoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return c.ctrl.AlterPartition(context.Background(), req)
	}
	if resp := alter(e.regs[1].Epoch()-1, ids(1, 2), int32(st.Version)); resp.ErrorCode != kerr.StaleBrokerEpoch.Code {
		t.Fatalf("stale broker epoch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	resp := alter(e.regs[1].Epoch(), ids(1, 2), int32(st.Version))
	pr := resp.Topics[0].Partitions[0]
	if resp.ErrorCode != 0 || pr.ErrorCode != 0 {
		t.Fatalf("shrink: %v / %v", kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(pr.ErrorCode))
	}
	now := e.waitState(tp("t", 0), 1, ids(1, 2), 0) // no epoch bump
	if pr.PartitionEpoch != int32(now.Version) || !slices.Equal(pr.ISR, ids(1, 2)) || pr.LeaderID != 1 {
		t.Errorf("response %+v, want partition epoch %d", pr, now.Version)
	}
	e.waitUM(3, tp("t", 0), 1, ids(1, 2))
	// The old partition epoch is now stale.
	if pr := alter(e.regs[1].Epoch(), ids(1, 2, 3), int32(st.Version)).Topics[0].Partitions[0]; pr.ErrorCode != kerr.InvalidUpdateVersion.Code {
		t.Errorf("stale partition epoch: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	// A dead broker cannot join.
	e.kill(3)
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if _, um, _ := e.brokers[1].lastUM(tp("t", 0)); len(um.LiveBrokers) != 2 {
			return errors.New("controller has not seen broker 3 die")
		}
		return nil
	})
	if pr := alter(e.regs[1].Epoch(), ids(1, 2, 3), int32(now.Version)).Topics[0].Partitions[0]; pr.ErrorCode != kerr.IneligibleReplica.Code {
		t.Errorf("dead replica joining: %v", kerr.ErrorForCode(pr.ErrorCode))
	}

	// v3 names the topic by the ID UpdateMetadata carried and the ISR with
	// broker epochs (KIP-841, KIP-903).
	_, um, _ := e.brokers[1].lastUM(tp("t", 0))
	if len(um.TopicStates) == 0 || um.TopicStates[0].TopicID == ([16]byte{}) {
		t.Fatalf("UpdateMetadata v%d without the topic ID: %+v", um.Version, um.TopicStates)
	}
	alterByID := func(id [16]byte, isr []int32) *kmsg.AlterPartitionResponse {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.SetVersion(3)
		req.BrokerID, req.BrokerEpoch = 1, e.regs[1].Epoch()
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch = 0, 0, int32(now.Version)
		for _, r := range isr {
			m := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			m.BrokerID, m.BrokerEpoch = r, e.regs[r].Epoch()
			rp.NewEpochISR = append(rp.NewEpochISR, m)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return c.ctrl.AlterPartition(context.Background(), req)
	}
	if pr := alterByID([16]byte{9}, ids(1)).Topics[0].Partitions[0]; pr.ErrorCode != kerr.UnknownTopicID.Code {
		t.Errorf("unknown topic ID: %v", kerr.ErrorForCode(pr.ErrorCode))
	}
	id := um.TopicStates[0].TopicID
	resp = alterByID(id, ids(1))
	if got := resp.Topics[0]; got.TopidID != id || got.Partitions[0].ErrorCode != 0 || !slices.Equal(got.Partitions[0].ISR, ids(1)) {
		t.Errorf("shrink by topic ID: %+v", got)
	}
}

func TestNotControllerWhenIdle(t *testing.T) {
	c := New(Config{BrokerID: 1})
	if c.Active() {
		t.Fatal("idle controller active")
	}
	ap := kmsg.NewPtrAlterPartitionRequest()
	if got := c.AlterPartition(context.Background(), ap).ErrorCode; got != kerr.NotController.Code {
		t.Errorf("AlterPartition: %v", kerr.ErrorForCode(got))
	}
	cs := kmsg.NewPtrControlledShutdownRequest()
	if got := c.ControlledShutdown(context.Background(), cs).ErrorCode; got != kerr.NotController.Code {
		t.Errorf("ControlledShutdown: %v", kerr.ErrorForCode(got))
	}
	el := kmsg.NewPtrElectLeadersRequest()
	el.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	resp := c.ElectLeaders(context.Background(), el)
	if resp.ErrorCode != kerr.NotController.Code || resp.Topics[0].Partitions[0].ErrorCode != kerr.NotController.Code {
		t.Errorf("ElectLeaders: %+v", resp)
	}
}

// TestQuorumLoss stops the coordinator under a running controller: requests
// that need a write fail with REQUEST_TIMED_OUT, nothing panics, the term
// survives, and the controller acts again once the coordinator is back.
func TestQuorumLoss(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	c := e.startController(100, nil, coord.WithCallTimeout(500*time.Millisecond))
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}}, nil)
	st := e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)

	e.srv.Close()
	req := kmsg.NewPtrAlterPartitionRequest()
	req.SetVersion(1)
	req.BrokerID, req.BrokerEpoch = 1, e.regs[1].Epoch()
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewAlterPartitionRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.NewISR, rp.PartitionEpoch = 0, 0, ids(1, 2), int32(st.Version)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := c.ctrl.AlterPartition(context.Background(), req)
	if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("AlterPartition without quorum: %v / %v", kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	}
	select {
	case <-c.done:
		t.Fatalf("controller stopped without quorum: %v", c.err)
	default:
	}
	if !c.ctrl.Active() {
		t.Fatal("controller inactive without quorum")
	}

	e.srv = coordtest.StartWith(t, e.cfg)
	// Registrations end before the restarted member stops (cleanups run
	// last-in first-out), or each would wait out a call timeout.
	t.Cleanup(func() {
		for _, r := range e.regs {
			r.Close()
		}
	})
	// Once the coordinator answers, the controller acts on events again.
	proctest.Eventually(t, 20*time.Second, "condition", func() error {
		if err := e.regs[1].Close(); err != nil {
			return err
		}
		return nil
	})
	e.waitState(tp("t", 0), 2, ids(2, 3), 1)
	e.waitLAI(3, tp("t", 0), 2, ids(2, 3), 1)
	select {
	case <-c.done:
		t.Fatalf("controller stopped: %v", c.err)
	default:
	}
}

// TestSenders checks the per-broker channels: a broker that never answers
// does not hold up the others, and a request whose connection breaks is
// sent again until it is answered.
func TestSenders(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	e.brokers[3].hang.Store(true)
	e.brokers[2].drop.Store(2)
	e.startController(100, func(cfg *Config) { cfg.RequestTimeout = time.Minute })
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}}, nil)
	e.waitLAI(1, tp("t", 0), 1, ids(1, 2, 3), 0)
	e.waitLAI(2, tp("t", 0), 1, ids(1, 2, 3), 0)
	e.waitUM(1, tp("t", 0), 1, ids(1, 2, 3))
	e.waitUM(2, tp("t", 0), 1, ids(1, 2, 3))
	// Broker 2 saw the failover UpdateMetadata three times: twice dropped.
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		n := 0
		for _, r := range e.brokers[2].requests() {
			if _, ok := r.req.(*kmsg.UpdateMetadataRequest); ok {
				n++
			}
		}
		if n < 3 {
			return fmt.Errorf("broker 2 received %d UpdateMetadata, want >= 3 (2 dropped, then answered)", n)
		}
		return nil
	})
	// Broker 3 got the first request and still waits on it.
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if n := len(e.brokers[3].requests()); n != 1 {
			return fmt.Errorf("hanging broker 3 received %d requests, want 1", n)
		}
		return nil
	})
}

// TestBrokerBounce: a broker that re-registers at once (new epoch) loses
// its leaderships and ISR memberships whether or not the controller saw
// the gap (KAFKA-7235), and its new incarnation gets LeaderAndIsr with its
// new broker epoch.
func TestBrokerBounce(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2, 3}}, nil)
	e.waitState(tp("t", 0), 1, ids(1, 2, 3), 0)
	old := e.regs[1].Epoch()
	e.kill(1)
	e.start(1)
	e.waitState(tp("t", 0), 2, ids(2, 3), 1)
	_, lai := e.waitLAIReq(1, tp("t", 0), 2, ids(2, 3), 1)
	if lai.BrokerEpoch == old || lai.BrokerEpoch != e.regs[1].Epoch() {
		t.Errorf("LeaderAndIsr broker epoch %d, want the new registration's %d (old %d)", lai.BrokerEpoch, e.regs[1].Epoch(), old)
	}
}

// stopReplicaDeletes reports whether broker fb was asked to delete t-p.
func (fb *fakeBroker) stopReplicaDeletes(topic string, p int32) int {
	n := 0
	for _, rc := range fb.requests() {
		if sr, ok := rc.req.(*kmsg.StopReplicaRequest); ok {
			for _, rt := range sr.Topics {
				for _, ps := range rt.PartitionStates {
					if rt.Topic == topic && ps.Partition == p && ps.Delete {
						n++
					}
				}
			}
		}
	}
	return n
}

// TestTopicDeletionWaitsForOfflineReplica: a deletion halts while a
// replica's broker is down (the topic stays marked, out of the metadata
// and out of elections) and completes once it is back and has answered.
func TestTopicDeletionWaitsForOfflineReplica(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	e.startController(100, nil)
	e.createTopic("t", map[int32][]int32{0: {1, 2}}, nil)
	e.waitState(tp("t", 0), 1, ids(1, 2), 0)
	e.kill(2)
	e.waitState(tp("t", 0), 1, ids(1), 1)
	if err := e.admin.MarkTopicForDeletion(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if n := e.brokers[1].stopReplicaDeletes("t", 0); n == 0 {
			return errors.New("broker 1 not asked to delete t-0")
		}
		if ps, _, _ := e.brokers[3].lastUM(tp("t", 0)); ps.Leader != leaderDuringDelete {
			return fmt.Errorf("broker 3: UpdateMetadata leader %d, want %d", ps.Leader, leaderDuringDelete)
		}
		return nil
	})
	// Broker 1 may die now: a topic being deleted takes part in no election.
	e.kill(1)
	spec, err := e.admin.Topic(context.Background(), "t")
	if err != nil || !spec.MarkedForDeletion {
		t.Fatalf("topic while a replica is down: %+v, %v (want still marked)", spec, err)
	}
	e.start(2)
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if n := e.brokers[2].stopReplicaDeletes("t", 0); n == 0 {
			return errors.New("returning broker 2 not asked to delete t-0")
		}
		if _, err := e.admin.Topic(context.Background(), "t"); !errors.Is(err, coord.ErrTopicNotFound) {
			return fmt.Errorf("topic still there: %v", err)
		}
		return nil
	})
	st, err := e.admin.PartitionState(context.Background(), "t", 0)
	if !errors.Is(err, coord.ErrPartitionNotFound) {
		t.Errorf("partition state after deletion: %+v, %v", st, err)
	}
}
