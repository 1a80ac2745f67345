package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/group"
	"github.com/isrlab/isrlab/internal/proctest"
)

// groupBrokerOverrides make groups fast to form in tests.
var groupBrokerOverrides = []string{"group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=5"}

// killSwitch is a kgo dialer whose connections can all be cut at once, so
// a consumer "crashes": it can neither commit nor leave its group.
type killSwitch struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

var errKilled = errors.New("consumer killed")

func (k *killSwitch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errKilled
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		k.conns = append(k.conns, c)
	}
	return c, err
}

func (k *killSwitch) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		c.Close()
	}
}

// groupConsumer is a kgo group member that records what it consumed.
type groupConsumer struct {
	name string
	cl   *kgo.Client
	ks   *killSwitch
	stop context.CancelFunc
	done chan struct{}
}

func startGroupConsumer(t *testing.T, seeds []string, name, group, topic string, record func(consumer string, r *kgo.Record), opts ...kgo.Opt) *groupConsumer {
	t.Helper()
	ks := &killSwitch{}
	base := []kgo.Opt{
		kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID(name),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Dialer(ks.dial),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.RetryTimeout(2 * time.Second), kgo.FetchMaxWait(200 * time.Millisecond),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gc := &groupConsumer{name: name, cl: cl, ks: ks, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(gc.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { record(name, r) })
		}
	}()
	t.Cleanup(func() { gc.close() })
	return gc
}

// close leaves the group cleanly (committing what was polled).
func (gc *groupConsumer) close() {
	if gc.stop == nil {
		return
	}
	gc.stop()
	<-gc.done
	gc.cl.Close()
	gc.stop = nil
}

// crash cuts the consumer off without a commit or a LeaveGroup.
func (gc *groupConsumer) crash() {
	gc.ks.kill()
	gc.close()
}

// assignedTo returns the partitions of topic each member owns, from
// DescribeGroups (only a Stable group shows assignments).
func groupAssignment(ctx context.Context, adm *kadm.Client, group, topic string) (string, map[string][]int32, error) {
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", nil, err
	}
	d := dg[group]
	if d.Err != nil {
		return "", nil, d.Err
	}
	out := map[string][]int32{}
	for _, m := range d.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, at := range ca.Topics {
			if at.Topic == topic {
				ps := append([]int32(nil), at.Partitions...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				out[m.ClientID] = ps
			}
		}
	}
	return d.State, out, nil
}

func TestGroupSmoke(t *testing.T) {
	b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
	cl := b.client(t)
	createTopic(t, cl, "gs", 4, nil)
	produceValues(t, cl, "gs", 4, "v", 200)
	var mu sync.Mutex
	seen := map[string]int{}
	rec := func(_ string, r *kgo.Record) { mu.Lock(); seen[string(r.Value)]++; mu.Unlock() }
	c := startGroupConsumer(t, b.Addrs(), "c1", "g1", "gs", rec)
	proctest.Eventually(t, 30*time.Second, "all records consumed", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 200 {
			return fmt.Errorf("%d records", len(seen))
		}
		return nil
	})
	c.close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lags, err := adm.Lag(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	l := lags["g1"]
	if l.Error() != nil {
		t.Fatal(l.Error())
	}
	if tot := l.Lag.Total(); tot != 0 {
		t.Fatalf("lag %d, want 0", tot)
	}
	t.Logf("state %s", l.State)
}

// consumed counts what a group's consumers read, by value.
type consumed struct {
	mu   sync.Mutex
	seen map[string]int
	by   map[string]string // value -> consumer that read it last
}

func newConsumed() *consumed { return &consumed{seen: map[string]int{}, by: map[string]string{}} }

func (c *consumed) record(consumer string, r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[string(r.Value)]++
	c.by[string(r.Value)] = consumer
}

// check reports missing values and values read more than once.
func (c *consumed) check(want []string) (missing, dups []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range want {
		switch n := c.seen[v]; {
		case n == 0:
			missing = append(missing, v)
		case n > 1:
			dups = append(dups, v)
		}
	}
	return missing, dups
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// waitMembers waits until the group is Stable with exactly the named
// members, whose assignments cover the topic's partitions once.
func waitMembers(t *testing.T, adm *kadm.Client, group, topic string, partitions int, members ...string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, fmt.Sprintf("group %s stable with %v", group, members), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		state, as, err := groupAssignment(ctx, adm, group, topic)
		if err != nil {
			return err
		}
		if state != "Stable" || len(as) != len(members) {
			return fmt.Errorf("state %s, assignment %v", state, as)
		}
		owned := map[int32]int{}
		for _, m := range members {
			if len(as[m]) == 0 {
				return fmt.Errorf("%s owns nothing: %v", m, as)
			}
			for _, p := range as[m] {
				owned[p]++
			}
		}
		for p := 0; p < partitions; p++ {
			if owned[int32(p)] != 1 {
				return fmt.Errorf("partition %d owned %d times: %v", p, owned[int32(p)], as)
			}
		}
		return nil
	})
}

func waitConsumed(t *testing.T, c *consumed, want []string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, "records consumed", func() error {
		if missing, _ := c.check(want); len(missing) > 0 {
			return fmt.Errorf("%d of %d missing, first %s", len(missing), len(want), missing[0])
		}
		return nil
	})
}

// TestGroupRebalance: kgo group consumers rebalance as members join,
// leave and crash; without a crash every record is consumed exactly once,
// and after one nothing is lost.
func TestGroupRebalance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
	}{
		{"range", kgo.RangeBalancer()},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
			cl := b.client(t)
			adm := kadm.NewClient(cl)
			const parts = 6
			topic, group := "rb-"+tc.name, "g-"+tc.name
			createTopic(t, cl, topic, parts, nil)
			got := newConsumed()
			start := func(name string) *groupConsumer {
				return startGroupConsumer(t, b.Addrs(), name, group, topic, got.record, kgo.Balancers(tc.balancer))
			}
			var want []string
			produce := func(prefix string) {
				produceValues(t, cl, topic, parts, prefix, 300)
				want = append(want, values(prefix, 300)...)
			}

			produce("a")
			c1 := start("c1")
			waitMembers(t, adm, group, topic, parts, "c1")
			c2 := start("c2")
			waitMembers(t, adm, group, topic, parts, "c1", "c2")
			produce("b")
			start("c3")
			waitMembers(t, adm, group, topic, parts, "c1", "c2", "c3")
			c1.close()
			waitMembers(t, adm, group, topic, parts, "c2", "c3")
			produce("c")
			waitConsumed(t, got, want)
			if _, dups := got.check(want); len(dups) > 0 {
				t.Fatalf("%d records consumed twice without a crash, e.g. %s", len(dups), dups[0])
			}

			c2.crash()
			waitMembers(t, adm, group, topic, parts, "c3")
			produce("d")
			waitConsumed(t, got, want)
		})
	}
}

// TestSeed003OffsetCommits reproduces seed 003's notes on offset commits:
// with auto-commit, a consumer killed between commits has its records
// since the last commit delivered again to its successor — exactly those;
// committing manually after processing, none are.
func TestSeed003OffsetCommits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		autoCommit bool
	}{
		{"auto-commit", true},
		{"manual commit after processing", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
			cl := b.client(t)
			const total = 1000
			createTopic(t, cl, "s3", 1, nil)
			produceValues(t, cl, "s3", 1, "r", total)

			// committed carries each successful auto-commit's offset.
			committed := make(chan int64, 100)
			ks := &killSwitch{}
			opts := []kgo.Opt{
				kgo.SeedBrokers(b.Addrs()...), kgo.ConsumerGroup("seed003"), kgo.ConsumeTopics("s3"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Dialer(ks.dial),
				kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond), kgo.RetryTimeout(2 * time.Second),
			}
			if tc.autoCommit {
				opts = append(opts, kgo.AutoCommitInterval(time.Second), kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					if err != nil || len(req.Topics) == 0 || len(resp.Topics) == 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
						return
					}
					committed <- req.Topics[0].Partitions[0].Offset
				}))
			} else {
				opts = append(opts, kgo.DisableAutoCommit())
			}
			first, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			processed := map[string]bool{}
			var next int64
			poll := func() {
				for {
					fs := first.PollRecords(ctx, 10)
					if ctx.Err() != nil {
						t.Fatal("poll timed out")
					}
					recs := fs.Records()
					if len(recs) == 0 {
						continue
					}
					for _, r := range recs {
						processed[string(r.Value)] = true
						next = r.Offset + 1
					}
					if !tc.autoCommit {
						if err := first.CommitRecords(ctx, recs...); err != nil {
							t.Fatalf("commit: %v", err)
						}
					}
					return
				}
			}
			// kgo, like the Java consumer, auto-commits what earlier polls
			// returned: wait until each poll's predecessor is committed, then
			// crash right after the third poll, before its commit is due.
			var ends []int64
			lastCommit := int64(-1)
			for i := 0; i < 3; i++ {
				poll()
				ends = append(ends, next)
				if !tc.autoCommit || i == 0 {
					continue
				}
				for lastCommit != ends[i-1] {
					select {
					case lastCommit = <-committed:
					case <-ctx.Done():
						t.Fatalf("no auto-commit of offset %d (last %d)", ends[i-1], lastCommit)
					}
				}
			}
			ks.kill()
			go first.Close()
			if !tc.autoCommit {
				lastCommit = next
			}

			// The broker's committed offset is the last acknowledged commit.
			adm := kadm.NewClient(cl)
			fo, err := adm.FetchOffsets(ctx, "seed003")
			if err != nil {
				t.Fatal(err)
			}
			o, ok := fo.Lookup("s3", 0)
			if !ok || o.Err != nil || o.At != lastCommit {
				t.Fatalf("committed offset %+v, want %d", o, lastCommit)
			}

			got := newConsumed()
			second := startGroupConsumer(t, b.Addrs(), "second", "seed003", "s3", got.record)
			waitConsumed(t, got, values("r", total)[lastCommit:])
			second.close()
			dups := 0
			for v := range processed {
				if got.seen[v] > 0 {
					dups++
				}
			}
			want := int(next - lastCommit)
			t.Logf("processed %d, committed %d, delivered again %d", next, lastCommit, dups)
			if dups != want {
				t.Fatalf("%d records delivered again, want %d (processed since the last commit)", dups, want)
			}
			if tc.autoCommit && dups == 0 {
				t.Fatal("the crash came after a commit: no duplicates to count")
			}
			if !tc.autoCommit && dups != 0 {
				t.Fatalf("manual commit after processing: %d duplicates", dups)
			}
		})
	}
}

// TestKcatGroupAndKadm: librdkafka's balanced consumer (kcat -G) reads
// everything and commits; kadm lists the group and shows zero lag.
func TestKcatGroupAndKadm(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed (make deps installs it)")
	}
	b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
	cl := b.client(t)
	createTopic(t, cl, "kg", 3, nil)
	produceValues(t, cl, "kg", 3, "k", 300)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", "-b", b.Addrs()[0], "-G", "kcat-group", "kg",
		"-o", "beginning", "-e", "-q", "-f", "%s\n", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -G: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if len(seen) != 300 {
		t.Fatalf("kcat -G read %d distinct of 300 records (%d lines)", len(seen), len(lines))
	}

	adm := kadm.NewClient(cl)
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["kcat-group"]; !ok {
		t.Fatalf("ListGroups: %v", listed.Groups())
	}
	// kcat commits on close; its lag is then zero on every partition.
	proctest.Eventually(t, 10*time.Second, "zero lag", func() error {
		lags, err := adm.Lag(ctx, "kcat-group")
		if err != nil {
			return err
		}
		l := lags["kcat-group"]
		if l.Error() != nil {
			return l.Error()
		}
		if n := len(l.Lag["kg"]); n != 3 {
			return fmt.Errorf("lag of %d partitions", n)
		}
		if tot := l.Lag.Total(); tot != 0 {
			return fmt.Errorf("lag %d", tot)
		}
		return nil
	})
}

// TestCommittedOffsetSurvivesCoordinatorKill: offsets committed with
// acks=-1 to a replicated __consumer_offsets survive SIGKILL of the
// coordinator's broker; the new coordinator reloads them and a consumer
// resumes from them.
func TestCommittedOffsetSurvivesCoordinatorKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: []string{
		"coordinator.session.timeout.ms=3000", "replica.lag.time.max.ms=2000",
		"replica.fetch.wait.max.ms=100", "replica.fetch.backoff.ms=100",
		"offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0",
	}})
	c.CreateTopic("ck", 2, 3, nil)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, cl, "ck", 2, "v", 200)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The first FindCoordinator creates __consumer_offsets; commit once
	// it is fully replicated so the commit reaches every replica.
	const grp = "survivor"
	proctest.Eventually(t, 30*time.Second, "__consumer_offsets exists", func() error {
		_, err := adm.FetchOffsets(ctx, grp)
		return err
	})
	proctest.Eventually(t, 30*time.Second, "__consumer_offsets fully replicated", func() error {
		st, err := c.Describe(group.Topic)
		if err != nil {
			return err
		}
		for p, s := range st {
			if s.Leader < 0 || len(s.ISR) != 3 {
				return fmt.Errorf("partition %d: leader %d isr %v", p, s.Leader, s.ISR)
			}
		}
		return nil
	})
	want := map[int32]int64{0: 42, 1: 17}
	toCommit := kadm.Offsets{}
	for p, o := range want {
		toCommit.AddOffset("ck", p, o, -1)
	}
	resp, err := adm.CommitOffsets(ctx, grp, toCommit)
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}

	st, err := c.Describe(group.Topic)
	if err != nil {
		t.Fatal(err)
	}
	victim := st[group.Partition(grp, 3)].Leader
	t.Logf("coordinator of %s is broker %d; SIGKILL", grp, victim)
	c.Brokers[victim].Kill()

	proctest.Eventually(t, 60*time.Second, "committed offsets from the new coordinator", func() error {
		// A fresh client: kgo keeps dialing a cached dead coordinator.
		fcl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
		if err != nil {
			return err
		}
		defer fcl.Close()
		fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
		defer fcancel()
		fo, err := kadm.NewClient(fcl).FetchOffsets(fctx, grp)
		if err != nil {
			return err
		}
		for p, o := range want {
			got, ok := fo.Lookup("ck", p)
			if !ok || got.Err != nil || got.At != o {
				return fmt.Errorf("partition %d: %+v, want %d", p, got, o)
			}
		}
		return nil
	})
	if st, err := c.Describe(group.Topic); err == nil && st[group.Partition(grp, 3)].Leader == victim {
		t.Fatalf("broker %d still leads the group's partition", victim)
	}

	// A group consumer resumes exactly at the committed offsets.
	first := map[int32]int64{}
	var mu sync.Mutex
	gc := startGroupConsumer(t, c.Bootstrap(), "resumer", grp, "ck", func(_ string, r *kgo.Record) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := first[r.Partition]; !ok {
			first[r.Partition] = r.Offset
		}
	})
	proctest.Eventually(t, 30*time.Second, "consumer resumes", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(first) != 2 {
			return fmt.Errorf("read from %v", first)
		}
		return nil
	})
	gc.close()
	for p, o := range want {
		if first[p] != o {
			t.Fatalf("partition %d: consumer resumed at %d, committed %d", p, first[p], o)
		}
	}
}

type saramaHandler struct {
	mu   *sync.Mutex
	seen map[string]int
}

func (saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

// TestSaramaConsumerGroup: sarama's consumer group joins, consumes
// everything and commits, at the protocol versions of several Kafka eras
// (JoinGroup v1 and OffsetCommit v2 for 0.11 up to JoinGroup v5+ for 2.8).
func TestSaramaConsumerGroup(t *testing.T) {
	for _, v := range []sarama.KafkaVersion{sarama.V0_11_0_0, sarama.V2_0_0_0, sarama.V2_8_0_0} {
		t.Run(v.String(), func(t *testing.T) {
			b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
			cl := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			createTopic(t, cl, "sg", 2, nil)
			produceValues(t, cl, "sg", 2, "s", 200)
			cfg := sarama.NewConfig()
			cfg.Version = v
			cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
			cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
			cg, err := sarama.NewConsumerGroup(b.Addrs(), "sarama-group", cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := saramaHandler{mu: &sync.Mutex{}, seen: map[string]int{}}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- cg.Consume(ctx, []string{"sg"}, h) }()
			proctest.Eventually(t, 30*time.Second, "sarama consumed everything", func() error {
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.seen) != 200 {
					return fmt.Errorf("%d of 200", len(h.seen))
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("consume: %v", err)
			}
			if err := cg.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer acancel()
			fo, err := kadm.NewClient(cl).FetchOffsets(actx, "sarama-group")
			if err != nil {
				t.Fatal(err)
			}
			for p := int32(0); p < 2; p++ {
				if o, ok := fo.Lookup("sg", p); !ok || o.At != 100 {
					t.Fatalf("partition %d committed %+v, want 100", p, o)
				}
			}
		})
	}
}

// BenchmarkOffsetCommit measures one synchronous OffsetCommit round trip
// (acks=-1 append to __consumer_offsets, then the cache) from a kadm
// client: on a standalone broker and on a 3-broker in-process cluster
// where __consumer_offsets has 3 replicas.
func BenchmarkOffsetCommit(b *testing.B) {
	for _, bc := range []struct {
		name    string
		brokers int
	}{{"standalone", 0}, {"cluster-rf3", 3}} {
		b.Run(bc.name, func(b *testing.B) {
			var seeds []string
			if bc.brokers == 0 {
				tb := startBroker(b, b.TempDir(), groupBrokerOverrides...)
				seeds = tb.Addrs()
			} else {
				tc := startClusterB(b, bc.brokers, groupBrokerOverrides...)
				seeds = tc.bootstrap()
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			ctx := context.Background()
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, "bench"); err != nil {
				b.Fatal(err)
			}
			commit := func(i int) error {
				o := kadm.Offsets{}
				o.AddOffset("bench", 0, int64(i), -1)
				resp, err := adm.CommitOffsets(ctx, "bench-group", o)
				if err == nil {
					err = resp.Error()
				}
				return err
			}
			proctest.Eventually(b, 30*time.Second, "coordinator ready", func() error { return commit(0) })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := commit(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

// TestGroupSurvivesCoordinatorMove: when the coordinator's broker shuts
// down cleanly, the new leader of the group's __consumer_offsets partition
// reloads the Stable group with its members, so the consumers carry on
// without a rebalance and without reading anything twice.
func TestGroupSurvivesCoordinatorMove(t *testing.T) {
	tc := startCluster(t, 3, "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3")
	// Clients notice moved leaders quickly.
	fresh := kgo.MetadataMinAge(100 * time.Millisecond)
	cl := tc.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), fresh)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 4, 3, nil, "mv"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "mv", 3)
	const grp = "mover"
	proctest.Eventually(t, 30*time.Second, "__consumer_offsets", func() error {
		_, err := adm.FetchOffsets(ctx, grp)
		return err
	})
	waitISR(t, tc.bootstrap()[0], group.Topic, 3)

	got := newConsumed()
	for _, name := range []string{"m1", "m2"} {
		startGroupConsumer(t, tc.bootstrap(), name, grp, "mv", got.record, kgo.AutoCommitInterval(200*time.Millisecond), fresh)
	}
	waitMembers(t, adm, grp, "mv", 4, "m1", "m2")
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
	// A fresh admin client: cl may have refreshed its metadata between
	// the old coordinator's controlled shutdown and its deregistration,
	// as Kafka's clients may, and then keeps dialling it as the group's
	// coordinator until metadata.max.age.ms (5 min) passes.
	waitMembers(t, kadm.NewClient(tc.client(fresh)), grp, "mv", 4, "m1", "m2")
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
}

// TestStaticMemberRestart: a kgo consumer with group.instance.id that
// restarts within its session takes its old place without a rebalance.
// (A restarted leader is different: kgo recomputes the plan and, finding
// it changed, rejoins on purpose — so the test restarts a follower.)
func TestStaticMemberRestart(t *testing.T) {
	b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
	cl := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	createTopic(t, cl, "st", 4, nil)
	got := newConsumed()
	start := func(name string) *groupConsumer {
		return startGroupConsumer(t, b.Addrs(), name, "static-group", "st", got.record, kgo.InstanceID("instance-"+name))
	}
	consumers := map[string]*groupConsumer{"s1": start("s1"), "s2": start("s2")}
	waitMembers(t, adm, "static-group", "st", 4, "s1", "s2")
	before, _ := b.groups().Group("static-group")
	follower := "s1"
	if strings.HasPrefix(before.Leader, "instance-s1-") {
		follower = "s2"
	}
	consumers[follower].close() // a static member does not leave the group
	start(follower)
	proctest.Eventually(t, 30*time.Second, follower+" back in its place", func() error {
		after, _ := b.groups().Group("static-group")
		if after.State != group.Stable || len(after.Members) != 2 || slices.Equal(after.Members, before.Members) {
			return fmt.Errorf("%+v", after)
		}
		if after.Generation != before.Generation {
			t.Fatalf("the restart rebalanced: generation %d -> %d", before.Generation, after.Generation)
		}
		return nil
	})
	produceValues(t, cl, "st", 4, "z", 200)
	waitConsumed(t, got, values("z", 200))
}

// TestStandaloneRestartKeepsOffsets: a standalone broker reloads groups and
// offsets from its __consumer_offsets when it restarts.
func TestStandaloneRestartKeepsOffsets(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, groupBrokerOverrides...)
	cl := b.client(t)
	createTopic(t, cl, "rs", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := kadm.Offsets{}
	o.AddOffset("rs", 0, 7, -1)
	o.AddOffset("rs", 1, 9, -1)
	proctest.Eventually(t, 10*time.Second, "commit", func() error {
		resp, err := kadm.NewClient(cl).CommitOffsets(ctx, "restarter", o)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	cl.Close()
	b.stop(t)

	b2 := startBroker(t, dir, groupBrokerOverrides...)
	adm := kadm.NewClient(b2.client(t))
	proctest.Eventually(t, 10*time.Second, "offsets after the restart", func() error {
		fo, err := adm.FetchOffsets(ctx, "restarter")
		if err != nil {
			return err
		}
		for p, want := range map[int32]int64{0: 7, 1: 9} {
			if got, ok := fo.Lookup("rs", p); !ok || got.At != want {
				return fmt.Errorf("partition %d: %+v, want %d", p, got, want)
			}
		}
		return nil
	})
}

// TestOffsetsTopicCreatedOnFirstUse: the first FindCoordinator creates
// __consumer_offsets with offsets.topic.num.partitions partitions and the
// replication factor clamped to the live brokers (3 configured, 2 live).
func TestOffsetsTopicCreatedOnFirstUse(t *testing.T) {
	tc := startCluster(t, 2, "offsets.topic.num.partitions=4")
	cl := tc.client()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if tds, err := adm.ListTopics(ctx, group.Topic); err == nil && tds.Has(group.Topic) {
		t.Fatalf("%s exists before any group request", group.Topic)
	}
	proctest.Eventually(t, 20*time.Second, "a coordinator", func() error {
		_, err := adm.FetchOffsets(ctx, "first")
		return err
	})
	proctest.Eventually(t, 20*time.Second, group.Topic+" with 4 partitions of 2 replicas", func() error {
		tds, err := adm.ListTopics(ctx, group.Topic)
		if err != nil {
			return err
		}
		td := tds[group.Topic]
		if len(td.Partitions) != 4 {
			return fmt.Errorf("%d partitions", len(td.Partitions))
		}
		for p, pd := range td.Partitions {
			if len(pd.Replicas) != 2 || pd.Leader < 0 {
				return fmt.Errorf("partition %d: leader %d replicas %v", p, pd.Leader, pd.Replicas)
			}
		}
		return nil
	})
}

// TestGroupsCLI runs `isrlab groups` against a broker as a user would.
func TestGroupsCLI(t *testing.T) {
	bin := proctest.Binary(t)
	b := startBroker(t, t.TempDir(), groupBrokerOverrides...)
	cl := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, cl, "cli", 1, nil)
	produceValues(t, cl, "cli", 1, "c", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := kadm.Offsets{}
	o.AddOffset("cli", 0, 40, -1)
	proctest.Eventually(t, 10*time.Second, "commit", func() error {
		resp, err := kadm.NewClient(cl).CommitOffsets(ctx, "cli-group", o)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	run := func(args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"groups"}, append(args, "--bootstrap-server", b.Addrs()[0])...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string // fields of one output line, in order
	}{
		{[]string{"list"}, 0, []string{"cli-group", "Empty"}},
		{[]string{"describe", "--group", "cli-group"}, 0, []string{"cli-group", "cli", "0", "40", "100", "60"}},
		{[]string{"delete"}, 254, []string{"--group", "is", "required"}},
		{[]string{"delete", "--group", "cli-group"}, 0, []string{"Deleted", "consumer", "group", "'cli-group'."}},
		{[]string{"describe", "--group", "cli-group"}, 0, []string{"Consumer", "group", "'cli-group'", "does", "not", "exist."}},
	} {
		out, code := run(tc.args...)
		if code != tc.code {
			t.Fatalf("groups %v: exit %d, want %d\n%s", tc.args, code, tc.code, out)
		}
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= len(tc.want) && slices.Equal(f[len(f)-len(tc.want):], tc.want) || slices.Equal(firstN(f, len(tc.want)), tc.want) {
				found = true
			}
		}
		if !found {
			t.Fatalf("groups %v: no line %v in\n%s", tc.args, tc.want, out)
		}
	}
}

func firstN(s []string, n int) []string {
	if len(s) < n {
		return s
	}
	return s[:n]
}
