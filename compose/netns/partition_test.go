package netns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// TestSwitchHandlesCutALink shows that a Node's handles are what a
// partition needs: an nftables bridge rule in Cluster.SwitchNS matching the
// nodes' SwitchPort cuts b1 -> b2 while the client still reaches b2, and
// deleting the run's table heals it.
func TestSwitchHandlesCutALink(t *testing.T) {
	requireNetns(t)
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := l.backend().Up(ctx, echoTopology("cut", l.runDir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down(context.Background())
	b1, b2 := c.Node("b1"), c.Node("b2")
	// A cut link drops SYNs: the dial during the cut ends by its timeout.
	fromB1 := func(d time.Duration) error {
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		conn, err := compose.NetNSDialer(b1.NetNS)(dctx, "tcp", fmt.Sprintf("%s:%d", b2.Addr, echoPort))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if err := fromB1(10 * time.Second); err != nil {
		t.Fatalf("b1 -> b2 before the cut: %v", err)
	}

	sw, err := netns.GetFromPath(c.SwitchNS)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	nft, err := nftables.New(nftables.WithNetNSFd(int(sw)))
	if err != nil {
		t.Fatal(err)
	}
	table := nft.AddTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: "isrlab-" + c.RunID})
	chain := nft.AddChain(&nftables.Chain{Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	nft.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(b1.SwitchPort)},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(b2.SwitchPort)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := nft.Flush(); err != nil {
		t.Skipf("nftables bridge filtering unavailable here: %v", err)
	}
	if err := fromB1(300 * time.Millisecond); err == nil {
		t.Fatal("b1 -> b2 connected through the cut")
	}
	if err := echo(ctx, c, "b2"); err != nil {
		t.Fatalf("client -> b2 during the cut: %v", err)
	}
	nft.DelTable(table)
	if err := nft.Flush(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "b1 -> b2 after the heal", func() error { return fromB1(time.Second) })
}

// ifname is an interface name as nftables compares it: NUL-padded to 16 bytes.
func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}
