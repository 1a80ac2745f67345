package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestCoordinatorQuorumLoss: with two of three coordinators down, brokers
// keep serving the partitions they lead (acks=1 and acks=all), topic
// creation cannot complete, nothing crashes; when the quorum is back the
// controller works again.
func TestCoordinatorQuorumLoss(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Coordinators: 3, Brokers: 3, Overrides: []string{
		"coordinator.session.timeout.ms=18000", "replica.fetch.wait.max.ms=100",
	}})
	c.CreateTopic("q", 3, 3, nil)
	st, _ := c.Describe("q")
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	send := func(within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		for p := range st {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "q", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
		}
		return nil
	}
	if err := send(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.Coordinators[1].Kill()
	c.Coordinators[2].Kill()
	for i := 0; i < 20; i++ {
		if err := send(10 * time.Second); err != nil {
			t.Fatalf("produce without a coordinator quorum: %v", err)
		}
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := adm.CreateTopic(ctx, 1, 3, nil, "needs-quorum")
	cancel()
	if err == nil {
		t.Fatal("topic creation succeeded without a coordinator quorum")
	}
	for id, p := range c.Brokers {
		if !p.Running() {
			t.Fatalf("broker %d exited during the quorum loss:\n%s", id, proctest.Tail(p.Log(), 20))
		}
	}
	c.Coordinators[1].Restart()
	c.Coordinators[2].Restart()
	proctest.Eventually(t, 60*time.Second, "topic creation after the quorum returned", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := adm.CreateTopic(ctx, 1, 3, nil, "after-quorum")
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
		return nil
	})
	c.WaitTopic("after-quorum", 1, 3)
	if err := send(10 * time.Second); err != nil {
		t.Fatalf("produce after the quorum returned: %v", err)
	}
}
