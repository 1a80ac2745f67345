package netns

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestCLI drives `isrlab cluster` and `isrlab clean` as a user would, with a
// private state directory.
func TestCLI(t *testing.T) {
	requireNetns(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	stateDir := t.TempDir()
	runDir := t.TempDir()
	isrlab := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir)
		return runCmd(t, cmd)
	}
	name := "cli"
	t.Cleanup(func() { isrlab("cluster", "down", "--name", name) })

	steps := []struct {
		args     []string
		code     int
		contains []string
	}{
		{[]string{"cluster", "up", "--brokers", "-1"}, 254, []string{"at least 0"}},
		{[]string{"cluster", "up", "--backend", "lxc"}, 254, []string{"netns, docker or ssh"}},
		{[]string{"cluster", "up", "--config", "novalue"}, 254, []string{"key=value"}},
		{[]string{"cluster", "up", "--config", "broker.id=9"}, 254, []string{"set by the topology"}},
		{[]string{"cluster", "status", "--name", name}, 254, []string{"not found"}},
		{[]string{"cluster", "up", "--name", name, "--brokers", "1", "--subnet", "10.216.0.0/24", "--run-dir", runDir + "/r"}, 0,
			[]string{"is up after", "bootstrap servers: 10.216.0.4:9092", "b1", "client1"}},
		{[]string{"cluster", "up", "--name", name, "--brokers", "1"}, 254, []string{"already running"}},
		{[]string{"cluster", "list"}, 0, []string{name, "true"}},
		{[]string{"cluster", "status", "--name", name}, 0, []string{"c3", "up", "controller: broker 1"}},
		{[]string{"cluster", "exec", "--name", name, "--", "cat", "/proc/net/dev"}, 0, []string{"eth0"}},
		{[]string{"cluster", "exec", "--name", name, "--", bin, "topics", "create", "--bootstrap-server", "10.216.0.4:9092",
			"--topic", "t1", "--partitions", "2", "--replication-factor", "1"}, 0, nil},
		{[]string{"cluster", "status", "--name", name}, 0, []string{"TOPIC", "t1 ", "[1]"}},
		{[]string{"cluster", "exec", "--name", name, "--node", "b1", "sh", "-c", "exit 3"}, 3, nil},
		{[]string{"cluster", "exec", "--name", name, "--node", "b9", "true"}, 254, []string{"b9"}},
		{[]string{"cluster", "exec", "--name", name}, 254, []string{"missing command"}},
		{[]string{"clean"}, 0, []string{"left live run " + name}},
		{[]string{"cluster", "down", "--name", name}, 0, []string{"is down after"}},
		{[]string{"cluster", "down", "--name", name}, 254, []string{"not found"}},
		{[]string{"clean"}, 0, []string{"nothing to clean"}},
	}
	for _, s := range steps {
		out, code := isrlab(s.args...)
		if len(s.args) > 1 && s.args[1] == "status" && code == 0 && !containsAll(out, s.contains) {
			// A new topic reaches the brokers' metadata a moment after
			// CreateTopics answers.
			proctest.Eventually(t, 20*time.Second, "isrlab "+strings.Join(s.args, " ")+" shows "+strings.Join(s.contains, ", "), func() error {
				if out, code = isrlab(s.args...); code != 0 || containsAll(out, s.contains) {
					return nil
				}
				return errors.New(out)
			})
		}
		if code != s.code {
			t.Fatalf("isrlab %s: exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.code, out)
		}
		for _, want := range s.contains {
			if !strings.Contains(out, want) {
				t.Fatalf("isrlab %s: output lacks %q:\n%s", strings.Join(s.args, " "), want, out)
			}
		}
	}
	if ents, _ := os.ReadDir(runDir); len(ents) > 0 {
		t.Errorf("run dir not removed by down: %v", ents)
	}
}

// TestRootlessCLI runs `isrlab cluster` as an unprivileged user: up
// re-executes itself in a user namespace and returns with the cluster
// running; exec, status and down enter that namespace through nsenter.
func TestRootlessCLI(t *testing.T) {
	requireNetns(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to run as an unprivileged user")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	bin := proctest.Binary(t)
	dir, err := os.MkdirTemp("", "isrlab-rootless-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	nbin := filepath.Join(dir, "isrlab")
	if err := os.WriteFile(nbin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	isrlab := func(args ...string) (string, int) {
		argv := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", nbin}, args...)
		cmd := exec.Command(setpriv, argv...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "TMPDIR="+dir, "XDG_RUNTIME_DIR=", "ISRLAB_STATE_DIR=", "ISRLAB_REGISTRY_DIR=")
		cmd.Dir = dir
		return runCmd(t, cmd)
	}
	name := "rlcli"
	t.Cleanup(func() { isrlab("cluster", "down", "--name", name) })
	steps := []struct {
		args     []string
		code     int
		contains []string
	}{
		{[]string{"cluster", "up", "--name", name, "--brokers", "1"}, 0, []string{"is up after", dir}},
		{[]string{"cluster", "exec", "--name", name, "--", "cat", "/proc/net/dev"}, 0, []string{"eth0"}},
		{[]string{"cluster", "status", "--name", name}, 0, []string{"b1", "up", "controller: broker 1"}},
		{[]string{"clean"}, 0, []string{"left live run " + name}},
		{[]string{"cluster", "down", "--name", name}, 0, []string{"is down after"}},
		{[]string{"cluster", "list"}, 0, nil},
	}
	if fuseIsRootOnly() {
		// The user namespace's root is nobody outside: no FUSE. Up says
		// so before creating anything.
		steps = append(steps, struct {
			args     []string
			code     int
			contains []string
		}{[]string{"cluster", "up", "--name", name + "-ffs", "--brokers", "1", "--faultfs", "all"}, 255,
			[]string{"rootless run (user namespace)", "/dev/fuse", "permission denied"}})
	}
	for _, s := range steps {
		out, code := isrlab(s.args...)
		if code != s.code {
			t.Fatalf("isrlab %s (as nobody): exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.code, out)
		}
		for _, want := range s.contains {
			if !strings.Contains(out, want) {
				t.Fatalf("isrlab %s (as nobody): output lacks %q:\n%s", strings.Join(s.args, " "), want, out)
			}
		}
		if len(s.args) > 1 && s.args[1] == "list" && strings.Contains(out, name) {
			t.Fatalf("cluster still listed after down:\n%s", out)
		}
	}
}

// TestFaultFSCLI brings a cluster up with `cluster up --faultfs`, injects a
// disk fault from another process with no --control (the sockets come from
// the cluster's state) and takes it down: the daemons outlive the `up`
// process and go with `down`.
func TestFaultFSCLI(t *testing.T) {
	requireFUSE(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	stateDir, runDir := t.TempDir(), t.TempDir()
	isrlab := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir)
		return runCmd(t, cmd)
	}
	name := "fficli"
	t.Cleanup(func() { isrlab("cluster", "down", "--name", name) })
	sock := runDir + "/r/b1/faultfs.sock"
	steps := []struct {
		args     []string
		code     int
		contains []string
	}{
		{[]string{"cluster", "up", "--name", name, "--brokers", "1", "--faultfs", "b2"}, 254, []string{"not a broker", "b1..b1"}},
		{[]string{"cluster", "up", "--name", name, "--coordinators", "1", "--brokers", "1", "--faultfs", "all",
			"--subnet", "10.219.0.0/24", "--run-dir", runDir + "/r"}, 0, []string{"is up after", "faultfs controls:  b1=" + sock}},
		{[]string{"cluster", "status", "--name", name, "--json"}, 0, []string{`"disk_pid"`, `"control": "` + sock + `"`}},
		{[]string{"fault", "inject", "slow-disk", "--name", name, "--node", "b1", "--latency", "5ms"}, 0,
			[]string{"injected f1", `"sockets":{"b1":"` + sock + `"}`}},
		{[]string{"faultfs", "ctl", "--control", sock, "status"}, 0, []string{`"latency": "5ms"`}},
		{[]string{"fault", "heal", "--name", name, "--all"}, 0, []string{"healed 1"}},
		{[]string{"faultfs", "ctl", "--control", sock, "status"}, 0, []string{`"faults": []`}},
		{[]string{"cluster", "down", "--name", name}, 0, []string{"is down after"}},
	}
	var run string
	for _, s := range steps {
		out, code := isrlab(s.args...)
		if code != s.code {
			t.Fatalf("isrlab %s: exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.code, out)
		}
		for _, want := range s.contains {
			if !strings.Contains(out, want) {
				t.Fatalf("isrlab %s: output lacks %q:\n%s", strings.Join(s.args, " "), want, out)
			}
		}
		if _, rest, ok := strings.Cut(out, "(run "); ok && run == "" && code == 0 {
			run, _, _ = strings.Cut(rest, ",")
		}
	}
	if run == "" {
		t.Fatal("cluster up printed no run id")
	}
	if got := runMounts(t, run); len(got) > 0 {
		t.Errorf("faultfs mounts left after down: %v", got)
	}
	if ps := faultfsProcs(t, run); len(ps) > 0 {
		t.Errorf("faultfs daemons left after down: %v", ps)
	}
}

// fuseIsRootOnly reports whether /dev/fuse exists and only root may open it.
func fuseIsRootOnly() bool {
	fi, err := os.Stat("/dev/fuse")
	return err == nil && fi.Mode().Perm()&0o006 != 0o006
}

// runCmd runs cmd and returns what it printed and its exit code.
func runCmd(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
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

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
