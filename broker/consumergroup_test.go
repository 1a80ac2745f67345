package broker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/group"
	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// consumerProtocolOverrides enable KIP-848 consumer groups, with members
// heartbeating every second instead of 5 (each membership change waits
// for the members' next heartbeats).
var consumerProtocolOverrides = append([]string{"group.coordinator.rebalance.protocols=classic,consumer", "group.consumer.heartbeat.interval.ms=1000"}, groupBrokerOverrides...)

// TestConsumerProtocolAdvertised: ConsumerGroupHeartbeat (68) and
// ConsumerGroupDescribe (69) are advertised only with the consumer
// protocol enabled; without it a heartbeat gets UNSUPPORTED_VERSION.
func TestConsumerProtocolAdvertised(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			var b *testBroker
			if on {
				b = startBroker(t, t.TempDir(), consumerProtocolOverrides...)
			} else {
				b = startBroker(t, t.TempDir(), groupBrokerOverrides...)
			}
			c := dialRaw(t, b.Addrs()[0])
			keys := map[int16]string{}
			for _, k := range c.apiVersions(3, "isrlab-test", "1.0").ApiKeys {
				keys[k.ApiKey] = fmt.Sprintf("%d-%d", k.MinVersion, k.MaxVersion)
			}
			want := map[bool][2]string{false: {"", ""}, true: {"0-1", "0-0"}}[on]
			if keys[68] != want[0] || keys[69] != want[1] {
				t.Fatalf("advertised 68 %q, 69 %q; want %q, %q", keys[68], keys[69], want[0], want[1])
			}
			if on {
				return
			}
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.SetVersion(1)
			req.Group, req.MemberID, req.RebalanceTimeoutMillis = "g", "m", 30000
			req.SubscribedTopicNames, req.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			resp := c.roundTrip(req).(*kmsg.ConsumerGroupHeartbeatResponse)
			if resp.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("heartbeat with the protocol off: %v", kerr.ErrorForCode(resp.ErrorCode))
			}
		})
	}
}

// owners tracks which consumer owns each partition, from kgo's assign,
// revoke and lose callbacks, and records every time a partition was
// given to one consumer while another still held it.
type owners struct {
	mu       sync.Mutex
	by       map[int32]string
	overlaps []string
}

func (o *owners) opts(name string) []kgo.Opt {
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, as map[string][]int32) { o.assign(name, as) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, rs map[string][]int32) {
			// What kgo does on a revocation without a callback of its own:
			// commit before the partitions go.
			cl.CommitUncommittedOffsets(ctx)
			o.release(name, rs)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ls map[string][]int32) { o.release(name, ls) }),
	}
}

func (o *owners) assign(name string, as map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ps := range as {
		for _, p := range ps {
			if cur, ok := o.by[p]; ok && cur != name {
				o.overlaps = append(o.overlaps, fmt.Sprintf("partition %d to %s while %s owns it", p, name, cur))
			}
			o.by[p] = name
		}
	}
}

func (o *owners) release(name string, rs map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ps := range rs {
		for _, p := range ps {
			if o.by[p] == name {
				delete(o.by, p)
			}
		}
	}
}

// forget drops what a crashed consumer held: it no longer consumes.
func (o *owners) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, n := range o.by {
		if n == name {
			delete(o.by, p)
		}
	}
}

// waitConsumerMembers waits until the consumer group is Stable with
// exactly the named clients, whose assignments cover the topic's
// partitions once (ConsumerGroupDescribe).
func waitConsumerMembers(t *testing.T, adm *kadm.Client, group string, partitions int, members ...string) {
	t.Helper()
	proctest.Eventually(t, 60*time.Second, fmt.Sprintf("consumer group %s stable with %v", group, members), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ds, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil {
			return err
		}
		d := ds[group]
		if d.Err != nil {
			return d.Err
		}
		as := map[string][]int32{}
		owned := map[int32]int{}
		for _, m := range d.Members {
			for _, tp := range m.Assignment.Sorted() {
				as[m.ClientID] = append(as[m.ClientID], tp.Partitions...)
				for _, p := range tp.Partitions {
					owned[p]++
				}
			}
		}
		if d.State != "Stable" || len(d.Members) != len(members) {
			return fmt.Errorf("state %s, %d members, assignment %v", d.State, len(d.Members), as)
		}
		names := make([]string, 0, len(d.Members))
		for _, m := range d.Members {
			names = append(names, m.ClientID)
		}
		sort.Strings(names)
		want := append([]string(nil), members...)
		sort.Strings(want)
		if fmt.Sprint(names) != fmt.Sprint(want) {
			return fmt.Errorf("members %v", names)
		}
		for p := 0; p < partitions; p++ {
			if owned[int32(p)] != 1 {
				return fmt.Errorf("partition %d owned %d times: %v", p, owned[int32(p)], as)
			}
		}
		return nil
	})
}

// TestConsumerProtocolGroup: franz-go consumers with the consumer group
// protocol (KIP-848, kgo.ServerSideBalancer) join and leave a group; every
// record is consumed, none twice, and no partition is ever held by two
// consumers at once (a partition reaches its new owner only after its
// old owner revoked it); after a consumer crashes nothing is lost.
func TestConsumerProtocolGroup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer // range asks for the range assignor, sticky for uniform
		assignor string
	}{
		{"uniform", kgo.StickyBalancer(), "uniform"},
		{"range", kgo.RangeBalancer(), "range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), slices.Concat(consumerProtocolOverrides, []string{"group.consumer.session.timeout.ms=3000"})...)
			cl := b.client(t)
			adm := kadm.NewClient(cl)
			const parts = 6
			topic, group := "cp-"+tc.name, "g-"+tc.name
			createTopic(t, cl, topic, parts, nil)
			got := newConsumed()
			own := &owners{by: map[int32]string{}}
			start := func(name string) *groupConsumer {
				opts := append(own.opts(name), kgo.Balancers(tc.balancer), kgo.ServerSideBalancer())
				return startGroupConsumer(t, b.Addrs(), name, group, topic, got.record, opts...)
			}
			var want []string
			produce := func(prefix string) {
				produceValues(t, cl, topic, parts, prefix, 300)
				want = append(want, values(prefix, 300)...)
			}

			produce("a")
			c1 := start("c1")
			waitConsumerMembers(t, adm, group, parts, "c1")
			c2 := start("c2")
			waitConsumerMembers(t, adm, group, parts, "c1", "c2")
			produce("b")
			c3 := start("c3")
			waitConsumerMembers(t, adm, group, parts, "c1", "c2", "c3")
			c1.close()
			waitConsumerMembers(t, adm, group, parts, "c2", "c3")
			produce("c")
			c3.close()
			waitConsumerMembers(t, adm, group, parts, "c2")
			produce("d")
			waitConsumed(t, got, want)
			if _, dups := got.check(want); len(dups) > 0 {
				t.Fatalf("%d records consumed twice without a crash, e.g. %s", len(dups), dups[0])
			}

			if tc.assignor == "uniform" {
				// A crash: the member stops heartbeating and its partitions
				// go to the other after group.consumer.session.timeout.ms
				// (3 s here; 45 s by default); nothing is lost.
				start("c4")
				waitConsumerMembers(t, adm, group, parts, "c2", "c4")
				c2.crash()
				own.forget("c2")
				waitConsumerMembers(t, adm, group, parts, "c4")
				produce("e")
				waitConsumed(t, got, want)
			}

			own.mu.Lock()
			defer own.mu.Unlock()
			if len(own.overlaps) > 0 {
				t.Fatalf("partitions held by two consumers: %v", own.overlaps)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ds, err := adm.DescribeConsumerGroups(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			if d := ds[group]; d.AssignorName != tc.assignor {
				t.Fatalf("assignor %q, want %q", d.AssignorName, tc.assignor)
			}
		})
	}
}

// TestConsumerGroupSurvivesCoordinatorMove: the coordinator of a consumer
// group (KIP-848) stops; the new one reads the group back from
// __consumer_offsets (epoch, members, assignments), the members go on
// heartbeating at their epochs without a rebalance, and nothing is read
// twice.
func TestConsumerGroupSurvivesCoordinatorMove(t *testing.T) {
	tc := startCluster(t, 3, "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3", "group.coordinator.rebalance.protocols=classic,consumer")
	fresh := kgo.MetadataMinAge(100 * time.Millisecond)
	cl := tc.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), fresh)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 4, 3, nil, "mv"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "mv", 3)
	const grp = "mover848"
	proctest.Eventually(t, 30*time.Second, "__consumer_offsets", func() error {
		_, err := adm.FetchOffsets(ctx, grp)
		return err
	})
	waitISR(t, tc.bootstrap()[0], group.Topic, 3)

	got := newConsumed()
	own := &owners{by: map[int32]string{}}
	for _, name := range []string{"m1", "m2"} {
		opts := append(own.opts(name), kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer(), kgo.AutoCommitInterval(200*time.Millisecond), fresh)
		startGroupConsumer(t, tc.bootstrap(), name, grp, "mv", got.record, opts...)
	}
	waitConsumerMembers(t, adm, grp, 4, "m1", "m2")
	produceValues(t, cl, "mv", 4, "x", 200)
	want := values("x", 200)
	waitConsumed(t, got, want)
	proctest.Eventually(t, 10*time.Second, "offsets committed", func() error {
		lags, err := adm.Lag(ctx, grp)
		if err != nil {
			return err
		}
		if l := lags[grp]; l.Error() != nil || l.Lag.Total() != 0 {
			return fmt.Errorf("lag %d err %v", l.Lag.Total(), l.Error())
		}
		return nil
	})
	leaders, _, err := tc.describe(group.Topic)
	if err != nil {
		t.Fatal(err)
	}
	coordinator := leaders[group.Partition(grp, 3)]
	before, ok := tc.brokers[coordinator].groups().Group(grp)
	if !ok || before.State != group.Stable || len(before.Members) != 2 {
		t.Fatalf("coordinator %d: %+v", coordinator, before)
	}
	tc.stop(coordinator)
	proctest.Eventually(t, 30*time.Second, "group moved", func() error {
		l, _, err := tc.describe(group.Topic)
		if err != nil {
			return err
		}
		if p := l[group.Partition(grp, 3)]; p == coordinator || p < 0 {
			return fmt.Errorf("leader %d", p)
		}
		return nil
	})
	produceValues(t, cl, "mv", 4, "y", 200)
	want = append(want, values("y", 200)...)
	waitConsumed(t, got, want)
	waitConsumerMembers(t, kadm.NewClient(tc.client(fresh)), grp, 4, "m1", "m2")
	l, _, err := tc.describe(group.Topic)
	if err != nil {
		t.Fatal(err)
	}
	after, ok := tc.brokers[l[group.Partition(grp, 3)]].groups().Group(grp)
	if !ok || after.Generation != before.Generation || !slices.Equal(after.Members, before.Members) {
		t.Fatalf("the move rebalanced the group: before %+v, after %+v", before, after)
	}
	if _, dups := got.check(want); len(dups) > 0 {
		t.Fatalf("%d records read twice after the coordinator moved, e.g. %s", len(dups), dups[0])
	}
	own.mu.Lock()
	defer own.mu.Unlock()
	if len(own.overlaps) > 0 {
		t.Fatalf("partitions held by two consumers: %v", own.overlaps)
	}
}

// TestConsumerProtocolRegex: a franz-go consumer subscribed by regular
// expression with the consumer protocol gets the matching topics from the
// coordinator, and a matching topic created later too.
func TestConsumerProtocolRegex(t *testing.T) {
	b := startBroker(t, t.TempDir(), consumerProtocolOverrides...)
	cl := b.client(t)
	createTopic(t, cl, "rx-a", 2, nil)
	createTopic(t, cl, "rx-b", 1, nil)
	createTopic(t, cl, "other", 1, nil)
	got := newConsumed()
	startGroupConsumer(t, b.Addrs(), "r1", "g-rx", "rx-.*", got.record, kgo.ConsumeRegex(), kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer(), kgo.MetadataMinAge(200*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	produceValues(t, cl, "rx-a", 2, "a", 100)
	produceValues(t, cl, "rx-b", 1, "b", 100)
	produceValues(t, cl, "other", 1, "o", 100)
	want := append(values("a", 100), values("b", 100)...)
	waitConsumed(t, got, want)
	createTopic(t, cl, "rx-c", 1, nil)
	produceValues(t, cl, "rx-c", 1, "c", 100)
	want = append(want, values("c", 100)...)
	waitConsumed(t, got, want)
	if missing, _ := got.check(values("o", 100)); len(missing) != 100 {
		t.Fatalf("%d records of a topic the expression does not match were consumed", 100-len(missing))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := kadm.NewClient(cl).DescribeConsumerGroups(ctx, "g-rx")
	if err != nil {
		t.Fatal(err)
	}
	if d := ds["g-rx"]; len(d.Members) != 1 || d.Members[0].SubscribedTopicRegex == nil {
		t.Fatalf("members %+v", d.Members)
	}
}

// TestQueueWorkloadConsumerProtocol: the queue workload's franz-go members
// with group.protocol=consumer (group.remote.assignor range) against a broker
// with the consumer protocol: the members join through
// ConsumerGroupHeartbeat and the history checks valid with every value
// read.
func TestQueueWorkloadConsumerProtocol(t *testing.T) {
	b := startBroker(t, t.TempDir(), consumerProtocolOverrides...)
	cl := b.client(t)
	createTopic(t, cl, "queue", 3, nil)
	var m history.Memory
	start := time.Now()
	rec := history.NewRecorder(&m, func() time.Duration { return time.Since(start) })
	cfg := workloads.Config{Topic: "queue", Partitions: 3, Producers: 2, Consumers: 2, Sends: 300, SendInterval: 2 * time.Millisecond,
		ManualCommit: true, PollTimeout: 100 * time.Millisecond, Seed: 1, Group: "queue-848"}
	w, err := workloads.NewQueue(cfg, rec, b.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.UseGroupProtocol(map[string]string{"group.protocol": "consumer", "group.remote.assignor": "range"}); err != nil {
		t.Fatal(err)
	}
	if err := w.UseGroupProtocol(map[string]string{"group.protocol": "eager"}); err == nil {
		t.Fatal("group.protocol eager accepted")
	}
	if err := w.UseGroupProtocol(map[string]string{"group.protocol": "consumer", "group.remote.assignor": "range"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	v := checker.CheckOps(m.Ops, checker.Options{})
	if v.Valid != checker.Valid || v.Stats.ReadValues != 300 {
		t.Fatalf("verdict %s, %d values read: anomalies %v", v.Valid, v.Stats.ReadValues, v.Anomalies)
	}
	ds, err := kadm.NewClient(cl).DescribeConsumerGroups(ctx, "queue-848")
	if err != nil {
		t.Fatal(err)
	}
	if d := ds["queue-848"]; d.Err != nil || d.Epoch == 0 {
		t.Fatalf("the workload's group is no consumer group: %+v", d)
	}
}
