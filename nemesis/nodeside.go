package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/nftables"

	"github.com/isrlab/isrlab/compose"
)

// injectNodes cuts each link in the receiving node's namespace (or on its
// host, for a remote node): its input hook drops IPv4 packets from the
// senders it holds a grudge against.
func (p *partitionRun) injectNodes(ctx context.Context, env *Env) error {
	if err := eachRemote(env, sortedKeys(p.Cut), func(n *compose.Node) error {
		return remoteDropFrom(ctx, env, n, p.Table, p.Cut[n.Name])
	}); err != nil {
		return err
	}
	for _, to := range sortedKeys(p.Cut) {
		n, err := env.node(to)
		if err != nil {
			return err
		}
		if n.Remote != nil {
			continue
		}
		nft, done, err := nftIn(n.NetNS)
		if err != nil {
			return err
		}
		t, ch := hostTable(nft, p.Table, nftables.ChainHookInput)
		for _, from := range p.Cut[to] {
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
func (l *lossRun) injectNodes(ctx context.Context, env *Env) error {
	if err := eachRemote(env, l.Resolved, func(n *compose.Node) error {
		return remoteLoss(ctx, n, l.Table, l.Percent, l.Direction)
	}); err != nil {
		return err
	}
	for _, name := range l.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if n.Remote != nil {
			continue
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

// healNodeTables deletes table in each node's namespace or on its host.
func healNodeTables(ctx context.Context, env *Env, nodes []string, table string) error {
	var errs []error
	if table != "" {
		errs = append(errs, eachRemote(env, nodes, func(n *compose.Node) error {
			return remoteRemoveTables(ctx, n, env.runID(), table)
		}))
	}
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n.Remote != nil {
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

// eachRemote runs fn on every node of names that lives on another
// machine, all at once (each is a round trip to its own host), and joins
// the errors.
func eachRemote(env *Env, names []string, fn func(*compose.Node) error) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		n, err := env.node(name)
		if err != nil {
			errs[i] = err
			continue
		}
		if n.Remote == nil {
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

func sortedKeys(g Grudge) []string {
	out := make([]string, 0, len(g))
	for k := range g {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
