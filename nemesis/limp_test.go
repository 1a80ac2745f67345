package nemesis

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// opNames lists a history's ops as "type f".
func opNames(mem *history.Memory) []string {
	var out []string
	for _, op := range mem.Ops {
		out = append(out, op.Type.String()+" "+op.F)
	}
	return out
}

// labClock reads node's clock skew from its /v1/clock, from inside the
// node's own namespace (so that a partition does not stop the read).
func (l *lab) labClock(t testing.TB, node string) int64 {
	t.Helper()
	n := l.c.Node(node)
	dial := compose.NetNSDialer(n.NetNS)
	c := clusterapi.Client{Base: clusterapi.BaseURL(n.Addr.String(), compose.MetricsPort), HTTP: &http.Client{
		Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) }}}}
	k, err := c.Clock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return k.OffsetMs
}

// TestClockFaults: bumps add to a node's skew and their heal restores the
// true clock; a strobe switches the clock between 0 and its offset, goes
// on while its node is cut off by a partition, and its heal stops the
// strober and restores the true clock. Every step is in the history.
func TestClockFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	mem := &history.Memory{}
	n.Recorder = history.NewRecorder(mem, func() time.Duration { return 0 })

	a, err := n.Inject(ctx, &ClockBump{procNodes: procNodes{Nodes: []string{"b1"}}, Offset: units.Duration(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Inject(ctx, &ClockBump{procNodes: procNodes{Nodes: []string{"b1"}}, Offset: units.Duration(-10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.labClock(t, "b1"); got != 20000 {
		t.Fatalf("b1's skew after bumps of 30s and -10s: %d ms", got)
	}
	if err := n.Heal(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got := l.labClock(t, "b1"); got != 0 {
		t.Fatalf("b1's skew after a bump's heal: %d ms, want the true clock", got)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Fault.Run.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}

	s, err := n.Inject(ctx, &ClockStrobe{procNodes: procNodes{Nodes: []string{"b2", "b3"}},
		Offset: units.Duration(200 * time.Millisecond), Period: units.Duration(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	strobe := s.Fault.Run.(*clockStrobeRun)
	if ps := delayers(l.c.SwitchNS); !slices.Equal(ps, []int{strobe.StroberPID}) {
		t.Fatalf("processes in the switch namespace: %v, want the strober %d", ps, strobe.StroberPID)
	}
	seesBoth := func(node string) func() error {
		seen := map[int64]bool{}
		return func() error {
			seen[l.labClock(t, node)] = true
			if len(seen) > 2 || !seen[0] || !seen[200] {
				return fmt.Errorf("%s's skews seen: %v, want 0 and 200", node, seen)
			}
			return nil
		}
	}
	proctest.Eventually(t, 20*time.Second, "b2 strobes", seesBoth("b2"))
	proctest.Eventually(t, 20*time.Second, "b3 strobes", seesBoth("b3"))
	cut, err := n.Inject(ctx, &Partition{Topology: TopoIsolate, Targets: []string{"b2"}})
	if err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "b2 strobes while cut off", seesBoth("b2"))
	if err := n.Heal(ctx, cut.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.Heal(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if ps := delayers(l.c.SwitchNS); len(ps) > 0 {
		t.Fatalf("strober left after the heal: %v", ps)
	}
	for _, node := range []string{"b2", "b3"} {
		if got := l.labClock(t, node); got != 0 {
			t.Fatalf("%s's skew after the strobe's heal: %d ms", node, got)
		}
	}
	if err := strobe.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}

	fs := opNames(mem)
	want := []string{"invoke start-clock-bump", "ok start-clock-bump", "invoke start-clock-bump", "ok start-clock-bump",
		"invoke stop-clock-bump", "ok stop-clock-bump", "invoke stop-clock-bump", "ok stop-clock-bump",
		"invoke start-clock-strobe", "ok start-clock-strobe", "invoke start-partition", "ok start-partition",
		"invoke stop-partition", "ok stop-partition", "invoke stop-clock-strobe", "ok stop-clock-strobe"}
	if !slices.Equal(fs, want) {
		t.Fatalf("history: %v\nwant %v", fs, want)
	}
	var v struct {
		Resolved []string `json:"resolved"`
		Offset   string   `json:"offset"`
	}
	if err := json.Unmarshal(mem.Ops[9].RawValue, &v); err != nil || !slices.Equal(v.Resolved, []string{"b2", "b3"}) || v.Offset != "200ms" {
		t.Fatalf("the strobe's start records %s (%v)", mem.Ops[9].RawValue, err)
	}
}

// requireCgroup skips unless this machine offers controller in a cgroup
// hierarchy (the fact the fault's ErrUnsupported would report).
func requireCgroup(t *testing.T, controller string) hierarchy {
	t.Helper()
	h, err := findHierarchy(controller)
	if err != nil {
		t.Skipf("the %s faults cannot run here: %v", controller, err)
	}
	return h
}

// cgroupStat reads key's value from a cgroup's flat-keyed file.
func cgroupStat(t *testing.T, dir, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	t.Fatalf("%s has no %s: %q", file, key, b)
	return 0
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// inCgroup reports whether pid's cgroup in h is dir.
func inCgroup(h hierarchy, pid int, dir string) bool {
	got, err := h.cgroupOf(pid)
	return err == nil && got == dir
}

// TestCPUThrottle: a throttled node's process runs in the fault's cgroup
// with the quota set, a busy loop in it is throttled by the kernel, and
// the heal moves it back and removes the cgroup.
func TestCPUThrottle(t *testing.T) {
	requireLab(t)
	h := requireCgroup(t, "cpu")
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	pid := l.c.Node("b1").PID()
	a, err := n.Inject(ctx, &CPUThrottle{procNodes: procNodes{Nodes: []string{"b1"}}, CPU: 10})
	if err != nil {
		t.Fatal(err)
	}
	f := a.Fault.Run.(*cpuThrottleRun)
	if len(f.Cgroups) != 1 || f.Cgroups[0].Version != h.version() {
		t.Fatalf("cgroups %+v, want one of v%d", f.Cgroups, h.version())
	}
	cg := f.Cgroups[0]
	if want := cgroupName(l.c.RunID, a.ID, "b1"); filepath.Base(cg.Path) != want || !inCgroup(h, pid, cg.Path) {
		t.Fatalf("b1 (%d) is not in %s (cgroup %s)", pid, want, cg.Path)
	}
	if h.v2 {
		if got := readTrim(t, filepath.Join(cg.Path, "cpu.max")); got != "10000 100000" {
			t.Fatalf("cpu.max %q", got)
		}
	} else if got := readTrim(t, filepath.Join(cg.Path, "cpu.cfs_quota_us")); got != "10000" {
		t.Fatalf("cpu.cfs_quota_us %q", got)
	}
	// Keep b1 busy: the kernel throttles it.
	conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr("b1", workPort))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "spin\n") //nolint:errcheck
	proctest.Eventually(t, 20*time.Second, "b1 throttled", func() error {
		if v := cgroupStat(t, cg.Path, "cpu.stat", "nr_throttled"); v == 0 {
			return errors.New("nr_throttled 0")
		}
		return nil
	})
	conn.Close()
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %s after the heal: %v", cg.Path, err)
	}
	if !inCgroup(h, pid, cg.From) {
		t.Fatalf("b1 is not back in %s", cg.From)
	}
	if err := f.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}
	if err := l.echoFrom("client1", "b1", 5*time.Second); err != nil {
		t.Fatalf("b1 after the heal: %v", err)
	}
}

// TestMemoryPressure: a node under memory pressure runs in the fault's
// cgroup with the limit set; the page cache it fills beyond the limit is
// reclaimed (the kernel counts hitting the limit) and the node lives on;
// the heal moves it back and removes the cgroup.
func TestMemoryPressure(t *testing.T) {
	requireLab(t)
	h := requireCgroup(t, "memory")
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	pid := l.c.Node("b2").PID()
	const limit = 16 << 20
	a, err := n.Inject(ctx, &MemoryPressure{procNodes: procNodes{Nodes: []string{"b2"}}, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	f := a.Fault.Run.(*memoryPressureRun)
	cg := f.Cgroups[0]
	if !inCgroup(h, pid, cg.Path) {
		t.Fatalf("b2 (%d) is not in %s", pid, cg.Path)
	}
	file := "memory.limit_in_bytes"
	if h.v2 {
		file = "memory.high"
	}
	if got := readTrim(t, filepath.Join(cg.Path, file)); got != strconv.Itoa(limit) {
		t.Fatalf("%s %q, want %d", file, got, limit)
	}
	// 64 MiB through the page cache, four times the limit.
	conn, err := compose.NetNSDialer(l.c.Node("client1").NetNS)(ctx, "tcp", l.addr("b2", workPort))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	io.WriteString(conn, "cache 64\n") //nolint:errcheck
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || line != "ok\n" {
		t.Fatalf("cache 64 MiB under a 16 MiB limit: %q %v", line, err)
	}
	if h.v2 {
		if v := cgroupStat(t, cg.Path, "memory.events", "high"); v == 0 {
			t.Fatal("memory.events: the limit was never reached")
		}
	} else if got := readTrim(t, filepath.Join(cg.Path, "memory.failcnt")); got == "0" {
		t.Fatal("memory.failcnt 0: the limit was never reached")
	}
	if err := l.echoFrom("client1", "b2", 5*time.Second); err != nil {
		t.Fatalf("b2 under memory pressure: %v", err)
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.Path); !errors.Is(err, os.ErrNotExist) || !inCgroup(h, pid, cg.From) {
		t.Fatalf("after the heal: cgroup %s (%v), b2 back in %s = %v", cg.Path, err, cg.From, inCgroup(h, pid, cg.From))
	}
	if err := f.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}
}

// ownerMain owns a lab under dir and injects the faults of dir/faults.in
// (one JSON spec a line), prints "ready" and waits to be killed: a run
// SIGKILLed with its faults in.
func ownerMain(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := upLab(ctx, dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	b, err := os.ReadFile(filepath.Join(dir, "faults.in"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	n := &Nemesis{Env: &Env{Cluster: c, DelayerCommand: testDelayer}, Store: &Store{Path: FaultsFile(filepath.Join(dir, "state"), c.Name)}}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f, err := ParseUserSpec([]byte(line))
		if err == nil {
			_, err = n.Inject(ctx, f)
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("ready")
	select {}
}

// TestFaultsCleanedAfterOwnerKilled: a run SIGKILLed with a clock strobe,
// a CPU throttle, memory pressure and packet faults in leaves their
// strober, cgroups and packet delayer behind; `isrlab clean` removes them
// with the run.
func TestFaultsCleanedAfterOwnerKilled(t *testing.T) {
	requireLab(t)
	requireCgroup(t, "cpu")
	requireCgroup(t, "memory")
	bin := proctest.Binary(t)
	d := t.TempDir()
	specs := []string{
		`{"kind":"clock-strobe","nodes":["b1"],"offset":"1s","period":"50ms"}`,
		`{"kind":"cpu-throttle","nodes":["b2"],"cpu":"20%"}`,
		`{"kind":"memory-pressure","nodes":["b3"],"limit":"64MiB"}`,
		`{"kind":"packet","nodes":["b1"],"duplicate":"10%","reorder":"10%","corrupt":"1%"}`,
	}
	if err := os.WriteFile(filepath.Join(d, "faults.in"), []byte(strings.Join(specs, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	owner := exec.Command(exe, "-test.run=^$")
	owner.Env = append(os.Environ(), envOwner+"="+d)
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(d, "state")
	clean := func() string {
		cmd := exec.Command(bin, "clean")
		cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+stateDir)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("isrlab clean: %v\n%s", err, b)
		}
		return string(b)
	}
	t.Cleanup(func() {
		owner.Process.Kill() //nolint:errcheck
		owner.Wait()         //nolint:errcheck
		clean()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("owner: %q %v", line, err)
	}
	as, err := (&Store{Path: FaultsFile(stateDir, "nem")}).List()
	if err != nil || len(as) != len(specs) {
		t.Fatalf("stored faults: %+v %v", as, err)
	}
	strober := as[0].Fault.Run.(*clockStrobeRun)
	packet := as[3].Fault.Run.(*packetRun)
	var cgroups []string
	for _, a := range as[1:3] {
		var v struct {
			Cgroups []Cgroup `json:"cgroups"`
		}
		b, _ := json.Marshal(a.Fault)
		json.Unmarshal(b, &v) //nolint:errcheck
		for _, cg := range v.Cgroups {
			cgroups = append(cgroups, cg.Path)
		}
	}
	if len(cgroups) != 2 {
		t.Fatalf("cgroups of the faults: %v", cgroups)
	}
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	owner.Wait() //nolint:errcheck
	// What the dead run left: the strober and both cgroups.
	if !compose.Alive(strober.StroberPID, strober.StroberStart) || !compose.Alive(packet.DelayerPID, packet.DelayerStart) {
		t.Fatal("the strober or the packet delayer died with its owner: the test would not notice a broken clean")
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); err != nil {
			t.Fatalf("cgroup %s of the dead run: %v", cg, err)
		}
	}
	got := clean()
	if compose.Alive(strober.StroberPID, strober.StroberStart) {
		t.Errorf("strober %d alive after isrlab clean", strober.StroberPID)
	}
	if compose.Alive(packet.DelayerPID, packet.DelayerStart) {
		t.Errorf("packet delayer %d alive after isrlab clean", packet.DelayerPID)
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s after isrlab clean: %v", cg, err)
		}
		if !strings.Contains(got, "removed leftover cgroup "+cg) {
			t.Errorf("isrlab clean did not report cgroup %s:\n%s", cg, got)
		}
	}
}
