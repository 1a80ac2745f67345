package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/compose"
)

// Name is the backend's name in state files and on the command line.
const Name = compose.Docker

// ErrNoDaemon reports that no Docker daemon answers.
var ErrNoDaemon = errors.New("no Docker daemon")

// ErrRunning is compose.ErrRunning: a live cluster already has the requested name.
var ErrRunning = compose.ErrRunning

// Backend brings clusters up as Docker containers. The zero value is usable.
type Backend struct {
	StateDir     string        // default compose.StateDir()
	Grace        time.Duration // SIGTERM grace for Stop and Down with KeepData; default 3s
	ReadyTimeout time.Duration // default 120s
	Detach       bool          // the run outlives this process (`isrlab cluster up`)
	KeepData     bool          // keep RunDir (and collect container logs into it) on Down
	Log          *slog.Logger
	// System is SystemIsrlab (default) or SystemKafka.
	System     string
	KafkaImage string       // default DefaultKafkaImage
	KafkaConf  []compose.KV // broker config for the kafka system
	// Binary goes into the lab image; default: the program of the first
	// node with a process, else this executable.
	Binary string
	// Idle is what a sandbox runs (after the binary); default
	// ["cluster", "idle"]. IdleEnv is its environment.
	Idle    []string
	IdleEnv []string
}

var _ compose.Backend = (*Backend)(nil)

func (b *Backend) defaults() Backend {
	o := *b
	if o.StateDir == "" {
		o.StateDir = compose.StateDir()
	}
	if o.Grace == 0 {
		o.Grace = 3 * time.Second
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 120 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.System == "" {
		o.System = SystemIsrlab
	}
	if o.KafkaImage == "" {
		o.KafkaImage = DefaultKafkaImage
	}
	if o.Idle == nil {
		o.Idle = []string{"cluster", "idle"}
	}
	return o
}

// Connect returns a client of the Docker daemon named by the environment
// (DOCKER_HOST, default unix:///var/run/docker.sock) after checking that it
// answers.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDaemon, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: %w", ErrNoDaemon, err)
	}
	return cli, nil
}

type run struct {
	b     Backend
	cli   *client.Client
	mu    sync.Mutex
	st    *compose.State
	procs map[string]*proc
}

func (r *run) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return compose.WriteState(r.b.StateDir, r.st)
}

// Up imports the lab image if needed, creates the run's network and
// containers and waits until every node answers its probe. On any error,
// panic or cancellation it removes everything it created.
func (b *Backend) Up(ctx context.Context, t compose.Topology) (c *compose.Cluster, err error) {
	o := b.defaults()
	log := o.Log.With("run", t.RunID, "cluster", t.Name)
	t, err = o.check(t)
	if err != nil {
		return nil, err
	}
	if len(t.Disks()) > 0 {
		if err := compose.CheckFUSE(); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
		}
	}
	cli, err := Connect(ctx)
	if err != nil {
		return nil, err
	}
	unlock, err := compose.Lock(o.StateDir, t.Name)
	if err != nil {
		cli.Close()
		return nil, err
	}
	defer unlock()
	if err := compose.CheckExisting(o.StateDir, t.Name, Name, func(old *compose.State) error {
		return attach(o, cli, old).teardown(ctx)
	}); err != nil {
		cli.Close()
		return nil, err
	}
	st := &compose.State{
		Name: t.Name, RunID: t.RunID, Backend: Name, Status: compose.StatusStarting,
		Created: time.Now().UTC(), KeepData: o.KeepData, Topology: t,
	}
	st.SetOwner()
	r := &run{b: o, cli: cli, st: st, procs: map[string]*proc{}}
	if err := r.save(); err != nil {
		cli.Close()
		return nil, err
	}
	if err := compose.Register(t.RunID, compose.StatePath(o.StateDir, t.Name)); err != nil {
		log.Warn("register run", "err", err)
	}
	defer func() {
		p := recover()
		if err != nil || p != nil {
			tctx, cancel := context.WithTimeout(context.Background(), o.Grace+60*time.Second)
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
	specs, err := r.specs(ctx, t)
	if err != nil {
		return nil, err
	}
	log.Debug("image ready", "took", time.Since(begin))
	if err := r.create(ctx, specs); err != nil {
		return nil, err
	}
	log.Debug("containers started", "took", time.Since(begin))
	c = r.cluster()
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := compose.Ready(rctx, c, r.exited); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
	}
	r.mu.Lock()
	r.st.Status, r.st.Detached = compose.StatusUp, o.Detach
	r.mu.Unlock()
	if err := r.save(); err != nil {
		return nil, err
	}
	log.Info("cluster up", "nodes", len(t.Nodes), "took", time.Since(begin))
	return c, nil
}

func withoutCoordinators(t compose.Topology) compose.Topology {
	var nodes []compose.NodeSpec
	for _, n := range t.Nodes {
		if n.Role != compose.RoleCoordinator {
			nodes = append(nodes, n)
		}
	}
	t.Nodes = nodes
	return t
}

func containsAddr(t compose.Topology, a netip.Addr) bool {
	for _, n := range t.Nodes {
		if n.Addr == a {
			return true
		}
	}
	return false
}

// specs imports the lab image and lays out the containers.
func (r *run) specs(ctx context.Context, t compose.Topology) ([]ContainerSpec, error) {
	bin := r.b.Binary
	if bin == "" {
		for _, n := range t.Nodes {
			if len(n.Argv) > 0 && r.b.System == SystemIsrlab {
				bin = n.Argv[0]
				break
			}
		}
	}
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find isrlab binary: %w", err)
		}
		bin = exe
	}
	img, err := EnsureImage(ctx, r.cli, bin)
	if err != nil {
		return nil, err
	}
	if r.b.System == SystemKafka {
		if _, err := r.cli.ImageInspect(ctx, r.b.KafkaImage); err != nil {
			if client.IsErrNotFound(err) {
				return nil, fmt.Errorf("image %s is not present: load it first (docker load -i kafka.tar); isrlab never pulls", r.b.KafkaImage)
			}
			return nil, fmt.Errorf("inspect image %s: %w", r.b.KafkaImage, err)
		}
	}
	idle := append([]string{BinaryPath}, r.b.Idle...)
	if r.b.System == SystemKafka {
		return KafkaSpecs(t, r.b.KafkaImage, img, idle, r.b.IdleEnv, r.b.KafkaConf), nil
	}
	return IsrlabSpecs(t, img, idle, r.b.IdleEnv), nil
}

// create makes the network, the node directories, then the sandboxes and
// the process containers (each group in parallel), recording them.
func (r *run) create(ctx context.Context, specs []ContainerSpec) error {
	st := r.st
	t := st.Topology
	net, err := r.cli.NetworkCreate(ctx, NetworkName(st.RunID), network.CreateOptions{
		Driver: "bridge",
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{
			Subnet: t.Subnet.String(), Gateway: Gateway(t.Subnet).String(),
		}}},
		Labels: map[string]string{LabelRun: st.RunID, LabelCluster: st.Name, LabelManaged: "true"},
	})
	if err != nil {
		return fmt.Errorf("create network: %w", err)
	}
	st.Network = net.ID
	for _, n := range t.Nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return fmt.Errorf("node dir %s: %w", n.Name, err)
		}
		if len(n.Argv) > 0 || n.Role == compose.RoleBroker {
			// The kafka image runs as an unprivileged user.
			if err := os.MkdirAll(n.DataDir, 0o777); err != nil {
				return fmt.Errorf("data dir %s: %w", n.Name, err)
			}
			if r.b.System == SystemKafka {
				os.Chmod(n.DataDir, 0o777) //nolint:errcheck // best effort
			}
		}
		for name, content := range n.Files {
			if err := os.WriteFile(filepath.Join(n.Dir, name), []byte(content), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
		}
		st.Nodes = append(st.Nodes, compose.NodeState{Name: n.Name})
	}
	if err := r.save(); err != nil {
		return err
	}
	if sec := t.Security; sec != nil {
		// Before the brokers' containers: their binds need the files.
		if err := sec.Prepare(t, time.Now()); err != nil {
			return fmt.Errorf("cluster %s: secured cluster: %w", t.Name, err)
		}
	}
	// faultfs daemons run on the host and mount before the containers
	// start: a process container's bind of its node directory is
	// recursive, so it carries the mount at the broker's data dir, at
	// every (re)start.
	for _, n := range t.Nodes {
		if n.Disk == nil {
			continue
		}
		pid, start, err := compose.StartDisk(ctx, n)
		if err != nil {
			return err
		}
		r.mu.Lock()
		ns := st.Node(n.Name)
		ns.DiskPID, ns.DiskPIDStart = pid, start
		r.mu.Unlock()
		if err := r.save(); err != nil {
			return err
		}
	}
	// Each group in parallel: the sandboxes, then the processes. On a
	// secured cluster the brokers authenticate to each other as a user
	// that must exist before they start: the coordinators start first,
	// then the users are created, then the brokers start.
	groups := []func(ContainerSpec) bool{
		func(s ContainerSpec) bool { return s.Kind == KindSandbox },
		func(s ContainerSpec) bool { return s.Kind == KindProcess },
	}
	if t.Security != nil {
		isBroker := func(s ContainerSpec) bool {
			n, _ := t.Node(s.Node)
			return n.Role == compose.RoleBroker
		}
		groups = []func(ContainerSpec) bool{
			groups[0],
			func(s ContainerSpec) bool { return s.Kind == KindProcess && !isBroker(s) },
			func(s ContainerSpec) bool { return s.Kind == KindProcess && isBroker(s) },
		}
	}
	for i, in := range groups {
		if i == 2 {
			err := t.Security.CreateUsersFrom(ctx, t, func(client string) string {
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.st.Node(client).NetNS
			})
			if err != nil {
				return err
			}
		}
		g, gctx := errgroup.WithContext(ctx)
		for _, s := range specs {
			if !in(s) {
				continue
			}
			g.Go(func() error { return r.createContainer(gctx, s) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if err := r.save(); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) createContainer(ctx context.Context, s ContainerSpec) error {
	cfg := &container.Config{Image: s.Image, Cmd: s.Cmd, Env: s.Env, Labels: s.Labels, Hostname: s.Hostname}
	host := &container.HostConfig{
		CapAdd: []string{"NET_ADMIN"},
		Binds:  s.Binds,
	}
	var netcfg *network.NetworkingConfig
	if s.JoinOf != "" {
		host.NetworkMode = container.NetworkMode("container:" + s.JoinOf)
		cfg.Hostname = ""
	} else {
		host.NetworkMode = container.NetworkMode(NetworkName(r.st.RunID))
		netcfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			NetworkName(r.st.RunID): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: s.IP.String()}},
		}}
	}
	resp, err := r.cli.ContainerCreate(ctx, cfg, host, netcfg, nil, s.Name)
	if err != nil {
		return fmt.Errorf("create container %s: %w", s.Name, err)
	}
	r.mu.Lock()
	ns := r.st.Node(s.Node)
	if s.Kind == KindSandbox {
		ns.Sandbox = resp.ID
	} else {
		ns.Container = resp.ID
	}
	r.mu.Unlock()
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", s.Name, err)
	}
	pid, err := r.pidOf(ctx, resp.ID)
	if err != nil {
		// It exited already: say why, while the container still exists.
		return fmt.Errorf("%s: %w: container %s exited; its last output:\n%s", s.Node, compose.ErrNotReady, s.Name, r.logTail(s.Node, 10))
	}
	start := compose.Identify(pid)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Kind == KindSandbox {
		ns.NetNS = "/proc/" + fmt.Sprint(pid) + "/ns/net"
		ns.Iface = "eth0"
		ns.SwitchPort = hostVeth(ns.NetNS)
	} else {
		ns.PID, ns.PIDStart = pid, start
	}
	return nil
}

func (r *run) pidOf(ctx context.Context, id string) (int, error) {
	ins, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("inspect container %s: %w", id, err)
	}
	if ins.State == nil || ins.State.Pid == 0 {
		return 0, fmt.Errorf("container %s is not running", ins.Name)
	}
	return ins.State.Pid, nil
}

// cluster builds the handles from the state.
func (r *run) cluster() *compose.Cluster {
	st := r.st
	var nodes []*compose.Node
	for _, spec := range st.Topology.Nodes {
		n := &compose.Node{NodeSpec: spec}
		ns := st.Node(spec.Name)
		if ns != nil {
			n.NetNS, n.SwitchPort, n.Iface = ns.NetNS, ns.SwitchPort, ns.Iface
		}
		if ns != nil && ns.Container != "" {
			p := &proc{r: r, node: spec.Name, id: ns.Container, pid: ns.PID, start: ns.PIDStart}
			r.procs[spec.Name] = p
			n.Proc = p
		}
		nodes = append(nodes, n)
	}
	// The bridge lives in the host's namespace, which is no switch of the
	// lab's (SwitchNS stays empty): faults go through the nodes'
	// namespaces instead (see the package doc).
	c := compose.NewCluster(st.Topology, Name, nodes, r.teardown)
	if len(st.Network) >= 12 {
		c.Bridge = "br-" + st.Network[:12]
	}
	c.StateFile = compose.StatePath(r.b.StateDir, st.Name)
	return c
}

// exited reports a node whose process died, with its last output. The
// process leaves /proc before Docker has handled its exit, and Docker
// copies the rest of its output into the log before it marks the container
// not running: the log is read once it has (or after 10 s), else a fast
// failure's message could be missing from it.
func (r *run) exited(n *compose.Node) error {
	if n.Proc == nil || n.Proc.Running() {
		return nil
	}
	if id := r.processContainer(n.Name); id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stopped, failed := r.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
		select {
		case <-stopped:
		case <-failed:
		}
		cancel()
	}
	return fmt.Errorf("container %s exited; its last output:\n%s", ContainerName(r.st.RunID, n.Name, KindProcess), r.logTail(n.Name, 10))
}

// processContainer returns the id of node's process container, "" if none.
func (r *run) processContainer(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ns := r.st.Node(node); ns != nil {
		return ns.Container
	}
	return ""
}

// logTail returns the last lines a node's process container wrote, indented
// (the container is removed by the teardown that follows a failed Up).
func (r *run) logTail(node string, lines int) string {
	id := r.processContainer(node)
	if id == "" {
		return "    (no container)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := r.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(lines)})
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil {
		return "    (" + err.Error() + ")"
	}
	return "    " + strings.Join(strings.Split(strings.TrimRight(buf.String(), "\n"), "\n"), "\n    ")
}

// teardown removes every container and network labelled with the run id,
// then the run directory (after collecting container logs into it when it
// is kept) and the state file. Safe on half-created runs and twice.
func (r *run) teardown(ctx context.Context) error {
	r.mu.Lock()
	r.st.Status = compose.StatusStopping
	r.mu.Unlock()
	_ = r.save()
	st := r.st
	var errs []error
	if sec := st.Topology.Security; sec != nil {
		// The passwords go first: nothing needs them any more.
		if err := sec.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove secrets: %w", err))
		}
	}
	byRun := filters.NewArgs(filters.Arg("label", LabelRun+"="+st.RunID))
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: byRun})
	if err != nil {
		errs = append(errs, fmt.Errorf("list containers: %w", err))
	}
	if st.KeepData {
		r.collectLogs(ctx, list)
	}
	// A packet delayer of the nemesis left in a node's namespace (its run
	// was killed before it healed) would keep the namespace, and the
	// container's end of its veth, after the container.
	for _, ctr := range list {
		if info, err := r.cli.ContainerInspect(ctx, ctr.ID); err == nil && info.State != nil && info.State.Pid > 0 {
			compose.KillHelpersIn("/proc/" + strconv.Itoa(info.State.Pid) + "/ns/net")
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, ctr := range list {
		g.Go(func() error {
			err := r.cli.ContainerRemove(gctx, ctr.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !client.IsErrNotFound(err) {
				return fmt.Errorf("remove container %s: %w", ctr.ID[:12], err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		errs = append(errs, err)
	}
	// The containers are gone: nothing uses the disks now.
	if err := compose.StopDisks(ctx, st, r.b.Grace); err != nil {
		errs = append(errs, err)
	}
	nets, err := r.cli.NetworkList(ctx, network.ListOptions{Filters: byRun})
	if err != nil {
		errs = append(errs, fmt.Errorf("list networks: %w", err))
	}
	for _, n := range nets {
		if err := r.cli.NetworkRemove(ctx, n.ID); err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s: %w", n.Name, err))
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

// collectLogs appends each process container's output to its node's log file.
func (r *run) collectLogs(ctx context.Context, list []container.Summary) {
	for _, ctr := range list {
		if ctr.Labels[LabelKind] != KindProcess {
			continue
		}
		spec, ok := r.st.Topology.Node(ctr.Labels[LabelNode])
		if !ok {
			continue
		}
		rc, err := r.cli.ContainerLogs(ctx, ctr.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			r.b.Log.Warn("collect logs", "node", spec.Name, "err", err)
			continue
		}
		f, err := os.OpenFile(logName(spec), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			_, err = stdcopy.StdCopy(f, f, rc)
			f.Close()
		}
		rc.Close()
		if err != nil {
			r.b.Log.Warn("collect logs", "node", spec.Name, "err", err)
		}
	}
}

func attach(o Backend, cli *client.Client, st *compose.State) *run {
	r := &run{b: o, cli: cli, st: st, procs: map[string]*proc{}}
	r.b.KeepData = st.KeepData
	return r
}

// Attach returns a handle on the cluster recorded in st. The caller closes
// cli after the cluster is no longer used.
func (b *Backend) Attach(cli *client.Client, st *compose.State) (*compose.Cluster, error) {
	if st.Backend != Name {
		return nil, fmt.Errorf("cluster %s runs on backend %s, not %s", st.Name, st.Backend, Name)
	}
	return attach(b.defaults(), cli, st).cluster(), nil
}

// Down removes the cluster recorded under name.
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
	cli, err := Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return attach(o, cli, st).teardown(ctx)
}

// CleanReport lists what Clean removed.
type CleanReport struct {
	Runs       []string // "name/run" of dead runs removed with their state
	Containers int      // orphan containers removed (no state at all)
	Networks   int      // orphan networks removed
	Images     int      // lab images removed (with all)
	Live       []string
}

// Clean removes dead runs (or every run and unused lab images, with all) and
// any container or network labelled with a run id that no state file knows. Live runs are
// left alone. Without a daemon it returns ErrNoDaemon.
func (b *Backend) Clean(ctx context.Context, all bool) (CleanReport, error) {
	o := b.defaults()
	var rep CleanReport
	cli, err := Connect(ctx)
	if err != nil {
		return rep, err
	}
	defer cli.Close()
	// Objects first, states second (a run writes its state before it
	// creates anything).
	managed := filters.NewArgs(filters.Arg("label", LabelRun))
	ctrs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: managed})
	if err != nil {
		return rep, fmt.Errorf("list containers: %w", err)
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: managed})
	if err != nil {
		return rep, fmt.Errorf("list networks: %w", err)
	}
	states, errs := compose.ListStates(o.StateDir)
	known := map[string]bool{}
	for _, st := range states {
		known[st.RunID] = true
	}
	removed, live, cerrs := compose.CleanDead(ctx, o.StateDir, states, Name, all, func(ctx context.Context, cur *compose.State) error {
		return attach(o, cli, cur).teardown(ctx)
	})
	rep.Runs, rep.Live, errs = append(rep.Runs, removed...), append(rep.Live, live...), append(errs, cerrs...)
	// A run recorded in another state directory is judged by its state.
	elsewhere := map[string]bool{}
	for _, run := range runsOf(ctrs, nets) {
		if known[run] {
			continue
		}
		st, dir, ok := compose.LookupRun(run)
		if !ok {
			continue
		}
		elsewhere[run] = true
		id := st.Name + "/" + run
		if (st.Live() && !all) || st.Backend != Name {
			rep.Live = append(rep.Live, id)
			continue
		}
		unlock, err := compose.Lock(dir, st.Name)
		if errors.Is(err, compose.ErrBusy) {
			rep.Live = append(rep.Live, id)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		other := o
		other.StateDir = dir
		if err := attach(other, cli, st).teardown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("clean %s: %w", id, err))
		} else {
			rep.Runs = append(rep.Runs, id)
		}
		unlock()
	}
	for _, c := range ctrs {
		if known[c.Labels[LabelRun]] || elsewhere[c.Labels[LabelRun]] {
			continue
		}
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
			continue
		}
		rep.Containers++
	}
	for _, n := range nets {
		if known[n.Labels[LabelRun]] || elsewhere[n.Labels[LabelRun]] {
			continue
		}
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s: %w", n.Name, err))
			continue
		}
		rep.Networks++
		if err := compose.Unregister(n.Labels[LabelRun]); err != nil {
			errs = append(errs, err)
		}
	}
	if all {
		// Lab images are a cache keyed by binary content; with all, the ones
		// no container uses go too.
		imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"))})
		if err != nil {
			errs = append(errs, fmt.Errorf("list images: %w", err))
		}
		for _, im := range imgs {
			if _, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: false, PruneChildren: true}); err == nil {
				rep.Images++
			}
		}
	}
	return rep, errors.Join(errs...)
}

// killWait bounds how long Kill waits for a SIGKILLed process to disappear.
const killWait = 10 * time.Second

// runsOf lists the run ids labelled on containers and networks.
func runsOf(ctrs []container.Summary, nets []network.Summary) []string {
	seen := map[string]bool{}
	var out []string
	add := func(run string) {
		if run != "" && !seen[run] {
			seen[run] = true
			out = append(out, run)
		}
	}
	for _, c := range ctrs {
		add(c.Labels[LabelRun])
	}
	for _, n := range nets {
		add(n.Labels[LabelRun])
	}
	return out
}
