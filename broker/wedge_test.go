package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
	leaders, _, err := tc.describe("wedge")
	if err != nil {
		t.Fatal(err)
	}
	a := leaders[0] // the preferred leader
	b := 3 - a

	// b leads an epoch and nothing is appended in it.
	tc.stop(a)
	waitFor(t, 20*time.Second, "b leads", func() error {
		if p := tc.brokers[b].partition("wedge", 0); p == nil || p.State().Leader != b {
			return fmt.Errorf("b does not lead yet")
		}
		return nil
	})
	tc.start(a)
	waitISR(t, tc.bootstrap()[0], "wedge", 2)

	// a leads again (preferred election); b follows with the empty epoch
	// at its LEO.
	waitFor(t, 20*time.Second, "preferred leader elected", func() error {
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
	waitFor(t, 15*time.Second, "follower catches up", func() error {
		p := tc.brokers[b].partition("wedge", 0)
		if got := p.Log().LogEndOffset(); got != leo {
			return fmt.Errorf("follower LEO %d, leader LEO %d (epochs %v)", got, leo, p.Log().Epochs().Entries())
		}
		return nil
	})
	waitFor(t, 15*time.Second, "full ISR on the leader", func() error {
		if isr := tc.brokers[a].partition("wedge", 0).State().ISR; !slices.Contains(isr, b) {
			return fmt.Errorf("isr %v", isr)
		}
		return nil
	})
}
