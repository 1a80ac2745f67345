package ssh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/sshtest"
)

// scenario is a short run with a partition and a kill, on whatever hosts
// --hosts gives. The kill lasts longer than the brokers' 6 s coordinator
// session (sshtest.KafkaConfig), so that leadership must move.
const scenario = `name: ssh/partition-and-kill
preset: safe
topic:
  partitions: 1
workload:
  producers: 1
  consumers: 1
  send.interval: 5ms
  delivery.timeout: 30s
duration: 33s
faults:
  - kind: partition
    topology: follower-leader
    partition: isrlab/0
    at: 3s
    heal.after: 6s
  - kind: kill
    nodes: [leader:isrlab/0]
    at: 10s
    heal.after: 15s
`

// TestCLIRunAndClean drives isrlab as a user would against hosts it
// reaches only over SSH (the isrlab process runs in the lab's namespace,
// which lets out nothing but connections to SSH ports; Kafka traffic goes
// through the client host's SSH connection): --plan touches nothing; a run with a partition
// and a kill is judged and leaves the hosts as they were; a run killed
// with SIGKILL mid-fault leaves its rules and processes, and
// `isrlab clean --backend ssh` removes exactly those.
func TestCLIRunAndClean(t *testing.T) {
	h := sshtest.New(t, "10.220.0.0/24", "c1", "b1", "b2", "b3", "client1")
	dir := t.TempDir()
	stateDir, results := filepath.Join(dir, "state"), filepath.Join(dir, "results")
	hosts := filepath.Join(dir, "hosts.yaml")
	b, err := yaml.Marshal(h.Cluster(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, b, 0o644); err != nil {
		t.Fatal(err)
	}
	scen := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(scen, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	// The lab's side can reach the hosts' SSH ports and nothing else:
	// every other connection has to go through SSH.
	onlySSH(t, h.LabNS)
	env := append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir, "ISRLAB_REGISTRY_DIR="+filepath.Join(dir, "runs"))
	isrlab, run := labCLI(t, h, env)

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("user: root\nnodez: []\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"run", "leader-kill", "--backend", "ssh"}, 254, []string{"ssh needs its hosts"}},
		{[]string{"run", "leader-kill", "--hosts", bad}, 254, []string{"line 2", "nodez"}},
		{[]string{"run", "follower-cut-from-leader", "--hosts", hosts, "--plan"}, 0, []string{
			"ssh root@" + h.Host("b1").Addr.String() + ":22", "host keys checked against " + h.KnownHosts,
			"coordinator.session.timeout.ms", "is NOT applied: the hosts run their own broker configuration",
			"start #1", "follower-leader", "nothing else is installed"}},
		{[]string{"clean", "--backend", "lxc"}, 254, []string{"--backend"}},
	} {
		out, code := run(tc.args...)
		if code != tc.code {
			t.Fatalf("isrlab %v: exit %d, want %d:\n%s", tc.args, code, tc.code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("isrlab %v: no %q in:\n%s", tc.args, w, out)
			}
		}
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) > 0 {
		t.Fatalf("--plan left state: %v", ents)
	}

	out, code := run("run", scen, "--hosts", hosts, "--results", results, "--seed", "7")
	if code != 0 {
		t.Fatalf("run: exit %d:\n%s", code, out)
	}
	outputHas(t, out, "ssh cluster: 5 nodes", "expectation (valid): MET")
	runDir := latest(t, results)
	leadersMoved(t, runDir, "partition", "kill")
	runID := filepath.Base(runDir)[strings.LastIndexByte(filepath.Base(runDir), '-')+1:]
	if left := h.Leftovers(t, runID); len(left) > 0 {
		t.Fatalf("the run left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(runDir, "nodes", "b1", "server.log")); err != nil {
		t.Errorf("b1's log was not copied into the run: %v", err)
	}

	// A run killed while its partition holds.
	crash := filepath.Join(dir, "crash.yaml")
	os.WriteFile(crash, []byte(strings.Replace(strings.Replace(scenario, "duration: 33s", "duration: 60s", 1),
		"    heal.after: 6s\n", "", 1)), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log bytes.Buffer
	cmd := isrlab(ctx, "run", crash, "--hosts", hosts, "--results", results, "--seed", "8")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var crashRun string
	proctest.Eventually(t, 90*time.Second, "the partition of the second run", func() error {
		st, _ := compose.ListStates(stateDir)
		if len(st) == 0 {
			return errors.New("no run yet")
		}
		crashRun = st[0].RunID
		for _, l := range h.Leftovers(t, crashRun) {
			if strings.Contains(l, "isrlab-"+crashRun+"-f") {
				return nil
			}
		}
		return errors.New("no rule yet")
	})
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	left := h.Leftovers(t, crashRun)
	var procs, rules int
	for _, l := range left {
		if strings.Contains(l, "pid ") {
			procs++
		} else {
			rules++
		}
	}
	if procs != 4 || rules == 0 {
		t.Fatalf("after SIGKILL: %d processes, %d rules, want 4 and some:\n%s", procs, rules, strings.Join(left, "\n"))
	}
	out, code = run("clean", "--backend", "ssh")
	if code != 0 || !strings.Contains(out, "removed run lab-"+crashRun+"/"+crashRun) {
		t.Fatalf("clean: exit %d:\n%s", code, out)
	}
	if left := h.Leftovers(t, crashRun); len(left) > 0 {
		t.Fatalf("clean left: %v", left)
	}
	if out, code := run("clean", "--backend", "ssh"); code != 0 || !strings.Contains(out, "nothing to clean") {
		t.Fatalf("second clean: exit %d:\n%s", code, out)
	}

	// A cluster kept up between commands, faults from other processes.
	name := "byo"
	t.Cleanup(func() { run("cluster", "down", "--name", name) })
	var upRun string
	for _, s := range []struct {
		args []string
		want []string
	}{
		{[]string{"cluster", "up", "--backend", "ssh", "--hosts", hosts, "--name", name, "--run-dir", filepath.Join(dir, "byo")},
			[]string{"backend ssh) is up", "b3", "client1"}},
		{[]string{"cluster", "status", "--name", name}, []string{"c1", "up", "controller: broker"}},
		{[]string{"fault", "inject", "partition", "--name", name, "--isolate", "b1"}, []string{"f1"}},
		{[]string{"fault", "inject", "pause", "--name", name, "--node", "b2"}, []string{"f2"}},
		{[]string{"fault", "list", "--name", name}, []string{"partition", "pause"}},
		{[]string{"fault", "heal", "--name", name, "--all"}, []string{"healed 2 fault(s)"}},
		{[]string{"cluster", "down", "--name", name}, []string{"is down"}},
	} {
		if upRun == "" {
			if st, _ := compose.ListStates(stateDir); len(st) > 0 {
				upRun = st[0].RunID
			}
		}
		if s.args[0] == "cluster" && s.args[1] == "down" && upRun != "" {
			if left := h.Leftovers(t, upRun); len(left) != 4 {
				t.Errorf("after fault heal --all, before down: want the 4 node processes and no rule, got %v", left)
			}
		}
		out, code := run(s.args...)
		if code != 0 {
			t.Fatalf("isrlab %v: exit %d:\n%s", s.args, code, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("isrlab %v: no %q in:\n%s", s.args, w, out)
			}
		}
	}
	if left := h.Leftovers(t, upRun); upRun == "" || len(left) > 0 {
		t.Fatalf("cluster down (run %q) left: %v", upRun, left)
	}
}

// labCLI is how the tests run isrlab on the lab's side of h, with env:
// isrlab makes the command (in its own process group), run runs one to
// its end (within 3 minutes) and returns its output and exit status.
// cliFiles writes the hosts file of cfg and the scenario into a fresh
// directory and returns their paths, the state and results directories
// under it, and the environment that points isrlab at them.
func cliFiles(t *testing.T, cfg any, scenario string) (hosts, scen, stateDir, results string, env []string) {
	t.Helper()
	dir := t.TempDir()
	stateDir, results = filepath.Join(dir, "state"), filepath.Join(dir, "results")
	hosts, scen = filepath.Join(dir, "hosts.yaml"), filepath.Join(dir, "scenario.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scen, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir, "ISRLAB_REGISTRY_DIR="+filepath.Join(dir, "runs"))
	return hosts, scen, stateDir, results, env
}

// outputHas reports every want missing from a command's output.
func outputHas(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output has no %q:\n%s", w, out)
		}
	}
}

func labCLI(t *testing.T, h *sshtest.Hosts, env []string) (isrlab func(context.Context, ...string) *exec.Cmd, run func(...string) (string, int)) {
	isrlab = func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + h.LabNS, "--", h.Bin}, args...)...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	run = func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd := isrlab(ctx, args...)
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
	return isrlab, run
}

// onlySSH lets connections out of ns go to TCP port 22 only.
func onlySSH(t *testing.T, ns string) {
	t.Helper()
	rules := "table inet onlyssh {\n\tchain output {\n\t\ttype filter hook output priority 0; policy drop;\n" +
		"\t\toif lo accept\n\t\tct state established,related accept\n\t\ttcp dport 22 accept\n\t}\n}\n"
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Inside the lab's namespace, never this machine's.
	if err := compose.InNetNS(ns, cmd.Run); err != nil {
		t.Fatalf("nft in the lab's namespace: %v\n%s", err, out.String())
	}
}

func latest(t *testing.T, results string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(filepath.Join(results, "latest"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leadersMoved checks the history of the run in runDir: each of faults
// went in and was healed, and the cluster's observer saw the leadership
// of the topic's partition move.
func leadersMoved(t *testing.T, runDir string, faults ...string) {
	t.Helper()
	ops := readHistory(t, filepath.Join(runDir, "history.jsonl"))
	for _, kind := range faults {
		for _, f := range []string{"start-" + kind, "stop-" + kind} {
			if !hasOp(ops, history.Nemesis, history.OK, f) {
				t.Errorf("history has no ok %s", f)
			}
		}
	}
	leaders := map[int32]bool{}
	for _, op := range ops {
		if op.Process == history.Cluster && op.F == history.FState && op.Leader >= 0 {
			leaders[op.Leader] = true
		}
	}
	if len(leaders) < 2 {
		var tl []string
		for _, op := range ops {
			if op.Process == history.Nemesis || (op.Process == history.Cluster && op.Leader >= 0) {
				tl = append(tl, fmt.Sprintf("%.1fs %s %s leader=%d isr=%v %s", float64(op.Time)/1e9, op.Type, op.F, op.Leader, op.ISR, op.RawValue))
			}
		}
		t.Errorf("the metadata timeline shows leaders %v: the kill moved no leadership:\n%s", leaders, strings.Join(tl, "\n"))
	}
}

func readHistory(t *testing.T, path string) []history.Op {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, ops, err := history.ReadAll(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func hasOp(ops []history.Op, proc int, typ history.Type, f string) bool {
	for _, op := range ops {
		if op.Process == proc && op.Type == typ && op.F == f {
			return true
		}
	}
	return false
}
