package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestHWTruncationLosesAckedWrite walks KAFKA-SPEC §5.5 step by step. RF 2,
// A leads, B follows, acks=all: m1@0 and m2@1 are acknowledged while B's
// high watermark is still 1. B crashes and restarts; as a follower it
// truncates to its HW (pre-KIP-101) and deletes m2. A stops before B
// fetches again; B becomes leader with LEO 1; A returns, fetches from 2,
// gets OFFSET_OUT_OF_RANGE and truncates to 1. With
// replication.truncation=hw the acknowledged m2 is gone from every replica;
// with epoch, B asks A for the end of epoch 0, keeps m2, and nothing is
// lost.
func TestHWTruncationLosesAckedWrite(t *testing.T) {
	for _, tc := range []struct {
		truncation string
		want       []string
	}{
		{"hw", []string{"m1"}},
		{"epoch", []string{"m1", "m2"}},
	} {
		t.Run(tc.truncation, func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, TestHooks: true, Overrides: []string{
				"kafka.profile=0.10",
				"replication.truncation=" + tc.truncation,
				"unclean.leader.election.enable=true",
				"coordinator.session.timeout.ms=10000",
				"replica.fetch.wait.max.ms=12000",
				"replica.high.watermark.checkpoint.interval.ms=100",
				"replica.lag.time.max.ms=60000",
				"replica.fetch.backoff.ms=200",
			}})
			topic, a, b := pairAwayFromController(t, c, "t55")
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.BrokerAddrs[a]), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			send := func(v string) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatalf("produce %s: %v", v, err)
				}
			}
			// The topic may not be in A's metadata cache yet: a produce it
			// refuses as UNKNOWN_TOPIC_OR_PARTITION appended nothing and is
			// tried again.
			proctest.Eventually(t, 15*time.Second, "A takes m1", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("m1")}).FirstErr()
				if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
					t.Fatalf("produce m1: %v", err)
				}
				return err
			})
			bCheckpoint := filepath.Join(c.Dir, fmt.Sprintf("b%d", b), "replication-offset-checkpoint")
			proctest.Eventually(t, 30*time.Second, "B checkpoints HW 1", func() error {
				if hw := checkpointed(bCheckpoint, topic); hw != 1 {
					return fmt.Errorf("B's checkpointed HW %d", hw)
				}
				return nil
			})
			// m2 is acknowledged once B's next fetch (at offset 2) tells A
			// that B has it; that fetch then waits in A's purgatory for
			// replica.fetch.wait.max.ms (12 s) with no data to wake it, so
			// B's HW stays 1 until long after the kill below.
			send("m2")
			c.Brokers[b].Kill()
			if hw := checkpointed(bCheckpoint, topic); hw != 1 {
				t.Fatalf("B learned HW %d before it was killed: its fetch at offset 2 was answered before replica.fetch.wait.max.ms", hw)
			}
			cl.Close()
			// B restarts; its registration waits for its old session to
			// end, and it comes back as A's follower while A still leads.
			// A holds B's fetches of the partition, so B never gets m2
			// again. A follower fetches only once it has truncated (hw) or
			// asked A for the end of epoch 0 (epoch): when A holds B's
			// first fetch, that step is done and A stops.
			hold := c.Hook(a, proctest.HookRule{API: "Fetch", From: proctest.Ref(b), Topic: topic, Partition: proctest.Ref(0)})
			c.Brokers[b].Restart()
			c.WaitHeld(a, hold, 1, 40*time.Second, "A holds B's first fetch after B's restart")
			c.Brokers[a].Pause()
			proctest.Eventually(t, 40*time.Second, "B leads", func() error {
				s, err := c.Describe(topic)
				if err != nil {
					return err
				}
				if s[0].Leader != b {
					return fmt.Errorf("leader %d", s[0].Leader)
				}
				return nil
			})
			c.Brokers[a].Resume()
			proctest.Eventually(t, 40*time.Second, "A follows B again", func() error {
				s, err := c.Describe(topic)
				if err != nil {
					return err
				}
				if !slices.Contains(s[0].ISR, a) {
					return fmt.Errorf("isr %v", s[0].ISR)
				}
				return nil
			})
			got := readAll(t, c.BrokerAddrs[b], topic)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("replication.truncation=%s: partition holds %v, want %v", tc.truncation, got, tc.want)
			}
			t.Logf("replication.truncation=%s: acknowledged [m1 m2], partition now holds %v", tc.truncation, got)
		})
	}
}

// checkpointed reads topic's partition-0 HW from a replication-offset-checkpoint file.
func checkpointed(path, topic string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == topic && f[1] == "0" {
			var n int64
			fmt.Sscan(f[2], &n)
			return n
		}
	}
	return -1
}

// pairAwayFromController creates RF-2 topics named prefix-N until one's two
// replicas exclude the controller, and returns it with its leader (A) and
// follower (B): the §5.5 and §5.6 walk-throughs kill A and B, and must not
// kill the controller with them.
func pairAwayFromController(t *testing.T, c *proctest.Cluster, prefix string) (topic string, a, b int32) {
	t.Helper()
	ctrl := controllerID(t, c)
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		c.CreateTopic(name, 1, 2, nil)
		st, _ := c.Describe(name)
		if slices.Contains(st[0].Replicas, ctrl) {
			continue
		}
		a = st[0].Leader
		for _, r := range st[0].Replicas {
			if r != a {
				b = r
			}
		}
		return name, a, b
	}
	t.Fatalf("no topic placed away from controller %d", ctrl)
	return "", 0, 0
}
