package workloads

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestNoRetryProducerFollowsMovedLeader: a producer whose records are sent
// once (retries -1) learns a moved leader from the first NOT_LEADER answer,
// as Kafka's producer does, instead of sending every later record to the
// old leader until metadata.max.age. Produce v8 (Kafka 2.4) carries no
// KIP-951 leader hint, so only a metadata refresh can move it.
func TestNoRetryProducerFollowsMovedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(1, "moved"), kfake.MaxVersions(kversion.V2_4_0()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := Config{Topic: "moved", Partitions: 1, Retries: -1}.withDefaults()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, cfg.producerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	produce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}
	if err := produce(); err != nil {
		t.Fatalf("produce to the first leader: %v", err)
	}
	leader, _, err := cl.PartitionLeader("moved", 0)
	if err != nil {
		t.Fatal(err)
	}
	to := int32(0)
	if leader == 0 {
		to = 1
	}
	if err := c.MoveTopicPartition("moved", 0, to); err != nil {
		t.Fatal(err)
	}
	notLeader := 0
	proctest.Eventually(t, 5*time.Second, fmt.Sprintf("a record acknowledged by the new leader %d", to), func() error {
		err := produce()
		if errors.Is(err, kerr.NotLeaderForPartition) {
			notLeader++
		} else if err != nil {
			t.Fatalf("produce after the move: %v", err)
		}
		return err
	})
	t.Logf("acknowledged by broker %d after %d NOT_LEADER answers from broker %d", to, notLeader, leader)
}

// TestNoRetryProducerAfterLeaderRestart is the crash of the library
// scenario restart-truncation/high-watermark under kafka.profile 0.10
// (RF 2, acks=all, min.insync.replicas=2, sends without retries or
// idempotence): the leader A is SIGKILLed and restarted at once. Until
// its old session ends A answers UNKNOWN_TOPIC_OR_PARTITION, then the
// controller elects B and A follows it; every broker's Metadata names B
// and a new producer is acknowledged.
// The producer that sent to A throughout must be acknowledged too: it got
// NOT_LEADER_OR_FOLLOWER from A for as long as it ran (the scenario's 8 s
// without an acknowledged send), never asking for new metadata. (After
// both replicas crash the leader moves only when A's old session ends
// first; crashing A alone moves it every time.)
func TestNoRetryProducerAfterLeaderRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: []string{
		"kafka.profile=0.10",
		"coordinator.session.timeout.ms=6000",
		"replica.lag.time.max.ms=6000",
	}})
	ctrl := controller(t, c)
	var topic string
	var a, b int32
	for i := 0; topic == "" && i < 20; i++ {
		name := fmt.Sprintf("restart-%d", i)
		c.CreateTopic(name, 1, 2, map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
		st, err := c.Describe(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(st[0].Replicas, ctrl) {
			topic, a = name, st[0].Leader
			b = st[0].Replicas[0] + st[0].Replicas[1] - a
		}
	}
	if topic == "" {
		t.Fatalf("no topic placed away from controller %d", ctrl)
	}
	leads := func(id int32, isr int) func() error {
		return func() error {
			st, err := c.Describe(topic)
			if err != nil {
				return err
			}
			if st[0].Leader != id || len(st[0].ISR) < isr {
				return fmt.Errorf("leader %d, isr %v", st[0].Leader, st[0].ISR)
			}
			return nil
		}
	}
	produce := func(cl *kgo.Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}
	cfg := Config{Topic: topic, Partitions: 1, Retries: -1}.withDefaults()
	// kgo also asks for metadata after a failed dial, at most once per
	// metadata.min.age: a minute keeps that out of the test.
	old := c.Client(append(cfg.producerOpts(), kgo.MetadataMinAge(time.Minute))...)
	proctest.Eventually(t, 10*time.Second, "A and B in the ISR", leads(a, 2))
	if err := produce(old); err != nil {
		t.Fatalf("produce to A (b%d): %v", a, err)
	}
	var acked atomic.Int64
	errs := map[string]int{}
	var mu sync.Mutex
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := produce(old); err != nil {
				mu.Lock()
				errs[err.Error()]++
				mu.Unlock()
			} else {
				acked.Add(1)
			}
			time.Sleep(2 * time.Millisecond) // the scenario's send.interval
		}
	}()
	defer func() { stop(); wg.Wait() }()
	c.Brokers[a].Kill()
	c.Brokers[a].Restart()
	proctest.Eventually(t, 30*time.Second, fmt.Sprintf("B (b%d) elected, A (b%d) back in its ISR", b, a), leads(b, 2))
	proctest.Eventually(t, 10*time.Second, fmt.Sprintf("every broker's Metadata v2 names B (b%d)", b), func() error {
		for id, addr := range c.BrokerAddrs {
			if leader := leaderAt(addr, topic); leader != b {
				return fmt.Errorf("b%d names leader %d", id, leader)
			}
		}
		return nil
	})
	if err := produce(c.Client(cfg.producerOpts()...)); err != nil {
		t.Fatalf("a new producer: %v", err)
	}
	since := acked.Load()
	proctest.Eventually(t, 5*time.Second, "the producer that sent to A acknowledged", func() error {
		if acked.Load() == since {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("no send acknowledged since B leads; failed sends: %v", errs)
		}
		return nil
	})
	mu.Lock()
	t.Logf("B (b%d) leads; the producer that sent to A (b%d) is acknowledged again; failed sends: %v", b, a, errs)
	mu.Unlock()
}

// controller is the controller the cluster's metadata names.
func controller(t *testing.T, c *proctest.Cluster) int32 {
	t.Helper()
	cl := c.Client()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m.Controller
}

// leaderAt is partition 0's leader in addr's Metadata v2 (Kafka 0.10's),
// -1 when it names none or does not answer.
func leaderAt(addr, topic string) int32 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V0_10_2()))
	if err != nil {
		return -1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) == 0 || resp.Topics[0].ErrorCode != 0 {
		return -1
	}
	return resp.Topics[0].Partitions[0].Leader
}
