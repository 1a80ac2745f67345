package netns

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NodeIface is each node's interface inside its own namespace.
const NodeIface = "eth0"

// BridgeName is the lab bridge in the switch namespace; it carries the run id.
func BridgeName(run string) string { return "isr" + run }

// PortName is node's veth end on the bridge, in the switch namespace.
func PortName(node string) string { return "p-" + node }

// wire joins the namespaces: a bridge in sw, and for each node a veth pair
// whose bridge end (PortName) stays in sw and whose other end becomes eth0
// with the node's address inside the node's namespace.
func wire(swPath, bridge string, subnet netip.Prefix, nodes []wireNode) error {
	sw, err := netns.GetFromPath(swPath)
	if err != nil {
		return fmt.Errorf("open switch netns: %w", err)
	}
	defer sw.Close()
	h, err := netlink.NewHandleAt(sw)
	if err != nil {
		return fmt.Errorf("netlink in switch netns: %w", err)
	}
	defer h.Close()
	if err := linkUp(h, "lo"); err != nil {
		return err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge %s: %w", bridge, err)
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("bridge %s up: %w", bridge, err)
	}
	if br.Index == 0 {
		l, err := h.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("find bridge %s: %w", bridge, err)
		}
		br.Index = l.Attrs().Index
	}
	for _, n := range nodes {
		if err := wireNode1(h, br, n, subnet); err != nil {
			return fmt.Errorf("wire %s: %w", n.name, err)
		}
	}
	return nil
}

type wireNode struct {
	name string
	ns   string // namespace path
	addr netip.Addr
}

func wireNode1(h *netlink.Handle, br *netlink.Bridge, n wireNode, subnet netip.Prefix) error {
	ns, err := netns.GetFromPath(n.ns)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer ns.Close()
	port := PortName(n.name)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: port, MasterIndex: br.Index},
		PeerName:      NodeIface,
		PeerNamespace: netlink.NsFd(ns),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", port, err)
	}
	if err := h.LinkSetUp(veth); err != nil {
		return fmt.Errorf("veth %s up: %w", port, err)
	}
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in node netns: %w", err)
	}
	defer nh.Close()
	if err := linkUp(nh, "lo"); err != nil {
		return err
	}
	eth, err := nh.LinkByName(NodeIface)
	if err != nil {
		return fmt.Errorf("find %s: %w", NodeIface, err)
	}
	ipn := &net.IPNet{IP: n.addr.AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}
	if err := nh.AddrAdd(eth, &netlink.Addr{IPNet: ipn}); err != nil {
		return fmt.Errorf("address %s: %w", n.addr, err)
	}
	if err := nh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("%s up: %w", NodeIface, err)
	}
	return nil
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	return nil
}
