package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	netipx "net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// Helper modes: this test binary is also the lab image's program.
const (
	envEcho  = "ISRLAB_TEST_ECHO"  // echo lines on this address
	envIdle  = "ISRLAB_TEST_IDLE"  // block until SIGTERM (sandboxes)
	envOwner = "ISRLAB_TEST_OWNER" // JSON ownerConfig: hold a cluster
)

const echoPort = 7000

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(envEcho) != "":
		os.Exit(echoServer(os.Getenv(envEcho)))
	case os.Getenv(envIdle) != "":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		<-ctx.Done()
		stop()
		os.Exit(0)
	case os.Getenv(envOwner) != "":
		os.Exit(owner(os.Getenv(envOwner)))
	}
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

func echoServer(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			io.Copy(c, c) //nolint:errcheck
		}()
	}
}

func exePath() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

// echoTopology: 1 coordinator + 2 brokers running the echo helper, 1 client.
func echoTopology(name, runDir string) compose.Topology {
	top, err := compose.Build(compose.Options{Name: name, RunDir: runDir, Coordinators: 1, Brokers: 2, Clients: 1,
		Subnet: netipx.MustParsePrefix("10.214.0.0/24")})
	if err != nil {
		panic(err)
	}
	for i := range top.Nodes {
		n := &top.Nodes[i]
		if n.Role == compose.RoleClient {
			continue
		}
		n.Argv = []string{exePath(), "-test.run=^$"}
		n.Env = []string{envEcho + "=" + fmt.Sprintf("%s:%d", n.Addr, echoPort)}
		n.Files, n.Probe, n.Port = nil, compose.ProbeTCP, echoPort
	}
	return top
}

func testBackend(stateDir string) *Backend {
	return &Backend{StateDir: stateDir, Grace: time.Second, ReadyTimeout: 30 * time.Second,
		Binary: exePath(), Idle: []string{"-test.run=^$"}, IdleEnv: []string{envIdle + "=1"}}
}

// requireDocker skips unless a Docker daemon answers and we may enter
// container namespaces.
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to enter container network namespaces; CI runs as root")
	}
	cli, err := Connect(context.Background())
	if err != nil {
		t.Skipf("no Docker daemon (install docker.io and start dockerd; make deps does): %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func echo(ctx context.Context, c *compose.Cluster, node string) error {
	n := c.Node(node)
	conn, err := c.Dial()(ctx, "tcp", fmt.Sprintf("%s:%d", n.Addr, echoPort))
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	msg := "hello " + node + "\n"
	if _, err := io.WriteString(conn, msg); err != nil {
		return err
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg {
		return fmt.Errorf("echo from %s: got %q", node, got)
	}
	return nil
}

// leftovers lists containers and networks labelled with run, and its state.
func leftovers(t *testing.T, cli *client.Client, stateDir, run string) []string {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", LabelRun+"="+run))
	var out []string
	ctrs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrs {
		out = append(out, "container "+c.Names[0])
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		out = append(out, "network "+n.Name)
	}
	states, _ := compose.ListStates(stateDir)
	for _, s := range states {
		if s.RunID == run {
			out = append(out, "state "+s.Name)
		}
	}
	return out
}

func TestDockerUpControlDown(t *testing.T) {
	cli := requireDocker(t)
	dir := t.TempDir()
	stateDir, runDir := filepath.Join(dir, "state"), filepath.Join(dir, "run")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	top := echoTopology("dock", runDir)
	c, err := testBackend(stateDir).Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	for _, n := range []string{"c1", "b1", "b2"} {
		if err := echo(ctx, c, n); err != nil {
			t.Fatalf("echo %s: %v", n, err)
		}
	}
	b1 := c.Node("b1")
	nsBefore := nsIno(t, b1.NetNS)
	if b1.SwitchPort == "" {
		t.Error("no host veth for b1")
	}
	if err := b1.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := echo(ctx, c, "b1"); err == nil {
		t.Fatal("echo to killed b1 succeeded")
	}
	if err := b1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "echo b1 after restart", func() error { return echo(ctx, c, "b1") })
	if got := nsIno(t, b1.NetNS); got != nsBefore {
		t.Errorf("b1's network namespace changed across a restart: %d -> %d", nsBefore, got)
	}
	if err := b1.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := b1.Resume(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "echo b1 after resume", func() error { return echo(ctx, c, "b1") })
	st, err := compose.ReadState(stateDir, "dock")
	if err != nil {
		t.Fatal(err)
	}
	if st.Node("b1").PID != b1.PID() {
		t.Errorf("state records b1 pid %d, want %d", st.Node("b1").PID, b1.PID())
	}
	if err := c.Node("b2").Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, cli, stateDir, top.RunID); len(left) > 0 {
		t.Fatalf("leftovers after Down: %v", left)
	}
}

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

type ownerConfig struct{ Name, StateDir, RunDir string }

// owner holds a docker cluster until it is killed.
func owner(cfgJSON string) int {
	var cfg ownerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := testBackend(cfg.StateDir).Up(ctx, echoTopology(cfg.Name, cfg.RunDir))
	if err != nil {
		fmt.Println("up failed:", err)
		return 4
	}
	fmt.Println("up")
	<-ctx.Done()
	if err := c.Down(context.Background()); err != nil {
		return 5
	}
	return 0
}

func TestDockerInterruptOrKillOwner(t *testing.T) {
	cli := requireDocker(t)
	tests := []struct {
		name  string
		sig   syscall.Signal
		clean bool // leftovers expected until Clean
	}{
		{"ctrl-c", syscall.SIGINT, false},
		{"sigkill then clean", syscall.SIGKILL, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ownerConfig{"dockown", filepath.Join(dir, "state"), filepath.Join(dir, "run")}
			b, _ := json.Marshal(cfg)
			cmd := exec.Command(exePath(), "-test.run=^$")
			cmd.Env = append(os.Environ(), envOwner+"="+string(b))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			line, err := bufio.NewReader(out).ReadString('\n')
			if line != "up\n" {
				t.Fatalf("owner: %q %v", line, err)
			}
			st, err := compose.ReadState(cfg.StateDir, cfg.Name)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			werr := cmd.Wait()
			if !tt.clean && werr != nil {
				t.Fatalf("owner after %v: %v", tt.sig, werr)
			}
			if tt.clean {
				if left := leftovers(t, cli, cfg.StateDir, st.RunID); len(left) == 0 {
					t.Fatal("a SIGKILLed owner left nothing: the test would not notice a broken Clean")
				}
				rep, err := testBackend(cfg.StateDir).Clean(context.Background(), false)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Runs) != 1 {
					t.Errorf("Clean removed runs %v, want the dead one", rep.Runs)
				}
			}
			if left := leftovers(t, cli, cfg.StateDir, st.RunID); len(left) > 0 {
				t.Fatalf("leftovers: %v", left)
			}
		})
	}
}

// TestDockerNodeExitFailsUp: a node that exits fails Up at once, with its
// output in the error, and leaves nothing.
func TestDockerNodeExitFailsUp(t *testing.T) {
	cli := requireDocker(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	top := echoTopology("dexit", filepath.Join(dir, "run"))
	for i := range top.Nodes {
		if top.Nodes[i].Name == "b2" {
			top.Nodes[i].Env = []string{envEcho + "=not-an-address"}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := testBackend(stateDir).Up(ctx, top)
	if err == nil {
		c.Down(ctx)
		t.Fatal("Up succeeded with a node that exits")
	}
	if !errors.Is(err, compose.ErrNotReady) || !strings.Contains(err.Error(), "b2") || !strings.Contains(err.Error(), "echo:") {
		t.Fatalf("Up error lacks the node or its output: %v", err)
	}
	if left := leftovers(t, cli, stateDir, top.RunID); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
}
