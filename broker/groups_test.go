package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
	waitFor(t, 30*time.Second, "all records consumed", func() error {
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
