package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
)

func init() {
	register(func() Fault { return &Kill{} })
	register(func() Fault { return &Stop{} })
	register(func() Fault { return &Pause{} })
	register(func() Fault { return &Restart{} })
	register(func() Fault { return &PowerLoss{} })
}

// procNodes is the spec every process fault shares: target expressions.
type procNodes struct {
	Nodes []string `json:"nodes"`
}

// nodesRun is the run every fault on nodes shares: the node names its
// targets resolved to.
type nodesRun struct {
	Resolved []string `json:"resolved,omitempty"`
}

func (r *nodesRun) resolvedNodes() []string { return r.Resolved }

// targets resolves the target expressions into at least one node.
func (p *procNodes) targets(ctx context.Context, env *Env, kind string) ([]string, error) {
	ns, err := env.ResolveTargets(ctx, p.Nodes)
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("%w: %s needs nodes", ErrBadFault, kind)
	}
	return ns, nil
}

// resolveProcs resolves p's targets into nodes that run a process.
func (r *nodesRun) resolveProcs(ctx context.Context, env *Env, kind string, p procNodes) error {
	ns, err := p.targets(ctx, env, kind)
	if err != nil {
		return err
	}
	for _, n := range ns {
		node, err := env.node(n)
		if err != nil {
			return err
		}
		if node.Proc == nil {
			return fmt.Errorf("%w: %s: node %s runs no process", ErrBadFault, kind, n)
		}
	}
	r.Resolved = ns
	return nil
}

// each runs fn on every resolved node at once and joins the errors.
func (r *nodesRun) each(env *Env, fn func(*compose.Node) error) error {
	errs := make([]error, len(r.Resolved))
	var wg sync.WaitGroup
	for i, name := range r.Resolved {
		n, err := env.node(name)
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startStopped starts every resolved node that is not running: the heal of
// kill, stop, restart and power loss.
func (r *nodesRun) startStopped(ctx context.Context, env *Env) error {
	return r.each(env, func(n *compose.Node) error {
		if n.Proc.Running() {
			return nil
		}
		return n.Start(ctx)
	})
}

// Kill sends SIGKILL to the nodes (all at the same instant); Heal starts
// them again.
type Kill struct{ procNodes }

type killRun struct {
	Kill `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *Kill) NewRun() Run { return &killRun{Kill: *f} }

func (*Kill) Kind() string { return "kill" }

// Resolve implements Run.
func (k *killRun) Resolve(ctx context.Context, env *Env) error {
	return k.resolveProcs(ctx, env, k.Kind(), k.procNodes)
}

// Inject implements Run.
func (k *killRun) Inject(ctx context.Context, env *Env) error {
	return k.each(env, func(n *compose.Node) error { return n.Kill() })
}

// Heal implements Run.
func (k *killRun) Heal(ctx context.Context, env *Env) error { return k.startStopped(ctx, env) }

// Stop shuts the nodes down gracefully (SIGTERM: a broker's controlled
// shutdown), SIGKILL after the backend's grace; Heal starts them again.
type Stop struct{ procNodes }

type stopRun struct {
	Stop `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *Stop) NewRun() Run { return &stopRun{Stop: *f} }

func (*Stop) Kind() string { return "stop" }

// Resolve implements Run.
func (s *stopRun) Resolve(ctx context.Context, env *Env) error {
	return s.resolveProcs(ctx, env, s.Kind(), s.procNodes)
}

// Inject implements Run.
func (s *stopRun) Inject(ctx context.Context, env *Env) error {
	return s.each(env, func(n *compose.Node) error { return n.Stop(ctx) })
}

// Heal implements Run.
func (s *stopRun) Heal(ctx context.Context, env *Env) error { return s.startStopped(ctx, env) }

// Pause freezes the nodes (SIGSTOP); Heal resumes them (SIGCONT).
type Pause struct{ procNodes }

type pauseRun struct {
	Pause `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *Pause) NewRun() Run { return &pauseRun{Pause: *f} }

func (*Pause) Kind() string { return "pause" }

// Resolve implements Run.
func (p *pauseRun) Resolve(ctx context.Context, env *Env) error {
	return p.resolveProcs(ctx, env, p.Kind(), p.procNodes)
}

// Inject implements Run.
func (p *pauseRun) Inject(ctx context.Context, env *Env) error {
	return p.each(env, func(n *compose.Node) error { return n.Pause() })
}

// Heal implements Run.
func (p *pauseRun) Heal(ctx context.Context, env *Env) error {
	return p.each(env, func(n *compose.Node) error {
		if !n.Proc.Running() {
			return nil
		}
		return n.Resume()
	})
}

// Restart stops the nodes gracefully and starts them again; Heal starts any
// that did not come back.
type Restart struct{ procNodes }

type restartRun struct {
	Restart `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *Restart) NewRun() Run { return &restartRun{Restart: *f} }

func (*Restart) Kind() string { return "restart" }

// Resolve implements Run.
func (r *restartRun) Resolve(ctx context.Context, env *Env) error {
	return r.resolveProcs(ctx, env, r.Kind(), r.procNodes)
}

// Inject implements Run.
func (r *restartRun) Inject(ctx context.Context, env *Env) error {
	return r.each(env, func(n *compose.Node) error { return n.Restart(ctx) })
}

// Heal implements Run.
func (r *restartRun) Heal(ctx context.Context, env *Env) error { return r.startStopped(ctx, env) }

// PowerLoss cuts the power of the nodes at the same instant: SIGKILL to
// all, then every write not fsynced is forgotten by the faultfs under each
// node that has one (Env.Disks). Nodes without faultfs only lose their
// processes. Heal starts them again.
type PowerLoss struct {
	procNodes
	// Torn keeps a random prefix of each file's unsynced tail (a torn write).
	Torn bool `json:"torn,omitempty"`
}

type powerLossRun struct {
	PowerLoss `json:"-"`
	nodesRun
	// Reports are the faultfs crash reports, by node, set by Inject.
	Reports map[string]faultfs.CrashReport `json:"reports,omitempty"`
	// NoDisk lists the nodes that had no faultfs.
	NoDisk []string `json:"no_disk,omitempty"`
}

// NewRun implements Fault.
func (f *PowerLoss) NewRun() Run { return &powerLossRun{PowerLoss: *f} }

func (*PowerLoss) Kind() string { return "power-loss" }

// Resolve implements Run.
func (p *powerLossRun) Resolve(ctx context.Context, env *Env) error {
	if err := p.resolveProcs(ctx, env, p.Kind(), p.procNodes); err != nil {
		return err
	}
	p.NoDisk = nil
	for _, n := range p.Resolved {
		if env.Disks[n] == "" {
			p.NoDisk = append(p.NoDisk, n)
		}
	}
	return nil
}

// Inject implements Run.
func (p *powerLossRun) Inject(ctx context.Context, env *Env) error {
	var pids []int
	var clients []*faultfs.Client
	var withDisk, remote []string
	for _, name := range p.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		// A remote node's pid is on its host: its Kill, below, reaches it
		// and returns once it is gone.
		if n.Remote != nil {
			remote = append(remote, name)
		} else if pid := n.PID(); pid > 0 && n.Proc.Running() {
			pids = append(pids, pid)
		}
		if s := env.Disks[name]; s != "" {
			c, err := diskClient(env, name, s)
			if err != nil {
				return err
			}
			clients = append(clients, c)
			withDisk = append(withDisk, name)
		}
	}
	// Remote processes die first: no write of theirs may land after
	// their disks forgot the unsynced ones.
	if err := eachRemote(env, remote, func(n *compose.Node) error { return n.Kill() }); err != nil {
		return fmt.Errorf("power loss: %w", err)
	}
	var opts []faultfs.CrashOpt
	if p.Torn {
		opts = append(opts, faultfs.Torn())
	}
	reps, err := faultfs.PowerLoss(ctx, pids, clients, opts...)
	if len(reps) > 0 {
		p.Reports = map[string]faultfs.CrashReport{}
		for i, r := range reps {
			p.Reports[withDisk[i]] = r
		}
	}
	// The backend's handles learn of the deaths through Kill, which is a
	// no-op on a process already gone.
	kerr := p.each(env, func(n *compose.Node) error { return n.Kill() })
	return errors.Join(err, kerr)
}

// Heal implements Run.
func (p *powerLossRun) Heal(ctx context.Context, env *Env) error { return p.startStopped(ctx, env) }
