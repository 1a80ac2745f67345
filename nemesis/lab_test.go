package nemesis

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/internal/proctest"
)

// Test servers the lab's nodes run (this test binary, re-executed).
const (
	envServe = "ISRLAB_NEMESIS_TEST_SERVE" // the node's address
	echoPort = 7000                        // TCP: echoes every byte
	sinkPort = 7001                        // TCP: reads to EOF, answers "ok\n"
	udpPort  = 7002                        // UDP: echoes every datagram
	workPort = 7003                        // TCP: "spin\n" burns CPU until closed; "cache N\n" writes N MiB through the page cache
	// A fake /v1/clock is served on compose.MetricsPort, as a broker's.

	envDelayer = "ISRLAB_NEMESIS_TEST_DELAYER" // run DelayerMain on the args after --
	envOwner   = "ISRLAB_NEMESIS_TEST_OWNER"   // own a lab under this dir with the faults in faults.json (ownerMain)
)

func delayerMain() int {
	i := slices.Index(os.Args, "--")
	if i < 0 {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := DelayerMain(ctx, os.Args[i+1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// testDelayer runs delayers from this test binary.
func testDelayer(args []string) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), envDelayer+"=1")
	return cmd
}

func TestMain(m *testing.M) {
	if addr := os.Getenv(envServe); addr != "" {
		os.Exit(serve(addr))
	}
	if os.Getenv(envDelayer) != "" {
		os.Exit(delayerMain())
	}
	if d := os.Getenv(envOwner); d != "" {
		os.Exit(ownerMain(d))
	}
	code := m.Run()
	proctest.Cleanup()
	proctest.Cleanup() // the binary sshtest built, if any
	os.Exit(code)
}

func serve(addr string) int {
	echo, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(echoPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sink, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(sinkPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	udp, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(udpPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo(buf[:n], from) //nolint:errcheck
		}
	}()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c) //nolint:errcheck
				io.WriteString(c, "ok\n")
			}()
		}
	}()
	work, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(workPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go serveWork(work)
	clock, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(compose.MetricsPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go http.Serve(clock, clockServer()) //nolint:errcheck
	for {
		c, err := echo.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			io.Copy(c, c) //nolint:errcheck
		}()
	}
}

// clockServer serves /v1/clock as a broker does: the skew a clock fault sets.
func clockServer() http.Handler {
	var skew atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc(clusterapi.ClockPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var body clusterapi.SetClock
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.OffsetMs == nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			skew.Store(*body.OffsetMs)
		}
		json.NewEncoder(w).Encode(clusterapi.Clock{OffsetMs: skew.Load(), TimeMs: time.Now().UnixMilli() + skew.Load()}) //nolint:errcheck
	})
	return mux
}

// serveWork makes the node busy on demand: "spin" burns CPU until the
// client closes; "cache N" writes N MiB to a file (page cache) and
// answers "ok".
func serveWork(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			switch f := strings.Fields(line); {
			case len(f) == 1 && f[0] == "spin":
				done := make(chan struct{})
				go func() { io.Copy(io.Discard, c); close(done) }() //nolint:errcheck
				for x := 0; ; x++ {
					select {
					case <-done:
						return
					default:
					}
					for range 100000 {
						x = x*31 + 7
					}
				}
			case len(f) == 2 && f[0] == "cache":
				n, _ := strconv.Atoi(f[1])
				if err := writeCache(n); err != nil {
					fmt.Fprintln(c, err)
					return
				}
				io.WriteString(c, "ok\n") //nolint:errcheck
			}
		}()
	}
}

func writeCache(mib int) error {
	f, err := os.CreateTemp("", "nemesis-cache-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// requireLab skips unless this process may create network namespaces and
// program nftables in them.
func requireLab(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) for network namespaces and nftables; CI runs as root")
	}
	if testing.Short() {
		t.Skip("creates network namespaces; skipped with -short")
	}
}

type lab struct {
	c        *compose.Cluster
	stateDir string
}

// newLab brings up 4 server nodes (c1, b1..b3 running the test servers) and a
// client host in namespaces joined by a bridge in a switch namespace.
func newLab(t testing.TB) *lab {
	t.Helper()
	d := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := upLab(ctx, d)
	if err != nil {
		if strings.Contains(err.Error(), "operation not permitted") || strings.Contains(err.Error(), "unshare") {
			t.Skipf("cannot create network namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	return &lab{c: c, stateDir: filepath.Join(d, "state")}
}

// upLab brings the lab's cluster up with its state, namespaces and run
// directory under d, owned by this process.
func upLab(ctx context.Context, d string) (*compose.Cluster, error) {
	top, err := compose.Build(compose.Options{Name: "nem", RunDir: filepath.Join(d, "run"),
		Coordinators: 1, Brokers: 3, Clients: 1, NoDefaults: true})
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for i := range top.Nodes {
		n := &top.Nodes[i]
		if n.Role == compose.RoleClient {
			continue
		}
		n.Argv = []string{exe, "-test.run=^$"}
		n.Env = []string{envServe + "=" + n.Addr.String()}
		n.Files = nil
		n.Probe, n.Port = compose.ProbeTCP, echoPort
	}
	b := &netns.Backend{StateDir: filepath.Join(d, "state"), NSDir: filepath.Join(d, "netns"),
		Grace: 2 * time.Second, ReadyTimeout: 20 * time.Second}
	return b.Up(ctx, top)
}

func (l *lab) nemesis(t testing.TB) *Nemesis {
	return &Nemesis{Env: &Env{Cluster: l.c, DelayerCommand: testDelayer}, Store: &Store{Path: FaultsFile(l.stateDir, l.c.Name)}}
}

func (l *lab) addr(node string, port int) string {
	return net.JoinHostPort(l.c.Node(node).Addr.String(), strconv.Itoa(port))
}

// echoFrom sends a line from node from (a namespace path) to node to's echo
// server within d and checks the answer.
func (l *lab) echoFrom(from, to string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := compose.NetNSDialer(l.c.Node(from).NetNS)(ctx, "tcp", l.addr(to, echoPort))
	if err != nil {
		return err
	}
	defer conn.Close()
	return echoOn(conn, d)
}

func echoOn(conn net.Conn, d time.Duration) error {
	conn.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if got != "ping\n" {
		return fmt.Errorf("echo answered %q", got)
	}
	return nil
}

// noLeftovers fails if any nftables table or qdisc of a fault remains.
func (l *lab) noLeftovers(t testing.TB) {
	t.Helper()
	var ts []string
	for _, p := range append([]string{l.c.SwitchNS}, nsPaths(l.c)...) {
		tp, err := Tables(p, l.c.RunID)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tp...)
	}
	var qs []string
	for _, p := range append([]string{l.c.SwitchNS}, nsPaths(l.c)...) {
		q, err := Qdiscs(p)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q...)
	}
	if len(ts)+len(qs) > 0 {
		t.Fatalf("leftovers after heal: tables %v, qdiscs %v", ts, qs)
	}
}

func nsPaths(c *compose.Cluster) []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.NetNS)
	}
	return out
}
