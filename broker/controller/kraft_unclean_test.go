package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/internal/proctest"
)

// kraftBroker plays a KRaft broker's registration and heartbeats against
// the controller's handlers directly.
type kraftBroker struct {
	t     *testing.T
	c     *Controller
	id    int32
	epoch int64
	fb    *fakeBroker
}

func (e *env) kraftBroker(c *Controller, id int32) *kraftBroker {
	e.t.Helper()
	fb := startFakeBroker(e.t, id)
	e.brokers[id] = fb
	b := &kraftBroker{t: e.t.(*testing.T), c: c, id: id, fb: fb}
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = id
	req.IncarnationID[0] = byte(id)
	info := fb.info()
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "BROKER", info.Host, uint16(info.Port)
	req.Listeners = append(req.Listeners, l)
	resp := c.BrokerRegistration(context.Background(), req)
	if resp.ErrorCode != 0 {
		e.t.Fatalf("register broker %d: %v", id, kerr.ErrorForCode(resp.ErrorCode))
	}
	b.epoch = resp.BrokerEpoch
	return b
}

// heartbeat sends one BrokerHeartbeat and returns whether the broker is
// fenced after it.
func (b *kraftBroker) heartbeat(wantFence bool) bool {
	b.t.Helper()
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.BrokerID, req.BrokerEpoch, req.WantFence = b.id, b.epoch, wantFence
	resp := b.c.BrokerHeartbeat(context.Background(), req)
	if resp.ErrorCode != 0 {
		b.t.Fatalf("heartbeat of broker %d: %v", b.id, kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp.IsFenced
}

// TestKRaftUncleanElectionInterval: in KRaft mode a dynamic
// unclean.leader.election.enable does not elect at once, as the ZooKeeper
// era's controller does (TestUncleanElection, "topic config turned on
// later"): the active controller elects leaderless partitions at its
// periodic check, every unclean.leader.election.interval.ms
// (QuorumController's maybeElectUncleanLeaders, 5 minutes by default),
// and ElectLeaders (UNCLEAN) elects at once.
func TestKRaftUncleanElectionInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval string
	}{
		{name: "elected at the next check", interval: "200"},
		{name: "not at once; ElectLeaders elects", interval: "3600000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.startController(100, func(cfg *Config) {
				cfg.KRaft, cfg.BrokerSessionTimeout = true, time.Hour
				if err := cfg.Broker.Set("unclean.leader.election.interval.ms", tc.interval); err != nil {
					t.Fatal(err)
				}
			})
			b1, b2 := e.kraftBroker(c.ctrl, 1), e.kraftBroker(c.ctrl, 2)
			if b1.heartbeat(false) || b2.heartbeat(false) {
				t.Fatal("a registered broker stayed fenced after its first heartbeat")
			}
			e.createTopic("t", map[int32][]int32{0: {1, 2}}, nil)
			e.waitState(tp("t", 0), 1, ids(1, 2), 0)
			// Broker 2 is fenced and leaves the ISR; unfenced again, it is
			// out of sync (no leader adds it back).
			if !b2.heartbeat(true) {
				t.Fatal("broker 2 not fenced")
			}
			e.waitState(tp("t", 0), 1, ids(1), 1)
			if b2.heartbeat(false) {
				t.Fatal("broker 2 still fenced")
			}
			// The last ISR member is fenced: the partition is offline.
			if !b1.heartbeat(true) {
				t.Fatal("broker 1 not fenced")
			}
			e.waitState(tp("t", 0), NoLeader, ids(1), 2)
			if err := e.admin.SetTopicConfig(context.Background(), nil, "t", map[string]string{"unclean.leader.election.enable": "true"}); err != nil {
				t.Fatal(err)
			}
			if tc.interval == "200" {
				e.waitState(tp("t", 0), 2, ids(2), 3)
				return
			}
			// Once the controller has applied the new topic config (the
			// same event in which the ZooKeeper era elects), the
			// partition is still offline.
			e.waitConfigSeen(c.ctrl, "t")
			st, err := e.admin.PartitionState(context.Background(), "t", 0)
			if err != nil {
				t.Fatal(err)
			}
			if st.Leader != NoLeader {
				t.Fatalf("leader %d elected at the config change; KRaft waits for its periodic check", st.Leader)
			}
			req := kmsg.NewPtrElectLeadersRequest()
			req.SetVersion(2)
			req.ElectionType = ElectUnclean
			req.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "t", Partitions: []int32{0}}}
			if code := c.ctrl.ElectLeaders(context.Background(), req).Topics[0].Partitions[0].ErrorCode; code != 0 {
				t.Fatalf("ElectLeaders UNCLEAN: %v", kerr.ErrorForCode(code))
			}
			e.waitState(tp("t", 0), 2, ids(2), 3)
		})
	}
}

// waitConfigSeen waits until the controller's term has applied topic's
// unclean.leader.election.enable=true.
func (e *env) waitConfigSeen(c *Controller, topic string) {
	e.t.Helper()
	proctest.Eventually(e.t, 10*time.Second, "the controller applies "+topic+"'s unclean.leader.election.enable", func() error {
		seen := false
		c.submit(context.Background(), func(_ context.Context, t *term) error {
			seen = t.unclean(topic)
			return nil
		})
		if !seen {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}
