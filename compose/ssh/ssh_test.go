package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/sshtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

func backend(h *sshtest.Hosts, cfg *ssh.Config, stateDir string) *ssh.Backend {
	return &ssh.Backend{Config: cfg, StateDir: stateDir, Dial: h.Dial(), Grace: 5 * time.Second, ReadyTimeout: 60 * time.Second}
}

// TestUpControlDown brings an isrlab cluster up on hosts reached only over
// SSH: the lab starts every node there (none ran), learns nothing it was
// not told, reaches the brokers through the client host's SSH connection,
// controls each process with signals over SSH, and Down stops what it
// started and leaves no process behind.
func TestUpControlDown(t *testing.T) {
	t.Setenv("ISRLAB_REGISTRY_DIR", t.TempDir())
	h := sshtest.New(t, "10.218.0.0/24", "c1", "b1", "b2", "b3", "client1")
	cfg := h.Cluster(t)
	// One broker's id is left to the metadata.
	cfg.Nodes[2].ID = 0
	stateDir := t.TempDir()
	runDir := t.TempDir()
	topo, err := cfg.Topology("sshup", "", runDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := backend(h, cfg, stateDir).Up(ctx, topo)
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			c.Down(context.Background())
		}
	})
	if got := c.Node("b2").ID; got != 2 {
		t.Errorf("b2's id from the metadata = %d, want 2", got)
	}
	st, err := compose.ReadState(stateDir, "sshup")
	if err != nil || st.Backend != ssh.Name || st.Status != compose.StatusUp {
		t.Fatalf("state: %+v, %v", st, err)
	}

	// The workload's path: a Kafka client through client1's SSH tunnel.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(c.Dial()), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "t"); err != nil {
		t.Fatalf("create topic through the tunnel: %v", err)
	}

	b1 := c.Node("b1")
	pid := b1.PID()
	if pid == 0 || !b1.Proc.Running() {
		t.Fatalf("b1 not running (pid %d)", pid)
	}
	if err := b1.Pause(); err != nil {
		t.Fatal(err)
	}
	// SIGSTOP is delivered asynchronously: wait for the stop to show.
	proctest.Eventually(t, 5*time.Second, "b1 stopped by the pause", func() error {
		if s := procState(t, pid); s != "T" {
			return fmt.Errorf("state %q, want T (stopped)", s)
		}
		return nil
	})
	if err := b1.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := b1.Kill(); err != nil {
		t.Fatal(err)
	}
	if b1.Proc.Running() || compose.Alive(pid, 0) {
		t.Fatal("b1 runs after kill")
	}
	if err := b1.Kill(); err != nil {
		t.Errorf("kill of a dead node: %v", err)
	}
	if err := b1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if b1.PID() == pid || !b1.Proc.Running() {
		t.Fatalf("b1 after start: pid %d (was %d)", b1.PID(), pid)
	}
	if err := b1.Start(ctx); err == nil {
		t.Error("start of a running node succeeded")
	}
	if err := b1.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "b1 back in the cluster", func() error {
		return compose.ProbeNode(ctx, c.Dial(), b1.NodeSpec, []int{1, 2, 3})
	})

	// Another process's view: the state names the remote pids.
	st2, c2, err := attach(h, stateDir, "sshup")
	if err != nil {
		t.Fatal(err)
	}
	if st2.RunID != c.RunID || c2.Node("b1").PID() != b1.PID() || !c2.Node("c1").Proc.Running() {
		t.Errorf("attached: run %s, b1 pid %d (want %d)", st2.RunID, c2.Node("b1").PID(), b1.PID())
	}

	downed = true
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if left := h.Leftovers(t, c.RunID); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := compose.ReadState(stateDir, "sshup"); !errors.Is(err, compose.ErrNotFound) {
		t.Errorf("state after down: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(runDir, "b1", "server.log")); err != nil || len(b) == 0 {
		t.Errorf("b1's log tail not copied: %v", err)
	}
}

func attach(h *sshtest.Hosts, stateDir, name string) (*compose.State, *compose.Cluster, error) {
	st, err := compose.ReadState(stateDir, name)
	if err != nil {
		return nil, nil, err
	}
	c, err := (&ssh.Backend{StateDir: stateDir, Dial: h.Dial()}).Attach(st)
	return st, c, err
}

// procState is the state letter of a local pid (the hosts are namespaces
// of this machine, so their pids are ours).
func procState(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// TestHostKeys shows that host keys are checked: a host missing from
// known_hosts or known under another key is refused with a message saying
// which, and only insecure_ignore_host_key lets it through.
func TestHostKeys(t *testing.T) {
	t.Setenv("ISRLAB_REGISTRY_DIR", t.TempDir())
	h := sshtest.New(t, "10.221.0.0/24", "b1")
	addr := h.Host("b1").Addr.String()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	wrong := filepath.Join(dir, "wrong")
	// A key of another host, under b1's address.
	os.WriteFile(wrong, []byte(addr+" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"), 0o600)
	up := func(cfg ssh.Config) error {
		cfg.User, cfg.Key = "root", h.Key
		cfg.Nodes = []ssh.Node{{Host: addr, Role: ssh.RoleBroker, ID: 1, Probe: "none"}}
		topo, err := cfg.Topology("keys", "", dir)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := backend(h, &cfg, t.TempDir()).Up(ctx, topo)
		if err == nil {
			return c.Down(ctx)
		}
		return err
	}
	for _, tc := range []struct {
		cfg  ssh.Config
		want string
	}{
		{ssh.Config{KnownHosts: empty}, "is not in " + empty},
		{ssh.Config{KnownHosts: wrong}, "HOST KEY MISMATCH"},
		{ssh.Config{KnownHosts: filepath.Join(dir, "none")}, "known_hosts"},
	} {
		if err := up(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("known_hosts %s: got %v, want %q", tc.cfg.KnownHosts, err, tc.want)
		}
	}
	if err := up(ssh.Config{KnownHosts: h.KnownHosts}); err != nil {
		t.Errorf("the right known_hosts: %v", err)
	}
	if err := up(ssh.Config{KnownHosts: wrong, InsecureIgnoreHostKey: true}); err != nil {
		t.Errorf("insecure_ignore_host_key: %v", err)
	}

	// The key through an agent instead of a file.
	sock := filepath.Join(dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Skipf("no ssh-agent: %v", err)
	}
	defer func() { agent.Process.Kill(); agent.Wait() }()
	proctest.Eventually(t, 5*time.Second, "ssh-agent", func() error { _, err := os.Stat(sock); return err })
	add := exec.Command("ssh-add", h.Key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v\n%s", err, out)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)
	agentUp := func(cfg ssh.Config) error {
		cfg.User, cfg.Agent = "root", true
		cfg.Nodes = []ssh.Node{{Host: addr, Role: ssh.RoleBroker, ID: 1, Probe: "none"}}
		topo, err := cfg.Topology("agent", "", dir)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := backend(h, &cfg, t.TempDir()).Up(ctx, topo)
		if err == nil {
			return c.Down(ctx)
		}
		return err
	}
	if err := agentUp(ssh.Config{KnownHosts: h.KnownHosts}); err != nil {
		t.Errorf("agent: %v", err)
	}
}
