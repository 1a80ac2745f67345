package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// TestTargetedFaultsOnRealCluster runs isrlab's coordinators and brokers,
// and checks that Kafka-aware targets hit the node that held the role at
// injection time: a killed leader:t/0 is the leader the metadata named and
// leadership moves away from it; a paused leader makes no progress; the
// seed 000 scenario leader-coordinators cuts the current leader.
func TestTargetedFaultsOnRealCluster(t *testing.T) {
	requireLab(t)
	bin := proctest.Binary(t)
	d := t.TempDir()
	top, err := compose.Build(compose.Options{Name: "nemreal", RunDir: filepath.Join(d, "run"), Binary: bin,
		Coordinators: 3, Brokers: 3, Clients: 1, NoDefaults: true,
		BrokerConfig: []compose.KV{{Key: "coordinator.session.timeout.ms", Value: "3000"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	b := &netns.Backend{StateDir: filepath.Join(d, "state"), NSDir: filepath.Join(d, "netns"),
		Grace: 3 * time.Second, ReadyTimeout: 30 * time.Second}
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })

	cl := kafkaClient(t, c)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "t"); err != nil {
		t.Fatal(err)
	}
	mem := &history.Memory{}
	begin := time.Now()
	res := &LiveResolver{Cluster: c}
	helper := func(args []string) *exec.Cmd {
		return exec.Command(bin, append(slices.Clone(DelayerSubcommand), args...)...)
	}
	n := &Nemesis{Env: &Env{Cluster: c, Resolver: res, DelayerCommand: helper},
		Recorder: history.NewRecorder(mem, func() time.Duration { return time.Since(begin) })}
	leader := func() (string, error) {
		v, err := res.View(ctx, []string{"t"})
		if err != nil {
			return "", err
		}
		p, ok := v.Partitions["t/0"]
		if !ok || p.Leader < 0 || len(p.ISR) < 3 {
			return "", fmt.Errorf("t/0 not fully replicated yet: %+v", p)
		}
		name, _ := brokerName(c, p.Leader)
		return name, nil
	}
	var first string
	proctest.Eventually(t, 30*time.Second, "t/0 has a leader and a full ISR", func() (err error) { first, err = leader(); return err })

	t.Logf("t/0 led by %s", first)
	// Kill the leader: the fault names it, and leadership moves away.
	a, err := n.Inject(ctx, &Kill{procNodes{Nodes: []string{"leader:t/0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Fault.Run.(*killRun).Resolved; !slices.Equal(got, []string{first}) {
		t.Fatalf("kill leader:t/0 hit %v, the leader was %s", got, first)
	}
	proctest.Eventually(t, 30*time.Second, "a new leader for t/0", func() error {
		v, err := res.View(ctx, []string{"t"})
		if err != nil {
			return err
		}
		if p := v.Partitions["t/0"]; p.Leader < 0 || name(c, p.Leader) == first {
			return fmt.Errorf("leader is still %d", p.Leader)
		}
		return nil
	})
	t.Log("leadership moved")
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	t.Log("killed leader restarted")
	var second string
	proctest.Eventually(t, 40*time.Second, "t/0 fully replicated again", func() (err error) { second, err = leader(); return err })

	// Pause the leader: no produce completes while it is frozen.
	a, err = n.Inject(ctx, &Pause{procNodes{Nodes: []string{"leader:t/0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Fault.Run.(*pauseRun).Resolved[0]; got != second {
		t.Fatalf("pause leader:t/0 hit %s, the leader was %s", got, second)
	}
	pctx, pcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	err = cl.ProduceSync(pctx, &kgo.Record{Topic: "t", Value: []byte("during pause")}).FirstErr()
	pcancel()
	if err == nil {
		if v, verr := res.View(ctx, []string{"t"}); verr == nil && name(c, v.Partitions["t/0"].Leader) == second {
			t.Fatal("a produce to a paused leader completed")
		}
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "produce after the pause", func() error {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		defer pcancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: "t", Value: []byte("after")}).FirstErr()
	})

	// Seed 000 scenario 4: the current leader loses the coordinators.
	var third string
	proctest.Eventually(t, 40*time.Second, "t/0 fully replicated again", func() (err error) { third, err = leader(); return err })
	a, err = n.Inject(ctx, &Partition{Topology: SeedLeaderCoordinators, Partition: "t/0"})
	if err != nil {
		t.Fatal(err)
	}
	g := a.Fault.Run.(*partitionRun).Cut
	if !slices.Equal(g[third], []string{"c1", "c2", "c3"}) {
		t.Fatalf("leader-coordinators cut %v, the leader was %s", g, third)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if ts, err := Tables(c.SwitchNS, c.RunID); err != nil || len(ts) > 0 {
		t.Fatalf("tables left: %v, %v", ts, err)
	}
	// Clock skew: the leader's clock jumps an hour ahead, then back.
	a, err = n.Inject(ctx, &ClockSkew{procNodes: procNodes{Nodes: []string{"leader:t/0"}}, OffsetMs: 3600000})
	if err != nil {
		t.Fatal(err)
	}
	skewed := a.Fault.Run.(*clockSkewRun).Resolved[0]
	if got := brokerClockSkew(t, c, skewed); got != 3600000 {
		t.Fatalf("clock skew of %s is %d ms, want 3600000", skewed, got)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := brokerClockSkew(t, c, skewed); got != 0 {
		t.Fatalf("clock skew of %s after heal is %d ms", skewed, got)
	}
	// A bump adds to the skew; a strobe switches the broker's clock
	// between 0 and its offset; each heal restores the true clock.
	skew := &ClockSkew{procNodes: procNodes{Nodes: []string{skewed}}, OffsetMs: 1000}
	bump := &ClockBump{procNodes: procNodes{Nodes: []string{skewed}}, Offset: units.Duration(30 * time.Second)}
	for _, f := range []Fault{skew, bump} {
		if _, err := n.Inject(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if got := brokerClockSkew(t, c, skewed); got != 31000 {
		t.Fatalf("clock of %s after a 1 s skew and a 30 s bump: %d ms", skewed, got)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := brokerClockSkew(t, c, skewed); got != 0 {
		t.Fatalf("clock skew of %s after the bump's heal is %d ms", skewed, got)
	}
	a, err = n.Inject(ctx, &ClockStrobe{procNodes: procNodes{Nodes: []string{skewed}},
		Offset: units.Duration(500 * time.Millisecond), Period: units.Duration(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	proctest.Eventually(t, 20*time.Second, skewed+"'s clock strobes", func() error {
		seen[brokerClockSkew(t, c, skewed)] = true
		if !seen[0] || !seen[500] {
			return fmt.Errorf("skews seen: %v", seen)
		}
		return nil
	})
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := brokerClockSkew(t, c, skewed); got != 0 {
		t.Fatalf("clock skew of %s after the strobe's heal is %d ms", skewed, got)
	}
	// A follower's newest segment gets a flipped bit while it is down; it
	// recovers (its recovery cuts the batch whose CRC fails) and catches up
	// from the leader.
	proctest.Eventually(t, 40*time.Second, "t/0 fully replicated again", func() (err error) { _, err = leader(); return err })
	for i := range 100 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "before corruption %d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	a, err = n.Inject(ctx, &Corrupt{procNodes: procNodes{Nodes: []string{"follower:t/0"}}, File: "segment", Mode: "bitflip", Partition: "t/0"})
	if err != nil {
		t.Fatal(err)
	}
	damaged := a.Fault.Run.(*corruptRun)
	t.Logf("corrupted %+v", damaged.Damage)
	if len(damaged.Damage) != 1 || damaged.Damage[0].Node != damaged.Resolved[0] {
		t.Fatalf("damage %+v on %v", damaged.Damage, damaged.Resolved)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 60*time.Second, "the damaged follower back in the ISR", func() (err error) { _, err = leader(); return err })
	// The CLI, one process per command, against the same cluster: inject
	// in one, list and heal in others.
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--name", "nemreal")...)
		cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+b.StateDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("isrlab %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := cli("fault", "inject", "partition", "--isolate", "leader:t/0")
	if !strings.Contains(out, "injected f1") {
		t.Fatalf("inject printed %q", out)
	}
	cli("fault", "inject", "slow-net", "--node", "controller", "--delay", "5ms", "--rate", "100mbit")
	var listed []Active
	if err := json.Unmarshal([]byte(cli("fault", "list", "--json")), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("fault list: %+v, %v", listed, err)
	}
	if ts, _ := Tables(c.SwitchNS, c.RunID); len(ts) != 2 {
		t.Fatalf("tables after two CLI faults: %v", ts)
	}
	if ps := delayers(c.SwitchNS); len(ps) != 1 {
		t.Fatalf("processes in the switch namespace: %v, want the one delayer", ps)
	}
	cli("fault", "heal", "--all")
	if ts, err := Tables(c.SwitchNS, c.RunID); err != nil || len(ts) > 0 {
		t.Fatalf("tables left after the CLI heal: %v, %v", ts, err)
	}
	if ps := delayers(c.SwitchNS); len(ps) > 0 {
		t.Fatalf("delayers left after the CLI heal: %v", ps)
	}

	// Every step is in the history, with the resolved targets.
	fs := opNames(mem)
	want := []string{"invoke start-kill", "ok start-kill", "invoke stop-kill", "ok stop-kill",
		"invoke start-pause", "ok start-pause", "invoke stop-pause", "ok stop-pause",
		"invoke start-partition", "ok start-partition", "invoke heal", "ok heal",
		"invoke start-clock-skew", "ok start-clock-skew", "invoke stop-clock-skew", "ok stop-clock-skew",
		"invoke start-clock-skew", "ok start-clock-skew", "invoke start-clock-bump", "ok start-clock-bump", "invoke heal", "ok heal",
		"invoke start-clock-strobe", "ok start-clock-strobe", "invoke stop-clock-strobe", "ok stop-clock-strobe",
		"invoke start-corrupt", "ok start-corrupt", "invoke stop-corrupt", "ok stop-corrupt"}
	if !slices.Equal(fs, want) {
		t.Fatalf("history: %v\nwant %v", fs, want)
	}
}

func name(c *compose.Cluster, id int32) string {
	n, _ := brokerName(c, id)
	return n
}

func kafkaClient(t *testing.T, c *compose.Cluster) *kgo.Client {
	var seeds []string
	for _, b := range c.Of(compose.RoleBroker) {
		seeds = append(seeds, net.JoinHostPort(b.Addr.String(), strconv.Itoa(compose.BrokerPort)))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.Dialer(c.Dial()), kgo.DefaultProduceTopic("t"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// brokerClockSkew reads a broker's clock skew from its /v1/clock.
func brokerClockSkew(t *testing.T, c *compose.Cluster, node string) int64 {
	t.Helper()
	n := c.Node(node)
	dial := c.Dial()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	resp, err := hc.Get("http://" + net.JoinHostPort(n.Addr.String(), strconv.Itoa(compose.MetricsPort)) + "/v1/clock")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		OffsetMs int64 `json:"offset_ms"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.OffsetMs
}
