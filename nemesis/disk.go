package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/units"
)

func init() {
	register(func() Fault { return &SlowDisk{} })
	register(func() Fault { return &DiskError{} })
	register(func() Fault { return &DiskHang{} })
}

// disk is what the disk faults share: the nodes, the faultfs operation
// kind and path prefix they apply to, and each node's control socket.
type disk struct {
	Nodes []string `json:"nodes"`
	// Op is read, write, fsync, meta or all (default).
	Op     faultfs.Op `json:"op,omitempty"`
	Prefix string     `json:"prefix,omitempty"`
	// Sockets maps each resolved node to its faultfs control socket.
	Sockets map[string]string `json:"sockets,omitempty"`
}

func (d *disk) resolve(ctx context.Context, env *Env, kind string) error {
	ns, err := env.ResolveTargets(ctx, d.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: %s needs nodes", ErrBadFault, kind)
	}
	if d.Op == "" {
		d.Op = faultfs.OpAll
	}
	d.Sockets = map[string]string{}
	for _, n := range ns {
		s := env.Disks[n]
		if s == "" {
			return fmt.Errorf("%w: %s: node %s has no faultfs control socket", ErrUnsupported, kind, n)
		}
		d.Sockets[n] = s
	}
	return nil
}

func (d *disk) each(env *Env, fn func(*faultfs.Client) error) error {
	for n, s := range d.Sockets {
		c, err := diskClient(env, n, s)
		if err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// heal lifts every fault of each node's faultfs (faultfs heals all at once).
func (d *disk) heal(ctx context.Context, env *Env) error {
	return d.each(env, func(c *faultfs.Client) error { return c.Heal(ctx) })
}

// remoteDisk is what a remote node's host tells about its faultfs
// (compose/ssh's Host does): the argument list that sends one control
// request, read from its standard input, to the daemon.
type remoteDisk interface {
	FaultfsCtl() []string
}

// diskClient is the client of node's faultfs at socket: on this machine,
// the socket itself; on a remote node's host, the control command run
// there over the node's Remote, the request on its standard input.
func diskClient(env *Env, node, socket string) (*faultfs.Client, error) {
	c := faultfs.NewClient(socket)
	n := env.Cluster.Node(node)
	if n == nil || n.Remote == nil {
		return c, nil
	}
	h, ok := n.Remote.(remoteDisk)
	if !ok || len(h.FaultfsCtl()) == 0 {
		return nil, fmt.Errorf("%w: %s's host has no faultfs control command", ErrUnsupported, node)
	}
	argv := h.FaultfsCtl()
	c.Exchange = func(ctx context.Context, req []byte) ([]byte, error) { return n.Remote.Command(ctx, argv, req) }
	return c, nil
}

// SlowDisk delays matching filesystem operations by Latency plus up to
// Jitter.
type SlowDisk struct {
	disk
	Latency units.Duration `json:"latency"`
	Jitter  units.Duration `json:"jitter,omitempty"`
}

func (*SlowDisk) Kind() string { return "slow-disk" }

// Resolve implements Fault.
func (s *SlowDisk) Resolve(ctx context.Context, env *Env) error {
	if s.Latency <= 0 && s.Jitter <= 0 {
		return fmt.Errorf("%w: slow-disk needs a latency", ErrBadFault)
	}
	return s.resolve(ctx, env, s.Kind())
}

// Inject implements Fault.
func (s *SlowDisk) Inject(ctx context.Context, env *Env) error {
	return s.each(env, func(c *faultfs.Client) error {
		return c.Latency(ctx, s.Op, s.Prefix, time.Duration(s.Latency), time.Duration(s.Jitter))
	})
}

// Heal implements Fault.
func (s *SlowDisk) Heal(ctx context.Context, env *Env) error { return s.heal(ctx, env) }

// DiskError fails matching filesystem operations with EIO with a
// probability.
type DiskError struct {
	disk
	Probability float64 `json:"probability"`
}

func (*DiskError) Kind() string { return "disk-error" }

// Resolve implements Fault.
func (e *DiskError) Resolve(ctx context.Context, env *Env) error {
	if e.Probability <= 0 || e.Probability > 1 {
		return fmt.Errorf("%w: disk-error probability %v: want (0, 1]", ErrBadFault, e.Probability)
	}
	return e.resolve(ctx, env, e.Kind())
}

// Inject implements Fault.
func (e *DiskError) Inject(ctx context.Context, env *Env) error {
	return e.each(env, func(c *faultfs.Client) error { return c.EIO(ctx, e.Op, e.Prefix, e.Probability) })
}

// Heal implements Fault.
func (e *DiskError) Heal(ctx context.Context, env *Env) error { return e.heal(ctx, env) }

// DiskHang blocks matching filesystem operations until healed.
type DiskHang struct{ disk }

func (*DiskHang) Kind() string { return "disk-hang" }

// Resolve implements Fault.
func (h *DiskHang) Resolve(ctx context.Context, env *Env) error { return h.resolve(ctx, env, h.Kind()) }

// Inject implements Fault.
func (h *DiskHang) Inject(ctx context.Context, env *Env) error {
	return h.each(env, func(c *faultfs.Client) error { return c.Hang(ctx, h.Op, h.Prefix) })
}

// Heal implements Fault.
func (h *DiskHang) Heal(ctx context.Context, env *Env) error { return h.heal(ctx, env) }
