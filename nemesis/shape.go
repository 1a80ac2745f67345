package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/units"
)

func init() { register(func() Fault { return &SlowNet{} }) }

// qdiscMajor is the handle major of every root qdisc a fault adds, so that
// Clean removes only ours.
const qdiscMajor = 0x1517

// ParseRate parses a tc-style rate: "1mbit", "500kbit", "10gbit", "800bit"
// (bits per second) or "1mbps", "64kbps", "100bps" (bytes per second), with
// SI multiples. It returns bytes per second.
func ParseRate(s string) (uint64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%w: rate %q: want a number and a unit like 1mbit", ErrBadFault, s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: rate %q", ErrBadFault, s)
	}
	unit := s[i:]
	mult := 1.0
	switch unit[0] {
	case 'k':
		mult, unit = 1e3, unit[1:]
	case 'm':
		mult, unit = 1e6, unit[1:]
	case 'g':
		mult, unit = 1e9, unit[1:]
	}
	switch unit {
	case "bit":
		mult /= 8
	case "bps":
	default:
		return 0, fmt.Errorf("%w: rate %q: unit must be bit, kbit, mbit, gbit, bps, kbps, mbps or gbps", ErrBadFault, s)
	}
	r := uint64(v * mult)
	if r == 0 {
		return 0, fmt.Errorf("%w: rate %q is below 1 byte/s", ErrBadFault, s)
	}
	return r, nil
}

// SlowNet limits the bandwidth of the nodes' links with a token bucket
// (TBF) and delays their packets (netem where the kernel has it, else the
// NFQUEUE delayer). Direction "in" shapes the switch port toward each node,
// "out" the node's own interface, "both" (default) both.
type SlowNet struct {
	Nodes     []string       `json:"nodes"`
	Rate      string         `json:"rate,omitempty"`
	Delay     units.Duration `json:"delay,omitempty"`
	Jitter    units.Duration `json:"jitter,omitempty"`
	Direction string         `json:"direction,omitempty"`
}

type slowNetRun struct {
	SlowNet `json:"-"`
	nodesRun
	// The delay's mode ("netem" or "nfqueue") and delayer.
	delayerRun
}

// NewRun implements Fault.
func (f *SlowNet) NewRun() Run { return &slowNetRun{SlowNet: *f} }

// delayerRun is what a fault played by the NFQUEUE delayer records when it
// fires.
type delayerRun struct {
	// Mode is how the fault is applied: "netem" or "nfqueue".
	Mode string `json:"mode,omitempty"`
	// Table is the nftables table steering packets to the queue.
	Table string `json:"table,omitempty"`
	// Queue and the delayer process (pid and start time) of nfqueue mode.
	Queue        uint16 `json:"queue,omitempty"`
	DelayerPID   int    `json:"delayer_pid,omitempty"`
	DelayerStart uint64 `json:"delayer_start,omitempty"`
	// Side is where the queue is: "switch" (one delayer in the switch
	// namespace) or "node" (one in each node's own namespace, NodeDelayers).
	Side         string       `json:"side,omitempty"`
	NodeDelayers []NodeHelper `json:"node_delayers,omitempty"`
}

// steer starts the fault's delayer(s) and steers the nodes' packets to them,
// at the switch or in the nodes' namespaces.
func (d *delayerRun) steer(ctx context.Context, env *Env, kind string, cfg DelayerConfig, nodes []string, direction string) error {
	d.Mode, d.Queue = "nfqueue", queueNum(env.id)
	cfg.Queue = d.Queue
	if env.nodeSide() {
		d.Side = SideNode
		var err error
		d.NodeDelayers, err = steerInNodes(ctx, env, kind, cfg, d.Table, nodes, direction)
		return err
	}
	d.Side = SideSwitch
	cfg.NetNS = env.Cluster.SwitchNS
	var err error
	d.DelayerPID, d.DelayerStart, err = steerToQueue(ctx, env, kind, cfg, d.Table, nodes, direction)
	return err
}

// unsteer undoes steer.
func (d *delayerRun) unsteer(ctx context.Context, env *Env, nodes []string) error {
	if d.Side == SideNode {
		return unsteerNodes(ctx, env, d.Table, nodes, d.NodeDelayers)
	}
	return unsteer(ctx, env, d.Table, d.DelayerPID, d.DelayerStart)
}

func (*SlowNet) Kind() string { return "slow-net" }

// Resolve implements Run.
func (s *slowNetRun) Resolve(ctx context.Context, env *Env) error {
	if s.Rate == "" && s.Delay <= 0 && s.Jitter <= 0 {
		return fmt.Errorf("%w: slow-net needs a rate or a delay", ErrBadFault)
	}
	if s.Rate != "" {
		if _, err := ParseRate(s.Rate); err != nil {
			return err
		}
	}
	if s.Delay < 0 || s.Jitter < 0 {
		return fmt.Errorf("%w: negative delay or jitter", ErrBadFault)
	}
	if err := checkDirection(s.Direction); err != nil {
		return err
	}
	ns, err := env.ResolveTargets(ctx, s.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: slow-net needs nodes", ErrBadFault)
	}
	switch {
	case !env.nodeSide() && s.Direction != "out":
		if _, err := env.switchNS(); err != nil {
			return err
		}
	case !env.nodeSide():
	case s.Direction != "out" && s.Rate != "":
		return fmt.Errorf("%w: slow-net on nodes' own namespaces limits the rate only of what they send: use direction out, or a delay without a rate", ErrUnsupported)
	case s.Direction != "out":
		// A delay of what the nodes receive: their own namespaces' queues.
		if err := queueNodes(env, s.Kind(), ns); err != nil {
			return err
		}
	}
	s.Resolved, s.Table = ns, tableName(env.runID(), env.id)
	return nil
}

// link is one interface a shaping fault acts on: its namespace and name.
type link struct{ ns, name string }

func (s *slowNetRun) links(env *Env) ([]link, error) {
	// On the nodes' side only what they send is shaped by a qdisc; a delay
	// of what they receive is their queues' (injectQueue).
	atSwitch := s.Direction != "out" && !env.nodeSide()
	var sw string
	if atSwitch {
		var err error
		if sw, err = env.switchNS(); err != nil {
			return nil, err
		}
	}
	var out []link
	for _, name := range s.Resolved {
		n, err := env.node(name)
		if err != nil {
			return nil, err
		}
		if atSwitch {
			out = append(out, link{sw, n.SwitchPort})
		}
		if s.Direction != "in" {
			out = append(out, link{n.NetNS, n.Iface})
		}
	}
	return out, nil
}

// remote returns the resolved nodes if they live on other machines.
func (s *slowNetRun) remote(env *Env) ([]*compose.Node, error) {
	var out []*compose.Node
	for _, name := range s.Resolved {
		n, err := env.node(name)
		if err != nil {
			return nil, err
		}
		if n.Remote != nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// Inject implements Run.
func (s *slowNetRun) Inject(ctx context.Context, env *Env) error {
	if rs, err := s.remote(env); err != nil || len(rs) > 0 {
		if err != nil {
			return err
		}
		return s.injectRemote(ctx, env, rs)
	}
	links, err := s.links(env)
	if err != nil {
		return err
	}
	var rate uint64
	if s.Rate != "" {
		rate, _ = ParseRate(s.Rate)
	}
	delayed := s.Delay > 0 || s.Jitter > 0
	if delayed && env.nodeSide() && s.Direction != "out" {
		s.Mode = "nfqueue" // netem on a node's interface delays only what it sends
	}
	if delayed && s.Mode != "nfqueue" {
		// netem does rate and delay in one qdisc where the kernel has it.
		err := eachLink(links, func(h *netlink.Handle, l netlink.Link) error { return addNetem(h, l, &s.SlowNet, rate) })
		if err == nil {
			s.Mode = "netem"
			return nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		eachLink(links, delQdisc) //nolint:errcheck // undo a partial netem
		s.Mode = "nfqueue"
	}
	if rate > 0 {
		if err := eachLink(links, func(h *netlink.Handle, l netlink.Link) error { return addTBF(h, l, rate) }); err != nil {
			return err
		}
	}
	if delayed {
		return s.injectQueue(ctx, env)
	}
	return nil
}

// Heal implements Run.
func (s *slowNetRun) Heal(ctx context.Context, env *Env) error {
	if rs, err := s.remote(env); err != nil || len(rs) > 0 {
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range rs {
			errs = append(errs, remoteUnshape(ctx, n))
		}
		if s.Mode == "nfqueue" {
			errs = append(errs, s.healQueue(ctx, env))
		}
		return errors.Join(errs...)
	}
	links, err := s.links(env)
	if err != nil {
		return err
	}
	err = eachLink(links, delQdisc)
	if s.Mode == "nfqueue" {
		err = errors.Join(err, s.healQueue(ctx, env))
	}
	return err
}

// injectRemote shapes what the nodes on other hosts send with a qdisc
// there (netem, or TBF for a rate alone), and delays through a delayer on
// each host (the nodes' queues) what netem cannot: a delay into the nodes,
// or any delay where a host's kernel lacks netem.
func (s *slowNetRun) injectRemote(ctx context.Context, env *Env, rs []*compose.Node) error {
	var rate uint64
	if s.Rate != "" {
		rate, _ = ParseRate(s.Rate)
	}
	delayed := s.Delay > 0 || s.Jitter > 0
	viaQueue := delayed && s.Direction != "out"
	for i := 0; i < len(rs); i++ {
		mode, err := s.remoteShape(ctx, rs[i], rate, delayed && !viaQueue)
		if errors.Is(err, errNoNetem) && !viaQueue {
			// Every node's delay goes through the queues then: undo the
			// netem delays of the nodes before and start again.
			for _, n := range rs[:i] {
				if err := remoteUnshape(ctx, n); err != nil {
					return err
				}
			}
			viaQueue, i = true, -1
			continue
		}
		if err != nil {
			return err
		}
		if delayed && !viaQueue {
			s.Mode = mode
		}
	}
	if viaQueue {
		return s.injectQueue(ctx, env)
	}
	return nil
}

// eachLink runs fn with a netlink handle in each link's namespace.
func eachLink(links []link, fn func(*netlink.Handle, netlink.Link) error) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, withLink(l, fn))
	}
	return errors.Join(errs...)
}

func withLink(l link, fn func(*netlink.Handle, netlink.Link) error) error {
	ns, err := netns.GetFromPath(l.ns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", l.ns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", l.ns, err)
	}
	defer h.Close()
	lk, err := h.LinkByName(l.name)
	if err != nil {
		return fmt.Errorf("find %s: %w", l.name, err)
	}
	return fn(h, lk)
}

func rootAttrs(l netlink.Link) netlink.QdiscAttrs {
	return netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(qdiscMajor, 0), Parent: netlink.HANDLE_ROOT}
}

// addTBF replaces the link's root qdisc with a token bucket at rate bytes/s.
func addTBF(h *netlink.Handle, l netlink.Link, rate uint64) error {
	// Bucket: 10 ms at the rate, at least a few full frames; queue: 100 ms.
	burst := max(rate/100, 3*1514)
	limit := max(rate/10, 2*burst)
	q := &netlink.Tbf{QdiscAttrs: rootAttrs(l), Rate: rate,
		Buffer: netlink.Xmittime(rate, uint32(burst)), Limit: uint32(limit)}
	if err := h.QdiscReplace(q); err != nil {
		return fmt.Errorf("tbf on %s: %w", l.Attrs().Name, err)
	}
	return nil
}

func addNetem(h *netlink.Handle, l netlink.Link, s *SlowNet, rate uint64) error {
	q := netlink.NewNetem(rootAttrs(l), netlink.NetemQdiscAttrs{
		Latency: uint32(time.Duration(s.Delay) / time.Microsecond),
		Jitter:  uint32(time.Duration(s.Jitter) / time.Microsecond),
		Limit:   10000, Rate64: rate,
	})
	if err := h.QdiscReplace(q); err != nil {
		return fmt.Errorf("netem on %s: %w", l.Attrs().Name, err)
	}
	return nil
}

// delQdisc removes the link's root qdisc if it is one of ours.
func delQdisc(h *netlink.Handle, l netlink.Link) error {
	qs, err := h.QdiscList(l)
	if err != nil {
		return fmt.Errorf("list qdiscs of %s: %w", l.Attrs().Name, err)
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent == netlink.HANDLE_ROOT && a.Handle == netlink.MakeHandle(qdiscMajor, 0) {
			if err := h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("delete qdisc on %s: %w", l.Attrs().Name, err)
			}
		}
	}
	return nil
}

// Qdiscs lists the root qdiscs a fault added in the namespace at path, as
// "link:kind".
func Qdiscs(path string) ([]string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		qs, err := h.QdiscList(l)
		if err != nil {
			continue
		}
		for _, q := range qs {
			if q.Attrs().Handle == netlink.MakeHandle(qdiscMajor, 0) {
				out = append(out, l.Attrs().Name+":"+q.Type())
			}
		}
	}
	return out, nil
}
