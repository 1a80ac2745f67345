package compose

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/isrlab/isrlab/kproxy"
)

// ProxiedBrokerPort is where a proxied broker listens, on its own
// loopback: its Kafka proxy holds BrokerPort on the node's address, the
// broker's advertised listener, so clients and the other brokers reach it
// only through the proxy.
const ProxiedBrokerPort = 19092

// ProxySpec is a broker's Kafka-protocol proxy (kproxy): a daemon (Argv,
// `isrlab kproxy`) in the broker's network namespace that listens on
// Listen, the broker's advertised address, forwards to Upstream, the
// broker's own listener on the node's loopback, and takes fault rules on
// Control. The backend starts it before the broker; it outlives the
// broker's kills and restarts (a connection to a dead broker is closed).
type ProxySpec struct {
	Listen   string   `json:"listen"`
	Upstream string   `json:"upstream"`
	Control  string   `json:"control"`
	LogFile  string   `json:"log_file"`
	Argv     []string `json:"argv"`
}

// BrokerProxy lays out the Kafka proxy of broker n: its log in the node's
// directory, its control socket there too if the path fits a Unix socket
// address, else in the state directory, named after the run. Its random
// source is seeded from the run id and node name.
func BrokerProxy(bin string, t Topology, n NodeSpec) (ProxySpec, error) {
	ctl := filepath.Join(n.Dir, "kproxy.sock")
	if len(ctl) > kproxy.MaxSocketPath {
		ctl = filepath.Join(StateDir(), "kproxy-"+t.RunID+"-"+n.Name+".sock")
	}
	if len(ctl) > kproxy.MaxSocketPath {
		return ProxySpec{}, fmt.Errorf("%w: Kafka proxy control socket of %s: %s and %s are longer than %d bytes; use a shorter run or state directory",
			ErrBadTopology, n.Name, filepath.Join(n.Dir, "kproxy.sock"), ctl, kproxy.MaxSocketPath)
	}
	h := fnv.New64a()
	h.Write([]byte(t.RunID + "/" + n.Name + "/kproxy"))
	p := ProxySpec{
		Listen:   netip.AddrPortFrom(n.Addr, BrokerPort).String(),
		Upstream: "127.0.0.1:" + strconv.Itoa(ProxiedBrokerPort),
		Control:  ctl,
		LogFile:  filepath.Join(n.Dir, "kproxy.log"),
	}
	o := kproxy.Options{Listen: p.Listen, Upstream: p.Upstream, RunID: t.RunID, Seed: int64(h.Sum64() >> 1)}
	p.Argv = append([]string{bin}, kproxy.Args(o, ctl)...)
	return p, nil
}

// Proxies maps each broker behind a Kafka proxy to the proxy's control
// socket, the form nemesis.Env.Proxies takes; nil if none is.
func (t Topology) Proxies() map[string]string {
	var out map[string]string
	for _, n := range t.Nodes {
		if n.Proxy == nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[n.Name] = n.Proxy.Control
	}
	return out
}

// StartProxy starts the Kafka proxy of node n (n.Proxy) in its own session,
// its sockets in the network namespace start puts it in (nil: this
// process's), and returns once its control socket answers.
func StartProxy(ctx context.Context, n NodeSpec, start func(cmd *exec.Cmd) error) (pid int, pstart uint64, err error) {
	p := n.Proxy
	if p == nil || len(p.Argv) == 0 {
		return 0, 0, fmt.Errorf("node %s has no Kafka proxy", n.Name)
	}
	cl := kproxy.NewClient(p.Control)
	return startDaemon(ctx, daemon{
		what:    "Kafka proxy of " + n.Name,
		argv:    p.Argv,
		dir:     n.Dir,
		logFile: p.LogFile,
		start:   start,
		ready: func(ctx context.Context) error {
			_, err := cl.Status(ctx)
			return err
		},
		notReady: "exited before listening on " + p.Listen,
	})
}

// RemoveProxySockets removes the control sockets of st's Kafka proxies
// (a proxy removes its own on SIGTERM; teardown SIGKILLs it with
// everything else in the run's namespaces). Missing sockets are fine.
func RemoveProxySockets(st *State) error {
	var errs []error
	for node, sock := range st.Topology.Proxies() {
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove Kafka proxy socket of %s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}
