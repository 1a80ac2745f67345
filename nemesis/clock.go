package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/units"
)

func init() {
	register(func() Fault { return &ClockSkew{} })
	register(func() Fault { return &ClockBump{} })
	register(func() Fault { return &ClockStrobe{} })
}

// Clock faults move the time an isrlab broker reads (through its
// /v1/clock: replica lag, ISR shrink checks, segment rolls, retention,
// transaction timeouts, record and ListOffsets timestamps it assigns), or
// an ssh host's system clock where the host allows it (clock: true).
// Clients keep their clocks. A coordinator on this machine cannot be
// moved: its etcd member times leases and elections with the monotonic
// clock, which only a time namespace shifts, and only before a process
// starts; REALTIME cannot be skewed for Go binaries here either.

// ClockSkew moves the clock of isrlab brokers by OffsetMs (negative goes
// back), through each broker's /v1/clock on its metrics listener; Heal sets
// the skew back to 0. On an ssh host that allows it (clock: true) it sets
// the host's system clock instead, with date, for whatever role the node
// has; Heal moves it back by the same offset.
type ClockSkew struct {
	procNodes
	OffsetMs int64 `json:"offset_ms"`
}

type clockSkewRun struct {
	ClockSkew `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *ClockSkew) NewRun() Run { return &clockSkewRun{ClockSkew: *f} }

// Kind implements Fault.
func (f *ClockSkew) Kind() string { return "clock-skew" }

// Resolve implements Run: the targets must be brokers.
func (f *clockSkewRun) Resolve(ctx context.Context, env *Env) error {
	return f.resolveClock(ctx, env, f.Kind(), f.procNodes, true)
}

// Inject implements Run.
func (f *clockSkewRun) Inject(ctx context.Context, env *Env) error {
	return f.eachClock(env, f.Kind(), func(n *compose.Node, c *clusterapi.Client) error {
		if c == nil {
			return hostClock(ctx, env, n, f.OffsetMs)
		}
		_, err := c.SetClock(ctx, f.OffsetMs)
		return err
	})
}

// Heal implements Run.
func (f *clockSkewRun) Heal(ctx context.Context, env *Env) error {
	return f.trueClock(ctx, env, f.Kind())
}

// ClockBump makes the clock jump once by Offset (Jepsen's clock bump), on
// top of whatever skew it had: a broker's /v1/clock offset goes from its
// current value to that plus Offset; an ssh host's system clock (clock:
// true) moves by Offset. Heal restores the true clock (skew 0; the host's
// clock moved back).
type ClockBump struct {
	procNodes
	Offset units.Duration `json:"offset"`
}

type clockBumpRun struct {
	ClockBump `json:"-"`
	nodesRun
}

// NewRun implements Fault.
func (f *ClockBump) NewRun() Run { return &clockBumpRun{ClockBump: *f} }

// Kind implements Fault.
func (f *ClockBump) Kind() string { return "clock-bump" }

// Validate implements validator.
func (f *ClockBump) Validate() error {
	if f.Offset == 0 {
		return fmt.Errorf("%w: clock-bump needs a non-zero offset, like 30s or -30s", ErrBadFault)
	}
	return nil
}

// Resolve implements Run.
func (f *clockBumpRun) Resolve(ctx context.Context, env *Env) error {
	if err := f.Validate(); err != nil {
		return err
	}
	return f.resolveClock(ctx, env, f.Kind(), f.procNodes, true)
}

// Inject implements Run.
func (f *clockBumpRun) Inject(ctx context.Context, env *Env) error {
	off := time.Duration(f.Offset).Milliseconds()
	return f.eachClock(env, f.Kind(), func(n *compose.Node, c *clusterapi.Client) error {
		if c == nil {
			return hostClock(ctx, env, n, off)
		}
		cur, err := c.Clock(ctx)
		if err != nil {
			return err
		}
		_, err = c.SetClock(ctx, cur.OffsetMs+off)
		return err
	})
}

// Heal implements Run.
func (f *clockBumpRun) Heal(ctx context.Context, env *Env) error {
	return f.trueClock(ctx, env, f.Kind())
}

// ClockStrobe makes a broker's clock oscillate between the true time and
// Offset ahead (behind, if negative), switching every Period, until
// healed: Jepsen's clock strobe. A strober process in the run's switch
// namespace sets each broker's /v1/clock, talking to it from inside the
// broker's own namespace, so that partitions do not stop it; it lives
// beyond `isrlab fault inject` and goes with the run (teardown kills every
// process of its namespaces, Clean stops it). Heal stops it and restores
// the true clock. Brokers on this machine only (netns backend).
type ClockStrobe struct {
	procNodes
	Offset units.Duration `json:"offset"`
	Period units.Duration `json:"period"`
}

type clockStrobeRun struct {
	ClockStrobe `json:"-"`
	nodesRun
	// The strober process (pid and start time), set by Inject.
	StroberPID   int    `json:"strober_pid,omitempty"`
	StroberStart uint64 `json:"strober_start,omitempty"`
}

// NewRun implements Fault.
func (f *ClockStrobe) NewRun() Run { return &clockStrobeRun{ClockStrobe: *f} }

// Kind implements Fault.
func (f *ClockStrobe) Kind() string { return "clock-strobe" }

// minStrobePeriod bounds the strober's rate: each switch is an HTTP call
// per broker.
const minStrobePeriod = 10 * time.Millisecond

// Validate implements validator.
func (f *ClockStrobe) Validate() error {
	switch {
	case f.Offset == 0:
		return fmt.Errorf("%w: clock-strobe needs a non-zero offset, like 200ms", ErrBadFault)
	case time.Duration(f.Period) < minStrobePeriod:
		return fmt.Errorf("%w: clock-strobe period %v: want at least %v (the clock switches every period)", ErrBadFault, time.Duration(f.Period), minStrobePeriod)
	}
	return nil
}

// Resolve implements Run.
func (f *clockStrobeRun) Resolve(ctx context.Context, env *Env) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if err := f.resolveClock(ctx, env, f.Kind(), f.procNodes, false); err != nil {
		return err
	}
	if _, err := env.switchNS(); err != nil {
		// Without a switch (Docker) the strober lives in its first
		// target's namespace, as a node-side delayer does.
		if n, nerr := env.node(f.Resolved[0]); nerr != nil || n.NetNS == "" || n.Remote != nil {
			return fmt.Errorf("%w: clock-strobe runs its strober on this machine, in the run's switch namespace or a node's; cluster %s runs on %s",
				ErrUnsupported, env.Cluster.Name, env.Cluster.Backend)
		}
	}
	return nil
}

// Inject implements Run.
func (f *clockStrobeRun) Inject(ctx context.Context, env *Env) error {
	args := []string{StrobeArg, "--run", env.runID(), "--offset", time.Duration(f.Offset).String(),
		"--period", time.Duration(f.Period).String()}
	for _, name := range f.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		args = append(args, "--target", n.NetNS+"="+clusterapi.BaseURL(n.Addr.String(), compose.MetricsPort))
	}
	var pid int
	var start uint64
	var err error
	if _, serr := env.switchNS(); serr == nil {
		pid, start, err = startHelper(ctx, env, args)
	} else {
		n, nerr := env.node(f.Resolved[0])
		if nerr != nil {
			return nerr
		}
		pid, start, err = startHelperIn(ctx, env, n.NetNS, args)
	}
	f.StroberPID, f.StroberStart = pid, start
	return err
}

// Heal implements Run.
func (f *clockStrobeRun) Heal(ctx context.Context, env *Env) error {
	err := stopProcess(ctx, f.StroberPID, f.StroberStart)
	return errors.Join(err, f.trueClock(ctx, env, f.Kind()))
}

// resolveClock resolves the targets of a clock fault: isrlab brokers, or
// any node whose ssh host lets clock faults set its system clock (when
// host is true).
func (r *nodesRun) resolveClock(ctx context.Context, env *Env, kind string, p procNodes, host bool) error {
	ns, err := p.targets(ctx, env, kind)
	if err != nil {
		return err
	}
	for _, name := range ns {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		switch {
		case systemClock(n) && host:
			continue // the host's clock: any node, with or without a process
		case systemClock(n):
			return fmt.Errorf("%w: %s: %s's clock is its host's system clock, which %s cannot switch at its rate over ssh", ErrUnsupported, kind, name, kind)
		case n.Role == compose.RoleCoordinator && n.Remote == nil:
			return fmt.Errorf("%w: %s: %s is a coordinator: its etcd member times leases and elections with the monotonic clock, which a running process cannot have moved here (a time namespace is set before a process starts); isrlab brokers and ssh hosts with clock: true can be moved", ErrUnsupported, kind, name)
		case n.Role != compose.RoleBroker || n.Proc == nil:
			return fmt.Errorf("%w: %s: %s is not a broker", ErrBadFault, kind, name)
		}
	}
	r.Resolved = ns
	return nil
}

// eachClock runs fn on every resolved node with a client of its broker's
// /v1/clock, or nil where the node's host clock is the one to move.
func (r *nodesRun) eachClock(env *Env, kind string, fn func(*compose.Node, *clusterapi.Client) error) error {
	dial := env.Cluster.Dial()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	return r.each(env, func(n *compose.Node) error {
		var c *clusterapi.Client
		if !systemClock(n) {
			c = &clusterapi.Client{Base: clusterapi.BaseURL(n.Addr.String(), compose.MetricsPort), HTTP: hc}
		}
		if err := fn(n, c); err != nil {
			return fmt.Errorf("%s %s: %w", kind, n.Name, err)
		}
		return nil
	})
}

// trueClock restores the true clock on every resolved node: skew 0 on a
// broker, the marked offset undone on a host. It is idempotent.
func (r *nodesRun) trueClock(ctx context.Context, env *Env, kind string) error {
	return r.eachClock(env, kind, func(n *compose.Node, c *clusterapi.Client) error {
		if c == nil {
			return hostClock(ctx, env, n, 0)
		}
		_, err := c.SetClock(ctx, 0)
		return err
	})
}

// hostClock moves (offset != 0) or moves back a host's system clock; the
// marker of the fault being applied records the move, so that undoing is
// idempotent and possible after a crash.
func hostClock(ctx context.Context, env *Env, n *compose.Node, offset int64) error {
	m := clockMarker(tableName(env.runID(), env.id), n.Name)
	argv := []string{"sh", "-c", clockUndoScript, "sh", "one", m}
	if offset != 0 {
		argv = []string{"sh", "-c", clockSkewScript, "sh", m, strconv.FormatInt(offset, 10)}
	}
	_, err := n.Remote.Command(ctx, argv, nil)
	return err
}
