package proctest

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// Cluster is a multi-process isrlab cluster on loopback: coordinator
// members and brokers, each its own process with its own directory.
type Cluster struct {
	t            testing.TB
	Dir          string
	Coordinators []*Proc
	Brokers      map[int32]*Proc
	BrokerAddrs  map[int32]string
	ClientURLs   []string
	// MetricsAddrs are the brokers' metrics.listen addresses, set with
	// ClusterOptions.TestHooks (see Hook).
	MetricsAddrs map[int32]string
	// ControllerAddrs are the KRaft controllers' listeners by node id.
	ControllerAddrs map[int32]string
}

// ClusterOptions sizes a cluster.
type ClusterOptions struct {
	Coordinators int      // default 1
	Brokers      int      // default 3
	Overrides    []string // broker config key=value for every broker
	// BrokerOverrides are more key=value settings for one broker (by id),
	// after Overrides.
	BrokerOverrides map[int32][]string
	// TestHooks runs every broker with test.hooks.enable=true and a
	// metrics.listen port, so the test can hold or delay requests (Hook).
	TestHooks bool
	// BeforeBrokers, if set, is called with every broker's listen address
	// before any broker starts: a test puts a proxy in front of a broker
	// there, the broker advertising the proxy (advertised.listeners in
	// BrokerOverrides).
	BeforeBrokers func(brokerAddrs map[int32]string)
	// KRaft runs the cluster in KRaft mode (kafka.profile 4.0): every
	// coordinator also runs a controller (node id ControllerID(i)) on its
	// own controller listener, and the brokers register and heartbeat
	// with them. ControllerOverrides go to those controllers.
	KRaft               bool
	ControllerOverrides []string
}

// ControllerID is the KRaft controller node id of coordinator i (from 1).
func ControllerID(i int) int32 { return int32(3000 + i) }

// StartCluster starts the coordinators, then the brokers, and waits until
// every broker appears in the metadata.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Coordinators <= 0 {
		o.Coordinators = 1
	}
	if o.Brokers <= 0 {
		o.Brokers = 3
	}
	c := &Cluster{t: t, Dir: t.TempDir(), Brokers: map[int32]*Proc{}, BrokerAddrs: map[int32]string{}, MetricsAddrs: map[int32]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogs(30)
		}
	})
	nports := 2*o.Coordinators + o.Brokers
	if o.KRaft {
		nports += o.Coordinators // controller listeners
	}
	if o.TestHooks {
		nports += o.Brokers // metrics.listen
	}
	ports := FreePorts(t, nports)
	var initial []string
	for i := 0; i < o.Coordinators; i++ {
		initial = append(initial, fmt.Sprintf("c%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
		c.ClientURLs = append(c.ClientURLs, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
	}
	var voters []string
	if o.KRaft {
		c.ControllerAddrs = map[int32]string{}
		for i := 0; i < o.Coordinators; i++ {
			id := ControllerID(i + 1)
			c.ControllerAddrs[id] = fmt.Sprintf("127.0.0.1:%d", ports[len(ports)-o.Coordinators+i])
			voters = append(voters, fmt.Sprintf("%d@%s", id, c.ControllerAddrs[id]))
		}
	}
	for i := 0; i < o.Coordinators; i++ {
		name := fmt.Sprintf("c%d", i+1)
		args := []string{"coordinator", "--name", name,
			"--data-dir", filepath.Join(c.Dir, name),
			"--listen-client-urls", c.ClientURLs[i],
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			"--initial-cluster", strings.Join(initial, ",")}
		if o.KRaft {
			id := ControllerID(i + 1)
			args = append(args, "--controller-id", fmt.Sprint(id), "--controller-listener", c.ControllerAddrs[id],
				"--controller-override", "kafka.profile=4.0")
			for _, ov := range append(slices.Clone(o.Overrides), o.ControllerOverrides...) {
				args = append(args, "--controller-override", ov)
			}
		}
		c.Coordinators = append(c.Coordinators, Start(t, c.Dir, name, args...))
	}
	// Brokers start once the coordinators serve: a test that kills a
	// coordinator right away must not kill it half-initialised.
	for _, p := range c.Coordinators {
		ready := "coordinator " + p.Name + " ready"
		Eventually(t, 60*time.Second, p.Name+" ready", func() error {
			if !p.Running() {
				return fmt.Errorf("%s exited:\n%s", p.Name, Tail(p.Log(), 20))
			}
			if !strings.Contains(p.Log(), ready) {
				return fmt.Errorf("no %q in its output", ready)
			}
			return nil
		})
	}
	for i := 0; i < o.Brokers; i++ {
		c.BrokerAddrs[int32(i+1)] = fmt.Sprintf("127.0.0.1:%d", ports[2*o.Coordinators+i])
	}
	if o.BeforeBrokers != nil {
		o.BeforeBrokers(maps.Clone(c.BrokerAddrs))
	}
	for i := 0; i < o.Brokers; i++ {
		id := int32(i + 1)
		addr := c.BrokerAddrs[id]
		args := []string{"broker",
			"--override", fmt.Sprintf("broker.id=%d", id),
			"--override", "log.dirs=" + filepath.Join(c.Dir, fmt.Sprintf("b%d", id)),
			"--override", "listeners=PLAINTEXT://" + addr,
			"--override", "coordinator.connect=" + strings.Join(c.ClientURLs, ","),
		}
		if o.KRaft {
			args = append(args, "--override", "kafka.profile=4.0", "--override", "controller.quorum.voters="+strings.Join(voters, ","))
		}
		if o.TestHooks {
			c.MetricsAddrs[id] = fmt.Sprintf("127.0.0.1:%d", ports[2*o.Coordinators+o.Brokers+i])
			args = append(args, "--override", "test.hooks.enable=true", "--override", "metrics.listen="+c.MetricsAddrs[id])
		}
		for _, ov := range append(slices.Clone(o.Overrides), o.BrokerOverrides[id]...) {
			args = append(args, "--override", ov)
		}
		c.Brokers[id] = Start(t, c.Dir, fmt.Sprintf("b%d", id), args...)
	}
	c.WaitBrokers(o.Brokers, 60*time.Second)
	return c
}

// Bootstrap lists the addresses of running brokers.
func (c *Cluster) Bootstrap() []string {
	var out []string
	for id, p := range c.Brokers {
		if p.Running() {
			out = append(out, c.BrokerAddrs[id])
		}
	}
	slices.Sort(out)
	return out
}

// Client returns a kgo client bootstrapped from every broker; the test
// closes it.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	all := make([]string, 0, len(c.BrokerAddrs))
	for _, a := range c.BrokerAddrs {
		all = append(all, a)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(all...)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// WaitBrokers waits until the metadata lists n brokers and a controller.
func (c *Cluster) WaitBrokers(n int, within time.Duration) {
	c.t.Helper()
	Eventually(c.t, within, fmt.Sprintf("%d brokers in metadata, with a controller", n), func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(m.Brokers) != n {
			return fmt.Errorf("%d brokers: %v", len(m.Brokers), m.Brokers.NodeIDs())
		}
		// A broker lists itself before it has registered; a controller
		// means the brokers are registered and led.
		if m.Controller < 0 {
			return fmt.Errorf("brokers %v, no controller", m.Brokers.NodeIDs())
		}
		return nil
	})
}

// PartitionState is one partition as the metadata shows it.
type PartitionState struct {
	Leader, LeaderEpoch int32
	Replicas, ISR       []int32
}

// Describe returns the metadata of topic's partitions as the active
// controller's broker sees it: other brokers' caches may lag (a paused
// broker's cache is as old as the pause). The controller is the one most
// running brokers name, so a resumed broker that still believes it is the
// controller is outvoted.
func (c *Cluster) Describe(topic string) (map[int32]PartitionState, error) {
	st, _, err := c.describeAll(topic)
	if st != nil {
		return st, nil // a broker that did not answer does not matter here
	}
	return nil, err
}

// describeAll is Describe plus every running broker's own answer; its
// error is the last failed answer, also when the controller's came.
func (c *Cluster) describeAll(topic string) (map[int32]PartitionState, map[int32]map[int32]PartitionState, error) {
	var lastErr error = fmt.Errorf("no broker claims to be the controller")
	answers := map[int32]map[int32]PartitionState{}
	var failed error
	votes := map[int32]int{}
	for id, p := range c.Brokers {
		if !p.Running() {
			continue
		}
		st, ctrl, err := describeAt(c.BrokerAddrs[id], topic)
		if ctrl >= 0 {
			votes[ctrl]++
		}
		if err != nil {
			lastErr = err
			failed = fmt.Errorf("b%d: %w", id, err)
			continue
		}
		answers[id] = st
	}
	best, most := int32(-1), 0
	for id, n := range votes {
		if n > most || (n == most && id < best) {
			best, most = id, n
		}
	}
	if st, ok := answers[best]; ok {
		return st, answers, failed
	}
	return nil, answers, lastErr
}

func describeAt(addr, topic string) (map[int32]PartitionState, int32, error) {
	cl := wire.NewClient(addr, "proctest", nil)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(9)
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	raw, err := cl.Request(ctx, req)
	if err != nil {
		return nil, -1, err
	}
	resp := raw.(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 {
		return nil, resp.ControllerID, fmt.Errorf("topic %s not in metadata", topic)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, resp.ControllerID, err
	}
	out := map[int32]PartitionState{}
	for _, pd := range resp.Topics[0].Partitions {
		out[pd.Partition] = PartitionState{Leader: pd.Leader, LeaderEpoch: pd.LeaderEpoch, Replicas: pd.Replicas, ISR: slices.Sorted(slices.Values(pd.ISR))}
	}
	return out, resp.ControllerID, nil
}

// CreateTopic creates a topic and waits until every partition has a
// leader and a full ISR.
func (c *Cluster) CreateTopic(topic string, partitions int32, rf int16, configs map[string]string) {
	c.t.Helper()
	cl := c.Client()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, rf, cfg, topic); err != nil {
		c.t.Fatalf("create topic %s: %v", topic, err)
	}
	c.WaitTopic(topic, partitions, rf)
}

// WaitTopic waits until every partition of topic has a leader and an ISR
// of rf, and every running broker's metadata has every partition with a
// leader: a client may ask any of them first, and one that has not heard
// of the topic yet answers UNKNOWN_TOPIC_OR_PARTITION.
func (c *Cluster) WaitTopic(topic string, partitions int32, rf int16) {
	c.t.Helper()
	Eventually(c.t, 30*time.Second, "topic "+topic+" online with full ISRs on every broker", func() error {
		st, all, err := c.describeAll(topic)
		if err != nil {
			return err
		}
		if len(st) != int(partitions) {
			return fmt.Errorf("%d partitions", len(st))
		}
		for p, s := range st {
			if s.Leader < 0 || len(s.ISR) != int(rf) {
				return fmt.Errorf("partition %d: leader %d isr %v", p, s.Leader, s.ISR)
			}
		}
		for id, st := range all {
			if len(st) != int(partitions) {
				return fmt.Errorf("b%d knows %d partitions", id, len(st))
			}
			for p, s := range st {
				if s.Leader < 0 {
					return fmt.Errorf("b%d: partition %d has no leader", id, p)
				}
			}
		}
		return nil
	})
}

// DumpLogs writes the last n lines of every process's output to the test log.
func (c *Cluster) DumpLogs(n int) {
	for _, p := range c.Coordinators {
		c.t.Logf("--- %s ---\n%s", p.Name, Tail(p.Log(), n))
	}
	for id := int32(1); int(id) <= len(c.Brokers); id++ {
		if p, ok := c.Brokers[id]; ok {
			c.t.Logf("--- %s ---\n%s", p.Name, Tail(p.Log(), n))
		}
	}
}
