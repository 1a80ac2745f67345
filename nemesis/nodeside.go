package nemesis

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
)

// injectNodes cuts each link in the receiving node's namespace: its input
// hook drops IPv4 packets from the senders it holds a grudge against.
func (p *Partition) injectNodes(env *Env) error {
	for _, to := range sortedKeys(p.Grudge) {
		n, err := env.node(to)
		if err != nil {
			return err
		}
		nft, done, err := nftIn(n.NetNS)
		if err != nil {
			return err
		}
		t, ch := hostTable(nft, p.Table, nftables.ChainHookInput)
		for _, from := range p.Grudge[to] {
			f, err := env.node(from)
			if err != nil {
				done()
				return err
			}
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(matchAddr(true, f.Addr.AsSlice()), drop())})
		}
		err = nft.Flush()
		done()
		if err != nil {
			return fmt.Errorf("partition: add nftables rules in %s: %w", to, err)
		}
	}
	return nil
}

// injectNodes drops a random share of each node's packets on its own input
// (in) and output (out) hooks.
func (l *Loss) injectNodes(env *Env) error {
	for _, name := range l.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		nft, done, err := nftIn(n.NetNS)
		if err != nil {
			return err
		}
		if l.Direction != "out" {
			t, ch := hostTable(nft, l.Table, nftables.ChainHookInput)
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: randomDrop(nil, l.Percent)})
		}
		if l.Direction != "in" {
			t, ch := hostTable(nft, l.Table, nftables.ChainHookOutput)
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: randomDrop(nil, l.Percent)})
		}
		err = nft.Flush()
		done()
		if err != nil {
			return fmt.Errorf("loss: add nftables rules in %s: %w", name, err)
		}
	}
	return nil
}

// healNodeTables deletes table in each node's namespace.
func healNodeTables(env *Env, nodes []string, table string) error {
	var errs []error
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nft, done, err := nftIn(n.NetNS)
		if err != nil {
			errs = append(errs, ignoreMissing(err))
			continue
		}
		errs = append(errs, delTableOf(nft, nftables.TableFamilyIPv4, table))
		done()
	}
	return errors.Join(errs...)
}

func sortedKeys(g Grudge) []string {
	out := make([]string, 0, len(g))
	for k := range g {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
