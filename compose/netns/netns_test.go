package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// Helper modes: the test binary re-executes itself as a node process or as a
// cluster owner.
const (
	envEcho  = "ISRLAB_TEST_ECHO"  // listen on this address and echo lines
	envOwner = "ISRLAB_TEST_OWNER" // JSON ownerConfig: bring a cluster up and hold it
)

const echoPort = 7000

func TestMain(m *testing.M) {
	if addr := os.Getenv(envEcho); addr != "" {
		os.Exit(echoServer(addr))
	}
	if cfg := os.Getenv(envOwner); cfg != "" {
		os.Exit(owner(cfg))
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

// ownerConfig tells a helper owner process what to bring up.
type ownerConfig struct {
	Name, StateDir, NSDir, RunDir string
	NeverReady                    bool // nodes run `sleep`: Up blocks until cancelled
}

// owner brings a cluster up and holds it until SIGINT or SIGTERM, then takes
// it down: it is what `isrlab run` does around a test.
func owner(cfgJSON string) int {
	var cfg ownerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	top := echoTopology(cfg.Name, cfg.RunDir)
	if cfg.NeverReady {
		for i := range top.Nodes {
			if top.Nodes[i].Role != compose.RoleClient {
				top.Nodes[i].Argv = []string{"sleep", "600"}
				top.Nodes[i].Env = nil
			}
		}
	}
	b := &Backend{StateDir: cfg.StateDir, NSDir: cfg.NSDir}
	c, err := b.Up(ctx, top)
	if err != nil {
		fmt.Println("up failed:", err)
		return 4
	}
	fmt.Println("up")
	<-ctx.Done()
	if err := c.Down(context.Background()); err != nil {
		fmt.Println("down failed:", err)
		return 5
	}
	fmt.Println("down")
	return 0
}

// echoTopology is a 1 coordinator + 2 broker + 1 client layout whose server
// nodes run the echo helper instead of isrlab.
func echoTopology(name, runDir string) compose.Topology {
	top, err := compose.Build(compose.Options{Name: name, RunDir: runDir, Coordinators: 1, Brokers: 2, Clients: 1})
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
		n.Files = nil
		n.Probe, n.Port = compose.ProbeTCP, echoPort
	}
	return top
}

// requireNetns skips unless this process may create network namespaces.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) to create network namespaces; CI runs as root")
	}
	if !canNetns() {
		t.Skip("cannot create a network namespace here (no CONFIG_NET_NS or not permitted)")
	}
}

func canNetns() bool {
	if os.Geteuid() != 0 {
		return false
	}
	d, err := os.MkdirTemp("", "isrlab-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(d)
	p := filepath.Join(d, "ns")
	if err := createNS(p); err != nil {
		return false
	}
	return removeNS(p) == nil
}

// exePath is this test binary, for node processes that re-execute it.
func exePath() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

type lab struct {
	stateDir, nsDir, runDir string
}

func newLab(t *testing.T) lab {
	d := t.TempDir()
	l := lab{filepath.Join(d, "state"), filepath.Join(d, "netns"), filepath.Join(d, "run")}
	return l
}

func (l lab) backend() *Backend {
	return &Backend{StateDir: l.stateDir, NSDir: l.nsDir, Grace: 2 * time.Second, ReadyTimeout: 20 * time.Second}
}

// echo sends a line through the cluster's client namespace to node and
// checks that it comes back.
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
		return fmt.Errorf("echo from %s: got %q, want %q", node, got, msg)
	}
	return nil
}

// leftovers lists what of run still exists: namespace files, processes in
// its namespaces or with its recorded pids, the state file, the run dir.
func (l lab) leftovers(run string, pids []int) []string {
	var out []string
	for _, name := range listNS(l.nsDir) {
		if r, _ := ParseNSName(name); r == run {
			out = append(out, "netns "+name)
		}
	}
	for _, pid := range pids {
		if compose.Alive(pid, 0) {
			out = append(out, fmt.Sprintf("pid %d", pid))
		}
	}
	if states, _ := compose.ListStates(l.stateDir); len(states) > 0 {
		for _, s := range states {
			if s.RunID == run {
				out = append(out, "state "+s.Name)
			}
		}
	}
	if ents, _ := os.ReadDir(l.runDir); len(ents) > 0 {
		out = append(out, "run dir "+l.runDir)
	}
	if links, err := netlink.LinkList(); err == nil {
		for _, ln := range links {
			if name := ln.Attrs().Name; name == BridgeName(run) || strings.HasPrefix(name, "p-") {
				out = append(out, "link in the root namespace "+name)
			}
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mounts), Prefix+run) {
		out = append(out, "mount of run "+run)
	}
	return out
}

func pidsOf(c *compose.Cluster) []int {
	var out []int
	for _, n := range c.Nodes {
		if p := n.PID(); p != 0 {
			out = append(out, p)
		}
	}
	return out
}

func TestUpControlDown(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	top := echoTopology("ctl", l.runDir)
	c, err := l.backend().Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	pids := pidsOf(c)

	for _, n := range []string{"c1", "b1", "b2"} {
		if err := echo(ctx, c, n); err != nil {
			t.Fatalf("echo %s: %v", n, err)
		}
	}
	// The handles name what the nemesis needs.
	b1 := c.Node("b1")
	if b1.SwitchPort != "p-b1" || b1.Iface != "eth0" || c.SwitchNS == "" || c.Bridge != "isr"+top.RunID {
		t.Errorf("handles: port %q iface %q switch %q bridge %q", b1.SwitchPort, b1.Iface, c.SwitchNS, c.Bridge)
	}
	if nsInode(b1.NetNS) == 0 || nsInode(c.SwitchNS) == 0 {
		t.Errorf("namespaces not mounted: %s %s", b1.NetNS, c.SwitchNS)
	}
	if c.Node("client1").Proc != nil {
		t.Error("client host has a process")
	}
	// Nothing of the lab network lives in the root namespace, even while up.
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range links {
		if name := ln.Attrs().Name; name == c.Bridge || strings.HasPrefix(name, "p-") {
			t.Errorf("lab link %s in the root namespace", name)
		}
	}

	// Kill, restart, pause, resume.
	if err := b1.Kill(); err != nil {
		t.Fatal(err)
	}
	if b1.Proc.Running() {
		t.Fatal("b1 running after Kill")
	}
	if err := echo(ctx, c, "b1"); err == nil {
		t.Fatal("echo to killed b1 succeeded")
	}
	if err := b1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, b1.PID())
	proctest.Eventually(t, 10*time.Second, "echo b1 after restart", func() error { return echo(ctx, c, "b1") })
	if err := b1.Pause(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 5*time.Second, "b1 stopped", func() error {
		if st := procState(b1.PID()); st != "T" {
			return fmt.Errorf("paused b1 state %q, want T", st)
		}
		return nil
	})
	if err := b1.Resume(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "echo b1 after resume", func() error { return echo(ctx, c, "b1") })
	if err := c.Node("b2").Restart(ctx); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, c.Node("b2").PID())
	proctest.Eventually(t, 10*time.Second, "echo b2 after restart", func() error { return echo(ctx, c, "b2") })

	// Another process sees the restarted pids through the state file.
	st, err := compose.ReadState(l.stateDir, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Node("b1").PID; got != b1.PID() {
		t.Errorf("state records b1 pid %d, want %d", got, b1.PID())
	}
	if st.Status != compose.StatusUp || st.Detached {
		t.Errorf("state status %q detached %v", st.Status, st.Detached)
	}

	// A paused process must not survive Down.
	if err := c.Node("c1").Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if left := l.leftovers(top.RunID, pids); len(left) > 0 {
		t.Fatalf("leftovers after Down: %v", left)
	}
	if err := c.Down(ctx); err != nil {
		t.Fatalf("second Down: %v", err)
	}
}

func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

func TestAttachAndDownFromState(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := l.backend()
	b.Detach = true
	top := echoTopology("det", l.runDir)
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	pids := pidsOf(c)

	if _, err := b.Up(ctx, echoTopology("det", l.runDir+"2")); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Up with the same name: got %v, want ErrRunning", err)
	}
	st, err := compose.ReadState(l.stateDir, "det")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Live() || !st.Detached {
		t.Fatalf("detached run not live: %+v", st)
	}
	ac, err := b.Attach(st)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ac.Node("b2").PID(), c.Node("b2").PID(); got != want {
		t.Errorf("attached b2 pid %d, want %d", got, want)
	}
	if err := echo(ctx, ac, "b2"); err != nil {
		t.Fatal(err)
	}
	if err := ac.Node("b2").Kill(); err != nil {
		t.Fatal(err)
	}
	if c.Node("b2").Proc.Running() {
		t.Fatal("b2 still running after Kill through attached handle")
	}
	// Clean leaves a detached, up run alone.
	rep, err := b.Clean(ctx, false)
	if err != nil || len(rep.Runs) > 0 || len(rep.Namespaces) > 0 {
		t.Fatalf("Clean touched a live run: %+v %v", rep, err)
	}
	if err := echo(ctx, c, "b1"); err != nil {
		t.Fatalf("after Clean: %v", err)
	}
	if err := b.Down(ctx, "det"); err != nil {
		t.Fatal(err)
	}
	if left := l.leftovers(top.RunID, pids); len(left) > 0 {
		t.Fatalf("leftovers after Down: %v", left)
	}
	if err := b.Down(ctx, "det"); !errors.Is(err, compose.ErrNotFound) {
		t.Fatalf("Down of a removed cluster: got %v, want ErrNotFound", err)
	}
}

// startOwner runs the owner helper and returns once it printed "up" (or,
// for never-ready runs, once its nodes run).
func startOwner(t *testing.T, l lab, cfg ownerConfig) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cfg.StateDir, cfg.NSDir, cfg.RunDir = l.stateDir, l.nsDir, l.runDir
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envOwner+"="+string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	if !cfg.NeverReady {
		line, err := r.ReadString('\n')
		if line != "up\n" {
			t.Fatalf("owner: %q %v", line, err)
		}
	}
	return cmd, r
}

func TestInterruptAndKillLeaveNothing(t *testing.T) {
	requireNetns(t)
	tests := []struct {
		name       string
		neverReady bool
		sig        syscall.Signal
		clean      bool // leftovers are expected until Clean runs
	}{
		{"ctrl-c while up", false, syscall.SIGINT, false},
		{"ctrl-c during up", true, syscall.SIGINT, false},
		{"sigkill then clean", false, syscall.SIGKILL, true},
		{"sigkill during up then clean", true, syscall.SIGKILL, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			name := "own"
			cmd, out := startOwner(t, l, ownerConfig{Name: name, NeverReady: tt.neverReady})
			var st *compose.State
			// Wait until every node process of the owner runs.
			proctest.Eventually(t, 20*time.Second, "owner's nodes running", func() error {
				s, err := compose.ReadState(l.stateDir, name)
				if err != nil {
					return err
				}
				for _, n := range s.Nodes {
					if n.Name != "client1" && !compose.Alive(n.PID, n.PIDStart) {
						return fmt.Errorf("%s not running", n.Name)
					}
				}
				st = s
				return nil
			})
			var pids []int
			for _, n := range st.Nodes {
				if n.PID != 0 {
					pids = append(pids, n.PID)
				}
			}
			// A live neighbour that Clean must leave alone.
			nb := l.backend()
			neighbour, err := nb.Up(ctx, echoTopology("neighbour", l.runDir+"-n"))
			if err != nil {
				t.Fatal(err)
			}
			defer neighbour.Down(context.Background())
			if rep, err := nb.Clean(ctx, false); err != nil || len(rep.Runs)+len(rep.Namespaces) > 0 {
				t.Fatalf("Clean with two live runs removed something: %+v %v", rep, err)
			}

			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(out)
			werr := cmd.Wait()
			if tt.sig == syscall.SIGINT && werr != nil && !tt.neverReady {
				t.Fatalf("owner after SIGINT: %v, output %q", werr, rest)
			}
			if tt.clean {
				if left := l.leftovers(st.RunID, pids); len(left) == 0 {
					t.Fatal("SIGKILLed owner left nothing: the test would not notice a broken Clean")
				}
				s, err := compose.ReadState(l.stateDir, name)
				if err != nil || s.Live() {
					t.Fatalf("run of a SIGKILLed owner: %v live=%v", err, s != nil && s.Live())
				}
				rep, err := nb.Clean(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				if want := name + "/" + st.RunID; len(rep.Runs) != 1 || rep.Runs[0] != want {
					t.Errorf("Clean removed %v, want [%s]", rep.Runs, want)
				}
			}
			if left := l.leftovers(st.RunID, pids); len(left) > 0 {
				t.Fatalf("leftovers: %v (owner output %q)", left, rest)
			}
			if err := echo(ctx, neighbour, "b1"); err != nil {
				t.Fatalf("neighbour after clean: %v", err)
			}
		})
	}
}

func TestCleanOrphanNamespaces(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	if err := os.MkdirAll(l.nsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Namespaces with no state at all, one with a process inside: what a
	// crash between creating them and recording them would leave.
	var paths []string
	for _, n := range []string{"b1", SwitchName} {
		p := filepath.Join(l.nsDir, NSName("dead0001", n))
		if err := createNS(p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	sleeper := &proc{spec: compose.NodeSpec{Name: "b1", Argv: []string{"sleep", "600"}, Dir: l.runDir, DataDir: l.runDir, LogFile: filepath.Join(l.runDir, "b1.log")}, netns: paths[0], grace: time.Second}
	if err := sleeper.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := sleeper.PID()
	// A foreign file in the directory is not ours to touch.
	if err := os.WriteFile(filepath.Join(l.nsDir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := l.backend().Clean(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Namespaces) != 2 {
		t.Errorf("removed %v, want both namespaces", rep.Namespaces)
	}
	if compose.Alive(pid, 0) {
		t.Error("process in orphan namespace survived Clean")
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists", p)
		}
	}
	if _, err := os.Stat(filepath.Join(l.nsDir, "other")); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
}

func TestParseNSName(t *testing.T) {
	tests := []struct {
		in, run string
		ok      bool
	}{
		{NSName("ab12cd34", "b1"), "ab12cd34", true},
		{NSName("ab12cd34", SwitchName), "ab12cd34", true},
		{"isrlab-", "", false},
		{"isrlab-x", "", false},
		{"other-ab-b1", "", false},
	}
	for _, tt := range tests {
		run, ok := ParseNSName(tt.in)
		if run != tt.run || ok != tt.ok {
			t.Errorf("ParseNSName(%q) = %q, %v; want %q, %v", tt.in, run, ok, tt.run, tt.ok)
		}
	}
}

const envRootlessTest = "ISRLAB_TEST_ROOTLESS"

// TestRootless runs TestRootlessInner as an unprivileged user (nobody): it
// re-executes itself in a user+net+mount namespace and runs the backend there.
func TestRootless(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user for the test (setpriv); CI runs as root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to run as an unprivileged user")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)")
	}
	dir, err := os.MkdirTemp("", "isrlab-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netns.test")
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run=^TestRootlessInner$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envRootlessTest+"=1", "TMPDIR="+dir, "HOME="+dir, "XDG_RUNTIME_DIR=")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("unprivileged run:\n%s", out)
	if strings.Contains(string(out), "--- SKIP") {
		t.Skipf("rootless backend cannot run on this kernel (see log above)")
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRootlessInner") {
		t.Fatalf("unprivileged run failed: %v", err)
	}
	if !strings.Contains(string(out), "rootless cluster echoed") {
		t.Fatal("the inner test did not run the cluster")
	}
}

// TestRootlessInner is TestRootless's unprivileged half.
func TestRootlessInner(t *testing.T) {
	if os.Getenv(envRootlessTest) == "" {
		t.Skip("run by TestRootless as an unprivileged user")
	}
	if NeedUserNS() {
		code, err := ReexecInUserNS(context.Background(), os.Args[0], os.Args[1:])
		if err != nil {
			t.Skipf("cannot create a user namespace as uid %d: %v", os.Getuid(), err)
		}
		if code != 0 {
			t.Fatalf("run in user namespace exited %d", code)
		}
		return
	}
	if !InUserNS() {
		t.Fatal("expected to run in a user namespace")
	}
	l := newLab(t)
	b := l.backend()
	b.NSDir = "" // the rootless default
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	top := echoTopology("rootless", l.runDir)
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down(context.Background())
	for _, n := range []string{"c1", "b1", "b2"} {
		if err := echo(ctx, c, n); err != nil {
			t.Fatalf("echo %s: %v", n, err)
		}
	}
	st, err := compose.ReadState(l.stateDir, "rootless")
	if err != nil || !st.Rootless {
		t.Fatalf("state: %v rootless=%v", err, st != nil && st.Rootless)
	}
	pids := pidsOf(c)
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	l.nsDir = filepath.Join(l.stateDir, "netns")
	if left := l.leftovers(top.RunID, pids); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
	fmt.Println("rootless cluster echoed through", len(pids), "nodes")
}

func TestRunTearsDownAfterPanic(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	top := echoTopology("panicky", l.runDir)
	var pids []int
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the panic to go on", p)
			}
		}()
		compose.Run(context.Background(), l.backend(), top, func(ctx context.Context, c *compose.Cluster) error { //nolint:errcheck
			pids = pidsOf(c)
			if err := echo(ctx, c, "b1"); err != nil {
				t.Errorf("echo: %v", err)
			}
			panic("boom")
		})
	}()
	if len(pids) == 0 {
		t.Fatal("fn did not run")
	}
	if left := l.leftovers(top.RunID, pids); len(left) > 0 {
		t.Fatalf("leftovers after a panic: %v", left)
	}
}

// TestCleanFromAnotherStateDir: a clean working from one state directory
// leaves a live run recorded in another alone, and removes a dead one.
func TestCleanFromAnotherStateDir(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	live, err := l.backend().Up(ctx, echoTopology("elsewhere", l.runDir))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Down(context.Background())

	dead := lab{filepath.Join(t.TempDir(), "state"), l.nsDir, filepath.Join(t.TempDir(), "run")}
	cmd, _ := startOwner(t, dead, ownerConfig{Name: "dead"})
	st, err := compose.ReadState(dead.stateDir, "dead")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait() //nolint:errcheck // killed on purpose

	cleaner := &Backend{StateDir: t.TempDir(), NSDir: l.nsDir}
	rep, err := cleaner.Clean(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "elsewhere/" + live.RunID; len(rep.Live) != 1 || rep.Live[0] != want {
		t.Errorf("Clean reported live %v, want [%s]", rep.Live, want)
	}
	if want := "dead/" + st.RunID; len(rep.Runs) != 1 || rep.Runs[0] != want {
		t.Errorf("Clean removed %v, want [%s]", rep.Runs, want)
	}
	if len(rep.Namespaces) != 0 {
		t.Errorf("Clean removed namespaces as orphans: %v", rep.Namespaces)
	}
	if err := echo(ctx, live, "b2"); err != nil {
		t.Fatalf("live run after Clean: %v", err)
	}
	var pids []int
	for _, n := range st.Nodes {
		pids = append(pids, n.PID)
	}
	if left := dead.leftovers(st.RunID, pids); len(left) > 0 {
		t.Fatalf("dead run's leftovers: %v", left)
	}
}

// TestNodeExitFailsUp: a node that exits fails Up at once, with the end of
// its log in the error, and leaves nothing.
func TestNodeExitFailsUp(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	top := echoTopology("exit", l.runDir)
	for i := range top.Nodes {
		if top.Nodes[i].Name == "b2" {
			top.Nodes[i].Env = []string{envEcho + "=not-an-address"}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := l.backend().Up(ctx, top)
	if err == nil {
		c.Down(ctx)
		t.Fatal("Up succeeded with a node that exits")
	}
	if !errors.Is(err, compose.ErrNotReady) || !strings.Contains(err.Error(), "b2") || !strings.Contains(err.Error(), "echo:") {
		t.Fatalf("Up error lacks the node or its log: %v", err)
	}
	if left := l.leftovers(top.RunID, nil); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
}
