package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
)

// createAssigned creates topic with a manual replica assignment
// (CreateTopics' ReplicaAssignment), one partition per entry.
func createAssigned(t testing.TB, cl *kgo.Client, topic string, configs map[string]string, assign ...[]int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	for p, rs := range assign {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = int32(p), rs
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v: %s", topic, err, deref(resp.Topics[0].ErrorMessage))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// partitionInfo is one partition as the metadata reports it.
type partitionInfo struct {
	leader        int32
	replicas, isr []int32
}

func metadataOf(cl *kgo.Client, topic string) (map[int32]partitionInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	out := map[int32]partitionInfo{}
	for p, pd := range td.Partitions {
		out[p] = partitionInfo{pd.Leader, slices.Clone(pd.Replicas), slices.Sorted(slices.Values(pd.ISR))}
	}
	return out, nil
}

// reassignments lists every reassignment in progress (null topics).
func reassignments(cl *kgo.Client) (map[string]map[int32]kmsg.ListPartitionReassignmentsResponseTopicPartition, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrListPartitionReassignmentsRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	out := map[string]map[int32]kmsg.ListPartitionReassignmentsResponseTopicPartition{}
	for _, rt := range resp.Topics {
		out[rt.Topic] = map[int32]kmsg.ListPartitionReassignmentsResponseTopicPartition{}
		for _, rp := range rt.Partitions {
			out[rt.Topic][rp.Partition] = rp
		}
	}
	return out, nil
}

// waitReassigned waits until no reassignment is in progress and topic/p
// has exactly replicas (in order), all in the ISR.
func waitReassigned(t testing.TB, cl *kgo.Client, topic string, p int32, replicas []int32, within time.Duration) {
	t.Helper()
	proctest.Eventually(t, within, fmt.Sprintf("%s/%d reassigned to %v", topic, p, replicas), func() error {
		ras, err := reassignments(cl)
		if err != nil {
			return err
		}
		if len(ras) > 0 {
			return fmt.Errorf("still reassigning: %v", ras)
		}
		md, err := metadataOf(cl, topic)
		if err != nil {
			return err
		}
		pi := md[p]
		if !slices.Equal(pi.replicas, replicas) || !slices.Equal(pi.isr, slices.Sorted(slices.Values(replicas))) || !slices.Contains(replicas, pi.leader) {
			return fmt.Errorf("replicas %v isr %v leader %d", pi.replicas, pi.isr, pi.leader)
		}
		return nil
	})
}

// load produces sequence numbers to topic/0 with acks=all until stopped
// and records which were acknowledged.
type load struct {
	mu     sync.Mutex
	acked  map[string]bool
	failed int
	stop   context.CancelFunc
	done   chan struct{}
}

func startLoad(t testing.TB, seeds []string, topic string) *load {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{acked: map[string]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer cl.Close()
		var wg sync.WaitGroup
		for i := 0; ctx.Err() == nil; i++ {
			v := strconv.Itoa(i)
			wg.Add(1)
			cl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				l.mu.Lock()
				defer l.mu.Unlock()
				if err == nil {
					l.acked[v] = true
				} else {
					l.failed++
				}
			})
			if i%50 == 49 {
				// Pacing (at most 10,000 records/s), not a wait for a state.
				time.Sleep(5 * time.Millisecond)
			}
		}
		wg.Wait()
	}()
	return l
}

// ackedMore waits until n more records than now are acknowledged.
func (l *load) ackedMore(t testing.TB, n int, within time.Duration, what string) {
	t.Helper()
	l.mu.Lock()
	from := len(l.acked)
	l.mu.Unlock()
	proctest.Eventually(t, within, what, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if got := len(l.acked) - from; got < n {
			return fmt.Errorf("%d more acknowledged, want %d", got, n)
		}
		return nil
	})
}

// finish stops producing and returns the acknowledged values.
func (l *load) finish() (map[string]bool, int) {
	l.stop()
	<-l.done
	return l.acked, l.failed
}

// consumeValues reads topic/0 from the start until it saw every value in
// want or within passes; it returns what it read.
func consumeValues(t testing.TB, seeds []string, topic string, want map[string]bool, within time.Duration) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	missing := len(want)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for missing > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if got[v] == 0 && want[v] {
				missing--
			}
			got[v]++
		})
	}
	return got
}

// TestReassignUnderLoad moves a partition's replicas while a producer
// writes with acks=all and a consumer reads: first adding a replica and
// dropping a follower, then moving the leader off (leadership moves, the
// old leader's data is deleted), and nothing acknowledged is lost.
func TestReassignUnderLoad(t *testing.T) {
	tc := startCluster(t, 3)
	cl := tc.client()
	adm := kadm.NewClient(cl)
	createAssigned(t, cl, "ra", map[string]string{"min.insync.replicas": "2"}, []int32{1, 2})
	waitISR(t, tc.bootstrap()[0], "ra", 2)

	ld := startLoad(t, tc.bootstrap(), "ra")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	proctest.Eventually(t, 10*time.Second, "records acknowledged", func() error {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		if len(ld.acked) < 500 {
			return fmt.Errorf("%d acked", len(ld.acked))
		}
		return nil
	})

	// Replace follower 2 by 3; leader 1 stays.
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("ra", 0, []int32{1, 3})
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil || res.Error() != nil {
		t.Fatalf("alter reassignments: %v %v", err, res.Error())
	}
	waitReassigned(t, cl, "ra", 0, []int32{1, 3}, 30*time.Second)
	proctest.Eventually(t, 10*time.Second, "broker 2 deleted its replica", func() error {
		if _, ok := tc.brokers[2].logs.Get("ra", 0); ok {
			return errors.New("broker 2 still has ra-0")
		}
		return nil
	})

	// Move the leader off: [1,3] -> [2,3]; 1 leads now and must hand over.
	req = nil
	req.Assign("ra", 0, []int32{2, 3})
	if res, err := adm.AlterPartitionAssignments(ctx, req); err != nil || res.Error() != nil {
		t.Fatalf("alter reassignments: %v %v", err, res.Error())
	}
	// waitReassigned wants the leader among the new replicas: broker 1
	// handed over (a metadata read after it could reach a broker that has
	// not yet had the controller's update).
	waitReassigned(t, cl, "ra", 0, []int32{2, 3}, 30*time.Second)
	proctest.Eventually(t, 10*time.Second, "broker 1 deleted its replica", func() error {
		if _, ok := tc.brokers[1].logs.Get("ra", 0); ok {
			return errors.New("broker 1 still has ra-0")
		}
		return nil
	})

	// Reordering only (nothing added or removed) completes at once and
	// the new order reaches the metadata.
	req = nil
	req.Assign("ra", 0, []int32{3, 2})
	if res, err := adm.AlterPartitionAssignments(ctx, req); err != nil || res.Error() != nil {
		t.Fatalf("alter reassignments: %v %v", err, res.Error())
	}
	waitReassigned(t, cl, "ra", 0, []int32{3, 2}, 30*time.Second)

	ld.ackedMore(t, 100, 20*time.Second, "100 writes acknowledged after the reorder")
	acked, failed := ld.finish()
	t.Logf("%d acknowledged, %d failed", len(acked), failed)
	got := consumeValues(t, tc.bootstrap(), "ra", acked, 30*time.Second)
	var lost []string
	for v := range acked {
		if got[v] == 0 {
			lost = append(lost, v)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Fatalf("%d acknowledged records lost, e.g. %v", len(lost), lost[:min(10, len(lost))])
	}

	// Cancelling when nothing moves; an invalid target.
	req = nil
	req.CancelAssign("ra", 0)
	res, err = adm.AlterPartitionAssignments(ctx, req)
	if err != nil || !errors.Is(res["ra"][0].Err, kerr.NoReassignmentInProgress) {
		t.Fatalf("cancel with nothing in progress: %v %+v", err, res)
	}
	req = nil
	req.Assign("ra", 0, []int32{2, 2})
	res, err = adm.AlterPartitionAssignments(ctx, req)
	if err != nil || !errors.Is(res["ra"][0].Err, kerr.InvalidReplicaAssignment) {
		t.Fatalf("duplicate replicas: %v %+v", err, res)
	}
	req = nil
	req.Assign("ra", 0, []int32{2, 9})
	res, err = adm.AlterPartitionAssignments(ctx, req)
	if err != nil || !errors.Is(res["ra"][0].Err, kerr.InvalidReplicaAssignment) {
		t.Fatalf("unknown broker: %v %+v", err, res)
	}
	req = nil
	req.Assign("nope", 0, []int32{1})
	res, err = adm.AlterPartitionAssignments(ctx, req)
	if err != nil || !errors.Is(res["nope"][0].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v %+v", err, res)
	}
}

// TestReassignResumesAfterControllerKill starts a reassignment that cannot
// finish (its new replica's broker is paused), kills the controller (which
// also led the partition and is the replica being removed) with SIGKILL,
// and checks that the new controller resumes the reassignment from the
// coordinator: once the paused broker runs again the partition ends on the
// target replicas, and an acks=all producer running throughout lost
// nothing it was told was written.
func TestReassignResumesAfterControllerKill(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 4, Overrides: []string{
		"coordinator.session.timeout.ms=3000", "replica.lag.time.max.ms=2000",
		"replica.fetch.wait.max.ms=100", "replica.fetch.backoff.ms=100"}})
	ctrl := liveController(c)
	if ctrl < 0 {
		t.Fatal("no controller")
	}
	var others []int32
	for id := int32(1); id <= 4; id++ {
		if id != ctrl {
			others = append(others, id)
		}
	}
	newcomer, x, y := others[0], others[1], others[2]
	cl := c.Client()
	createAssigned(t, cl, "kr", map[string]string{"min.insync.replicas": "2"}, []int32{ctrl, x, y})
	proctest.Eventually(t, 30*time.Second, "kr fully replicated", func() error {
		md, err := metadataOf(cl, "kr")
		if err != nil {
			return err
		}
		if md[0].leader != ctrl || len(md[0].isr) != 3 {
			return fmt.Errorf("%+v", md[0])
		}
		return nil
	})
	ld := startLoad(t, c.Bootstrap(), "kr")
	proctest.Eventually(t, 10*time.Second, "records acknowledged", func() error {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		if len(ld.acked) < 1000 {
			return fmt.Errorf("%d acked", len(ld.acked))
		}
		return nil
	})

	// The newcomer cannot catch up while it is frozen.
	c.Brokers[newcomer].Pause()
	resumed := false
	defer func() {
		if !resumed {
			c.Brokers[newcomer].Resume()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("kr", 0, []int32{newcomer, x, y})
	res, err := kadm.NewClient(cl).AlterPartitionAssignments(ctx, req)
	if err != nil || res.Error() != nil {
		t.Fatalf("alter reassignments: %v %v", err, res.Error())
	}
	ras, err := reassignments(cl)
	if err != nil {
		t.Fatal(err)
	}
	if rp, ok := ras["kr"][0]; !ok || !slices.Equal(rp.AddingReplicas, []int32{newcomer}) || !slices.Equal(rp.RemovingReplicas, []int32{ctrl}) {
		t.Fatalf("reassignment in progress: %+v", ras)
	}

	c.Brokers[ctrl].Kill()
	proctest.Eventually(t, 30*time.Second, "a new controller still reassigning kr-0", func() error {
		if n := liveController(c); n < 0 || n == ctrl {
			return fmt.Errorf("controller %d", n)
		}
		ras, err := reassignments(cl)
		if err != nil {
			return err
		}
		rp, ok := ras["kr"][0]
		if !ok || !slices.Equal(rp.Replicas, []int32{newcomer, x, y, ctrl}) {
			return fmt.Errorf("reassignments %+v", ras)
		}
		return nil
	})
	c.Brokers[newcomer].Resume()
	resumed = true
	waitReassigned(t, cl, "kr", 0, []int32{newcomer, x, y}, 60*time.Second)

	ld.ackedMore(t, 100, 30*time.Second, "100 writes acknowledged by the reassigned replicas")
	acked, failed := ld.finish()
	t.Logf("%d acknowledged, %d failed", len(acked), failed)
	got := consumeValues(t, c.Bootstrap(), "kr", acked, 60*time.Second)
	var lost []string
	for v := range acked {
		if got[v] == 0 {
			lost = append(lost, v)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Fatalf("%d acknowledged records lost, e.g. %v", len(lost), lost[:min(10, len(lost))])
	}
}

// liveController returns the broker that says it is the controller, -1 if
// none does.
func liveController(c *proctest.Cluster) int32 {
	for id, p := range c.Brokers {
		if !p.Running() {
			continue
		}
		cl := wire.NewClient(c.BrokerAddrs[id], "test", nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(9)
		req.Topics = []kmsg.MetadataRequestTopic{}
		raw, err := cl.Request(ctx, req)
		cancel()
		cl.Close()
		if err == nil && raw.(*kmsg.MetadataResponse).ControllerID == id {
			return id
		}
	}
	return -1
}
