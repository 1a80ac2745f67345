package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFollowerRejoinsAfterEmptyLeaderEpoch reproduces the wedged follower
// of the sarama functional suite (__consumer_offsets-5): a replica that led
// an epoch in which nothing was appended keeps that epoch's entry at its
// LEO. When it follows again, its fetch names that epoch as the last
// fetched one; the new leader, which never had it, answers with a diverging
// epoch ending exactly at the follower's LEO, so the truncation is a no-op
// that must still drop the empty epoch (Kafka's UnifiedLog.truncateTo
// "always truncate epoch cache"). Without that the follower asks the same
// question forever, never appends, and leaves the ISR for good.
func TestFollowerRejoinsAfterEmptyLeaderEpoch(t *testing.T) {
	tc := startCluster(t, 2, "replica.lag.time.max.ms=2000", "auto.leader.rebalance.enable=false")
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 2, nil, "wedge"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "wedge", 2)
	produceValues(t, cl, "wedge", 1, "a", 5)
	a := leaderOf(t, tc, "wedge") // the preferred leader
	b := 3 - a

	// b leads an epoch and nothing is appended in it.
	tc.stop(a)
	proctest.Eventually(t, 20*time.Second, "b leads", func() error {
		if p := tc.brokers[b].partition("wedge", 0); p == nil || p.State().Leader != b {
			return fmt.Errorf("b does not lead yet")
		}
		return nil
	})
	tc.start(a)
	waitISR(t, tc.bootstrap()[0], "wedge", 2)

	// a leads again (preferred election); b follows with the empty epoch
	// at its LEO.
	proctest.Eventually(t, 20*time.Second, "preferred leader elected", func() error {
		ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
		defer ecancel()
		set := kadm.TopicsSet{}
		set.Add("wedge", 0)
		if _, err := adm.ElectLeaders(ectx, kadm.ElectPreferredReplica, set); err != nil {
			return err
		}
		l, _, err := tc.describe("wedge")
		if err != nil {
			return err
		}
		if l[0] != a {
			return fmt.Errorf("leader %d", l[0])
		}
		return nil
	})
	produceAcks1 := tc.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, produceAcks1, "wedge", 1, "b", 5)
	leo := tc.brokers[a].partition("wedge", 0).Log().LogEndOffset()

	// The follower fetches the new records and stays in (or rejoins) the ISR.
	proctest.Eventually(t, 15*time.Second, "follower catches up", func() error {
		p := tc.brokers[b].partition("wedge", 0)
		if got := p.Log().LogEndOffset(); got != leo {
			return fmt.Errorf("follower LEO %d, leader LEO %d (epochs %v)", got, leo, p.Log().Epochs().Entries())
		}
		return nil
	})
	proctest.Eventually(t, 15*time.Second, "full ISR on the leader", func() error {
		if isr := tc.brokers[a].partition("wedge", 0).State().ISR; !slices.Contains(isr, b) {
			return fmt.Errorf("isr %v", isr)
		}
		return nil
	})
}

// TestStalledFollowerIsReported: a follower whose fetcher stops fetching one
// partition (held here by delaying it for an hour) is reported by the
// leader's kafka_server_StalledFollowerPartitions once it has not fetched
// for replica.lag.time.max.ms, and the gauge clears when it fetches again.
// A follower removed from its fetchers outright is fetched again by the
// reconcile check.
func TestStalledFollowerIsReported(t *testing.T) {
	tc := startCluster(t, 2, "replica.lag.time.max.ms=1000", "auto.leader.rebalance.enable=false")
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 2, nil, "stall"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "stall", 2)
	a := leaderOf(t, tc, "stall")
	b := 3 - a
	gauge := func() float64 {
		var m dto.Metric
		if err := tc.brokers[a].metrics.replica.stalled.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	// The gauge starts at 0 once the follower fetches (on a loaded machine
	// its first fetch can come later than replica.lag.time.max.ms).
	proctest.Eventually(t, 10*time.Second, "no stalled follower before the stall", func() error {
		if g := gauge(); g != 0 {
			return fmt.Errorf("gauge %v", g)
		}
		return nil
	})

	// A new topic's ISR is full in metadata from its creation, before the
	// follower has taken its LeaderAndIsr, so hold the partition once the
	// follower has a fetcher for it.
	fs := tc.brokers[b].fetchers
	proctest.Eventually(t, 10*time.Second, "the follower fetches the partition", func() error {
		if !fs.Hold("stall", 0, time.Now().Add(time.Hour)) {
			return fmt.Errorf("in no fetcher of broker %d", b)
		}
		return nil
	})
	proctest.Eventually(t, 10*time.Second, "the leader reports the stalled follower", func() error {
		if g := gauge(); g != 1 {
			return fmt.Errorf("gauge %v", g)
		}
		return nil
	})
	fs.Hold("stall", 0, time.Time{})
	proctest.Eventually(t, 10*time.Second, "the gauge clears", func() error {
		if g := gauge(); g != 0 {
			return fmt.Errorf("gauge %v", g)
		}
		return nil
	})

	// Dropped from every fetcher without a LeaderAndIsr: fetched again.
	fs.Remove("stall", 0)
	proctest.Eventually(t, 10*time.Second, "the reconcile check fetches it again", func() error {
		if !fs.Has("stall", 0) {
			return fmt.Errorf("in no fetcher")
		}
		return nil
	})
	produceValues(t, cl, "stall", 1, "x", 3)
	proctest.Eventually(t, 10*time.Second, "follower catches up", func() error {
		if got, want := tc.brokers[b].partition("stall", 0).Log().LogEndOffset(), tc.brokers[a].partition("stall", 0).Log().LogEndOffset(); got != want {
			return fmt.Errorf("follower LEO %d, leader %d", got, want)
		}
		return nil
	})
}

// leaderOf waits until every broker answers with topic's partition 0 and
// returns its leader.
func leaderOf(t *testing.T, tc *testCluster, topic string) int32 {
	var leader int32
	proctest.Eventually(t, 20*time.Second, "the topic's leader in metadata", func() error {
		leaders, _, err := tc.describe(topic)
		if err != nil {
			return err
		}
		if leaders[0] < 0 {
			return fmt.Errorf("no leader")
		}
		leader = leaders[0]
		return nil
	})
	return leader
}
