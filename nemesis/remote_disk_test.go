package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// diskHost is a remote node's host that runs its commands here (the
// control command is the real isrlab binary) and logs them in order,
// with the kills of its process.
type diskHost struct {
	localHost
	ctl []string
	mu  sync.Mutex
	log []string
}

func (d *diskHost) Command(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	d.note("run " + strings.Join(argv, " ") + " <- " + strings.TrimSpace(string(stdin)))
	return d.localHost.Command(ctx, argv, stdin)
}

func (d *diskHost) FaultfsCtl() []string { return d.ctl }

func (d *diskHost) note(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, s)
}

func (d *diskHost) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// remoteProc is the broker process of a diskHost.
type remoteProc struct {
	h       *diskHost
	running bool
}

func (p *remoteProc) PID() int      { return 0 }
func (p *remoteProc) Running() bool { return p.running }
func (p *remoteProc) Start(ctx context.Context) error {
	p.running = true
	p.h.note("start")
	return nil
}
func (p *remoteProc) Stop(ctx context.Context) error { p.running = false; return nil }
func (p *remoteProc) Kill() error {
	if p.running {
		p.h.note("kill")
	}
	p.running = false
	return nil
}
func (p *remoteProc) Pause() error  { return nil }
func (p *remoteProc) Resume() error { return nil }

// TestRemoteDiskFaults: on a remote node, the disk faults reach the
// faultfs daemon behind its data dir only through the host's control
// command (argument list fixed, the request on standard input): a slow
// disk and EIO go in and are healed, a power loss kills the process first
// and then crashes the disk (the unsynced write is gone), its heal starts
// the process, and CleanRemote heals what a fault left.
func TestRemoteDiskFaults(t *testing.T) {
	mnt, sock := mountFaultfs(t)
	bin := proctest.Binary(t)
	h := &diskHost{localHost: localHost{path: os.Getenv("PATH")}, ctl: []string{bin, "faultfs", "ctl", "--control", sock, "-"}}
	proc := &remoteProc{h: h, running: true}
	run := "rd" + strings.ReplaceAll(t.Name(), "/", "")[:6]
	n := &compose.Node{NodeSpec: compose.NodeSpec{Name: "b1", Role: compose.RoleBroker, DataDir: mnt,
		Disk: &compose.DiskSpec{Mount: mnt, Control: sock}}, Remote: h, Proc: proc}
	c := compose.NewCluster(compose.Topology{Name: "x", RunID: strings.ToLower(run), Nodes: []compose.NodeSpec{n.NodeSpec}}, "ssh", []*compose.Node{n}, nil)
	env := &Env{Cluster: c, Disks: c.Disks()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	local := faultfs.NewClient(sock) // the test's own view of the daemon
	faults := func() []faultfs.Fault {
		t.Helper()
		st, err := local.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Faults
	}
	// Each request went through the control command, with its JSON.
	sent := func(cmd string) {
		t.Helper()
		want := "run " + strings.Join(h.ctl, " ") + " <- "
		for _, l := range h.calls() {
			if rest, ok := strings.CutPrefix(l, want); ok {
				var req faultfs.Request
				if json.Unmarshal([]byte(rest), &req) == nil && req.Cmd == cmd {
					return
				}
			}
		}
		t.Errorf("no %s request through the host's control command in %q", cmd, h.calls())
	}

	slow := (&SlowDisk{Latency: units.Duration(20 * time.Millisecond)}).NewRun().(*slowDiskRun)
	slow.Nodes, slow.Op = []string{"b1"}, faultfs.OpFsync
	if err := slow.Resolve(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := slow.Inject(ctx, env); err != nil {
		t.Fatal(err)
	}
	if f := faults(); len(f) != 1 || f[0].Kind != faultfs.CmdLatency || f[0].Op != faultfs.OpFsync {
		t.Fatalf("faults after slow-disk: %+v", f)
	}
	sent(faultfs.CmdLatency)
	if err := slow.Heal(ctx, env); err != nil {
		t.Fatal(err)
	}
	if f := faults(); len(f) != 0 {
		t.Fatalf("faults after heal: %+v", f)
	}
	sent(faultfs.CmdHeal)

	// A refusal comes back as the daemon's error, not as a failed command.
	bad, err := diskClient(env, "b1", sock)
	if err != nil {
		t.Fatal(err)
	}
	var re *faultfs.RemoteError
	if _, err := bad.Do(ctx, faultfs.Request{Cmd: faultfs.CmdLatency, Op: "nonsense", Latency: units.Duration(time.Millisecond)}); !errors.As(err, &re) {
		t.Errorf("a refused request: %v, want a RemoteError", err)
	}

	// Power loss: the unsynced write is forgotten, after the kill.
	synced, unsynced := filepath.Join(mnt, "synced"), filepath.Join(mnt, "unsynced")
	f, err := os.Create(synced)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("kept")
	f.Sync()
	f.Close()
	d, _ := os.Open(mnt)
	d.Sync()
	d.Close()
	if err := os.WriteFile(unsynced, []byte("lost"), 0o644); err != nil {
		t.Fatal(err)
	}
	pl := (&PowerLoss{procNodes: procNodes{Nodes: []string{"b1"}}}).NewRun().(*powerLossRun)
	if err := pl.Resolve(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pl.Inject(ctx, env); err != nil {
		t.Fatal(err)
	}
	if r := pl.Reports["b1"]; r.Files == 0 || len(pl.NoDisk) != 0 {
		t.Errorf("power loss report %+v, no disk %v", r, pl.NoDisk)
	}
	if _, err := os.Stat(unsynced); !os.IsNotExist(err) {
		t.Errorf("the unsynced file survived the power loss: %v", err)
	}
	if b, err := os.ReadFile(synced); string(b) != "kept" {
		t.Errorf("the synced file: %q, %v", b, err)
	}
	calls := h.calls()
	kill := slices.Index(calls, "kill")
	crash := slices.IndexFunc(calls, func(l string) bool { return strings.Contains(l, `"cmd":"crash"`) })
	if kill < 0 || crash < 0 || kill > crash {
		t.Errorf("the process must die before its disk crashes: %q", calls)
	}
	if err := pl.Heal(ctx, env); err != nil || !proc.running {
		t.Errorf("heal of the power loss: running %v, %v", proc.running, err)
	}

	// A fault whose heal never ran: CleanRemote heals the disk.
	eio := (&DiskError{Probability: 0.5}).NewRun().(*diskErrorRun)
	eio.Nodes, eio.Op = []string{"b1"}, faultfs.OpWrite
	if err := eio.Resolve(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := eio.Inject(ctx, env); err != nil {
		t.Fatal(err)
	}
	if len(faults()) != 1 {
		t.Fatal("disk-error not injected")
	}
	if err := CleanRemote(ctx, c); err != nil {
		t.Fatal(err)
	}
	if f := faults(); len(f) != 0 {
		t.Errorf("faults after CleanRemote: %+v", f)
	}

	// A remote host that cannot reach its daemon is an unsupported fault.
	h.ctl = nil
	if err := slow.Inject(ctx, env); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no control command: %v", err)
	}
}
