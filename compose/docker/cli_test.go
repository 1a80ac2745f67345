package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestDockerCLI drives `isrlab cluster --backend docker` as a user would.
func TestDockerCLI(t *testing.T) {
	requireDocker(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	stateDir, runDir := t.TempDir(), t.TempDir()
	isrlab := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	}
	name := "dcli"
	t.Cleanup(func() { isrlab("cluster", "down", "--name", name) })
	// A delay into b1 is seen from here as a connection that takes at
	// least that long to set up (its SYN waits in b1's queue).
	connectAtLeast := func(d time.Duration) error {
		begin := time.Now()
		conn, err := net.DialTimeout("tcp", "10.218.0.4:9092", 10*time.Second)
		if err != nil {
			return err
		}
		conn.Close()
		if took := time.Since(begin); took < d {
			return fmt.Errorf("connected in %v with a %v delay into b1", took, d)
		}
		return nil
	}
	steps := []struct {
		args     []string
		code     int
		contains []string
		then     func() error
	}{
		{[]string{"cluster", "up", "--system", "kafka"}, 254, []string{"needs --backend docker"}, nil},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "zk"}, 254, []string{"isrlab or kafka"}, nil},
		{[]string{"cluster", "up", "--backend", "docker", "--name", name, "--brokers", "1", "--subnet", "10.218.0.0/24", "--run-dir", runDir + "/r"}, 0,
			[]string{"backend docker", "bootstrap servers: 10.218.0.4:9092", "/proc/"}, nil},
		{[]string{"cluster", "status", "--name", name}, 0, []string{"b1", "up", "controller: broker 1"}, nil},
		{[]string{"cluster", "exec", "--name", name, "--", "cat", "/proc/net/dev"}, 0, []string{"eth0"}, nil},
		// Packet faults and delays act in the container's own namespace:
		// a delayer there, its queue on the node's input and output hooks.
		{[]string{"fault", "inject", "slow-net", "--name", name, "--node", "b1", "--delay", "200ms", "--direction", "in"}, 0,
			[]string{`"mode":"nfqueue"`, `"side":"node"`, `"node_delayers":[{"node":"b1"`}, func() error { return connectAtLeast(200 * time.Millisecond) }},
		{[]string{"fault", "inject", "--name", name, "--spec", `{"kind":"packet","nodes":["b1"],"duplicate":"50%","reorder":"20%"}`}, 0,
			[]string{`"side":"node"`}, nil},
		{[]string{"cluster", "exec", "--name", name, "--", "kcat", "-L", "-b", "10.218.0.4:9092"}, 0, []string{"1 brokers"}, nil},
		{[]string{"fault", "heal", "--name", name, "f1"}, 0, []string{"healed f1"}, func() error { return connectAtLeast(0) }},
		// A strober lives in its first target's namespace: its start
		// waits until the broker answered the first switch.
		{[]string{"fault", "inject", "--name", name, "--spec", `{"kind":"clock-strobe","nodes":["b1"],"offset":"1s","period":"50ms"}`}, 0,
			[]string{`"strober_pid":`}, nil},
		{[]string{"fault", "heal", "--name", name, "f3"}, 0, []string{"healed f3"}, nil},
		{[]string{"clean"}, 0, []string{"left live run " + name}, nil},
		// f2 is still active: going down stops its delayer.
		{[]string{"cluster", "down", "--name", name}, 0, []string{"is down after"}, nil},
		{[]string{"cluster", "list"}, 0, nil, nil},
	}
	var helpers []int
	for _, s := range steps {
		out, code := isrlab(s.args...)
		helpers = append(helpers, injectedHelpers(t, out)...)
		if code != s.code {
			t.Fatalf("isrlab %s: exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.code, out)
		}
		for _, want := range s.contains {
			if !strings.Contains(out, want) {
				t.Fatalf("isrlab %s: output lacks %q:\n%s", strings.Join(s.args, " "), want, out)
			}
		}
		if s.then != nil {
			if err := s.then(); err != nil {
				t.Fatalf("after isrlab %s: %v", strings.Join(s.args, " "), err)
			}
		}
	}
	if len(helpers) != 2 {
		t.Fatalf("delayers started: %v, want one per fault", helpers)
	}
	for _, pid := range helpers {
		if running(pid) {
			t.Errorf("delayer %d still runs after the cluster went down", pid)
		}
	}
}

// injectedHelpers returns the pids of the node-side delayers a fault
// inject printed.
func injectedHelpers(t *testing.T, out string) []int {
	_, js, ok := strings.Cut(out, "injected ")
	if !ok {
		return nil
	}
	_, js, _ = strings.Cut(js, ": ")
	var f struct {
		Helpers []struct{ PID int } `json:"node_delayers"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(js)), &f); err != nil {
		t.Fatalf("fault inject printed %q: %v", out, err)
	}
	var pids []int
	for _, h := range f.Helpers {
		pids = append(pids, h.PID)
	}
	return pids
}

// running reports whether pid is a process that has not exited (a zombie
// waiting for its reaper has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
