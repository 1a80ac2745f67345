package nemesis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// TestNetworkFaults shows each network fault's effect on real traffic
// between the lab's namespaces, then that healing leaves nothing behind.
func TestNetworkFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()

	t.Run("partition stalls TCP and heals", func(t *testing.T) {
		n := l.nemesis(t)
		conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr("b1", echoPort))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := echoOn(conn, 5*time.Second); err != nil {
			t.Fatalf("before the partition: %v", err)
		}
		a, err := n.Inject(ctx, &Partition{Topology: TopoIsolate, Targets: []string{"b1"}})
		if err != nil {
			t.Fatal(err)
		}
		// The established connection stalls: the echo does not come back.
		conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
		io.WriteString(conn, "late\n")
		r := bufio.NewReader(conn)
		if _, err := r.ReadString('\n'); !isTimeout(err) {
			t.Fatalf("echo through the partition: err = %v, want a timeout", err)
		}
		if err := l.echoFrom("client1", "b1", 300*time.Millisecond); err == nil {
			t.Fatal("a new connection crossed the partition")
		}
		if err := l.echoFrom("b2", "b3", 5*time.Second); err != nil {
			t.Fatalf("b2 -> b3 is not part of the partition: %v", err)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		// The stalled connection recovers by retransmission.
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		if got, err := r.ReadString('\n'); err != nil || got != "late\n" {
			t.Fatalf("stalled echo after the heal: %q, %v", got, err)
		}
		if err := l.echoFrom("client1", "b1", 5*time.Second); err != nil {
			t.Fatalf("after the heal: %v", err)
		}
		if err := n.Heal(ctx, a.ID); !errors.Is(err, ErrNotActive) {
			t.Fatalf("second heal: %v", err)
		}
		if err := (&partitionRun{nftRun: nftRun{Table: a.Fault.Run.(*partitionRun).Table}}).Heal(ctx, n.Env); err != nil {
			t.Fatalf("healing a healed partition again: %v", err)
		}
		l.noLeftovers(t)
	})

	t.Run("one-way partition", func(t *testing.T) {
		n := l.nemesis(t)
		// b1 drops what b2 sends it; b1 -> b2 UDP still arrives.
		a, err := n.Inject(ctx, &Partition{Topology: TopoCut, Targets: []string{"b1"}, Others: []string{"b2"}, OneWay: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.echoFrom("b2", "b1", 300*time.Millisecond); err == nil {
			t.Fatal("b2 -> b1 crossed a one-way partition into b1")
		}
		if err := l.echoFrom("client1", "b1", 5*time.Second); err != nil {
			t.Fatalf("client -> b1 is not cut: %v", err)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		proctest.Eventually(t, 10*time.Second, "b2 -> b1 after the heal", func() error { return l.echoFrom("b2", "b1", time.Second) })
		l.noLeftovers(t)
	})

	t.Run("random loss", func(t *testing.T) {
		n := l.nemesis(t)
		if got := l.udpDelivery(t, "b1", 400); got < 0.99 {
			t.Fatalf("delivery without loss: %.3f", got)
		}
		a, err := n.Inject(ctx, &Loss{Nodes: []string{"b1"}, Percent: 30, Direction: "in"})
		if err != nil {
			t.Fatal(err)
		}
		got := l.udpDelivery(t, "b1", 2000)
		t.Logf("30%% loss into b1: %.3f of datagrams answered", got)
		if got < 0.6 || got > 0.8 {
			t.Fatalf("delivery with 30%% loss: %.3f, want about 0.70", got)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if got := l.udpDelivery(t, "b1", 400); got < 0.99 {
			t.Fatalf("delivery after the heal: %.3f", got)
		}
		l.noLeftovers(t)
	})

	t.Run("bandwidth", func(t *testing.T) {
		n := l.nemesis(t)
		const rate = "16mbit" // 2 MB/s
		a, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Rate: rate, Direction: "in"})
		if err != nil {
			t.Fatal(err)
		}
		got := l.sendRate(t, "b1", 3<<20)
		want, _ := ParseRate(rate)
		t.Logf("TBF %s: measured %.2f MB/s, set %.2f MB/s", rate, got/1e6, float64(want)/1e6)
		if got < 0.7*float64(want) || got > 1.15*float64(want) {
			t.Fatalf("measured %.0f B/s through a %d B/s limit", got, want)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
		if after := l.sendRate(t, "b1", 3<<20); after < 2*float64(want) {
			t.Fatalf("after the heal: %.0f B/s, still limited", after)
		}
	})

	t.Run("heal all from another process's store and clean", func(t *testing.T) {
		n := l.nemesis(t)
		for _, f := range []Fault{
			&Partition{Topology: TopoHalves, Nodes: []string{"brokers"}},
			&Loss{Nodes: []string{"b2"}, Percent: 50},
			&SlowNet{Nodes: []string{"b3"}, Rate: "1mbit"},
		} {
			if _, err := n.Inject(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		other := l.nemesis(t) // a fresh handle on the same store file
		as, err := other.Active()
		if err != nil || len(as) != 3 {
			t.Fatalf("active from another handle: %d, %v", len(as), err)
		}
		if err := other.HealAll(ctx); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
		// Clean finds faults nobody stored.
		orphan := &Partition{Topology: TopoIsolate, Targets: []string{"b2"}}
		env := &Env{Cluster: l.c, id: "orphan"}
		run := orphan.NewRun()
		if err := run.Resolve(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := run.Inject(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := (&slowNetRun{SlowNet: SlowNet{Rate: "1mbit"}, nodesRun: nodesRun{Resolved: []string{"b2"}}}).Inject(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := Clean(ctx, l.c.SwitchNS, l.c.RunID, nsPaths(l.c)); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
		if err := l.echoFrom("client1", "b2", 5*time.Second); err != nil {
			t.Fatalf("after clean: %v", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// udpConn is a UDP socket of the client connected to node's UDP echo.
func (l *lab) udpConn(t *testing.T, node string) net.Conn {
	t.Helper()
	var conn net.Conn
	err := compose.InNetNS(l.c.Node("client1").NetNS, func() error {
		var err error
		conn, err = net.Dial("udp", l.addr(node, udpPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// udpDelivery sends count datagrams from the client to node's UDP echo in
// batches (not to overrun the sockets' buffers) and returns the share
// answered.
func (l *lab) udpDelivery(t *testing.T, node string, count int) float64 {
	t.Helper()
	conn := l.udpConn(t, node)
	defer conn.Close()
	got := 0
	buf := make([]byte, 64)
	const batch = 50
	for sent := 0; sent < count; sent += batch {
		for i := 0; i < batch; i++ {
			if _, err := conn.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < batch; i++ {
			conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := conn.Read(buf); err != nil {
				if isTimeout(err) {
					break
				}
				t.Fatal(err)
			}
			got++
		}
	}
	// Answers a stall held past a batch's reads wait in the socket.
	readUntilIdle(t, conn, func([]byte) { got++ })
	return float64(min(got, count)) / float64(count)
}

// readUntilIdle reads datagrams from conn, handing each to got, until
// none comes for a second.
func readUntilIdle(t *testing.T, conn net.Conn, got func([]byte)) {
	t.Helper()
	buf := make([]byte, 2048)
	for {
		conn.SetReadDeadline(time.Now().Add(time.Second))
		k, err := conn.Read(buf)
		if isTimeout(err) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		got(buf[:k])
	}
}

// sendRate sends n bytes from the client to node's sink and returns the
// bytes per second until the sink confirmed it read them all.
func (l *lab) sendRate(t *testing.T, node string, n int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr(node, sinkPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 64<<10)
	begin := time.Now()
	for left := n; left > 0; left -= len(buf) {
		if _, err := conn.Write(buf[:min(left, len(buf))]); err != nil {
			t.Fatal(err)
		}
	}
	conn.(*net.TCPConn).CloseWrite()
	ok, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || strings.TrimSpace(ok) != "ok" {
		t.Fatalf("sink: %q, %v", ok, err)
	}
	return float64(n) / time.Since(begin).Seconds()
}

// TestDelay measures the round trip to a node whose inbound packets are
// delayed (netem where the kernel has it, else the NFQUEUE delayer).
func TestDelay(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	base := l.rtt(t, "b1", 10)
	const delay = 40 * time.Millisecond
	a, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Delay: units.Duration(delay), Direction: "in"})
	if err != nil {
		t.Fatal(err)
	}
	mode := a.Fault.Run.(*slowNetRun).Mode
	got := l.rtt(t, "b1", 10)
	t.Logf("mode %s: median RTT %v without, %v with a %v delay into b1", mode, base, got, delay)
	if got < delay || got > delay+250*time.Millisecond {
		t.Fatalf("median RTT %v with a %v delay", got, delay)
	}
	if err := l.echoFrom("b2", "b3", 5*time.Second); err != nil {
		t.Fatalf("b2 -> b3 is not delayed and must work: %v", err)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	l.noLeftovers(t)
	if mode == "nfqueue" {
		if ps := delayers(l.c.SwitchNS); len(ps) > 0 {
			t.Fatalf("delayer processes left: %v", ps)
		}
	}
	if after := l.rtt(t, "b1", 10); after >= delay {
		t.Fatalf("RTT after the heal: %v", after)
	}
}

// TestDelaySurvivesAnotherHeal: deleting another fault's nftables table
// makes the kernel drop the packets the delayer holds, and its verdicts on
// them come back as errors; the delayer must go on delaying (it used to
// exit, and every packet then bypassed the queue undelayed).
func TestDelaySurvivesAnotherHeal(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	const delay = 40 * time.Millisecond
	a, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Delay: units.Duration(delay), Direction: "in"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Fault.Run.(*slowNetRun).Mode != "nfqueue" {
		t.Skip("netem delays here; no delayer to test")
	}
	// Keep packets in the queue while the other fault comes and goes.
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr("b1", echoPort))
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := echoOn(conn, 10*time.Second); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := 0; i < 3; i++ {
		p, err := n.Inject(ctx, &Partition{Topology: TopoCut, Targets: []string{"b2"}, Others: []string{"b3"}})
		if err != nil {
			t.Fatal(err)
		}
		// Heal while the delayer holds echoes: the kernel drops those.
		proctest.Eventually(t, 10*time.Second, "the delayer holds packets", func() error {
			return queued(l.c.SwitchNS)
		})
		if err := n.Heal(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("echo during the other fault: %v", err)
	}
	if ps := delayers(l.c.SwitchNS); len(ps) != 1 {
		t.Fatalf("delayer processes after the other fault's heals: %v", ps)
	}
	if got := l.rtt(t, "b1", 5); got < delay {
		t.Fatalf("median RTT %v after another fault's heal, want the %v delay", got, delay)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
}

// queued returns nil when the delayer serving the namespace at nsPath holds
// packets: the kernel's count of packets waiting for a verdict
// (queue_total, the third field of nfnetlink_queue in /proc, read through
// the delayer's own /proc entry, which is in that namespace).
func queued(nsPath string) error {
	ps := delayers(nsPath)
	if len(ps) != 1 {
		return fmt.Errorf("delayer processes %v", ps)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/netfilter/nfnetlink_queue", ps[0]))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[2] != "0" {
			return nil
		}
	}
	return fmt.Errorf("no packet waits for a verdict: %q", data)
}

// rtt returns the median round trip of count echoes from the client to node
// over one connection.
func (l *lab) rtt(t *testing.T, node string, count int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr(node, echoPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ds []time.Duration
	for range count {
		begin := time.Now()
		if err := echoOn(conn, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(begin))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// TestNodeSideFaults applies partitions and loss inside the nodes' own
// namespaces, the way the Docker backend needs them, on the same lab.
func TestNodeSideFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	n.Env.NodeSide = true

	a, err := n.Inject(ctx, &Partition{Topology: TopoIsolate, Targets: []string{"b1"}})
	if err != nil {
		t.Fatal(err)
	}
	if side := a.Fault.Run.(*partitionRun).Side; side != SideNode {
		t.Fatalf("side %q", side)
	}
	if ts, _ := Tables(l.c.SwitchNS, l.c.RunID); len(ts) > 0 {
		t.Fatalf("node-side partition wrote switch tables %v", ts)
	}
	if err := l.echoFrom("client1", "b1", 300*time.Millisecond); err == nil {
		t.Fatal("client -> b1 crossed a node-side partition")
	}
	if err := l.echoFrom("b1", "b2", 300*time.Millisecond); err == nil {
		t.Fatal("b1 -> b2 crossed a node-side partition")
	}
	if err := l.echoFrom("b2", "b3", 5*time.Second); err != nil {
		t.Fatalf("b2 -> b3 is not cut: %v", err)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "client -> b1 after the heal", func() error { return l.echoFrom("client1", "b1", time.Second) })

	a, err = n.Inject(ctx, &Loss{Nodes: []string{"b2"}, Percent: 30, Direction: "in"})
	if err != nil {
		t.Fatal(err)
	}
	got := l.udpDelivery(t, "b2", 2000)
	t.Logf("node-side 30%% loss into b2: %.3f answered", got)
	if got < 0.6 || got > 0.8 {
		t.Fatalf("delivery with 30%% node-side loss: %.3f", got)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b3"}, Rate: "1mbit"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("node-side slow-net into a node: %v", err)
	}
	a, err = n.Inject(ctx, &SlowNet{Nodes: []string{"b3"}, Rate: "1mbit", Direction: "out"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	l.noLeftovers(t)
}
