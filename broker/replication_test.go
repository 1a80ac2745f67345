package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// fastFailover makes multi-process tests quick: short sessions and lag.
var fastFailover = []string{
	"coordinator.session.timeout.ms=3000",
	"replica.lag.time.max.ms=2000",
	"replica.fetch.wait.max.ms=100",
	"replica.fetch.backoff.ms=100",
	"controlled.shutdown.retry.backoff.ms=200",
}

// ackedProducer sends unique values to topic until stopped and records
// which ones were acknowledged.
type ackedProducer struct {
	mu     sync.Mutex
	acked  map[string]bool
	failed int
	cancel context.CancelFunc
	done   chan struct{}
}

func startProducer(t *testing.T, cl *kgo.Client, topic string) *ackedProducer {
	ctx, cancel := context.WithCancel(context.Background())
	ap := &ackedProducer{acked: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ap.done)
		var wg sync.WaitGroup
		for i := 0; ctx.Err() == nil; i++ {
			v := strconv.Itoa(i)
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				ap.mu.Lock()
				defer ap.mu.Unlock()
				if err == nil {
					ap.acked[v] = true
				} else {
					ap.failed++
				}
			})
		}
		wg.Wait()
	}()
	return ap
}

func (ap *ackedProducer) count() int {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return len(ap.acked)
}

func (ap *ackedProducer) waitAcked(t *testing.T, n int, within time.Duration) {
	t.Helper()
	proctest.Eventually(t, within, fmt.Sprintf("%d acknowledged", n), func() error {
		if c := ap.count(); c < n {
			return fmt.Errorf("%d acknowledged", c)
		}
		return nil
	})
}

func (ap *ackedProducer) stop() map[string]bool {
	ap.cancel()
	<-ap.done
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return ap.acked
}

// lostAcked returns the acknowledged values missing from what was read.
func lostAcked(acked map[string]bool, read []string) []string {
	have := map[string]bool{}
	for _, v := range read {
		have[v] = true
	}
	var lost []string
	for v := range acked {
		if !have[v] {
			lost = append(lost, v)
		}
	}
	slices.Sort(lost)
	return lost
}

// TestAcksAllSurvivesLeaderKill: acks=all with min.insync.replicas=2 and
// RF 3 loses no acknowledged record when the leader's broker is SIGKILLed
// mid-stream (KAFKA-SPEC §3, seed 000).
func TestAcksAllSurvivesLeaderKill(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: fastFailover})
	c.CreateTopic("safe", 1, 3, map[string]string{"min.insync.replicas": "2"})
	st, _ := c.Describe("safe")
	leader := st[0].Leader

	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(60*time.Second))
	ap := startProducer(t, cl, "safe")
	ap.waitAcked(t, 2000, 30*time.Second)
	c.Brokers[leader].Kill()
	proctest.Eventually(t, 30*time.Second, "new leader", func() error {
		s, err := c.Describe("safe")
		if err != nil {
			return err
		}
		if s[0].Leader == leader || s[0].Leader < 0 {
			return fmt.Errorf("leader %d", s[0].Leader)
		}
		return nil
	})
	before := ap.count()
	ap.waitAcked(t, before+1000, 30*time.Second)
	// Stop quickly: the producer is unbounded.
	acked := ap.stop()
	read := readAll(t, c.Bootstrap()[0], "safe")
	if lost := lostAcked(acked, read); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged records lost with acks=all, min.insync.replicas=2: first %v", len(lost), len(acked), lost[:min(5, len(lost))])
	}
	t.Logf("%d acknowledged, %d read, leader %d killed", len(acked), len(read), leader)
}

// TestPausedFollowerLeavesAndRejoinsISR: a follower SIGSTOPped longer than
// replica.lag.time.max.ms leaves the ISR; with min.insync.replicas=2 and an
// ISR of one, acks=all gets NOT_ENOUGH_REPLICAS while acks=1 still works;
// after SIGCONT the follower catches up and rejoins (KAFKA-SPEC §1, §3.2).
func TestPausedFollowerLeavesAndRejoinsISR(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 2, Overrides: fastFailover})
	c.CreateTopic("lag", 1, 2, map[string]string{"min.insync.replicas": "2"})
	st, _ := c.Describe("lag")
	leader := st[0].Leader
	var follower int32
	for _, r := range st[0].Replicas {
		if r != leader {
			follower = r
		}
	}
	c.Brokers[follower].Pause()
	defer c.Brokers[follower].Resume()
	proctest.Eventually(t, 20*time.Second, "follower out of the ISR", func() error {
		s, err := c.Describe("lag")
		if err != nil {
			return err
		}
		if !slices.Equal(s[0].ISR, []int32{leader}) {
			return fmt.Errorf("isr %v", s[0].ISR)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, err := kgo.NewClient(kgo.SeedBrokers(c.BrokerAddrs[leader]), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	// The metadata can show the shrink before the leader has applied it
	// (the controller's answer and its metadata update travel apart); a
	// produce in between waits on the paused follower.
	proctest.Eventually(t, 30*time.Second, "acks=all refused with an ISR of one", func() error {
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		if err := all.ProduceSync(ctx2, &kgo.Record{Topic: "lag", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
			return fmt.Errorf("err = %v, want NOT_ENOUGH_REPLICAS", err)
		}
		return nil
	})
	// This client bootstraps from the leader alone: the paused broker would
	// only cost it connection timeouts.
	one, err := kgo.NewClient(kgo.SeedBrokers(c.BrokerAddrs[leader]), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	for i := 0; i < 100; i++ {
		if err := one.ProduceSync(ctx, &kgo.Record{Topic: "lag", Value: []byte("y" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("acks=1 with ISR of one: %v", err)
		}
	}
	c.Brokers[follower].Resume()
	proctest.Eventually(t, 30*time.Second, "follower back in the ISR", func() error {
		s, err := c.Describe("lag")
		if err != nil {
			return err
		}
		if len(s[0].ISR) != 2 {
			return fmt.Errorf("isr %v", s[0].ISR)
		}
		return nil
	})
	// The leader learns the ISR change from the controller's answer; allow
	// it a moment after the metadata shows it.
	proctest.Eventually(t, 20*time.Second, "acks=all after the follower rejoined", func() error {
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		return all.ProduceSync(ctx2, &kgo.Record{Topic: "lag", Value: []byte("z")}).FirstErr()
	})
}
