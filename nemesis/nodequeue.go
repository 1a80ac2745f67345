package nemesis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/isrlab/isrlab/compose"
)

// Without a switch namespace (the Docker backend, or the netns backend with
// node-side faults) the packet faults and slow-net's delay act in each
// node's own namespace: a delayer process lives there, serving the
// namespace's queue, and the node's input and output hooks steer its
// packets to it. Loopback traffic is left alone, and so are the copies the
// delayer sends itself for duplicates (a raw IPv4 socket whose packets
// carry dupMark: to a peer they leave by the node's output hook, to the
// node itself they come back in through loopback).

// dupMark is the packet mark of a node-side delayer's duplicates.
const dupMark = 0x15b1ab

// NodeHelper is a helper process of a fault in one node's namespace.
type NodeHelper struct {
	Node  string `json:"node"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// queueNodes checks that every node can take a node-side delayer: it
// lives in a namespace of its own on this machine, or on a host of its own
// (remotequeue.go).
func queueNodes(env *Env, kind string, names []string) error {
	for _, name := range names {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if n.NetNS == "" && n.Remote == nil {
			return fmt.Errorf("%w: %s on %s: the node has no network namespace of its own", ErrUnsupported, kind, name)
		}
	}
	return nil
}

// steerInNodes starts a delayer serving cfg's queue in each node's
// namespace and steers the packets the node receives (direction in),
// sends (out) or both ("") to it. It returns the delayers started, even on
// failure, for the heal.
func steerInNodes(ctx context.Context, env *Env, kind string, cfg DelayerConfig, table string, nodes []string, direction string) ([]NodeHelper, error) {
	var hs []NodeHelper
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			return hs, err
		}
		c := cfg
		c.NetNS, c.Packet.DupMark, c.Packet.MACs = n.NetNS, dupMark, nil
		if n.Remote != nil {
			pid, err := remoteSteer(ctx, n, kind, c, env.runID(), table, direction)
			if pid > 0 {
				hs = append(hs, NodeHelper{Node: name, PID: pid})
			}
			if err != nil {
				return hs, err
			}
			continue
		}
		pid, start, err := startHelperIn(ctx, env, n.NetNS, DelayerArgs(c, env.runID()))
		if pid > 0 {
			hs = append(hs, NodeHelper{Node: name, PID: pid, Start: start})
		}
		if err != nil {
			return hs, err
		}
		nft, done, err := nftIn(n.NetNS)
		if err != nil {
			return hs, err
		}
		if direction != "out" {
			t, ch := hostTable(nft, table, nftables.ChainHookInput)
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: nodeQueueRule(expr.MetaKeyIIFNAME, cfg.Queue)})
		}
		if direction != "in" {
			t, ch := hostTable(nft, table, nftables.ChainHookOutput)
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: nodeQueueRule(expr.MetaKeyOIFNAME, cfg.Queue)})
		}
		err = nft.Flush()
		done()
		if err != nil {
			return hs, fmt.Errorf("%s: add nftables queue rules in %s: %w", kind, name, err)
		}
	}
	return hs, nil
}

// nodeQueueRule steers a packet to queue unless it passes loopback (key is
// the interface of its hook) or is a delayer's own copy.
func nodeQueueRule(key expr.MetaKey, queue uint16) []expr.Any {
	mark := binary.NativeEndian.AppendUint32(nil, dupMark)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: mark},
		nfqueueTarget(queue),
	}
}

// unsteerNodes deletes table in the nodes' namespaces, then stops their
// delayers, which release what they hold.
func unsteerNodes(ctx context.Context, env *Env, table string, nodes []string, hs []NodeHelper) error {
	errs := []error{healNodeTables(ctx, env, nodes, table)}
	for _, h := range hs {
		if n, err := env.node(h.Node); err == nil && n.Remote != nil {
			continue
		}
		errs = append(errs, stopProcess(ctx, h.PID, h.Start))
	}
	// On other hosts, by the files named after the fault: a delayer that
	// started without its pid reaching the lab is found too.
	errs = append(errs, eachRemote(env, nodes, func(n *compose.Node) error {
		return remoteStopDelayers(ctx, n, env.runID(), delayerFiles(table, n.Name))
	}))
	return errors.Join(errs...)
}

// nameDelayer names the calling process compose.HelperComm (the thread
// group's name, which /proc/PID/comm shows), so that clean and a node's
// teardown can tell it from the node's own processes.
func nameDelayer() {
	os.WriteFile("/proc/self/comm", []byte(compose.HelperComm), 0) //nolint:errcheck // a name only helps clean
}

// nodeDelayers returns the delayers in the node namespace at path.
func nodeDelayers(path string) []int { return compose.HelpersIn(path) }

// stopNodeDelayers stops the delayers in the node namespaces at paths.
func stopNodeDelayers(ctx context.Context, paths []string) error {
	var errs []error
	for _, p := range paths {
		if p == "" {
			continue
		}
		for _, pid := range nodeDelayers(p) {
			errs = append(errs, stopProcess(ctx, pid, compose.Identify(pid)))
		}
	}
	return errors.Join(errs...)
}
