package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
}

// small is a one-coordinator, one-broker scenario for the tests of the run
// machinery itself.
const small = `name: small
description: one broker, one partition, no faults
cluster: {coordinators: 1, brokers: 1}
topic: {partitions: 1, replication.factor: 1}
workload: {producers: 2, consumers: 1, send.interval: 2ms}
duration: %s
`

func writeScenario(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var runIDRE = regexp.MustCompile(`run ([0-9a-f]{8})\)`)

// leftovers lists what a run left behind: network namespaces and processes
// carrying its run id.
func leftovers(t *testing.T, runID string) []string {
	t.Helper()
	var out []string
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.Contains(e.Name(), runID) {
				out = append(out, "netns "+e.Name())
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), runID) {
			out = append(out, fmt.Sprintf("process %s: %s", filepath.Dir(p), strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestRunDefaultScenario runs the embedded default end to end: cluster up,
// workload, leader kill and restart through the nemesis, drain, verdict,
// expectation met.
func TestRunDefaultScenario(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc := lab.Default()
	sc.Duration = 20 * time.Second
	sc.Seed = 7
	resultsDir := t.TempDir()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: resultsDir, Binary: bin, Out: &out})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if res.Verdict.Valid != checker.Valid || res.Judgement.Outcome != lab.Met {
		t.Fatalf("verdict %v, anomalies %v, outcome %v", res.Verdict.Valid, res.Verdict.Anomalies, res.Judgement)
	}
	for _, f := range []string{"scenario.yaml", "history.jsonl", "verdict.json", "outcome.json", "nodes/b1/b1.log"} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("run dir lacks %s: %v", f, err)
		}
	}
	if !strings.HasSuffix(res.Dir, res.RunID) {
		t.Errorf("run dir %s is not named after run %s", res.Dir, res.RunID)
	}
	if target, err := os.Readlink(filepath.Join(resultsDir, "latest")); err != nil || !strings.HasSuffix(res.Dir, target) {
		t.Errorf("results/latest -> %q (%v), run dir %s", target, err, res.Dir)
	}
	// The kill went through the nemesis and into the history, resolved.
	hist, _ := os.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
	if !regexp.MustCompile(`"f":"start-kill".*"resolved":\["b\d"\]`).Match(hist) || !strings.Contains(string(hist), `"f":"stop-kill"`) {
		t.Errorf("the history has no resolved start-kill and stop-kill")
	}
	// The header records the assignment, its first replicas the first
	// leaders the timeline shows (what a replay pins).
	var hdr struct {
		Replicas map[int32][]int32 `json:"replicas"`
	}
	first := strings.SplitN(string(hist), "\n", 2)[0]
	if err := json.Unmarshal([]byte(first), &hdr); err != nil || len(hdr.Replicas) != int(sc.Topic.Partitions) {
		t.Fatalf("history header %s: replicas %v (%v)", first, hdr.Replicas, err)
	}
	for p, rs := range hdr.Replicas {
		m := regexp.MustCompile(fmt.Sprintf(`"f":"state","partition":%d,"leader":(\d+)`, p)).FindSubmatch(hist)
		if m == nil || string(m[1]) != fmt.Sprint(rs[0]) {
			t.Errorf("partition %d: assignment %v, first leader %s", p, rs, m)
		}
	}
	// The leaders' high watermarks are in the cluster-state timeline.
	if !regexp.MustCompile(`"process":"cluster","type":"info","f":"state","partition":\d,"node":"b\d","epoch":\d+,"hw":[1-9]`).Match(hist) {
		t.Errorf("the history has no high-watermark state ops")
	}
	if !regexp.MustCompile(`kill leader:isrlab/0 -> b\d`).MatchString(out.String()) || res.Verdict.Availability.Faults != 1 {
		t.Errorf("the fault did not run: %s", out.String())
	}
	// Where the time went is in outcome.json and the output: every phase
	// measured, the workload its duration, the phases within the total.
	var sum results.Outcome
	if b, err := os.ReadFile(filepath.Join(res.Dir, "outcome.json")); err != nil || json.Unmarshal(b, &sum) != nil || sum.Timing == nil {
		t.Fatalf("outcome.json has no timing: %s %v", b, err)
	}
	tm := sum.Timing
	if tm.Up <= 0 || tm.Setup <= 0 || tm.Down <= 0 || tm.Check <= 0 || tm.Workload < sc.Duration.Seconds() ||
		tm.Workload+tm.Overhead() > sum.Seconds || !strings.Contains(out.String(), "took ") {
		t.Errorf("timing %+v of a %.1fs run", *tm, sum.Seconds)
	}
	// The run over, its nodes were killed, not shut down: no broker
	// spent the teardown on a controlled shutdown.
	for _, b := range []string{"b1", "b2", "b3"} {
		if l, _ := os.ReadFile(filepath.Join(res.Dir, "nodes", b, b+".log")); len(l) == 0 || strings.Contains(string(l), `msg="controlled shutdown"`) {
			t.Errorf("%s's log is empty or shows a clean shutdown at teardown", b)
		}
	}
	again, err := lab.Load(filepath.Join(res.Dir, "scenario.yaml"))
	if err != nil || again.Seed != 7 || len(again.Faults) != 1 {
		t.Errorf("resolved scenario: seed %d, faults %d, %v", again.Seed, len(again.Faults), err)
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestRunSignals: SIGINT, SIGTERM and SIGHUP mid-run heal, tear down, and
// still check what was recorded, marked incomplete.
func TestRunSignals(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	file := writeScenario(t, fmt.Sprintf(small, "60s")+`faults:
  - kind: pause
    nodes: [b1]
    at: 4s
    heal.after: 50s
`)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			resultsDir := t.TempDir()
			cmd := exec.Command(bin, "run", file, "--results", resultsDir)
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var lines []string
			var runID string
			sc := bufio.NewScanner(stdout)
			sent := false
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if m := runIDRE.FindStringSubmatch(sc.Text()); m != nil {
					runID = m[1]
				}
				// Signal while the pause fault is active.
				if !sent && strings.Contains(sc.Text(), "pause b1") {
					sent = true
					cmd.Process.Signal(sig)
				}
			}
			err := cmd.Wait()
			out := strings.Join(lines, "\n")
			if !sent {
				t.Fatalf("the fault never started:\n%s", out)
			}
			if code := exitCode(err); code != 2 {
				t.Errorf("exit %d, want 2 (undecided: cut short)\n%s", code, out)
			}
			var sum results.Outcome
			paths, _ := filepath.Glob(filepath.Join(resultsDir, "small", "*", "outcome.json"))
			if len(paths) != 1 {
				t.Fatalf("outcome.json: %v\n%s", paths, out)
			}
			b, _ := os.ReadFile(paths[0])
			if err := json.Unmarshal(b, &sum); err != nil || !sum.Incomplete || sum.Outcome != results.Undecided {
				t.Errorf("outcome: %s (%v)", b, err)
			}
			hist, _ := os.ReadFile(filepath.Join(filepath.Dir(paths[0]), "history.jsonl"))
			if !strings.Contains(string(hist), `"f":"stop-pause"`) {
				t.Errorf("the pause was not healed in the history")
			}
			if !strings.Contains(out, "stopped early") || !strings.Contains(out, "verdict:") {
				t.Errorf("no verdict of the recorded part:\n%s", out)
			}
			if l := leftovers(t, runID); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
		})
	}
}

// TestRunClosedStdout: `isrlab run | head -3` stops the run, heals, tears
// the cluster down and still writes a verdict.
func TestRunClosedStdout(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	file := writeScenario(t, fmt.Sprintf(small, "60s"))
	resultsDir := t.TempDir()
	cmd := exec.Command(bin, "run", file, "--results", resultsDir)
	r, w, _ := os.Pipe()
	cmd.Stdout = w
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var head []string
	sc := bufio.NewScanner(r)
	for len(head) < 5 && sc.Scan() {
		head = append(head, sc.Text())
	}
	r.Close() // like head exiting
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 2 {
			t.Errorf("exit %d, want 2 (cut short)", code)
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("isrlab run went on after its stdout closed")
	}
	var runID string
	for _, l := range head {
		if m := runIDRE.FindStringSubmatch(l); m != nil {
			runID = m[1]
		}
	}
	paths, _ := filepath.Glob(filepath.Join(resultsDir, "small", "*", "outcome.json"))
	if len(paths) != 1 || runID == "" {
		t.Fatalf("outcome.json %v, run id %q, head %q", paths, runID, head)
	}
	b, _ := os.ReadFile(paths[0])
	if !strings.Contains(string(b), `"incomplete": true`) {
		t.Errorf("outcome not marked incomplete: %s", b)
	}
	if l := leftovers(t, runID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestParallelRuns: two runs of the same scenario with the same seed on one
// host do not collide: both complete, in distinct result directories.
func TestParallelRuns(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	file := writeScenario(t, fmt.Sprintf(small, "8s"))
	resultsDir := t.TempDir()
	var wg sync.WaitGroup
	outs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := exec.Command(bin, "run", file, "--seed", "5", "--results", resultsDir).CombinedOutput()
			outs[i], errs[i] = string(b), err
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || !strings.Contains(outs[i], "MET") {
			t.Errorf("run %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	paths, _ := filepath.Glob(filepath.Join(resultsDir, "small", "*", "outcome.json"))
	if len(paths) != 2 {
		t.Errorf("want 2 run directories, got %v", paths)
	}
}

// TestSmokeMatrix plays the CI smoke matrix end to end: one cell must stay
// valid, the Kafka 0.10 acks=1 cell must lose acknowledged writes, and the
// JUnit XML has a passing testcase for each.
func TestSmokeMatrix(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	resultsDir := t.TempDir()
	junit := filepath.Join(t.TempDir(), "junit.xml")
	// Both cells at once, as a CI runner with two cores runs them.
	out, err := exec.Command(bin, "matrix", "smoke", "--parallel", "2", "--results", resultsDir, "--junit", junit).CombinedOutput()
	t.Logf("%s", out)
	if code := exitCode(err); code != 0 {
		t.Fatalf("matrix exit %d", code)
	}
	var tab lab.MatrixResult
	paths, _ := filepath.Glob(filepath.Join(resultsDir, "matrices", "smoke", "*Z-*", "table.json"))
	if len(paths) != 1 {
		t.Fatalf("table.json: %v", paths)
	}
	b, _ := os.ReadFile(paths[0])
	if err := json.Unmarshal(b, &tab); err != nil || len(tab.Cells) != 2 {
		t.Fatalf("table: %v %s", err, b)
	}
	valid := map[string]string{}
	for _, c := range tab.Cells {
		valid[c.Preset] = c.Valid
		if c.Outcome != "met" {
			t.Errorf("cell %s: %s %v", c.Cell, c.Outcome, c.Reasons)
		}
	}
	if valid["safe"] != "true" || valid["acks1+kafka-0.10"] != "false" {
		t.Errorf("validity per preset: %v", valid)
	}
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name string `xml:"name,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	jb, _ := os.ReadFile(junit)
	if err := xml.Unmarshal(jb, &suites); err != nil || len(suites.Suites) != 1 || suites.Suites[0].Tests != 2 || suites.Suites[0].Failures != 0 {
		t.Errorf("junit: %v\n%s", err, jb)
	}
}

// TestSmokeMatrixShards plays the CI smoke matrix as CI runners split it:
// each of its two shards runs its one cell into its own results
// directory (both at once, as two runners would), and isrlab matrix merge
// joins them into one matrix whose table, JUnit XML and diff are the whole
// matrix's.
func TestSmokeMatrixShards(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	var dirs []string
	cells := map[string]bool{}
	results := []string{t.TempDir(), t.TempDir()}
	outs, errs := make([][]byte, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = exec.Command(bin, "matrix", "smoke", "--shard", fmt.Sprintf("%d/2", i+1), "--results", results[i]).CombinedOutput()
		}()
	}
	wg.Wait()
	for i := 1; i <= 2; i++ {
		resultsDir := results[i-1]
		shard := fmt.Sprintf("%d/2", i)
		out, err := outs[i-1], errs[i-1]
		t.Logf("shard %s:\n%s", shard, out)
		if code := exitCode(err); code != 0 {
			t.Fatalf("shard %s: exit %d", shard, code)
		}
		dir := filepath.Join(resultsDir, "matrices", "smoke", fmt.Sprintf("latest-shard-%d-of-2", i))
		var tab lab.MatrixResult
		b, _ := os.ReadFile(filepath.Join(dir, "table.json"))
		if err := json.Unmarshal(b, &tab); err != nil || len(tab.Cells) != 1 || tab.Shard != shard {
			t.Fatalf("shard %s: table %v %s", shard, err, b)
		}
		cells[tab.Cells[0].Cell] = true
		dirs = append(dirs, dir)
	}
	if len(cells) != 2 {
		t.Fatalf("the shards ran %v, want both cells once", cells)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	junit := filepath.Join(t.TempDir(), "junit.xml")
	out, err := exec.Command(bin, append([]string{"matrix", "merge", "--out", merged, "--junit", junit}, dirs...)...).CombinedOutput()
	t.Logf("merge:\n%s", out)
	if code := exitCode(err); code != 0 || !strings.Contains(string(out), "merged from shards 1/2, 2/2") {
		t.Fatalf("merge exit %d", code)
	}
	var tab lab.MatrixResult
	b, _ := os.ReadFile(filepath.Join(merged, "table.json"))
	if err := json.Unmarshal(b, &tab); err != nil || len(tab.Cells) != 2 {
		t.Fatalf("merged table: %v %s", err, b)
	}
	for _, c := range tab.Cells {
		if c.Outcome != "met" {
			t.Errorf("cell %s: %s %v", c.Cell, c.Outcome, c.Reasons)
		}
		if _, err := os.Stat(filepath.Join(c.Dir, "report.html")); err != nil || !strings.HasPrefix(c.Dir, merged) {
			t.Errorf("cell %s: run %s not in the merge: %v", c.Cell, c.Dir, err)
		}
	}
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	jb, _ := os.ReadFile(junit)
	if err := xml.Unmarshal(jb, &suites); err != nil || len(suites.Suites) != 1 || suites.Suites[0].Tests != 2 || suites.Suites[0].Failures != 0 {
		t.Errorf("junit: %v\n%s", err, jb)
	}
	out, err = exec.Command(bin, "diff", merged, merged).CombinedOutput()
	if code := exitCode(err); code != 0 || !strings.Contains(string(out), "no regression") {
		t.Errorf("diff of the merged matrix: exit %d\n%s", code, out)
	}
}

// TestPowerLossScenarios plays the library's correlated power loss on
// faultfs disks: with the default flush policy the two ISR members forget
// acknowledged writes (seed 000's page-cache point), with an fsync per
// message nothing is lost.
func TestPowerLossScenarios(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse for faultfs disks")
	}
	bin := proctest.Binary(t)
	for _, name := range []string{"power-loss/safe", "power-loss/flush-every-message"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // two runs at once, as a sweep beside --hog has them
			sc, err := lab.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out})
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if res.Judgement.Outcome != lab.Met {
				t.Errorf("%s: %v %v, anomalies %v\n%s", name, res.Judgement.Outcome, res.Judgement.Reasons, res.Verdict.Anomalies, out.String())
			}
			hist, _ := os.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
			if !regexp.MustCompile(`"f":"start-power-loss".*"reports":\{"b\d"`).Match(hist) {
				t.Errorf("the power loss did not go through faultfs (no crash reports in the history)")
			}
			// It waited for the cut follower to leave the ISR, and says so
			// in the history before the power loss.
			if !regexp.MustCompile(`(?s)"f":"condition"[^\n]*"held":"[^"]*cut is out of the ISR of isrlab/0.*"f":"start-power-loss"`).Match(hist) {
				t.Errorf("no condition op before the power loss")
			}
		})
	}
}

// TestRunNotSetUp: a fault whose condition cannot hold (an ISR of 3 on a
// partition of one replica) ends the run when its wait runs out, as not
// set up: never met, whatever the history shows, and the run cleans up.
func TestRunNotSetUp(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Parse("s.yaml", "not-set-up", []byte(fmt.Sprintf(small, "60s")+`faults:
  - kind: pause
    nodes: [leader:isrlab/0]
    at: 2s
    when: {partition: isrlab/0, isr-size: 3, within: 3s}
    heal.after: 2s
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if res.Judgement.Outcome != lab.NotSetUp || len(res.Judgement.Reasons) == 0 ||
		!strings.Contains(res.Judgement.Reasons[0], "could not set up: pause: the ISR of isrlab/0 has 3 members did not hold within 3s (last seen: leader 1, ISR [1])") {
		t.Errorf("outcome %v %q\n%s", res.Judgement.Outcome, res.Judgement.Reasons, out.String())
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the run went on for %v after its story could not happen", took)
	}
	hist, _ := os.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
	if !strings.Contains(string(hist), `"f":"not-set-up"`) || strings.Contains(string(hist), `"f":"start-pause"`) {
		t.Errorf("the history should hold the not-set-up op and no pause")
	}
	outcome, _ := os.ReadFile(filepath.Join(res.Dir, "outcome.json"))
	if !strings.Contains(string(outcome), `"outcome": "not set up"`) {
		t.Errorf("outcome.json: %s", outcome)
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestRunFaultFails: a run whose fault could not be injected (its target
// names no node: the follower of a partition with one replica) is not set up,
// never met, though the history it recorded is valid.
func TestRunFaultFails(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Parse("s.yaml", "fault-fails", []byte(fmt.Sprintf(small, "5s")+`faults:
  - kind: pause
    nodes: [follower:isrlab/0]
    at: 1s
    heal.after: 1s
expect: {valid: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, out := runLogged(t, bin, sc)
	if res.Verdict.Valid != checker.Valid {
		t.Fatalf("verdict %v, want valid (nothing happened)\n%s", res.Verdict.Valid, out)
	}
	if res.Judgement.Outcome != lab.NotSetUp || len(res.Judgement.Reasons) < 2 ||
		!strings.Contains(res.Judgement.Reasons[1], "pause follower:isrlab/0") || !strings.Contains(res.Judgement.Reasons[1], "FAILED") {
		t.Errorf("outcome %v %q, want not set up naming the failed pause\n%s", res.Judgement.Outcome, res.Judgement.Reasons, out)
	}
}

// TestRunWorkloadDies: a run whose client driver dies (an exec driver that
// exits at once) ends there, checks what was recorded and is undecided,
// never met: its expectation was not put to the test. What the driver
// said on its way out is in the run's nodes/client1/driver.log.
func TestRunWorkloadDies(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Parse("dies.yaml", "dies", []byte(`
duration: 60s
cluster: {coordinators: 1, brokers: 3}
topic: {partitions: 1}
workload:
  client: exec
  exec: [/bin/sh, -c, "echo the driver gives up >&2; exit 1"]
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out})
	t.Log(out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Judgement.Outcome != lab.Undecided || len(res.Judgement.Reasons) == 0 ||
		!strings.Contains(res.Judgement.Reasons[0], "the workload stopped before the end") {
		t.Errorf("outcome %v %q, want undecided: the workload stopped", res.Judgement.Outcome, res.Judgement.Reasons)
	}
	if res.Timing == nil || res.Timing.Workload >= sc.Duration.Seconds() || !strings.Contains(out.String(), "ending the run: the workload stopped") {
		t.Errorf("the run did not end when its workload did: %+v", res.Timing)
	}
	if b, err := os.ReadFile(filepath.Join(res.Dir, "nodes", "client1", lab.DriverLogFile)); err != nil || string(b) != "the driver gives up\n" {
		t.Errorf("the driver's log: %q, %v; want its stderr", b, err)
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestRunUnservedGroupProtocol: a queue workload that asks for the
// consumer group protocol on a cluster that does not serve it (the 3.7
// profile's default) is not set up, before any history: franz-go would
// otherwise run the classic protocol without a word.
func TestRunUnservedGroupProtocol(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc, err := lab.Parse("unserved.yaml", "unserved", []byte(`
duration: 5s
cluster: {coordinators: 1, brokers: 1}
topic: {partitions: 1, replication.factor: 1}
workload:
  type: queue
  client.config: {group.protocol: consumer}
expect: {valid: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, out := runLogged(t, bin, sc)
	if res.Judgement.Outcome != lab.NotSetUp || len(res.Judgement.Reasons) != 1 || !strings.Contains(res.Judgement.Reasons[0], "does not serve the consumer group protocol") {
		t.Fatalf("outcome %v %q, want not set up: the protocol is not served\n%s", res.Judgement.Outcome, res.Judgement.Reasons, out)
	}
}
