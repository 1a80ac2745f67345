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

// disk is the spec the disk faults share: the nodes, the faultfs
// operation kind and path prefix they apply to.
type disk struct {
	Nodes []string `json:"nodes"`
	// Op is read, write, fsync, meta or all (default).
	Op     faultfs.Op `json:"op,omitempty"`
	Prefix string     `json:"prefix,omitempty"`
}

// op is the operation kind, all by default.
func (d disk) op() faultfs.Op {
	if d.Op == "" {
		return faultfs.OpAll
	}
	return d.Op
}

// diskRun is the run the disk faults share: each node's control socket.
type diskRun struct {
	// Sockets maps each resolved node to its faultfs control socket.
	Sockets map[string]string `json:"sockets,omitempty"`
}

func (r *diskRun) resolve(ctx context.Context, env *Env, kind string, d disk) error {
	ns, err := env.ResolveTargets(ctx, d.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: %s needs nodes", ErrBadFault, kind)
	}
	r.Sockets = map[string]string{}
	for _, n := range ns {
		s := env.Disks[n]
		if s == "" {
			return fmt.Errorf("%w: %s: node %s has no faultfs control socket", ErrUnsupported, kind, n)
		}
		r.Sockets[n] = s
	}
	return nil
}

func (r *diskRun) each(env *Env, fn func(*faultfs.Client) error) error {
	for n, s := range r.Sockets {
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
func (r *diskRun) heal(ctx context.Context, env *Env) error {
	return r.each(env, func(c *faultfs.Client) error { return c.Heal(ctx) })
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

type slowDiskRun struct {
	SlowDisk `json:"-"`
	diskRun
}

// NewRun implements Fault.
func (f *SlowDisk) NewRun() Run { return &slowDiskRun{SlowDisk: *f} }

func (*SlowDisk) Kind() string { return "slow-disk" }

// Resolve implements Run.
func (s *slowDiskRun) Resolve(ctx context.Context, env *Env) error {
	if s.Latency <= 0 && s.Jitter <= 0 {
		return fmt.Errorf("%w: slow-disk needs a latency", ErrBadFault)
	}
	return s.resolve(ctx, env, s.Kind(), s.disk)
}

// Inject implements Run.
func (s *slowDiskRun) Inject(ctx context.Context, env *Env) error {
	return s.each(env, func(c *faultfs.Client) error {
		return c.Latency(ctx, s.op(), s.Prefix, time.Duration(s.Latency), time.Duration(s.Jitter))
	})
}

// Heal implements Run.
func (s *slowDiskRun) Heal(ctx context.Context, env *Env) error { return s.heal(ctx, env) }

// DiskError fails matching filesystem operations with EIO with a
// probability.
type DiskError struct {
	disk
	Probability float64 `json:"probability"`
}

type diskErrorRun struct {
	DiskError `json:"-"`
	diskRun
}

// NewRun implements Fault.
func (f *DiskError) NewRun() Run { return &diskErrorRun{DiskError: *f} }

func (*DiskError) Kind() string { return "disk-error" }

// Resolve implements Run.
func (e *diskErrorRun) Resolve(ctx context.Context, env *Env) error {
	if e.Probability <= 0 || e.Probability > 1 {
		return fmt.Errorf("%w: disk-error probability %v: want (0, 1]", ErrBadFault, e.Probability)
	}
	return e.resolve(ctx, env, e.Kind(), e.disk)
}

// Inject implements Run.
func (e *diskErrorRun) Inject(ctx context.Context, env *Env) error {
	return e.each(env, func(c *faultfs.Client) error { return c.EIO(ctx, e.op(), e.Prefix, e.Probability) })
}

// Heal implements Run.
func (e *diskErrorRun) Heal(ctx context.Context, env *Env) error { return e.heal(ctx, env) }

// DiskHang blocks matching filesystem operations until healed.
type DiskHang struct{ disk }

type diskHangRun struct {
	DiskHang `json:"-"`
	diskRun
}

// NewRun implements Fault.
func (f *DiskHang) NewRun() Run { return &diskHangRun{DiskHang: *f} }

func (*DiskHang) Kind() string { return "disk-hang" }

// Resolve implements Run.
func (h *diskHangRun) Resolve(ctx context.Context, env *Env) error {
	return h.resolve(ctx, env, h.Kind(), h.disk)
}

// Inject implements Run.
func (h *diskHangRun) Inject(ctx context.Context, env *Env) error {
	return h.each(env, func(c *faultfs.Client) error { return c.Hang(ctx, h.op(), h.Prefix) })
}

// Heal implements Run.
func (h *diskHangRun) Heal(ctx context.Context, env *Env) error { return h.heal(ctx, env) }
