package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/compose"
)

// ErrRunning is compose.ErrRunning: a live cluster already has the requested name.
var ErrRunning = compose.ErrRunning

// logTailBytes is how much of each node's log Down copies into the run
// directory.
const logTailBytes = 4 << 20

// Backend runs the lab against the hosts a Config lists. Config is needed
// by Up; Attach, Down and Clean read it from the run's state.
type Backend struct {
	Config   *Config
	StateDir string        // default compose.StateDir()
	Grace    time.Duration // how long a node may take to stop; default 30s
	// ReadyTimeout bounds the wait for every node to answer; default 120s.
	ReadyTimeout time.Duration
	// Detach marks the run as living on after this process exits.
	Detach bool
	Log    *slog.Logger
	// Dial reaches the hosts' SSH servers, and the brokers when the
	// cluster has no client host; nil dials from this machine.
	Dial compose.DialFunc
	// CleanFaults heals and removes what faults left on the hosts; Down
	// calls it before it stops anything. compose/backends sets it (the
	// fault code lives in nemesis, which compose cannot import).
	CleanFaults func(ctx context.Context, c *compose.Cluster) error
}

var _ compose.Backend = (*Backend)(nil)

func (b *Backend) defaults() Backend {
	o := *b
	if o.StateDir == "" {
		o.StateDir = compose.StateDir()
	}
	if o.Grace == 0 {
		o.Grace = 30 * time.Second
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 120 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// sideFile is the backend's own part of a run's state, next to the
// compose state file: the config it was started from (so that other
// processes can reconnect) and what it found and did on each node.
const sideFile = "ssh.json"

type side struct {
	Config Config                `json:"config"`
	Nodes  map[string]*nodeState `json:"nodes"`
}

type nodeState struct {
	PID   int    `json:"pid,omitempty"` // on the node's host
	Start uint64 `json:"pid_start,omitempty"`
	// WasRunning: the process ran when the lab came; Down makes sure it
	// runs again. Started: the lab started it; Down stops it.
	WasRunning bool `json:"was_running,omitempty"`
	Started    bool `json:"started,omitempty"`
}

func sidePath(dir, name string) string { return filepath.Join(dir, name, sideFile) }

func readSide(dir, name string) (*side, error) {
	b, err := os.ReadFile(sidePath(dir, name))
	if err != nil {
		return nil, fmt.Errorf("ssh state of %s: %w", name, err)
	}
	var s side
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("ssh state %s: %w", sidePath(dir, name), err)
	}
	if s.Nodes == nil {
		s.Nodes = map[string]*nodeState{}
	}
	return &s, nil
}

// run is one cluster's hosts and state, shared by Up, Attach and teardown.
type run struct {
	b     Backend
	mu    sync.Mutex // guards st, side and their files
	st    *compose.State
	side  *side
	hosts map[string]*Host
	procs map[string]*proc
	auth  *auth
	c     *compose.Cluster
}

func (r *run) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := compose.WriteState(r.b.StateDir, r.st); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r.side, "", "  ")
	if err != nil {
		return fmt.Errorf("write ssh state: %w", err)
	}
	p := sidePath(r.b.StateDir, r.st.Name)
	if err := os.WriteFile(p+".tmp", append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write ssh state: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("write ssh state: %w", err)
	}
	return nil
}

func (r *run) node(name string) *nodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.side.Nodes[name]
	if ns == nil {
		ns = &nodeState{}
		r.side.Nodes[name] = ns
	}
	return ns
}

func newRun(o Backend, st *compose.State, sd *side) *run {
	r := &run{b: o, st: st, side: sd, hosts: map[string]*Host{}, procs: map[string]*proc{}}
	names := sd.Config.Names()
	hosts, a := hostsOf(&sd.Config, names, o.Dial)
	r.auth = a
	for i, h := range hosts {
		r.hosts[names[i]] = h
		n := sd.Config.Nodes[i]
		if !n.Managed() {
			continue
		}
		p := &proc{h: h, n: n, grace: o.Grace}
		if ns := sd.Nodes[names[i]]; ns != nil {
			p.pid, p.start = ns.PID, ns.Start
		}
		name := names[i]
		p.saved = func(pid int, start uint64) {
			ns := r.node(name)
			r.mu.Lock()
			ns.PID, ns.Start = pid, start
			r.mu.Unlock()
			if err := r.save(); err != nil {
				r.b.Log.Warn("record pid", "node", name, "err", err)
			}
		}
		r.procs[name] = p
	}
	r.c = r.cluster()
	return r
}

// cluster builds the handles: each node's Remote is its Host, managed
// nodes have a Proc, and Dial goes through the first client host's SSH
// connection (or from this machine when there is none).
func (r *run) cluster() *compose.Cluster {
	st := r.st
	var nodes []*compose.Node
	names := r.side.Config.Names()
	for i, spec := range st.Topology.Nodes {
		n := &compose.Node{NodeSpec: spec, Remote: r.hosts[spec.Name]}
		if i < len(names) && names[i] == spec.Name {
			n.Iface = r.side.Config.Nodes[i].Iface
		}
		if p := r.procs[spec.Name]; p != nil {
			n.Proc = p
		}
		nodes = append(nodes, n)
	}
	c := compose.NewCluster(st.Topology, Name, nodes, r.teardown)
	c.StateFile = compose.StatePath(r.b.StateDir, st.Name)
	c.Dialer = r.b.Dial
	if cl := c.Client(); cl != nil {
		c.Dialer = r.hosts[cl.Name].DialContext
	} else if c.Dialer == nil {
		var d net.Dialer
		c.Dialer = d.DialContext
	}
	return c
}

// Up connects to every host, runs the setup steps, starts each managed
// node that is not running, learns the brokers' ids from the metadata
// where the config gives none, and waits until every node answers its
// probe. On error it undoes what it did (as Down does).
func (b *Backend) Up(ctx context.Context, t compose.Topology) (c *compose.Cluster, err error) {
	o := b.defaults()
	if o.Config == nil {
		return nil, fmt.Errorf("%w: no config", ErrConfig)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if names := o.Config.Names(); len(names) != len(t.Nodes) {
		return nil, fmt.Errorf("%w: topology has %d nodes, the config %d", ErrConfig, len(t.Nodes), len(names))
	}
	log := o.Log.With("run", t.RunID, "cluster", t.Name)
	unlock, err := compose.Lock(o.StateDir, t.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := compose.CheckExisting(o.StateDir, t.Name, Name, func(old *compose.State) error {
		log.Info("removing dead run", "old_run", old.RunID)
		return o.attach(old).teardown(ctx)
	}); err != nil {
		return nil, err
	}

	st := &compose.State{Name: t.Name, RunID: t.RunID, Backend: Name, Status: compose.StatusStarting,
		Created: time.Now().UTC(), KeepData: true, Topology: t}
	st.SetOwner()
	r := newRun(o, st, &side{Config: *o.Config, Nodes: map[string]*nodeState{}})
	// On disk before anything is touched, so that clean finds the run.
	if err := r.save(); err != nil {
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
	if err := os.MkdirAll(t.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	if err := r.connectAll(ctx); err != nil {
		return nil, err
	}
	log.Debug("hosts connected", "took", time.Since(begin))
	if err := r.steps(ctx, r.side.Config.Setup, "setup"); err != nil {
		return nil, err
	}
	if err := r.startAll(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := r.brokerIDs(rctx); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
	}
	if err := compose.Ready(rctx, r.c, r.exited()); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", t.Name, err)
	}
	r.mu.Lock()
	r.st.Status = compose.StatusUp
	r.st.Detached = o.Detach
	r.mu.Unlock()
	if err := r.save(); err != nil {
		return nil, err
	}
	log.Info("cluster up", "nodes", len(t.Nodes), "took", time.Since(begin))
	return r.c, nil
}

// connectAll opens every host's connection at once.
func (r *run) connectAll(ctx context.Context) error {
	var g errgroup.Group
	for _, h := range r.hosts {
		g.Go(func() error {
			_, err := h.Command(ctx, []string{"true"}, nil)
			return err
		})
	}
	return g.Wait()
}

// steps runs setup or teardown steps in order, each on its nodes at once.
func (r *run) steps(ctx context.Context, steps []Step, what string) error {
	names := r.side.Config.Names()
	for i, s := range steps {
		idx, err := r.side.Config.stepNodes(s.On, names)
		if err != nil {
			return err
		}
		var g errgroup.Group
		for _, j := range idx {
			g.Go(func() error {
				_, err := r.hosts[names[j]].Command(ctx, s.Run, nil)
				if err != nil {
					return fmt.Errorf("%s step %d on %s: %w", what, i+1, names[j], err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// startAll records which managed nodes run, then starts the others:
// coordinators first, then brokers.
func (r *run) startAll(ctx context.Context) error {
	for _, role := range []compose.Role{compose.RoleCoordinator, compose.RoleBroker} {
		var g errgroup.Group
		for _, spec := range r.st.Topology.Role(role) {
			p := r.procs[spec.Name]
			if p == nil {
				continue
			}
			g.Go(func() error {
				pid, _, err := p.refresh(ctx)
				if err != nil {
					return err
				}
				ns := r.node(spec.Name)
				if pid != 0 {
					r.mu.Lock()
					ns.WasRunning = true
					r.mu.Unlock()
					return r.save()
				}
				// Recorded first: a crash during the start still leaves
				// Down (or clean) the duty to stop it.
				r.mu.Lock()
				ns.Started = true
				r.mu.Unlock()
				if err := r.save(); err != nil {
					return err
				}
				if err := p.Start(ctx); err != nil {
					return fmt.Errorf("start %s: %w", spec.Name, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// exited fails readiness when a node the lab started dies; it asks each
// host at most once a second.
func (r *run) exited() func(*compose.Node) error {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(n *compose.Node) error {
		p := r.procs[n.Name]
		if p == nil {
			return nil
		}
		mu.Lock()
		due := time.Since(last[n.Name]) >= time.Second
		if due {
			last[n.Name] = time.Now()
		}
		mu.Unlock()
		if !due || p.Running() {
			return nil
		}
		return fmt.Errorf("process exited; end of %s on %s:\n%s", n.LogFile, n.Name, r.remoteTail(n.Name, n.LogFile))
	}
}

// remoteTail is the last lines of a remote log file, indented.
func (r *run) remoteTail(node, file string) string {
	if file == "" {
		return "    (no log_file)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.hosts[node].Command(ctx, []string{"tail", "-n", "10", "--", file}, nil)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	return "    " + string(out)
}

// brokerIDs fills in the ids of brokers the config gives none, matching
// each broker's address and port to the Metadata's broker list.
func (r *run) brokerIDs(ctx context.Context) error {
	missing := false
	for _, n := range r.st.Topology.Role(compose.RoleBroker) {
		missing = missing || n.ID == 0
	}
	if !missing {
		return nil
	}
	var lastErr error
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		md, err := r.metadata(ctx)
		if err == nil {
			if err = r.matchIDs(md); err == nil {
				return r.save()
			}
		}
		for _, n := range r.st.Topology.Role(compose.RoleBroker) {
			if terr := r.c.TLSMismatch(ctx, n); terr != nil {
				return terr
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker ids from metadata: %w (last: %v); give each broker its id", ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

func (r *run) metadata(ctx context.Context) (*kmsg.MetadataResponse, error) {
	kafka, err := r.c.KafkaOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(kafka, kgo.SeedBrokers(r.st.Topology.Bootstrap()...),
		kgo.DialTimeout(5*time.Second), kgo.RequestRetries(0))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return req.RequestWith(mctx, cl)
}

// matchIDs sets the id of each broker whose address and port one of the
// metadata's brokers advertises; host names are resolved here.
func (r *run) matchIDs(md *kmsg.MetadataResponse) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes := r.st.Topology.Nodes
	for i := range nodes {
		n := &nodes[i]
		if n.Role != compose.RoleBroker || n.ID != 0 {
			continue
		}
		want := n.KafkaAddr()
		for _, b := range md.Brokers {
			if advertised(b.Host, b.Port) == want {
				n.ID = int(b.NodeID)
			}
		}
		if n.ID == 0 {
			return fmt.Errorf("no broker in the metadata advertises %s (%s); brokers: %v", want, n.Name, brokerList(md))
		}
	}
	// The handles share the topology's values; update them too.
	for _, cn := range r.c.Nodes {
		if spec, ok := r.st.Topology.Node(cn.Name); ok {
			cn.ID = spec.ID
		}
	}
	r.c.Topology = r.st.Topology
	return nil
}

func advertised(host string, port int32) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		if ips, lerr := net.LookupIP(host); lerr == nil && len(ips) > 0 {
			a, _ = netip.AddrFromSlice(ips[0])
		}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
}

func brokerList(md *kmsg.MetadataResponse) []string {
	var out []string
	for _, b := range md.Brokers {
		out = append(out, fmt.Sprintf("%d=%s:%d", b.NodeID, b.Host, b.Port))
	}
	return out
}

// teardown undoes the run on the hosts: it heals the faults
// (CleanFaults), resumes every managed process (in case it was paused),
// starts again those that ran when the lab came, stops those the lab
// started, copies the tail of each log into the run directory, runs the
// teardown steps and removes the state. It is safe on a half-made run and
// more than once; a host that cannot be reached keeps the state, so that
// clean can try again.
func (r *run) teardown(ctx context.Context) error {
	begin := time.Now()
	defer func() { r.b.Log.Debug("teardown", "run", r.st.RunID, "took", time.Since(begin)) }()
	r.mu.Lock()
	r.st.Status = compose.StatusStopping
	r.mu.Unlock()
	_ = r.save() // best effort: the state dir may be gone already
	defer r.close()
	var errs []error
	if r.b.CleanFaults != nil {
		if err := r.b.CleanFaults(ctx, r.c); err != nil {
			errs = append(errs, fmt.Errorf("clean faults: %w", err))
		}
	}
	var g errgroup.Group
	for name, p := range r.procs {
		ns := r.node(name)
		r.mu.Lock()
		started, was := ns.Started, ns.WasRunning
		r.mu.Unlock()
		g.Go(func() error {
			pid, start, err := p.refresh(ctx)
			if err != nil {
				return err
			}
			if pid != 0 {
				if err := p.signal(ctx, "CONT", pid, start); err != nil && !errors.Is(err, compose.ErrNoProcess) {
					return fmt.Errorf("resume %s: %w", name, err)
				}
			}
			switch {
			case started && pid != 0:
				if err := p.Stop(ctx); err != nil {
					return fmt.Errorf("stop %s: %w", name, err)
				}
			case was && pid == 0:
				if err := p.Start(ctx); err != nil {
					return fmt.Errorf("start %s again: %w", name, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		errs = append(errs, err)
	}
	r.collectLogs(ctx)
	if err := r.steps(ctx, r.side.Config.Teardown, "teardown"); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := compose.RemoveState(r.b.StateDir, r.st.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := compose.Unregister(r.st.RunID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// collectLogs copies the tail of each node's log into RunDir/<node>/.
func (r *run) collectLogs(ctx context.Context) {
	if r.st.Topology.RunDir == "" {
		return
	}
	var wg sync.WaitGroup
	for _, n := range r.st.Topology.Nodes {
		if n.LogFile == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := r.hosts[n.Name].Command(ctx, []string{"tail", "-c", strconv.Itoa(logTailBytes), "--", n.LogFile}, nil)
			if err != nil {
				r.b.Log.Warn("copy log", "node", n.Name, "file", n.LogFile, "err", err)
				return
			}
			dir := filepath.Join(r.st.Topology.RunDir, n.Name)
			if err := os.MkdirAll(dir, 0o755); err == nil {
				err = os.WriteFile(filepath.Join(dir, path.Base(n.LogFile)), out, 0o644)
			}
			if err != nil {
				r.b.Log.Warn("copy log", "node", n.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

func (r *run) close() {
	for _, h := range r.hosts {
		h.Close()
	}
	r.auth.close()
}

func (o Backend) attach(st *compose.State) *run {
	sd, err := readSide(o.StateDir, st.Name)
	if err != nil {
		// Nothing was recorded beyond the compose state: there is no host
		// to go back to.
		sd = &side{Nodes: map[string]*nodeState{}}
	}
	return newRun(o, st, sd)
}

// Attach returns a handle on the run recorded in st, started by this or
// another process; its connections are made on first use. Its Down
// removes the run.
func (b *Backend) Attach(st *compose.State) (*compose.Cluster, error) {
	if st.Backend != Name {
		return nil, fmt.Errorf("cluster %s runs on backend %s, not %s", st.Name, st.Backend, Name)
	}
	o := b.defaults()
	if _, err := readSide(o.StateDir, st.Name); err != nil {
		return nil, err
	}
	return o.attach(st).c, nil
}

// Down undoes the run recorded under name, whoever started it.
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
	return o.attach(st).teardown(ctx)
}

// CleanReport lists what Clean did.
type CleanReport struct {
	Runs []string // "name/run" of dead runs undone
	Live []string // "name/run" of live runs left alone
}

// Clean undoes every dead ssh run recorded in the state directory (with
// all, live ones too): their faults healed and swept, their nodes put back
// as they were found. Runs whose lock is held are left alone.
func (b *Backend) Clean(ctx context.Context, all bool) (CleanReport, error) {
	o := b.defaults()
	var rep CleanReport
	states, errs := compose.ListStates(o.StateDir)
	removed, live, cerrs := compose.CleanDead(ctx, o.StateDir, states, Name, all, func(ctx context.Context, cur *compose.State) error {
		return o.attach(cur).teardown(ctx)
	})
	rep.Runs, rep.Live, errs = append(rep.Runs, removed...), append(rep.Live, live...), append(errs, cerrs...)
	return rep, errors.Join(errs...)
}
