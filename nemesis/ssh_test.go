package nemesis

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/sshtest"
	"github.com/isrlab/isrlab/units"
)

// TestSSHFaults applies faults to a cluster whose hosts the lab reaches
// only over SSH: partitions and loss as nftables rules on the hosts (and
// iptables chains where the host is set to use iptables), a bandwidth
// limit as a tc qdisc, a kill of the partition leader found through the
// Kafka metadata (tunnelled through the client host), then a "crash" that
// leaves faults behind, which HealAll from the store and CleanRemote
// remove to the last rule.
func TestSSHFaults(t *testing.T) {
	t.Setenv("ISRLAB_REGISTRY_DIR", t.TempDir())
	h := sshtest.New(t, "10.219.0.0/24", "c1", "b1", "b2", "b3", "client1")
	cfg := h.Cluster(t)
	cfg.Nodes[3].Iface = "" // b3 finds its interface by address
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, nem := upSSH(ctx, t, h, cfg, "sshfaults")
	store := nem.Store

	// dialFrom connects from one host to another's Kafka port, through the
	// first host's SSH connection.
	dialFrom := func(from, to string, d time.Duration) error {
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		conn, err := c.Node(from).Remote.(*ssh.Host).DialContext(dctx, "tcp", c.Node(to).KafkaAddr())
		if err != nil {
			return err
		}
		return conn.Close()
	}
	sshOK := func(node string) {
		t.Helper()
		if _, err := c.Node(node).Remote.Command(ctx, []string{"true"}, nil); err != nil {
			t.Fatalf("ssh to %s during the fault: %v", node, err)
		}
	}
	tables := func(node string) []string {
		t.Helper()
		ts, err := RemoteTables(ctx, c.Node(node), c.RunID)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	if err := dialFrom("b2", "b1", 5*time.Second); err != nil {
		t.Fatalf("b2 -> b1 before any fault: %v", err)
	}

	// Partition: b1 isolated; its host drops what the others send, but the
	// lab's SSH connection still gets through.
	a, err := nem.Inject(ctx, &Partition{Topology: TopoIsolate, Targets: []string{"b1"}})
	if err != nil {
		t.Fatal(err)
	}
	p := a.Fault.Run.(*partitionRun)
	if p.Side != SideNode || !strings.HasPrefix(p.Table, "isrlab-"+c.RunID+"-") {
		t.Fatalf("partition resolved to side %q table %q", p.Side, p.Table)
	}
	if err := dialFrom("b2", "b1", 500*time.Millisecond); err == nil {
		t.Fatal("b2 -> b1 connected through the partition")
	}
	sshOK("b1")
	if ts := tables("b1"); len(ts) == 0 {
		t.Fatal("no nftables table on b1")
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ts := tables("b1"); len(ts) > 0 {
		t.Fatalf("after heal, b1 has %v", ts)
	}
	proctest.Eventually(t, 10*time.Second, "b2 -> b1 after the heal", func() error { return dialFrom("b2", "b1", time.Second) })

	// The same on a host set to use iptables.
	c.Node("b3").Remote.(*ssh.Host).Firewall = "iptables"
	a, err = nem.Inject(ctx, &Partition{Topology: TopoIsolate, Targets: []string{"b3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dialFrom("b2", "b3", 500*time.Millisecond); err == nil {
		t.Fatal("b2 -> b3 connected through the iptables partition")
	}
	sshOK("b3")
	if ts := tables("b3"); len(ts) == 0 || !strings.HasSuffix(ts[0], "-in") {
		t.Fatalf("iptables chains on b3: %v", ts)
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ts := tables("b3"); len(ts) > 0 {
		t.Fatalf("after heal, b3 has %v", ts)
	}
	proctest.Eventually(t, 10*time.Second, "b2 -> b3 after the heal", func() error { return dialFrom("b2", "b3", time.Second) })

	// Loss of everything b2 receives: connections fail, SSH does not.
	a, err = nem.Inject(ctx, &Loss{Nodes: []string{"b2"}, Percent: 100, Direction: "in"})
	if err != nil {
		t.Fatal(err)
	}
	if err := dialFrom("b1", "b2", 500*time.Millisecond); err == nil {
		t.Fatal("b1 -> b2 connected through 100% loss")
	}
	sshOK("b2")
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}

	// A bandwidth limit on what b1 sends: netem where the kernel has it,
	// else TBF; a delay without netem is refused as unsupported.
	a, err = nem.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Rate: "10mbit", Direction: "out"})
	if err != nil {
		t.Fatal(err)
	}
	qd := qdiscOn(t, h.Host("b1"))
	if !strings.Contains(qd, " 1517: ") {
		t.Fatalf("no fault qdisc on b1: %s", qd)
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if qd := qdiscOn(t, h.Host("b1")); strings.Contains(qd, " 1517: ") {
		t.Fatalf("fault qdisc left on b1: %s", qd)
	}
	// A delay of what b1 sends: netem where its kernel has it, else the
	// delayer on b1's host (its isrlab), as a delay into a node always is.
	const delay = 300 * time.Millisecond
	a, err = nem.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Delay: units.Duration(delay), Direction: "out"})
	if err != nil {
		t.Fatal(err)
	}
	if r := a.Fault.Run.(*slowNetRun); r.Mode == "nfqueue" {
		if r.Side != SideNode || len(r.NodeDelayers) != 1 || delayersOn(t, h, c.RunID)["b1"] != 1 {
			t.Fatalf("delay through a delayer: side %q, delayers %v; on the hosts %v", r.Side, r.NodeDelayers, delayersOn(t, h, c.RunID))
		}
	} else if qd := qdiscOn(t, h.Host("b1")); !strings.Contains(qd, "netem 1517:") {
		t.Fatalf("mode %q without netem: %s", r.Mode, qd)
	}
	// b1's answer to b2's connection waits in b1's queue.
	begin := time.Now()
	if err := dialFrom("b2", "b1", 10*time.Second); err != nil || time.Since(begin) < delay {
		t.Fatalf("b2 -> b1 with a %v delay out of b1: %v after %v", delay, err, time.Since(begin))
	}
	sshOK("b1")
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if d := delayersOn(t, h, c.RunID); len(d) > 0 {
		t.Fatalf("delayers left after the heal: %v", d)
	}

	// Packet faults on b2's host, into it: connections still work (TCP
	// drops the copies and puts segments back in order), SSH too.
	a, err = nem.Inject(ctx, &Packet{Nodes: []string{"b2"}, Duplicate: 50, Reorder: 30, Direction: "in"})
	if err != nil {
		t.Fatal(err)
	}
	if d := delayersOn(t, h, c.RunID); d["b2"] != 1 || len(tables("b2")) == 0 {
		t.Fatalf("packet fault on b2: delayers %v, tables %v", d, tables("b2"))
	}
	if err := dialFrom("b1", "b2", 10*time.Second); err != nil {
		t.Fatalf("b1 -> b2 with duplicated, reordered packets: %v", err)
	}
	sshOK("b2")
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Fault.Run.Heal(ctx, nem.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}
	if d := delayersOn(t, h, c.RunID); len(d) > 0 || len(tables("b2")) > 0 {
		t.Fatalf("after the heal: delayers %v, tables %v", d, tables("b2"))
	}

	// A Kafka-aware target: the leader of t/0, read through the tunnel.
	createTopic(ctx, t, c, "t")
	a, err = nem.Inject(ctx, &Kill{procNodes{Nodes: []string{"leader:t/0"}}})
	if err != nil {
		t.Fatal(err)
	}
	victim := a.Fault.Run.(*killRun).Resolved[0]
	if c.Node(victim).Proc.Running() {
		t.Fatalf("%s runs after kill", victim)
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if !c.Node(victim).Proc.Running() {
		t.Fatalf("%s not started by the heal", victim)
	}

	// A crash: faults injected, never healed by their process. The store
	// and the sweep find them all.
	for _, f := range []Fault{
		&Partition{Topology: TopoHalves},
		&Loss{Nodes: []string{"client1"}, Percent: 10},
		&Pause{procNodes{Nodes: []string{"b2"}}},
		&Packet{Nodes: []string{"b3"}, Reorder: 10}, // b3's host uses iptables
	} {
		if _, err := nem.Inject(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	// A table no store knows (a crash between the rule and the record).
	if _, err := c.Node("b3").Remote.Command(ctx, []string{"nft", "-f", "-"},
		[]byte(nftRuleset(tableName(c.RunID, "f99"), 22, []string{"ip saddr 192.0.2.1 drop"}, nil))); err != nil {
		t.Fatal(err)
	}
	other := &Nemesis{Env: &Env{Cluster: c}, Store: &Store{Path: store.Path}}
	if err := errors.Join(other.HealAll(ctx), CleanRemote(ctx, c)); err != nil {
		t.Fatal(err)
	}
	if left := h.Leftovers(t, c.RunID); len(left) > 0 {
		var tablesLeft []string
		for _, l := range left {
			if !strings.Contains(l, "pid ") {
				tablesLeft = append(tablesLeft, l)
			}
		}
		if len(tablesLeft) > 0 {
			t.Fatalf("left behind: %v", tablesLeft)
		}
	}
	if d := delayersOn(t, h, c.RunID); len(d) > 0 {
		t.Fatalf("delayers left after the sweep: %v", d)
	}
	// A delayer whose fault no store knows (killed between the start and
	// the record) is found by its files.
	if _, err := remoteSteer(ctx, c.Node("client1"), "packet", DelayerConfig{Queue: 7, Packet: PacketConfig{Reorder: 0.1}},
		c.RunID, tableName(c.RunID, "f98"), "in"); err != nil {
		t.Fatal(err)
	}
	if d := delayersOn(t, h, c.RunID); d["client1"] != 1 {
		t.Fatalf("stray delayer not started: %v", d)
	}
	if err := CleanRemote(ctx, c); err != nil {
		t.Fatal(err)
	}
	if d := delayersOn(t, h, c.RunID); len(d) > 0 {
		t.Fatalf("stray delayer left by CleanRemote: %v", d)
	}
	if s := stateOf(t, c.Node("b2").PID()); s == "T" {
		t.Fatal("b2 still paused after the heal")
	}
}

// upSSH brings the ssh cluster of cfg up on h's hosts (taken down when
// the test ends) and returns it with a Nemesis storing its faults in the
// cluster's state directory, the faultfs disks the cluster has in its Env.
func upSSH(ctx context.Context, t *testing.T, h *sshtest.Hosts, cfg *ssh.Config, name string) (*compose.Cluster, *Nemesis) {
	t.Helper()
	stateDir := t.TempDir()
	topo, err := cfg.Topology(name, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &ssh.Backend{Config: cfg, StateDir: stateDir, Dial: h.Dial(), Grace: 5 * time.Second, ReadyTimeout: 60 * time.Second}
	c, err := b.Up(ctx, topo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	env := &Env{Cluster: c, Resolver: &LiveResolver{Cluster: c}, Disks: c.Disks(), Rand: rand.New(rand.NewSource(1))}
	return c, &Nemesis{Env: env, Store: &Store{Path: FaultsFile(stateDir, c.Name)}}
}

// delayersOn counts the live delayers of run on each host.
func delayersOn(t *testing.T, h *sshtest.Hosts, run string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range h.Leftovers(t, run) {
		if strings.Contains(l, "fault delayer") && strings.Contains(l, "--run "+run) {
			node, _, _ := strings.Cut(l, ":")
			pid := strings.Fields(strings.TrimPrefix(l, node+": pid "))[0]
			if p, _ := strconv.Atoi(strings.TrimSuffix(pid, ":")); p > 0 && stateOf(t, p) != "Z" {
				out[node]++
			}
		}
	}
	return out
}

func qdiscOn(t *testing.T, x *sshtest.Host) string {
	t.Helper()
	cmd := exec.Command("tc", "qdisc", "show")
	var b strings.Builder
	cmd.Stdout = &b
	if err := compose.InNetNS(x.NS, cmd.Run); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func stateOf(t *testing.T, pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func adminCreate(ctx context.Context, c *compose.Cluster, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(c.Dial()))
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).CreateTopic(cctx, 1, 3, nil, topic)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
}

// createTopic makes a topic with RF 3 through the cluster's dialer.
func createTopic(ctx context.Context, t *testing.T, c *compose.Cluster, topic string) {
	t.Helper()
	r := &LiveResolver{Cluster: c}
	proctest.Eventually(t, 60*time.Second, "topic "+topic, func() error {
		if err := adminCreate(ctx, c, topic); err != nil {
			return err
		}
		v, err := r.View(ctx, []string{topic})
		if err != nil {
			return err
		}
		if pv, ok := v.Partitions[topic+"/0"]; !ok || pv.Leader < 0 || len(pv.ISR) < 3 {
			return errors.New("no leader with a full ISR yet")
		}
		return nil
	})
}

// TestClockScripts runs the clock-skew scripts with a stand-in date that
// records what it is asked to set: skew, a second skew of the same fault
// (ignored), undo, a second undo (ignored), and the sweep of a marker left
// behind.
func TestClockScripts(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "date.log")
	fake := "#!/bin/sh\ncase $1 in\n+%s%N) echo 1000000000000000000 ;;\n-s) echo \"$2\" >>" + log + " ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(bin, "date"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := "t" + strconv.Itoa(os.Getpid())
	n := &compose.Node{NodeSpec: compose.NodeSpec{Name: "b1", Role: compose.RoleBroker},
		Remote: localHost{path: bin + ":" + os.Getenv("PATH"), clock: true}}
	c := compose.NewCluster(compose.Topology{Name: "x", RunID: run}, "ssh", []*compose.Node{n}, nil)
	env := &Env{Cluster: c, id: "f1"}
	f := (&ClockSkew{procNodes: procNodes{Nodes: []string{"b1"}}, OffsetMs: 5500}).NewRun().(*clockSkewRun)
	ctx := context.Background()
	if err := f.Resolve(ctx, env); err != nil {
		t.Fatal(err)
	}
	marker := clockMarker(tableName(run, "f1"), "b1")
	t.Cleanup(func() { os.Remove(marker) })
	for range 2 {
		if err := f.Inject(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "5500" {
		t.Fatalf("marker %s: %q, %v", marker, b, err)
	}
	for range 2 {
		if err := f.Heal(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("marker after heal: %v", err)
	}
	// A skew whose heal never ran: the sweep undoes it.
	env.id = "f2"
	f.OffsetMs = -250
	if err := f.Inject(ctx, env); err != nil {
		t.Fatal(err)
	}
	env.id = ""
	if err := undoClockSkews(ctx, n, run); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "@1000000005.500000000\n@999999994.500000000\n@999999999.750000000\n@1000000000.250000000\n"
	if string(b) != want {
		t.Fatalf("date -s calls:\n%s\nwant:\n%s", b, want)
	}
}

// localHost runs "remote" commands here, with PATH set: the remote
// scripts' logic tested without a host.
type localHost struct {
	path  string
	clock bool
}

func (l localHost) Command(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PATH="+l.path)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, &compose.ExitError{Argv: argv, Status: ee.ExitCode(), Stderr: stderr.String()}
	}
	return out, err
}

func (l localHost) ControlPort() int     { return 22 }
func (l localHost) SystemClock() bool    { return l.clock }
func (l localHost) FirewallTool() string { return "nft" }

// BenchmarkSSHInjectHeal measures inject and heal latency of the faults
// the ssh backend applies on remote hosts (sshd in namespaces here, so the
// network round trip is ~0: what is measured is SSH sessions and the
// hosts' nft, iptables, tc and kill), through a Nemesis with a file store.
// "ssh-true" is one bare remote command, the unit everything else costs.
func BenchmarkSSHInjectHeal(b *testing.B) {
	b.Setenv("ISRLAB_REGISTRY_DIR", b.TempDir())
	h := sshtest.New(b, "10.222.0.0/24", "c1", "b1", "b2", "b3", "client1")
	cfg := h.Cluster(b)
	stateDir := b.TempDir()
	topo, err := cfg.Topology("sshbench", "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := (&ssh.Backend{Config: cfg, StateDir: stateDir, Dial: h.Dial(), Grace: 5 * time.Second, ReadyTimeout: 60 * time.Second}).Up(ctx, topo)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Down(context.Background()) })
	nem := &Nemesis{Env: &Env{Cluster: c}, Store: &Store{Path: FaultsFile(stateDir, c.Name)}}
	b.Run("ssh-true", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Node("b1").Remote.Command(ctx, []string{"true"}, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, fc := range []struct {
		name string
		f    func() Fault
		fw   string
	}{
		{"partition-isolate-nft", func() Fault { return &Partition{Topology: TopoIsolate, Targets: []string{"b1"}} }, ""},
		{"partition-isolate-iptables", func() Fault { return &Partition{Topology: TopoIsolate, Targets: []string{"b1"}} }, "iptables"},
		{"partition-halves", func() Fault { return &Partition{Topology: TopoHalves} }, ""},
		{"loss", func() Fault { return &Loss{Nodes: []string{"b2"}, Percent: 10} }, ""},
		{"slow-net-rate", func() Fault { return &SlowNet{Nodes: []string{"b2"}, Rate: "10mbit", Direction: "out"} }, ""},
		{"pause", func() Fault { return &Pause{procNodes{Nodes: []string{"b3"}}} }, ""},
		{"kill", func() Fault { return &Kill{procNodes{Nodes: []string{"b3"}}} }, ""},
	} {
		b.Run(fc.name, func(b *testing.B) {
			for _, n := range c.Nodes {
				n.Remote.(*ssh.Host).Firewall = fc.fw
			}
			var inject, heal time.Duration
			for b.Loop() {
				t0 := time.Now()
				a, err := nem.Inject(ctx, fc.f())
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := nem.Heal(ctx, a.ID); err != nil {
					b.Fatal(err)
				}
				inject += t1.Sub(t0)
				heal += time.Since(t1)
			}
			b.ReportMetric(float64(inject.Microseconds())/1000/float64(b.N), "inject-ms")
			b.ReportMetric(float64(heal.Microseconds())/1000/float64(b.N), "heal-ms")
		})
	}
	if left := h.Leftovers(b, c.RunID); len(left) != 4 {
		b.Fatalf("want only the 4 node processes left, got %v", left)
	}
}

// TestSSHDiskFaults: a broker host whose data dir is a faultfs mount (its
// daemon run by the host's own installation, as a user would set it up)
// takes the disk faults over SSH: each request runs the host's control
// command there (a wrapper that notes the network namespace it runs in,
// then runs isrlab faultfs ctl). A slow disk delays the broker's writes
// and is healed; a power loss kills the broker over SSH, then forgets the
// disk's unsynced bytes, and its heal starts the broker again; a slow
// disk left behind by a lab that died is healed by the store and the
// sweep (what isrlab clean --backend ssh runs).
func TestSSHDiskFaults(t *testing.T) {
	t.Setenv("ISRLAB_REGISTRY_DIR", t.TempDir())
	h := sshtest.New(t, "10.223.0.0/24", "c1", "b1", "client1")
	cfg := h.Cluster(t)
	sock, notes := h.Faultfs(t, cfg, "b1")
	b1 := &cfg.Nodes[1]
	local := faultfs.NewClient(sock) // the test's own view of the daemon
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, nem := upSSH(ctx, t, h, cfg, "sshdisk")
	if c.Disks()["b1"] != sock || nem.Env.Disks["b1"] != sock {
		t.Fatalf("the cluster's disks: %v", c.Disks())
	}
	store := nem.Store
	status := func() faultfs.Status {
		t.Helper()
		st, err := local.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// produce sends n records to topic d (one partition) and waits for them.
	produce := func(n int) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(c.Dial()), kgo.DefaultProduceTopic("d"),
			kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopic(pctx, 1, 1, nil, "d"); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
		for i := range n {
			if err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
				return err
			}
		}
		return nil
	}
	proctest.Eventually(t, 60*time.Second, "produce to b1", func() error { return produce(5) })

	// A slow disk under b1: the broker's writes are delayed, then healed.
	slow := (&SlowDisk{Latency: units.Duration(5 * time.Millisecond)}).NewRun().(*slowDiskRun)
	slow.Nodes, slow.Op = []string{"b1"}, faultfs.OpWrite
	a, err := nem.Inject(ctx, slow)
	if err != nil {
		t.Fatal(err)
	}
	if f := status().Faults; len(f) != 1 || f[0].Kind != faultfs.CmdLatency || f[0].Op != faultfs.OpWrite {
		t.Fatalf("faults on b1's disk: %+v", f)
	}
	before := status().Counters[faultfs.OpWrite].Delayed
	if err := produce(20); err != nil {
		t.Fatal(err)
	}
	if after := status().Counters[faultfs.OpWrite].Delayed; after <= before {
		t.Errorf("no write of b1 was delayed (%d before, %d after)", before, after)
	} else {
		t.Logf("b1's writes delayed by the slow disk: %d", after-before)
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if f := status().Faults; len(f) != 0 {
		t.Fatalf("faults after the heal: %+v", f)
	}

	// Power loss: b1 dies over SSH, then its disk forgets what it did not
	// sync (here a file no fsync covered).
	lost := filepath.Join(b1.DataDir, "unsynced")
	if err := os.WriteFile(lost, []byte("gone at the power loss"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err = nem.Inject(ctx, &PowerLoss{procNodes: procNodes{Nodes: []string{"b1"}}})
	if err != nil {
		t.Fatal(err)
	}
	pl := a.Fault.Run.(*powerLossRun)
	if r, ok := pl.Reports["b1"]; !ok || r.Files == 0 {
		t.Errorf("power loss report: %+v", pl.Reports)
	} else {
		t.Logf("b1's disk at the power loss: %+v", r)
	}
	if _, err := os.Stat(lost); !os.IsNotExist(err) {
		t.Errorf("the unsynced file survived the power loss: %v", err)
	}
	if c.Node("b1").Proc.Running() {
		t.Fatal("b1 runs after the power loss")
	}
	if err := nem.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 60*time.Second, "produce to b1 after the power loss", func() error { return produce(1) })

	// A lab that died with a slow disk injected: the store and the sweep
	// heal it.
	if _, err := nem.Inject(ctx, slow); err != nil {
		t.Fatal(err)
	}
	other := &Nemesis{Env: &Env{Cluster: c}, Store: &Store{Path: store.Path}}
	if err := other.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := nem.Inject(ctx, slow); err != nil { // one no store knows of
		t.Fatal(err)
	}
	os.Remove(store.Path)
	if err := CleanRemote(ctx, c); err != nil {
		t.Fatal(err)
	}
	if f := status().Faults; len(f) != 0 {
		t.Fatalf("faults after the sweep: %+v", f)
	}

	// Every request ran on b1's host, in its network namespace.
	noted, err := os.ReadFile(notes)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(noted)), "\n")
	t.Logf("control commands run on b1's host:\n%s", noted)
	want := h.Host("b1").NetNSInode(t) + " faultfs ctl --control " + sock + " -"
	if len(lines) < 7 { // latency, heal, crash, latency, heal, latency, heal
		t.Errorf("%d control commands ran on b1's host:\n%s", len(lines), noted)
	}
	for _, l := range lines {
		if l != want {
			t.Errorf("control command %q, want %q", l, want)
		}
	}
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if left := h.Leftovers(t, c.RunID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
