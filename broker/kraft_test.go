package broker_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
)

// TestKRaftLifecycle runs a cluster in KRaft mode (kafka.profile 4.0): the
// controller is on the coordinator nodes, not a broker; a SIGKILLed
// leader is fenced when its heartbeats stop and its partitions get new
// leaders; it is unfenced and rejoins the ISR when it comes back; a
// SIGTERMed leader shuts down under control through its heartbeats; and
// when the active controller's node dies another quorum node takes over.
func TestKRaftLifecycle(t *testing.T) {
	t.Parallel()
	c := proctest.StartCluster(t, proctest.ClusterOptions{
		Coordinators: 3, Brokers: 3, KRaft: true,
		Overrides: []string{"broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500", "min.insync.replicas=2",
			"eligible.leader.replicas.enable=true"},
	})
	const topic = "kraft"
	c.CreateTopic(topic, 1, 3, nil)
	// A topic whose ISR is below min.insync.replicas as soon as one
	// replica is fenced: that replica joins its ELR (KIP-966).
	c.CreateTopic("elr", 1, 3, map[string]string{"min.insync.replicas": "3"})
	st, err := c.Describe(topic)
	if err != nil {
		t.Fatal(err)
	}
	// No broker runs the controller: every broker's log is free of a won
	// election, and a coordinator's says it is the active controller.
	for id, p := range c.Brokers {
		if strings.Contains(p.Log(), "elected controller") {
			t.Fatalf("broker %d ran a controller in KRaft mode", id)
		}
	}
	active := activeController(t, c)
	t.Logf("active controller on %s; partition 0 led by %d", active.Name, st[0].Leader)

	cl := c.Client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	produce := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr()
			cancel()
			if err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	produce(50)

	// A SIGKILLed leader: fenced by the controller, a new leader elected.
	old := st[0].Leader
	c.Brokers[old].Kill()
	proctest.Eventually(t, 30*time.Second, "a new leader after the kill", func() error {
		st, err := c.Describe(topic)
		if err != nil {
			return err
		}
		if st[0].Leader == old || st[0].Leader < 0 || slices.Contains(st[0].ISR, old) {
			return fmt.Errorf("leader %d, isr %v", st[0].Leader, st[0].ISR)
		}
		return nil
	})
	active = activeController(t, c)
	if !regexp.MustCompile(fmt.Sprintf(`msg="fencing broker: no heartbeat within broker.session.timeout.ms" .* broker=%d `, old)).MatchString(active.Log()) {
		t.Fatalf("the active controller's log does not show broker %d fenced for its heartbeats:\n%s", old, proctest.Tail(active.Log(), 30))
	}
	produce(50)
	// DescribeTopicPartitions names the fenced broker in the ELR of the
	// topic whose ISR fell below min.insync.replicas.
	proctest.Eventually(t, 20*time.Second, "the fenced broker in the ELR", func() error {
		for id, p := range c.Brokers {
			if !p.Running() {
				continue
			}
			req := kmsg.NewPtrDescribeTopicPartitionsRequest()
			rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			rt.Topic = "elr"
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			raw, err := wire.NewClient(c.BrokerAddrs[id], "kraft-test", nil).Request(ctx, req)
			cancel()
			if err != nil {
				return err
			}
			resp := raw.(*kmsg.DescribeTopicPartitionsResponse)
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				return fmt.Errorf("answer %+v", resp.Topics)
			}
			if p := resp.Topics[0].Partitions[0]; !slices.Contains(p.EligibleLeaderReplicas, old) {
				return fmt.Errorf("b%d: isr %v elr %v", id, p.ISR, p.EligibleLeaderReplicas)
			}
			return nil
		}
		return fmt.Errorf("no broker running")
	})

	// Back: registered, unfenced at its first heartbeat, back in the ISR.
	c.Brokers[old].Restart()
	proctest.Eventually(t, 60*time.Second, "the restarted broker back in the ISR", func() error {
		st, err := c.Describe(topic)
		if err != nil {
			return err
		}
		if !slices.Contains(st[0].ISR, old) {
			return fmt.Errorf("isr %v", st[0].ISR)
		}
		return nil
	})
	if log := c.Brokers[old].Log(); !strings.Contains(log, "fencing changed") || !strings.Contains(log, "fenced=false") {
		t.Fatalf("broker %d's log does not show it unfenced:\n%s", old, proctest.Tail(log, 30))
	}

	// The active controller's node dies: another quorum node takes over
	// and the brokers heartbeat it.
	active.Kill()
	var next *proctest.Proc
	proctest.Eventually(t, 30*time.Second, "another active controller", func() error {
		for _, p := range c.Coordinators {
			if p != active && p.Running() && strings.Contains(p.Log(), "elected active controller") {
				next = p
				return nil
			}
		}
		return fmt.Errorf("no other coordinator was elected")
	})
	produce(50)

	// A SIGTERMed leader shuts down under control: the controller grants
	// it once its leaderships have moved.
	st, err = c.Describe(topic)
	if err != nil {
		t.Fatal(err)
	}
	leader := st[0].Leader
	if err := c.Brokers[leader].Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if log := c.Brokers[leader].Log(); !strings.Contains(log, "controlled shutdown granted by the controller") {
		t.Fatalf("broker %d stopped without a granted controlled shutdown:\n%s", leader, proctest.Tail(log, 30))
	}
	if !regexp.MustCompile(fmt.Sprintf(`msg="broker shut down under control; fencing it" .* broker=%d\b`, leader)).MatchString(next.Log()) {
		t.Fatalf("the controller's log does not show broker %d's controlled shutdown:\n%s", leader, proctest.Tail(next.Log(), 30))
	}
	proctest.Eventually(t, 30*time.Second, "a leader other than the stopped one", func() error {
		st, err := c.Describe(topic)
		if err != nil {
			return err
		}
		if st[0].Leader == leader || st[0].Leader < 0 {
			return fmt.Errorf("leader %d", st[0].Leader)
		}
		return nil
	})
}

// activeController is the coordinator process whose controller won the
// newest election among the running ones.
func activeController(t *testing.T, c *proctest.Cluster) *proctest.Proc {
	t.Helper()
	var found *proctest.Proc
	proctest.Eventually(t, 30*time.Second, "an active controller", func() error {
		best := -1
		for _, p := range c.Coordinators {
			if !p.Running() {
				continue
			}
			if i := strings.LastIndex(p.Log(), "elected active controller"); i >= 0 && strings.LastIndex(p.Log(), "controller term ended") < i {
				if best < 0 {
					found, best = p, i
				}
			}
		}
		if found == nil {
			return fmt.Errorf("no coordinator runs the active controller")
		}
		return nil
	})
	return found
}
