package nemesis

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/isrlab/isrlab/units"
)

func init() { register(func() Fault { return &Packet{} }) }

// Packet duplicates, reorders and corrupts a share of the packets to and
// from the nodes (Jepsen's packet faults), through the NFQUEUE delayer in
// the switch namespace, or in each node's own namespace where there is no
// switch (nodequeue.go); this kernel has no netem. The fault records the
// mode and the side. What each does, layer by layer:
//
//   - duplicate: a copy of the packet follows it on the wire. TCP discards
//     a segment it already has (a D-SACK), so Kafka never sees a
//     duplicated request: Kafka-level duplicates come from retries, not
//     from the network. UDP delivers both.
//   - reorder: the packet is held back Gap (default 10ms) while the ones
//     after it pass. TCP puts the bytes back in order (a reordered segment
//     can look lost and be retransmitted early); UDP delivers them out of
//     order.
//   - corrupt: one bit of the TCP or UDP payload flips. Its checksum is
//     then wrong, and the receiving kernel drops the packet: for TCP a
//     loss and a retransmission, for UDP a loss; the IP header is never
//     touched (a corrupt IP header is dropped the same way, before TCP).
//     With checksum "fix" the checksum is computed again, as a middlebox
//     or a NIC that corrupts before checksumming would, and the flipped
//     bit reaches the application: a Kafka record batch's CRC-32C catches
//     it where it covers the bytes (the broker refuses a produce with
//     CORRUPT_MESSAGE, a follower refuses the fetched batch and fetches it
//     again, a consumer with check.crcs refuses it), and a flipped length,
//     request header or base offset, which the CRC does not cover, breaks
//     the request's framing or lands as is.
//
// Correlation makes each draw lean on the previous one of its kind, as
// netem's does.
type Packet struct {
	Nodes       []string       `json:"nodes"`
	Duplicate   Percent        `json:"duplicate,omitempty"`
	Reorder     Percent        `json:"reorder,omitempty"`
	Corrupt     Percent        `json:"corrupt,omitempty"`
	Correlation Percent        `json:"correlation,omitempty"`
	Gap         units.Duration `json:"gap,omitempty"`
	// Checksum is "keep" (default: a corrupted packet keeps its stale
	// checksum and the receiver drops it) or "fix".
	Checksum string `json:"checksum,omitempty"`
	// Direction is "both" (default), "in" (to the nodes) or "out".
	Direction string `json:"direction,omitempty"`
}

type packetRun struct {
	Packet `json:"-"`
	nodesRun
	// Mode is "nfqueue" (set by Inject), and the delayer.
	delayerRun
}

// NewRun implements Fault.
func (f *Packet) NewRun() Run { return &packetRun{Packet: *f} }

// Kind implements Fault.
func (*Packet) Kind() string { return "packet" }

const defaultReorderGap = 10 * time.Millisecond

// Validate implements validator.
func (p *Packet) Validate() error {
	for _, f := range []struct {
		name string
		v    Percent
	}{{"duplicate", p.Duplicate}, {"reorder", p.Reorder}, {"corrupt", p.Corrupt}, {"correlation", p.Correlation}} {
		if err := f.v.check(f.name, true); err != nil {
			return err
		}
	}
	if p.Duplicate == 0 && p.Reorder == 0 && p.Corrupt == 0 {
		return fmt.Errorf("%w: packet needs duplicate, reorder or corrupt (percentages, like 20%%)", ErrBadFault)
	}
	if p.Gap < 0 || time.Duration(p.Gap) > 10*time.Second {
		return fmt.Errorf("%w: packet gap %v: want up to 10s", ErrBadFault, time.Duration(p.Gap))
	}
	if p.Gap != 0 && p.Reorder == 0 {
		return fmt.Errorf("%w: packet gap is how long a reordered packet is held back: give reorder too", ErrBadFault)
	}
	switch p.Checksum {
	case "", "keep":
	case "fix":
		if p.Corrupt == 0 {
			return fmt.Errorf("%w: packet checksum fix is about corrupted packets: give corrupt too", ErrBadFault)
		}
	default:
		return fmt.Errorf("%w: packet checksum %q: want keep or fix", ErrBadFault, p.Checksum)
	}
	return checkDirection(p.Direction)
}

// Resolve implements Run.
func (p *packetRun) Resolve(ctx context.Context, env *Env) error {
	if err := p.Validate(); err != nil {
		return err
	}
	ns, err := env.ResolveTargets(ctx, p.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: packet needs nodes", ErrBadFault)
	}
	if env.nodeSide() {
		if err := queueNodes(env, p.Kind(), ns); err != nil {
			return err
		}
	} else if _, err := env.switchNS(); err != nil {
		return err
	}
	p.Resolved, p.Table = ns, tableName(env.runID(), env.id)
	return nil
}

// config is the delayer configuration that plays the fault.
func (p *packetRun) config(env *Env) (PacketConfig, error) {
	c := PacketConfig{Duplicate: float64(p.Duplicate) / 100, Reorder: float64(p.Reorder) / 100,
		Corrupt: float64(p.Corrupt) / 100, Correlation: float64(p.Correlation) / 100,
		Gap: time.Duration(p.Gap), FixChecksum: p.Checksum == "fix"}
	if c.Reorder > 0 && c.Gap == 0 {
		c.Gap = defaultReorderGap
	}
	if c.Duplicate > 0 && !env.nodeSide() {
		// Copies are addressed to their destination's MAC address: any
		// node of the cluster.
		macs, err := nodeMACs(env)
		if err != nil {
			return c, err
		}
		c.MACs = macs
	}
	return c, nil
}

// Inject implements Run.
func (p *packetRun) Inject(ctx context.Context, env *Env) error {
	pc, err := p.config(env)
	if err != nil {
		return err
	}
	cfg := DelayerConfig{Packet: pc, Seed: env.rng().Int63()}
	return p.steer(ctx, env, p.Kind(), cfg, p.Resolved, p.Direction)
}

// Heal implements Run.
func (p *packetRun) Heal(ctx context.Context, env *Env) error {
	return p.unsteer(ctx, env, p.Resolved)
}

// nodeMACs maps each node's address to the MAC address of its interface.
func nodeMACs(env *Env) (map[netip.Addr]net.HardwareAddr, error) {
	out := map[netip.Addr]net.HardwareAddr{}
	for _, n := range env.Cluster.Nodes {
		if n.NetNS == "" || n.Iface == "" || n.Remote != nil {
			continue
		}
		err := withLink(link{n.NetNS, n.Iface}, func(_ *netlink.Handle, l netlink.Link) error {
			out[n.Addr] = l.Attrs().HardwareAddr
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("packet: the MAC address of %s: %w", n.Name, err)
		}
	}
	return out, nil
}
