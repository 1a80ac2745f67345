package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
)

// initProducerID sends InitProducerId (no transactional id) to addr.
func initProducerID(addr string) (int64, int16, error) {
	cl := wire.NewClient(addr, "pid-test", nil)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := cl.Request(ctx, kmsg.NewPtrInitProducerIDRequest())
	if err != nil {
		return 0, 0, err
	}
	resp := raw.(*kmsg.InitProducerIDResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, 0, err
	}
	return resp.ProducerID, resp.ProducerEpoch, nil
}

// TestProducerIDsDistinctAcrossBrokers: InitProducerId answered by each
// broker of one cluster gives ids no other broker gave, also after a broker
// restart and after the controller is killed, because the blocks are
// reserved in the coordinator (/latest_producer_id_block).
func TestProducerIDsDistinctAcrossBrokers(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: fastFailover})
	seen := map[int64]int32{}
	ask := func(phase string, ids ...int32) {
		t.Helper()
		for _, id := range ids {
			var pid int64
			var epoch int16
			proctest.Eventually(t, 20*time.Second, fmt.Sprintf("%s: producer id from b%d", phase, id), func() (err error) {
				pid, epoch, err = initProducerID(c.BrokerAddrs[id])
				return err
			})
			if by, dup := seen[pid]; dup {
				t.Fatalf("%s: b%d handed out producer id %d, which b%d handed out before (all seen: %v)", phase, id, pid, by, seen)
			}
			if epoch != 0 {
				t.Errorf("%s: b%d: epoch %d for a new producer id, want 0", phase, id, epoch)
			}
			seen[pid] = id
			t.Logf("%s: b%d -> producer id %d", phase, id, pid)
		}
	}
	ask("fresh cluster", 1, 2, 3)
	ask("second round", 1, 2, 3)

	c.Brokers[2].Kill()
	c.Brokers[2].Restart()
	c.WaitBrokers(3, 60*time.Second)
	ask("after b2 restart", 2, 1, 3)

	var ctrl int32
	proctest.Eventually(t, 30*time.Second, "a controller", func() error {
		if ctrl = controllerID(t, c); ctrl < 0 {
			return errors.New("no broker says it is the controller")
		}
		return nil
	})
	c.Brokers[ctrl].Kill()
	var rest []int32
	for id := int32(1); id <= 3; id++ {
		if id != ctrl {
			rest = append(rest, id)
		}
	}
	proctest.Eventually(t, 30*time.Second, "a new controller", func() error {
		if n := controllerID(t, c); n < 0 || n == ctrl {
			return fmt.Errorf("controller %d", n)
		}
		return nil
	})
	ask(fmt.Sprintf("after controller b%d was killed", ctrl), rest...)
	c.Brokers[ctrl].Restart()
	c.WaitBrokers(3, 60*time.Second)
	ask(fmt.Sprintf("after b%d came back", ctrl), ctrl)
}

// TestInitProducerIDWithoutCoordinatorIsRetriable: a broker that needs a
// block while its coordinator is down answers COORDINATOR_LOAD_IN_PROGRESS
// (retriable) within producerIDTimeout instead of hanging (a hang ends in
// the request's own 10 s deadline, not in that error), and hands out ids
// again once the coordinator is back.
func TestInitProducerIDWithoutCoordinatorIsRetriable(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, Overrides: fastFailover})
	c.Coordinators[0].Kill()
	start := time.Now()
	_, _, err := initProducerID(c.BrokerAddrs[1])
	took := time.Since(start)
	if !errors.Is(err, kerr.CoordinatorLoadInProgress) {
		t.Fatalf("InitProducerId without a coordinator: %v after %v, want COORDINATOR_LOAD_IN_PROGRESS", err, took)
	}
	t.Logf("answered %v after %v", err, took)
	c.Coordinators[0].Restart()
	proctest.Eventually(t, 30*time.Second, "a producer id once the coordinator is back", func() error {
		_, _, err := initProducerID(c.BrokerAddrs[1])
		return err
	})
}

// pinnedProducer is an idempotent acks=all kgo client whose producer id
// comes from broker id: until the id is in, it can dial only that broker
// (kgo sends InitProducerId to any broker it knows, chosen at random).
func pinnedProducer(t *testing.T, c *proctest.Cluster, id int32, topic string) (*kgo.Client, int64) {
	t.Helper()
	pin := c.BrokerAddrs[id]
	var open atomic.Bool
	var d net.Dialer
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(pin),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if !open.Load() && host != pin {
				return nil, fmt.Errorf("dial %s: only %s until the producer id is in", host, pin)
			}
			return d.DialContext(ctx, network, host)
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatalf("producer id from b%d: %v", id, err)
	}
	open.Store(true)
	t.Logf("producer pinned to b%d: producer id %d epoch %d", id, pid, epoch)
	return cl, pid
}

// TestIdempotentProducersOfTwoBrokersLoseNothing: two idempotent producers
// whose InitProducerId went to different brokers send, in turn, to one
// partition with acks=all. Every acknowledged record of both must be in the
// log exactly once. Had both brokers handed out the same producer id, each
// of the second producer's batches would repeat the first one's sequence
// number and be acknowledged as a duplicate, at the first one's offset,
// without being written.
func TestIdempotentProducersOfTwoBrokersLoseNothing(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: fastFailover})
	const topic = "two-producers"
	c.CreateTopic(topic, 1, 3, map[string]string{"min.insync.replicas": "2"})
	a, _ := pinnedProducer(t, c, 1, topic)
	b, _ := pinnedProducer(t, c, 2, topic)

	const n = 200
	acked := map[string]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		for j, cl := range []*kgo.Client{a, b} {
			v := fmt.Sprintf("%c-%d", 'a'+j, i)
			r := &kgo.Record{Value: []byte(v)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = r.Offset
		}
	}
	count := map[string]int{}
	for _, v := range readAll(t, c.Bootstrap()[0], topic) {
		count[v]++
	}
	var lost, dup []string
	for v := range acked {
		switch count[v] {
		case 1:
		case 0:
			lost = append(lost, v)
		default:
			dup = append(dup, v)
		}
	}
	slices.Sort(lost)
	slices.Sort(dup)
	if len(lost) > 0 || len(dup) > 0 {
		ex := lost[:min(3, len(lost))]
		var at []string
		for _, v := range ex {
			at = append(at, fmt.Sprintf("%s acked at offset %d", v, acked[v]))
		}
		t.Fatalf("%d of %d acknowledged records lost (%v), %d duplicated (%v)", len(lost), len(acked), at, len(dup), dup[:min(3, len(dup))])
	}
	t.Logf("%d acknowledged records of two producers, each read once", len(acked))
}
