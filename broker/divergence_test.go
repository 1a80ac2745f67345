package broker_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestPowerLossDivergence walks KAFKA-SPEC §5.6. A and B both hold m1@0 and
// m2@1 (HW 2), nothing flushed. Power fails on both; A's recovery finds m2
// was never written to disk (LEO 1). A comes up first, is elected and
// takes m3@1. B comes up and, with replication.truncation=hw, truncates to
// its HW 2 (no change) and fetches from 2: offset 1 is m3 on A and m2 on B,
// permanently and silently. With epoch, B asks A where epoch 0 ended (1),
// truncates to it and fetches m3.
func TestPowerLossDivergence(t *testing.T) {
	for _, tc := range []struct {
		truncation string
		diverges   bool
	}{
		{"hw", true},
		{"epoch", false},
	} {
		t.Run(tc.truncation, func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: []string{
				"kafka.profile=0.10",
				"replication.truncation=" + tc.truncation,
				"unclean.leader.election.enable=true",
				"coordinator.session.timeout.ms=4000",
				"replica.fetch.wait.max.ms=100",
				"replica.high.watermark.checkpoint.interval.ms=100",
				"replica.lag.time.max.ms=60000",
				"replica.fetch.backoff.ms=200",
			}})
			topic, a, b := pairAwayFromController(t, c, "t56")
			produce := func(addr string, acks kgo.Acks, v string) {
				t.Helper()
				cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite())
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatalf("produce %s: %v", v, err)
				}
			}
			produce(c.BrokerAddrs[a], kgo.AllISRAcks(), "m1")
			produce(c.BrokerAddrs[a], kgo.AllISRAcks(), "m2")
			bCheckpoint := filepath.Join(c.Dir, fmt.Sprintf("b%d", b), "replication-offset-checkpoint")
			proctest.Eventually(t, 15*time.Second, "B checkpoints HW 2", func() error {
				if hw := checkpointed(bCheckpoint, topic); hw != 2 {
					return fmt.Errorf("B's checkpointed HW %d", hw)
				}
				return nil
			})

			// Power fails on both. A's disk never got m2.
			c.Brokers[a].Kill()
			c.Brokers[b].Kill()
			dropLastBatch(t, filepath.Join(c.Dir, fmt.Sprintf("b%d", a), topic+"-0"))

			// A comes back first and leads; it takes m3 at offset 1.
			c.Brokers[a].Restart()
			proctest.Eventually(t, 40*time.Second, "A leads", func() error {
				s, err := c.Describe(topic)
				if err != nil {
					return err
				}
				if s[0].Leader != a {
					return fmt.Errorf("leader %d", s[0].Leader)
				}
				return nil
			})
			produce(c.BrokerAddrs[a], kgo.LeaderAck(), "m3")
			onA := readAll(t, c.BrokerAddrs[a], topic)

			// B comes back as A's follower and catches up.
			c.Brokers[b].Restart()
			proctest.Eventually(t, 40*time.Second, "B back in the ISR", func() error {
				s, err := c.Describe(topic)
				if err != nil {
					return err
				}
				if len(s[0].ISR) != 2 {
					return fmt.Errorf("isr %v", s[0].ISR)
				}
				return nil
			})
			// Let B lead: what it serves is what it holds.
			c.Brokers[a].Kill()
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
			onB := readAll(t, c.BrokerAddrs[b], topic)
			diverged := !slices.Equal(onA, onB)
			t.Logf("replication.truncation=%s: A held %v, B holds %v", tc.truncation, onA, onB)
			if !slices.Equal(onA, []string{"m1", "m3"}) {
				t.Fatalf("A held %v, want [m1 m3]", onA)
			}
			if diverged != tc.diverges {
				t.Fatalf("replication.truncation=%s: diverged=%v (A %v, B %v), want %v", tc.truncation, diverged, onA, onB, tc.diverges)
			}
		})
	}
}

// dropLastBatch removes the last record batch from the newest segment of a
// partition directory, as if it never reached the disk before power failed.
func dropLastBatch(t *testing.T, dir string) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(segs)
	if len(segs) == 0 {
		t.Fatalf("no segment in %s", dir)
	}
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for pos := 0; pos+12 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[pos+8:])) + 12
		if n < 12 || pos+n > len(data) {
			break
		}
		last = pos
		pos += n
	}
	if last < 0 {
		t.Fatalf("no batch in %s", path)
	}
	if err := os.Truncate(path, int64(last)); err != nil {
		t.Fatal(err)
	}
}
