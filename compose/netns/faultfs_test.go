package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/units"
)

// requireFUSE skips unless this process may create network namespaces and
// mount faultfs.
func requireFUSE(t *testing.T) {
	t.Helper()
	requireNetns(t)
	if err := compose.CheckFUSE(); err != nil {
		t.Skipf("needs /dev/fuse for faultfs disks; CI has it: %v", err)
	}
}

// TestFaultFSCluster runs 3 brokers of the real isrlab binary on faultfs
// disks: a slow disk slows acks=all produces down until healed, a power loss
// of a broker forgets what it had not fsynced while its disk daemon lives
// on, and the teardown leaves no mount and no daemon, only the backing data.
func TestFaultFSCluster(t *testing.T) {
	requireFUSE(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	l := newLab(t)
	top, err := compose.Build(compose.Options{
		Name: "ffs", RunDir: l.runDir, Binary: bin, NoDefaults: true,
		Coordinators: 1, Brokers: 3, Clients: 1, FaultFS: []string{"all"},
		BrokerConfig: []compose.KV{{Key: "coordinator.session.timeout.ms", Value: "3000"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	b := l.backend()
	b.ReadyTimeout, b.KeepData = 30*time.Second, true
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })

	disks := c.Disks()
	if len(disks) != 3 {
		t.Fatalf("Disks() = %v, want b1..b3", disks)
	}
	st, err := compose.ReadState(l.stateDir, "ffs")
	if err != nil {
		t.Fatal(err)
	}
	daemons := map[string]int{}
	for _, n := range c.Of(compose.RoleBroker) {
		if got := st.Topology.Disks()[n.Name]; got != disks[n.Name] {
			t.Errorf("state records %s's socket as %q, the cluster as %q", n.Name, got, disks[n.Name])
		}
		ns := st.Node(n.Name)
		if !compose.Alive(ns.DiskPID, ns.DiskPIDStart) {
			t.Fatalf("%s: faultfs daemon %d not running", n.Name, ns.DiskPID)
		}
		daemons[n.Name] = ns.DiskPID
		// The broker, in its own network namespace, shares our mount
		// namespace, where the mounts are.
		if got, want := nsLink(t, n.PID(), "mnt"), nsLink(t, os.Getpid(), "mnt"); got != want {
			t.Errorf("%s runs in mount namespace %s, the faultfs mounts are in %s", n.Name, got, want)
		}
	}
	if got := runMounts(t, c.RunID); !slices.Equal(got, []string{top.Nodes[1].DataDir, top.Nodes[2].DataDir, top.Nodes[3].DataDir}) {
		t.Fatalf("faultfs mounts of the run: %v, want the brokers' data dirs", got)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(c.Dial()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if r, err := adm.CreateTopic(ctx, 1, 3, nil, "slow"); err != nil || r.Err != nil {
		t.Fatalf("create topic: %v %v", err, r.Err)
	}
	proctest.Eventually(t, 30*time.Second, "a first acks=all produce", func() error {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		defer pcancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: "slow", Value: []byte("warm-up")}).FirstErr()
	})

	// Slow disk: every write of every broker waits lat, so an acks=all
	// produce (leader and followers write) takes at least that long.
	const lat = 100 * time.Millisecond
	before := produceTimes(ctx, t, cl, "slow", 10)
	n := &nemesis.Nemesis{Env: &nemesis.Env{Cluster: c, Resolver: &nemesis.LiveResolver{Cluster: c}, Disks: disks}}
	slow := &nemesis.SlowDisk{Latency: units.Duration(lat)}
	slow.Nodes, slow.Op = []string{"brokers"}, faultfs.OpWrite
	a, err := n.Inject(ctx, slow)
	if err != nil {
		t.Fatal(err)
	}
	during := produceTimes(ctx, t, cl, "slow", 5)
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	after := produceTimes(ctx, t, cl, "slow", 10)
	t.Logf("produce latency: median %v before, min %v under a %v write latency, median %v after the heal",
		median(before), slices.Min(during), lat, median(after))
	if median(before) >= lat || median(after) >= lat {
		t.Fatalf("produces take %v before and %v after the fault: too slow to tell a %v disk latency", median(before), median(after), lat)
	}
	if slices.Min(during) < lat {
		t.Fatalf("a produce took %v under a %v write latency on every broker", slices.Min(during), lat)
	}
	for node, sock := range disks {
		s, err := faultfs.NewClient(sock).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Faults) != 0 || s.Counters[faultfs.OpWrite].Delayed == 0 {
			t.Errorf("%s after the heal: faults %v, %d writes delayed", node, s.Faults, s.Counters[faultfs.OpWrite].Delayed)
		}
	}

	// Power loss: a one-replica partition's leader acknowledged records
	// that live only in the page cache (log.flush.interval.messages is
	// unset), and loses them.
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "lossy"); err != nil || r.Err != nil {
		t.Fatalf("create topic: %v %v", err, r.Err)
	}
	const records = 20
	proctest.Eventually(t, 30*time.Second, "a first produce to lossy", func() error {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		defer pcancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: "lossy", Value: []byte("r0")}).FirstErr()
	})
	for i := 1; i < records; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "lossy", Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	if end := endOffset(ctx, t, adm, "lossy"); end != records {
		t.Fatalf("lossy ends at %d after %d acknowledged records", end, records)
	}
	pl := &nemesis.PowerLoss{}
	pl.Nodes = []string{"leader:lossy/0"}
	a, err = n.Inject(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	// What the power loss did is in its record (its run's fields).
	var fired struct {
		Resolved []string                       `json:"resolved"`
		Reports  map[string]faultfs.CrashReport `json:"reports"`
		NoDisk   []string                       `json:"no_disk"`
	}
	if b, err := json.Marshal(a.Fault); err != nil || json.Unmarshal(b, &fired) != nil || len(fired.Resolved) != 1 {
		t.Fatalf("power loss record %s: %v", b, err)
	}
	victim := fired.Resolved[0]
	if rep := fired.Reports[victim]; rep.BytesLost == 0 || len(fired.NoDisk) != 0 {
		t.Fatalf("power loss of %s: crash report %+v, nodes without a disk %v", victim, rep, fired.NoDisk)
	}
	oldPID := c.Node(victim).PID()
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if pid := c.Node(victim).PID(); pid == oldPID || !c.Node(victim).Proc.Running() {
		t.Fatalf("%s not restarted: pid %d, was %d", victim, pid, oldPID)
	}
	var end int64
	proctest.Eventually(t, 40*time.Second, "lossy led again after "+victim+" restarted", func() error {
		var err error
		end, err = tryEndOffset(ctx, adm, "lossy")
		return err
	})
	t.Logf("%s lost %d bytes; lossy ends at %d after the restart", victim, fired.Reports[victim].BytesLost, end)
	if end >= records {
		t.Fatalf("lossy ends at %d after a power loss of its only replica: the unsynced records survived", end)
	}
	st, err = compose.ReadState(l.stateDir, "ffs")
	if err != nil {
		t.Fatal(err)
	}
	for node, pid := range daemons {
		if ns := st.Node(node); ns.DiskPID != pid || !compose.Alive(pid, ns.DiskPIDStart) {
			t.Fatalf("%s's faultfs daemon changed or died across the power loss: %d, was %d", node, ns.DiskPID, pid)
		}
	}

	// Teardown: brokers first, then the daemons; the mounts go, the
	// backing data stays (KeepData).
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if got := runMounts(t, c.RunID); len(got) > 0 {
		t.Errorf("faultfs mounts left after Down: %v", got)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || bytes.Contains(mi, []byte(faultfs.FSNamePrefix+c.RunID)) {
		t.Errorf("mountinfo still names run %s (%v)", c.RunID, err)
	}
	if ps := faultfsProcs(t, c.RunID); len(ps) > 0 {
		t.Errorf("faultfs daemons left after Down: %v", ps)
	}
	for _, bn := range top.Role(compose.RoleBroker) {
		if _, err := os.Stat(bn.Disk.Control); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s's control socket left: %v", bn.Name, err)
		}
		if ents, err := os.ReadDir(bn.DataDir); err != nil || len(ents) > 0 {
			t.Errorf("%s's mount point after Down: %d entries, %v; want an empty directory", bn.Name, len(ents), err)
		}
		if _, err := os.Stat(filepath.Join(bn.Disk.Backing, "slow-0")); err != nil {
			t.Errorf("%s's backing data: %v", bn.Name, err)
		}
	}
	if left := l.leftovers(c.RunID, nil); len(left) != 1 || !strings.HasPrefix(left[0], "run dir") {
		t.Errorf("leftovers besides the kept run dir: %v", left)
	}
}

// TestFaultFSTeardownPaths checks that a run whose Up fails, and one whose
// owner is interrupted (Ctrl-C in compose.Run), leave no faultfs mount or
// daemon behind. The nodes run sleep or false, not isrlab.
func TestFaultFSTeardownPaths(t *testing.T) {
	requireFUSE(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	for _, tt := range []struct {
		name      string
		brokerCmd []string
	}{
		{"up fails", []string{"false"}},
		{"interrupted", []string{"sleep", "600"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t)
			top, err := compose.Build(compose.Options{Name: "ffsdown", RunDir: l.runDir, Binary: bin, NoDefaults: true,
				Coordinators: 1, Brokers: 2, Clients: 1, FaultFS: []string{"b2"}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range top.Nodes {
				nd := &top.Nodes[i]
				if nd.Role == compose.RoleClient {
					continue
				}
				nd.Argv, nd.Probe, nd.Files = []string{"sleep", "600"}, compose.ProbeNone, nil
				if nd.Role == compose.RoleBroker {
					nd.Argv = tt.brokerCmd
					if tt.brokerCmd[0] == "false" {
						// Ready fails once the process is seen gone.
						nd.Probe, nd.Port = compose.ProbeTCP, 9
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// The caller turns SIGINT into a cancelled ctx, as the isrlab
			// commands do; Run tears down on it.
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT)
			defer stop()
			var sawMount bool
			err = compose.Run(ctx, l.backend(), top, func(ctx context.Context, c *compose.Cluster) error {
				sawMount = slices.Equal(runMounts(t, c.RunID), []string{top.Nodes[2].DataDir})
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				<-ctx.Done()
				return ctx.Err()
			})
			switch tt.name {
			case "up fails":
				if err == nil || !strings.Contains(err.Error(), "process exited") {
					t.Fatalf("Run: %v, want the broker's exit", err)
				}
			case "interrupted":
				if !errors.Is(err, context.Canceled) || !sawMount {
					t.Fatalf("Run: %v (mount seen: %v), want context.Canceled after seeing b2's mount", err, sawMount)
				}
			}
			if got := runMounts(t, top.RunID); len(got) > 0 {
				t.Errorf("faultfs mounts left: %v", got)
			}
			if ps := faultfsProcs(t, top.RunID); len(ps) > 0 {
				t.Errorf("faultfs daemons left: %v", ps)
			}
			if left := l.leftovers(top.RunID, nil); len(left) > 0 {
				t.Errorf("leftovers: %v", left)
			}
		})
	}
}

// runMounts lists the mount points of run's faultfs mounts, in order.
func runMounts(t *testing.T, run string) []string {
	t.Helper()
	ms, err := faultfs.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if m.RunID == run {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// faultfsProcs lists the pids of faultfs daemons tagged with run.
func faultfsProcs(t *testing.T, run string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "--run-id"); slices.Contains(args, "faultfs") && i >= 0 && i+1 < len(args) && args[i+1] == run {
			out = append(out, pid)
		}
	}
	return out
}

func nsLink(t *testing.T, pid int, kind string) string {
	t.Helper()
	s, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// produceTimes produces n records one at a time and returns how long each
// took to be acknowledged.
func produceTimes(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range n {
		begin := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		out = append(out, time.Since(begin))
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func endOffset(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	end, err := tryEndOffset(ctx, adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// tryEndOffset returns the log end offset of topic's partition 0.
func tryEndOffset(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	offs, err := adm.ListEndOffsets(lctx, topic)
	if err != nil {
		return 0, err
	}
	o, ok := offs.Lookup(topic, 0)
	if !ok {
		return 0, fmt.Errorf("no offset for %s/0", topic)
	}
	return o.Offset, o.Err
}
