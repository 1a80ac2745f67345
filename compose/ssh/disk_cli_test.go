package ssh_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/internal/sshtest"
)

// diskScenario slows b1's disk for longer than the test lets the run live.
const diskScenario = `name: ssh/slow-disk
topic:
  partitions: 1
  replication.factor: 1
workload:
  producers: 1
  consumers: 1
  send.interval: 5ms
duration: 90s
faults:
  - kind: slow-disk
    nodes: [b1]
    op: write
    latency: 5ms
    at: 2s
`

// TestCLIDiskFaultClean: isrlab run --plan lists b1's disk faults and the
// command they run on its host; a run whose slow disk on b1 (a faultfs
// mount on the host) is injected over SSH and that is then killed with
// SIGKILL leaves the fault on the daemon; isrlab clean --backend ssh heals
// it over SSH and stops what the run started.
func TestCLIDiskFaultClean(t *testing.T) {
	h := sshtest.New(t, "10.224.0.0/24", "c1", "b1", "client1")
	cfg := h.Cluster(t)
	sock, notes := h.Faultfs(t, cfg, "b1")
	hosts, scen, stateDir, results, env := cliFiles(t, cfg, diskScenario)
	onlySSH(t, h.LabNS)
	isrlab, run := labCLI(t, h, env)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, code := run("run", scen, "--hosts", hosts, "--plan")
	if code != 0 || !strings.Contains(out, "disk faults (slow-disk, disk-error, disk-hang, power-loss): the faultfs daemon behind "+cfg.Nodes[1].DataDir) ||
		!strings.Contains(out, "faultfs ctl --control "+sock+" -") || !strings.Contains(out, `"kind":"slow-disk"`) {
		t.Fatalf("plan: exit %d:\n%s", code, out)
	}

	local := faultfs.NewClient(sock)
	var log bytes.Buffer
	cmd := isrlab(ctx, "run", scen, "--hosts", hosts, "--results", results, "--seed", "3")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	proctest.Eventually(t, 90*time.Second, "the slow disk on b1", func() error {
		st, err := local.Status(ctx)
		if err != nil {
			return err
		}
		if len(st.Faults) == 0 {
			return errors.New("no fault yet")
		}
		return nil
	})
	states, _ := compose.ListStates(stateDir)
	if len(states) != 1 {
		t.Fatalf("runs recorded: %d\n%s", len(states), log.String())
	}
	runID := states[0].RunID
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if st, err := local.Status(ctx); err != nil || len(st.Faults) != 1 || st.Faults[0].Op != faultfs.OpWrite {
		t.Fatalf("after SIGKILL the slow disk should hold: %+v, %v", st.Faults, err)
	}
	out, code = run("clean", "--backend", "ssh")
	if code != 0 || !strings.Contains(out, "removed run lab-"+runID+"/"+runID) {
		t.Fatalf("clean: exit %d:\n%s", code, out)
	}
	if st, err := local.Status(ctx); err != nil || len(st.Faults) != 0 {
		t.Errorf("after clean: faults %+v, %v", st.Faults, err)
	}
	if left := h.Leftovers(t, runID); len(left) > 0 {
		t.Errorf("clean left: %v", left)
	}
	noted, _ := os.ReadFile(notes)
	want := h.Host("b1").NetNSInode(t) + " faultfs ctl --control " + sock + " -"
	lines := strings.Split(strings.TrimSpace(string(noted)), "\n")
	if len(lines) < 2 { // the inject, and at least the clean's heal
		t.Errorf("control commands on b1's host:\n%s", noted)
	}
	for _, l := range lines {
		if l != want {
			t.Errorf("control command %q, want %q", l, want)
		}
	}
}
