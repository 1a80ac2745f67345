package nemesis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TablePrefix starts the name of every nftables table a fault creates:
// isrlab-<run>-<fault id>.
const TablePrefix = "isrlab-"

// tableName names the bridge table of fault id in run.
func tableName(run, id string) string { return TablePrefix + run + "-" + id }

// nftIn opens an nftables connection inside the namespace at path.
func nftIn(path string) (*nftables.Conn, func(), error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open switch netns %s: %w", path, err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("nftables in %s: %w", path, err)
	}
	return c, func() { ns.Close() }, nil
}

// nodeSide reports whether network faults act in node namespaces (or, on
// the ssh backend, on the nodes' hosts).
func (e *Env) nodeSide() bool {
	return e.NodeSide || !e.Cluster.Caps().Switch
}

// switchNS is the namespace switch-side network faults act in.
func (e *Env) switchNS() (string, error) {
	if !e.Cluster.Caps().Switch || e.Cluster.SwitchNS == "" {
		return "", fmt.Errorf("%w: this fault needs the netns backend's switch namespace (cluster %s runs on %s)",
			ErrUnsupported, e.Cluster.Name, e.Cluster.Backend)
	}
	return e.Cluster.SwitchNS, nil
}

// side is where a network fault acts, recorded in the fault.
func (e *Env) side() (string, error) {
	if e.nodeSide() {
		return SideNode, nil
	}
	if _, err := e.switchNS(); err != nil {
		return "", err
	}
	return SideSwitch, nil
}

// Where network faults act.
const (
	SideSwitch = "switch" // the bridge in the switch namespace
	SideNode   = "node"   // each node's own namespace
)

// hostTable adds an IPv4 table with a filter chain on hook (input or
// output) in a node's namespace.
func hostTable(c *nftables.Conn, name string, hook *nftables.ChainHook) (*nftables.Table, *nftables.Chain) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: name})
	chName := "input"
	if hook == nftables.ChainHookOutput {
		chName = "output"
	}
	ch := c.AddChain(&nftables.Chain{Name: chName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: hook, Priority: nftables.ChainPriorityFilter})
	return t, ch
}

// nft opens nftables in the switch namespace.
func (e *Env) nft() (*nftables.Conn, func(), error) {
	sw, err := e.switchNS()
	if err != nil {
		return nil, nil, err
	}
	return nftIn(sw)
}

// bridgeTable adds a bridge-family table with a forward filter chain: the
// hook every frame between two bridge ports passes.
func bridgeTable(c *nftables.Conn, name string) (*nftables.Table, *nftables.Chain) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: name})
	ch := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	return t, ch
}

// ipTable adds an IPv4 table with a forward filter chain. With
// br_netfilter's bridge-nf-call-iptables on in the switch namespace,
// bridged IPv4 packets pass it; it is where the NFQUEUE target works (this
// kernel has no nft queue expression and no bridge-family queueing).
func ipTable(c *nftables.Conn, name string) (*nftables.Table, *nftables.Chain) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: name})
	ch := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	return t, ch
}

// families are the table families faults create tables in.
var families = []nftables.TableFamily{nftables.TableFamilyBridge, nftables.TableFamilyIPv4}

// delTableOf removes a table; a missing table is not an error.
func delTableOf(c *nftables.Conn, fam nftables.TableFamily, name string) error {
	c.DelTable(&nftables.Table{Family: fam, Name: name})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nftables table %s: %w", name, err)
	}
	return nil
}

// ifname is an interface name as nftables compares it: NUL-padded to 16 bytes.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// matchPort matches frames entering (in) or leaving (out) the bridge port.
func matchPort(key expr.MetaKey, port string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(port)},
	}
}

func drop() expr.Any { return &expr.Verdict{Kind: expr.VerdictDrop} }

// dropLink drops frames from port from to port to.
func dropLink(from, to string) []expr.Any {
	return append(append(matchPort(expr.MetaKeyIIFNAME, from), matchPort(expr.MetaKeyOIFNAME, to)...),
		&expr.Verdict{Kind: expr.VerdictDrop})
}

// lossScale is the resolution of random loss: 1/10000 (0.01 %).
const lossScale = 10000

// randomDrop drops a matched frame with probability pct/100: a random
// number modulo lossScale, turned big-endian so that "less than" compares
// numerically, below the threshold.
func randomDrop(match []expr.Any, pct float64) []expr.Any {
	th := uint32(pct / 100 * lossScale)
	data := make([]byte, 4)
	binary.BigEndian.PutUint32(data, th)
	return append(append([]expr.Any(nil), match...),
		&expr.Numgen{Register: 1, Modulus: lossScale, Type: unix.NFT_NG_RANDOM},
		&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
		&expr.Cmp{Op: expr.CmpOpLt, Register: 1, Data: data},
		&expr.Verdict{Kind: expr.VerdictDrop},
	)
}

// matchAddr matches IPv4 packets whose source (src) or destination address
// is addr.
func matchAddr(src bool, addr []byte) []expr.Any {
	off := uint32(16)
	if src {
		off = 12
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
	}
}

// Tables lists the nftables tables of run (every run with run == "") in the
// switch namespace at path.
func Tables(path, run string) ([]string, error) {
	c, done, err := nftIn(path)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []string
	for _, fam := range families {
		ts, err := c.ListTablesOfFamily(fam)
		if err != nil {
			return nil, fmt.Errorf("list nftables tables: %w", err)
		}
		for _, t := range ts {
			if strings.HasPrefix(t.Name, TablePrefix+run) {
				out = append(out, t.Name)
			}
		}
	}
	return out, nil
}

const (
	iif = expr.MetaKeyIIFNAME // frames from the node (it sent them into its port)
	oif = expr.MetaKeyOIFNAME // frames to the node
)
