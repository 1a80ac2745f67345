package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestISRLockStall reproduces the seed 004 mechanism: with
// isr.update=sync-under-lock-always (Kafka <= 2.4) a leader whose ISR must
// shrink writes the change to the coordinator while holding the
// partition's write lock, so when the coordinator does not answer,
// produce to that partition stalls while other partitions keep going.
// With async-alter-partition (2.7+) the same fault does not stall produce.
func TestISRLockStall(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		stall bool
	}{
		{"sync-under-lock-always", true},
		{"async-alter-partition", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: []string{
				"isr.update=" + tc.mode,
				"replica.lag.time.max.ms=1500",
				"replica.fetch.wait.max.ms=100",
				"replica.fetch.backoff.ms=100",
				"coordinator.session.timeout.ms=30000",
			}})
			c.CreateTopic("hot", 1, 2, nil)
			c.CreateTopic("other", 3, 1, nil) // one partition led by each broker
			st, _ := c.Describe("hot")
			leader := st[0].Leader
			var follower int32
			for _, r := range st[0].Replicas {
				if r != leader {
					follower = r
				}
			}
			// The other partition is one led by neither the paused follower
			// nor the hot leader.
			os, _ := c.Describe("other")
			otherPart, otherLeader := int32(-1), int32(-1)
			for p, s := range os {
				if s.Leader != follower && s.Leader != leader {
					otherPart, otherLeader = p, s.Leader
				}
			}
			if otherPart < 0 {
				t.Fatalf("no partition of other led by a third broker: %+v", os)
			}
			hot := producerTo(t, c.BrokerAddrs[leader])
			other := producerTo(t, c.BrokerAddrs[otherLeader])
			send := func(cl *kgo.Client, topic string, within time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), within)
				defer cancel()
				part := int32(0)
				if topic == "other" {
					part = otherPart
				}
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte("v")}).FirstErr()
			}
			if err := send(hot, "hot", 10*time.Second); err != nil {
				t.Fatalf("produce before the fault: %v", err)
			}

			// The follower stops fetching and the coordinator stops answering.
			c.Brokers[follower].Pause()
			c.Coordinators[0].Pause()
			defer c.Brokers[follower].Resume()
			defer c.Coordinators[0].Resume()

			// Watch produce to the hot partition for a while: the ISR must
			// shrink after replica.lag.time.max.ms and the shrink needs the
			// coordinator.
			deadline := time.Now().Add(8 * time.Second)
			stalled := false
			for time.Now().Before(deadline) && !stalled {
				if err := send(hot, "hot", 2*time.Second); errors.Is(err, context.DeadlineExceeded) {
					stalled = true
				} else if err != nil {
					t.Fatalf("produce to hot partition: %v", err)
				}
			}
			if stalled != tc.stall {
				t.Fatalf("%s: produce stalled = %v, want %v", tc.mode, stalled, tc.stall)
			}
			if err := send(other, "other", 10*time.Second); err != nil {
				t.Fatalf("produce to another partition during the fault: %v", err)
			}
			c.Coordinators[0].Resume()
			c.Brokers[follower].Resume()
			if err := send(hot, "hot", 30*time.Second); err != nil {
				t.Fatalf("produce after the coordinator came back: %v", err)
			}
			t.Logf("%s: hot-partition produce stalled=%v while the coordinator was paused", tc.mode, stalled)
		})
	}
}

// producerTo is an acks=1 producer bootstrapped from one broker.
func producerTo(t *testing.T, addr string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
