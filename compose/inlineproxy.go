package compose

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/isrlab/isrlab/kproxy"
)

// InlineProxies puts a Kafka proxy in this process in front of each
// broker for the connections this process's clients make: c.Dial, and
// with it every client the lab makes from then on, dials a broker through
// the proxy of that broker (kproxy.DialVia). It is how kind: kafka faults
// reach a cluster the lab cannot put a proxy in front of (a backend
// without the KafkaProxy capability: the user's own hosts, containers):
// they act on the lab's clients' requests and responses, not on traffic
// between brokers, and not on clients in other processes (exec drivers).
//
// Each proxy serves its control socket in the state directory, named
// after the run and broker, so nemesis.Env.Proxies (the map returned)
// drives them as it drives proxy daemons. stop closes the sockets, every
// proxied connection and the dialer's wrapping; unproxied reports the
// addresses dialed on a broker's Kafka port that are no broker's the
// topology knows (a broker advertising another name than the lab's),
// which went direct.
func (c *Cluster) InlineProxies(ctx context.Context, log *slog.Logger) (sockets map[string]string, stop func(), unproxied func() []string, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		proxies []*kproxy.Proxy
		dones   []<-chan error
	)
	stopAll := func() {
		cancel()
		for _, d := range dones {
			<-d
		}
		for _, p := range proxies {
			p.Close()
		}
	}
	byAddr := map[string]*kproxy.Proxy{}
	sockets = map[string]string{}
	for _, n := range c.Topology.Role(RoleBroker) {
		h := fnv.New64a()
		h.Write([]byte(c.RunID + "/" + n.Name + "/kproxy"))
		p := kproxy.NewInline(kproxy.Options{RunID: c.RunID, Seed: int64(h.Sum64() >> 1), Log: log.With("node", n.Name)})
		ctl := filepath.Join(StateDir(), "kproxy-"+c.RunID+"-"+n.Name+".sock")
		done, err := p.StartControl(ctx, ctl)
		if err != nil {
			stopAll()
			return nil, nil, nil, fmt.Errorf("Kafka proxy of %s: %w", n.Name, err)
		}
		proxies, dones = append(proxies, p), append(dones, done)
		byAddr[n.KafkaAddr()] = p
		sockets[n.Name] = ctl
	}
	kafkaPorts := map[string]bool{}
	for a := range byAddr {
		if _, port, err := net.SplitHostPort(a); err == nil {
			kafkaPorts[port] = true
		}
	}
	var mu sync.Mutex
	var direct []string
	prev := c.Dialer
	dial := c.Dial()
	c.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p := byAddr[addr]; p != nil {
			return p.DialVia(ctx, network, addr, kproxy.DialFunc(dial))
		}
		if _, port, err := net.SplitHostPort(addr); err == nil && kafkaPorts[port] {
			mu.Lock()
			if len(direct) < 16 && !slices.Contains(direct, addr) {
				direct = append(direct, addr)
			}
			mu.Unlock()
		}
		return dial(ctx, network, addr)
	}
	stop = func() {
		c.Dialer = prev
		stopAll()
	}
	unproxied = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), direct...)
	}
	return sockets, stop, unproxied, nil
}

// CleanStaleSockets removes the control sockets that proxies and faultfs
// daemons of runs that are gone left in the state directory
// (kproxy-<run>-<node>.sock, faultfs-<run>-<node>.sock: a process
// SIGKILLed before it removed its own), and returns their paths. alive
// says whether a run still runs.
func CleanStaleSockets(alive func(run string) bool) ([]string, error) {
	var out []string
	var errs []error
	for _, prefix := range []string{"kproxy-", "faultfs-"} {
		paths, err := filepath.Glob(filepath.Join(StateDir(), prefix+"*-*.sock"))
		if err != nil {
			return out, err
		}
		for _, p := range paths {
			run, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(p), prefix), "-")
			if !ok || alive(run) {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}
