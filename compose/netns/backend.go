package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/compose"
)

// Name is the backend's name in state files and on the command line.
const Name = compose.Netns

// ErrRunning is compose.ErrRunning: a live cluster already has the requested name.
var ErrRunning = compose.ErrRunning

// DefaultNSDir is where root binds namespaces, as `ip netns` does.
const DefaultNSDir = "/run/netns"

// Backend brings clusters up in network namespaces. The zero value is usable.
type Backend struct {
	StateDir string        // default compose.StateDir()
	NSDir    string        // default DefaultNSDir, or StateDir/netns when rootless
	Grace    time.Duration // SIGTERM grace for Stop and Down; default 3s
	// ReadyTimeout bounds the wait for every probe; default 60s.
	ReadyTimeout time.Duration
	// Detach marks the run as living on after this process exits
	// (`isrlab cluster up`); otherwise the run dies with its owner.
	Detach   bool
	KeepData bool // leave RunDir in place on Down
	// KillOnDown makes Down SIGKILL the nodes even when their data stays:
	// a finished run needs no clean shutdown (brokers would spend the
	// grace period on controlled shutdowns to a controller going down
	// too). A broker restarted on the data recovers as after a crash.
	KillOnDown bool
	Log        *slog.Logger
}

var _ compose.Backend = (*Backend)(nil)

func (b *Backend) defaults() Backend {
	o := *b
	if o.StateDir == "" {
		o.StateDir = compose.StateDir()
	}
	if o.NSDir == "" {
		o.NSDir = DefaultNSDir
		if InUserNS() {
			o.NSDir = filepath.Join(o.StateDir, "netns")
		}
	}
	if o.Grace == 0 {
		o.Grace = 3 * time.Second
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// run is one cluster's resources, shared by Up, Attach and teardown.
type run struct {
	b     Backend
	mu    sync.Mutex // guards st and its file
	st    *compose.State
	procs map[string]*proc
}

func (r *run) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return compose.WriteState(r.b.StateDir, r.st)
}

func (r *run) nsPath(node string) string {
	return filepath.Join(r.st.NSDir, NSName(r.st.RunID, node))
}

// Up creates the switch and node namespaces, wires them, starts every node and
// waits until each answers its probe. On any error, panic or cancellation
// (SIGINT/SIGTERM reach it through ctx) it removes everything it created.
func (b *Backend) Up(ctx context.Context, t compose.Topology) (c *compose.Cluster, err error) {
	o := b.defaults()
	log := o.Log.With("run", t.RunID, "cluster", t.Name)
	if len(t.Disks()) > 0 {
		if err := compose.CheckFUSE(); err != nil {
			if InUserNS() {
				// /dev/fuse is usually root's alone; a user namespace's
				// root is the unprivileged user outside it.
				return nil, fmt.Errorf("cluster %s: rootless run (user namespace): %w; run as root for faultfs disks", t.Name, err)
			}
			return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
		}
	}
	unlock, err := compose.Lock(o.StateDir, t.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := compose.CheckExisting(o.StateDir, t.Name, Name, func(old *compose.State) error {
		log.Info("removing dead run", "old_run", old.RunID)
		return attach(o, old).teardown(ctx)
	}); err != nil {
		return nil, err
	}

	st := &compose.State{
		Name: t.Name, RunID: t.RunID, Backend: Name, Status: compose.StatusStarting,
		Created: time.Now().UTC(), NSDir: o.NSDir, KeepData: o.KeepData, KillOnDown: o.KillOnDown,
		Rootless: InUserNS(), Topology: t,
	}
	st.SetOwner()
	if st.Rootless {
		st.Holder, st.HolderStart = st.Owner, st.OwnerStart
	}
	r := &run{b: o, st: st, procs: map[string]*proc{}}
	// The state goes to disk before anything exists, so that `clean` can tie
	// every namespace and process of this run to a live or dead owner.
	if err := r.save(); err != nil {
		return nil, err
	}
	if err := compose.Register(t.RunID, compose.StatePath(o.StateDir, t.Name)); err != nil {
		log.Warn("register run", "err", err)
	}
	defer func() {
		p := recover()
		if err != nil || p != nil {
			// A fresh context: ctx may be the cancellation that got us here.
			tctx, cancel := context.WithTimeout(context.Background(), o.Grace+10*time.Second)
			if terr := r.teardown(tctx); terr != nil {
				log.Error("teardown after failed up", "err", terr)
			}
			cancel()
			c = nil
		}
		if p != nil {
			panic(p)
		}
	}()

	begin := time.Now()
	if err := r.create(); err != nil {
		return nil, err
	}
	log.Debug("network ready", "took", time.Since(begin))
	if sec := st.Topology.Security; sec != nil {
		if err := sec.Prepare(st.Topology, time.Now()); err != nil {
			return nil, fmt.Errorf("cluster %s: secured cluster: %w", t.Name, err)
		}
	}
	c = r.cluster()
	if err := r.startAll(ctx); err != nil {
		return nil, err
	}
	log.Debug("nodes started", "took", time.Since(begin))
	if err := r.save(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := compose.Ready(rctx, c, r.exited); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
	}
	log.Debug("nodes ready", "took", time.Since(begin))
	r.mu.Lock()
	r.st.Status = compose.StatusUp
	r.st.Detached = o.Detach
	if r.st.Rootless && o.Detach {
		// This process leaves; a node keeps the user and mount namespaces.
		r.st.Holder, r.st.HolderStart = 0, 0
		if h := Holder(r.st); h != 0 {
			r.st.Holder, r.st.HolderStart = h, r.st.Node(nodeWithPID(r.st, h)).PIDStart
		}
	}
	r.mu.Unlock()
	if err := r.save(); err != nil {
		return nil, err
	}
	log.Info("cluster up", "nodes", len(t.Nodes), "took", time.Since(begin))
	return c, nil
}

// create makes the run directory, the namespaces and the wiring.
func (r *run) create() error {
	st := r.st
	if err := os.MkdirAll(st.NSDir, 0o755); err != nil {
		return fmt.Errorf("netns dir: %w", err)
	}
	// Only /run/netns is `ip netns`'s (a directory of the run's own
	// would only be left a mount point).
	if st.NSDir == DefaultNSDir {
		if err := shareNSDir(st.NSDir); err != nil {
			return err
		}
	}
	for _, n := range st.Topology.Nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return fmt.Errorf("node dir %s: %w", n.Name, err)
		}
	}
	st.SwitchNS = r.nsPath(SwitchName)
	st.Bridge = BridgeName(st.RunID)
	if err := createNS(st.SwitchNS); err != nil {
		return err
	}
	var wn []wireNode
	for _, n := range st.Topology.Nodes {
		p := r.nsPath(n.Name)
		if err := createNS(p); err != nil {
			return err
		}
		st.Nodes = append(st.Nodes, compose.NodeState{Name: n.Name, NetNS: p, SwitchPort: PortName(n.Name), Iface: NodeIface})
		wn = append(wn, wireNode{name: n.Name, ns: p, addr: n.Addr})
	}
	if err := r.save(); err != nil {
		return err
	}
	return wire(st.SwitchNS, st.Bridge, st.Topology.Subnet, wn)
}

// cluster builds the handles; procs of nodes with a process are attached.
func (r *run) cluster() *compose.Cluster {
	st := r.st
	var nodes []*compose.Node
	for _, spec := range st.Topology.Nodes {
		ns := st.Node(spec.Name)
		n := &compose.Node{NodeSpec: spec}
		if ns != nil {
			n.NetNS, n.SwitchPort, n.Iface = ns.NetNS, ns.SwitchPort, ns.Iface
		}
		if len(spec.Argv) > 0 {
			p := &proc{spec: spec, netns: n.NetNS, grace: r.b.Grace}
			if ns != nil {
				p.pid, p.start = ns.PID, ns.PIDStart
			}
			p.started = func(pid int, start uint64) {
				r.mu.Lock()
				if ns := r.st.Node(spec.Name); ns != nil {
					ns.PID, ns.PIDStart = pid, start
				}
				r.mu.Unlock()
				if err := r.save(); err != nil {
					r.b.Log.Warn("record pid", "node", spec.Name, "err", err)
				}
			}
			r.procs[spec.Name] = p
			n.Proc = p
		}
		nodes = append(nodes, n)
	}
	c := compose.NewCluster(st.Topology, Name, nodes, r.teardown)
	c.SwitchNS, c.Bridge = st.SwitchNS, st.Bridge
	c.StateFile = compose.StatePath(r.b.StateDir, st.Name)
	return c
}

// startAll starts the faultfs disks, then the Kafka proxies (in their
// brokers' namespaces), then coordinators, then brokers:
// brokers need their disks mounted and the coordinators' addresses to
// answer, not the coordinators' readiness. Disk daemons run in this
// process's namespaces: the host's mount namespace, which node processes
// share (only their network namespace is their own).
func (r *run) startAll(ctx context.Context) error {
	for _, spec := range r.st.Topology.Nodes {
		if spec.Disk == nil {
			continue
		}
		pid, start, err := compose.StartDisk(ctx, spec)
		if err != nil && InUserNS() {
			return fmt.Errorf("rootless run (user namespace): %w", err)
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		if ns := r.st.Node(spec.Name); ns != nil {
			ns.DiskPID, ns.DiskPIDStart = pid, start
		}
		r.mu.Unlock()
		if err := r.save(); err != nil {
			return err
		}
	}
	for _, spec := range r.st.Topology.Nodes {
		if spec.Proxy == nil {
			continue
		}
		ns := r.nsPath(spec.Name)
		pid, start, err := compose.StartProxy(ctx, spec, func(cmd *exec.Cmd) error { return compose.InNetNS(ns, cmd.Start) })
		if err != nil {
			return err
		}
		r.mu.Lock()
		if ns := r.st.Node(spec.Name); ns != nil {
			ns.ProxyPID, ns.ProxyPIDStart = pid, start
		}
		r.mu.Unlock()
		if err := r.save(); err != nil {
			return err
		}
	}
	usersCreated := false
	for _, spec := range r.st.Topology.Nodes {
		p := r.procs[spec.Name]
		if p == nil {
			continue
		}
		if sec := r.st.Topology.Security; sec != nil && spec.Role == compose.RoleBroker && !usersCreated {
			// The brokers authenticate to each other as a user that
			// must exist before they start.
			if err := sec.CreateUsersFrom(ctx, r.st.Topology, r.nsPath); err != nil {
				return err
			}
			usersCreated = true
		}
		err := p.Start(ctx)
		if err != nil {
			return fmt.Errorf("start %s: %w", spec.Name, err)
		}
	}
	return nil
}

// exited fails readiness as soon as a node's process is gone.
func (r *run) exited(n *compose.Node) error {
	if n.Proc == nil || n.Proc.Running() {
		return nil
	}
	return fmt.Errorf("process exited; end of %s:\n%s", n.LogFile, compose.LogTail(n.LogFile, 10))
}

// teardown stops every process of the run (SIGKILL when its data goes too,
// else SIGTERM with a grace period), then its faultfs daemons (their mounts
// go with them), removes its namespaces (their links go with them), its run
// directory and finally its state file. It is safe to call on a
// half-created run and more than once.
func (r *run) teardown(ctx context.Context) error {
	begin := time.Now()
	defer func() { r.b.Log.Debug("teardown", "run", r.st.RunID, "took", time.Since(begin)) }()
	r.mu.Lock()
	r.st.Status = compose.StatusStopping
	r.mu.Unlock()
	_ = r.save() // best effort: the state dir may be gone already
	st := r.st
	var errs []error
	if sec := st.Topology.Security; sec != nil {
		// The passwords go first: nothing needs them any more.
		if err := sec.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove secrets: %w", err))
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	for _, ns := range st.Nodes {
		if ns.PID == 0 && r.procs[ns.Name] == nil {
			continue
		}
		g.Go(func() error {
			pid, start := ns.PID, ns.PIDStart
			if p := r.procs[ns.Name]; p != nil {
				pid, start = p.ident()
			}
			if !st.KeepData || st.KillOnDown {
				// Nothing of the node outlives Down, or the run that
				// wrote its data is over: no need to let it shut down
				// cleanly (etcd takes seconds to).
				if err := compose.Signal(pid, start, syscall.SIGKILL); err != nil && !errors.Is(err, compose.ErrNoProcess) {
					return err
				}
				wctx, cancel := context.WithTimeout(gctx, killWait)
				defer cancel()
				return compose.WaitGone(wctx, pid, start)
			}
			return compose.Terminate(gctx, pid, start, r.b.Grace)
		})
	}
	if err := g.Wait(); err != nil {
		errs = append(errs, err)
	}

	// Whatever else runs in the run's namespaces (Kafka proxies, strays,
	// `cluster exec` commands) is killed before the namespaces go.
	paths := r.nsPaths()
	inodes := map[uint64]bool{}
	for _, p := range paths {
		if ino := nsInode(p); ino != 0 {
			inodes[ino] = true
		}
	}
	if err := killAll(ctx, procsInNetNS(inodes)); err != nil {
		errs = append(errs, err)
	}
	if err := compose.RemoveProxySockets(st); err != nil {
		errs = append(errs, err)
	}
	// Nothing of the run uses the disks now.
	if err := compose.StopDisks(ctx, st, r.b.Grace); err != nil {
		errs = append(errs, err)
	}
	for _, p := range paths {
		if err := removeNS(p); err != nil {
			errs = append(errs, err)
		}
	}
	if !st.KeepData && st.Topology.RunDir != "" {
		if err := os.RemoveAll(st.Topology.RunDir); err != nil {
			errs = append(errs, fmt.Errorf("remove run dir: %w", err))
		}
	}
	if len(errs) == 0 {
		if err := compose.RemoveState(r.b.StateDir, st.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := compose.Unregister(st.RunID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nsPaths lists every namespace file of the run: the ones recorded and any
// other carrying its run id (a crash can happen before the state records them).
func (r *run) nsPaths() []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, ns := range r.st.Nodes {
		add(ns.NetNS)
	}
	if r.st.NSDir != "" {
		for _, name := range listNS(r.st.NSDir) {
			if run, ok := ParseNSName(name); ok && run == r.st.RunID {
				add(filepath.Join(r.st.NSDir, name))
			}
		}
	}
	// The switch last: nothing runs there, and node veths go with their nodes.
	add(r.st.SwitchNS)
	return out
}

// killAll SIGKILLs pids (SIGCONT first is unnecessary: SIGKILL wakes stopped
// processes) and waits for them to go.
func killAll(ctx context.Context, pids []int) error {
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	for _, pid := range pids {
		wctx, cancel := context.WithTimeout(ctx, killWait)
		err := compose.WaitGone(wctx, pid, 0)
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Attach returns a handle on the cluster recorded in st, started by this or
// another process. Its Down removes the cluster.
func (b *Backend) Attach(st *compose.State) (*compose.Cluster, error) {
	if st.Backend != Name {
		return nil, fmt.Errorf("cluster %s runs on backend %s, not %s", st.Name, st.Backend, Name)
	}
	return attach(b.defaults(), st).cluster(), nil
}

func attach(o Backend, st *compose.State) *run {
	r := &run{b: o, st: st, procs: map[string]*proc{}}
	if st.NSDir != "" {
		r.b.NSDir = st.NSDir
	}
	r.b.KeepData, r.b.KillOnDown = st.KeepData, st.KillOnDown
	return r
}

// Down removes the cluster recorded under name, whoever started it.
func (b *Backend) Down(ctx context.Context, name string) error {
	o := b.defaults()
	unlock, err := compose.Lock(o.StateDir, name)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := compose.ReadState(o.StateDir, name)
	if err != nil {
		return err
	}
	if st.Backend != Name {
		return fmt.Errorf("cluster %s runs on backend %s, not %s", name, st.Backend, Name)
	}
	return attach(o, st).teardown(ctx)
}

func nodeWithPID(st *compose.State, pid int) string {
	for _, n := range st.Nodes {
		if n.PID == pid {
			return n.Name
		}
	}
	return ""
}
