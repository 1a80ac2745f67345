package nemesis

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// udpEchoes sends n numbered datagrams from the client to node's UDP echo
// and returns the answers in their order of arrival, read until none came
// for a while.
func (l *lab) udpEchoes(t *testing.T, node string, n int) []string {
	t.Helper()
	conn := l.udpConn(t, node)
	defer conn.Close()
	// Every answer (duplicates too) waits in the socket until read.
	if err := conn.(*net.UDPConn).SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := fmt.Fprintf(conn, "datagram %04d %s", i, strings.Repeat(".", 64)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	readUntilIdle(t, conn, func(b []byte) { got = append(got, string(b)) })
	return got
}

// snmp reads a counter of node's namespace (/proc/net/snmp, e.g. Udp
// InCsumErrors) through its process.
func (l *lab) snmp(t *testing.T, node, proto, key string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(l.c.Node(node).PID()) + "/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, key); i > 0 && i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s %s in %s", proto, key, b)
	return 0
}

// TestPacketFaults plays each packet fault on the datagrams to b1 and
// shows what reaches b1's application: duplicates and reordering reach a
// UDP application as they are; a corrupted datagram is dropped by the
// receiver's checksum, unless the fault fixes the checksum, and then its
// flipped bit arrives; TCP hides duplicates, reordering and corruption
// (a corrupted segment is a loss it retransmits).
func TestPacketFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	const sent = 200
	sentSet := map[string]bool{}
	for i := range sent {
		sentSet[fmt.Sprintf("datagram %04d %s", i, strings.Repeat(".", 64))] = true
	}
	tests := []struct {
		name  string
		fault *Packet
		check func(t *testing.T, got []string, csumErrs int64)
	}{
		{"duplicate", &Packet{Duplicate: 100}, func(t *testing.T, got []string, _ int64) {
			seen := map[string]int{}
			for _, g := range got {
				seen[g]++
			}
			twice := 0
			for _, c := range seen {
				if c > 1 {
					twice++
				}
			}
			if twice == 0 {
				t.Fatalf("%d answers to %d datagrams, none twice", len(got), sent)
			}
			t.Logf("%d answers to %d datagrams, %d answered twice", len(got), sent, twice)
		}},
		{"reorder", &Packet{Reorder: 50, Gap: 20e6}, func(t *testing.T, got []string, _ int64) {
			if slices.IsSorted(got) {
				t.Fatalf("%d answers, all in order", len(got))
			}
		}},
		{"corrupt", &Packet{Corrupt: 50}, func(t *testing.T, got []string, csumErrs int64) {
			for _, g := range got {
				if !sentSet[g] {
					t.Fatalf("a corrupted datagram reached the application: %q", g)
				}
			}
			if csumErrs == 0 || len(got) >= sent {
				t.Fatalf("%d of %d answered, %d checksum errors at b1: want the corrupted ones dropped by the checksum", len(got), sent, csumErrs)
			}
			t.Logf("%d of %d answered; b1's kernel dropped %d on their checksum", len(got), sent, csumErrs)
		}},
		{"corrupt, checksum fixed", &Packet{Corrupt: 100, Checksum: "fix"}, func(t *testing.T, got []string, csumErrs int64) {
			bad := 0
			for _, g := range got {
				if !sentSet[g] {
					bad++
				}
			}
			if bad == 0 || csumErrs != 0 {
				t.Fatalf("%d of %d answers corrupted, %d checksum errors: want the corruption delivered", bad, len(got), csumErrs)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := l.nemesis(t)
			tt.fault.Nodes, tt.fault.Direction = []string{"b1"}, "in"
			before := l.snmp(t, "b1", "Udp", "InCsumErrors")
			a, err := n.Inject(ctx, tt.fault)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Fault.Run.(*packetRun).Mode; got != "nfqueue" {
				t.Fatalf("mode %q", got)
			}
			got := l.udpEchoes(t, "b1", sent)
			tt.check(t, got, l.snmp(t, "b1", "Udp", "InCsumErrors")-before)
			if err := n.Heal(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := a.Fault.Run.Heal(ctx, n.Env); err != nil {
				t.Fatalf("second heal: %v", err)
			}
			l.noLeftovers(t)
			if ps := delayers(l.c.SwitchNS); len(ps) > 0 {
				t.Fatalf("delayer left after the heal: %v", ps)
			}
			if got := l.udpEchoes(t, "b1", 20); len(got) != 20 || !slices.IsSorted(got) {
				t.Fatalf("after the heal: %d answers to 20 datagrams (sorted: %v)", len(got), slices.IsSorted(got))
			}
		})
	}
	t.Run("tcp", func(t *testing.T) {
		n := l.nemesis(t)
		before := l.snmp(t, "b1", "Tcp", "InCsumErrors")
		a, err := n.Inject(ctx, &Packet{Nodes: []string{"b1"}, Duplicate: 20, Reorder: 20, Corrupt: 10})
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<20)
		rand.Read(data)
		conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr("b1", echoPort))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Minute))
		go conn.Write(data) //nolint:errcheck
		back := make([]byte, len(data))
		if _, err := io.ReadFull(conn, back); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) {
			t.Fatal("1 MiB echoed through duplicated, reordered and corrupted segments came back different")
		}
		proctest.Eventually(t, 10*time.Second, "b1 counts corrupted segments", func() error {
			if got := l.snmp(t, "b1", "Tcp", "InCsumErrors") - before; got == 0 {
				return fmt.Errorf("no TCP checksum errors at b1")
			}
			return nil
		})
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
	})
}

// TestNodeSidePacketFaults plays the packet faults and a delay in the
// nodes' own namespaces (a delayer in each, as on the Docker backend,
// which has no switch namespace) on the same lab: duplicates, reordering,
// corruption and delay into and out of a node, then the heal and clean
// leave no delayer and no table behind.
func TestNodeSidePacketFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	const sent = 200
	nodeNS := l.c.Node("b1").NetNS
	for _, dir := range []string{"in", "out"} {
		t.Run("duplicate "+dir, func(t *testing.T) {
			n := l.nemesis(t)
			n.Env.NodeSide = true
			a, err := n.Inject(ctx, &Packet{Nodes: []string{"b1"}, Duplicate: 100, Direction: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Fault.Run.Heal(ctx, n.Env) }) //nolint:errcheck // healed below; this is for a failure
			r := a.Fault.Run.(*packetRun)
			if r.Side != SideNode || len(r.NodeDelayers) != 1 || r.DelayerPID != 0 {
				t.Fatalf("side %q, node delayers %v, switch delayer %d", r.Side, r.NodeDelayers, r.DelayerPID)
			}
			if ps := nodeDelayers(nodeNS); len(ps) != 1 || ps[0] != r.NodeDelayers[0].PID {
				t.Fatalf("delayers in b1's namespace: %v, recorded %v", ps, r.NodeDelayers)
			}
			if ts, _ := Tables(l.c.SwitchNS, l.c.RunID); len(ts) > 0 {
				t.Fatalf("node-side packet fault wrote switch tables %v", ts)
			}
			got := l.udpEchoes(t, "b1", sent)
			seen := map[string]int{}
			for _, g := range got {
				seen[g]++
			}
			// UDP may lose a few on a busy machine; most must come twice.
			twice := 0
			for _, c := range seen {
				if c >= 2 {
					twice++
				}
			}
			if twice < sent/2 {
				t.Fatalf("%d answers, %d distinct, %d twice, to %d datagrams duplicated %s: want most twice", len(got), len(seen), twice, sent, dir)
			}
			if err := n.Heal(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := a.Fault.Run.Heal(ctx, n.Env); err != nil {
				t.Fatalf("second heal: %v", err)
			}
			l.noLeftovers(t)
			if ps := nodeDelayers(nodeNS); len(ps) > 0 {
				t.Fatalf("delayer left after the heal: %v", ps)
			}
			if got := l.udpEchoes(t, "b1", 20); len(got) != 20 {
				t.Fatalf("after the heal: %d answers to 20 datagrams", len(got))
			}
		})
	}
	t.Run("reorder and corrupt", func(t *testing.T) {
		n := l.nemesis(t)
		n.Env.NodeSide = true
		before := l.snmp(t, "b1", "Udp", "InCsumErrors")
		a, err := n.Inject(ctx, &Packet{Nodes: []string{"b1"}, Reorder: 50, Gap: 20e6, Corrupt: 30, Direction: "in"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Fault.Run.Heal(ctx, n.Env) }) //nolint:errcheck // healed below; this is for a failure
		got := l.udpEchoes(t, "b1", sent)
		csum := l.snmp(t, "b1", "Udp", "InCsumErrors") - before
		if slices.IsSorted(got) || csum == 0 || len(got) >= sent {
			t.Fatalf("%d of %d answered (in order: %v), %d checksum errors at b1: want reordering and corrupted datagrams dropped",
				len(got), sent, slices.IsSorted(got), csum)
		}
		t.Logf("%d of %d answered, out of order; b1's kernel dropped %d on their checksum", len(got), sent, csum)
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
	})
	t.Run("delay", func(t *testing.T) {
		n := l.nemesis(t)
		n.Env.NodeSide = true
		const delay = 40 * time.Millisecond
		if _, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Delay: units.Duration(delay), Rate: "1mbit"}); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("node-side rate into a node: %v", err)
		}
		a, err := n.Inject(ctx, &SlowNet{Nodes: []string{"b1"}, Delay: units.Duration(delay), Direction: "in"})
		if err != nil {
			t.Fatal(err)
		}
		if r := a.Fault.Run.(*slowNetRun); r.Mode != "nfqueue" || r.Side != SideNode {
			t.Fatalf("mode %q side %q", r.Mode, r.Side)
		}
		if got := l.rtt(t, "b1", 10); got < delay || got > delay+250*time.Millisecond {
			t.Fatalf("median RTT %v with a %v delay into b1", got, delay)
		}
		// A run that ends without its heal: clean stops the delayer and
		// removes the table.
		if err := Clean(ctx, l.c.SwitchNS, l.c.RunID, nsPaths(l.c)); err != nil {
			t.Fatal(err)
		}
		l.noLeftovers(t)
		if ps := nodeDelayers(nodeNS); len(ps) > 0 {
			t.Fatalf("delayer left after clean: %v", ps)
		}
		if got := l.rtt(t, "b1", 10); got >= delay {
			t.Fatalf("RTT after clean: %v", got)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatalf("heal after clean: %v", err)
		}
	})
}

// TestCleanRefusesOwnNamespace: clean stops every process of a switch
// namespace and deletes its qdiscs, so it must refuse a "switch" that is
// this host's own namespace (a Docker cluster once named it so).
func TestCleanRefusesOwnNamespace(t *testing.T) {
	err := Clean(context.Background(), "/proc/thread-self/ns/net", "r0", nil)
	if err == nil || !strings.Contains(err.Error(), "own network namespace") {
		t.Fatalf("clean of this host's own namespace: %v", err)
	}
}
