package docker

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

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
	steps := []struct {
		args     []string
		code     int
		contains []string
	}{
		{[]string{"cluster", "up", "--system", "kafka"}, 254, []string{"needs --backend docker"}},
		{[]string{"cluster", "up", "--backend", "docker", "--system", "zk"}, 254, []string{"isrlab or kafka"}},
		{[]string{"cluster", "up", "--backend", "docker", "--name", name, "--brokers", "1", "--subnet", "10.218.0.0/24", "--run-dir", runDir + "/r"}, 0,
			[]string{"backend docker", "bootstrap servers: 10.218.0.4:9092", "/proc/"}},
		{[]string{"cluster", "status", "--name", name}, 0, []string{"b1", "up", "controller: broker 1"}},
		{[]string{"cluster", "exec", "--name", name, "--", "cat", "/proc/net/dev"}, 0, []string{"eth0"}},
		{[]string{"clean"}, 0, []string{"left live run " + name}},
		{[]string{"cluster", "down", "--name", name}, 0, []string{"is down after"}},
		{[]string{"cluster", "list"}, 0, nil},
	}
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
	}
}
