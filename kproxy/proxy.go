package kproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Options configures a Proxy.
type Options struct {
	// Listen is the address clients connect to (":0" picks a port).
	Listen string
	// Upstream is the broker's address. It may be empty at New and set
	// later with SetUpstream; connections accepted while it is empty are
	// closed.
	Upstream string
	// RunID tags the proxy in Status.
	RunID string
	// Seed seeds the draws of rules with a probability.
	Seed int64
	// Log receives connection and fault events; nil discards them.
	Log *slog.Logger
}

// Proxy is a Kafka-protocol-aware TCP proxy in front of one broker.
type Proxy struct {
	opts Options
	ln   net.Listener
	log  *slog.Logger

	mu       sync.Mutex // guards rules, rng, upstream
	rules    []*ruleState
	rng      *rand.Rand
	upstream string

	pairsMu sync.Mutex
	pairs   map[*pair]struct{}
	stopped bool
	wg      sync.WaitGroup
	nextID  atomic.Int64

	accepted  atomic.Int64
	requests  atomic.Int64
	responses atomic.Int64
}

type ruleState struct {
	c              *compiled
	matched, acted int64
}

// Status is a proxy's configuration, counters and rules.
type Status struct {
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	RunID    string `json:"run_id,omitempty"`
	// Conns is the number of open connection pairs, Accepted the number
	// of client connections accepted so far.
	Conns    int   `json:"conns"`
	Accepted int64 `json:"accepted"`
	// Requests counts request frames forwarded to the broker (a duplicated
	// request twice), Responses response frames forwarded from it.
	Requests  int64        `json:"requests"`
	Responses int64        `json:"responses"`
	Rules     []RuleStatus `json:"rules"`
}

// RuleStatus is a rule and its counters: Matched counts the requests it
// matched (API and filters), Acted those it decided to act on.
type RuleStatus struct {
	Rule
	Matched int64 `json:"matched"`
	Acted   int64 `json:"acted"`
}

// New binds o.Listen; it dials the upstream broker only for each accepted
// connection, once Serve runs.
func New(o Options) (*Proxy, error) {
	p := newProxy(o)
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("kproxy: listen on %s: %w", o.Listen, err)
	}
	p.ln = ln
	return p, nil
}

func newProxy(o Options) *Proxy {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxy{opts: o, log: log, rng: rand.New(rand.NewSource(o.Seed)), upstream: o.Upstream, pairs: map[*pair]struct{}{}}
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetUpstream sets the broker address that connections accepted from now
// on dial.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	p.upstream = addr
	p.mu.Unlock()
}

// Set validates r and adds it, replacing the rule with the same ID (and
// its counters).
func (p *Proxy) Set(r Rule) error {
	c, err := r.compile()
	if err != nil {
		return fmt.Errorf("rule %q: %w", r.ID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := &ruleState{c: c}
	for i, old := range p.rules {
		if old.c.ID == r.ID {
			p.rules[i] = rs
			return nil
		}
	}
	p.rules = append(p.rules, rs)
	return nil
}

// Clear removes the rule id and reports whether there was one.
func (p *Proxy) Clear(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, rs := range p.rules {
		if rs.c.ID == id {
			p.rules = slices.Delete(p.rules, i, i+1)
			return true
		}
	}
	return false
}

// ClearAll removes every rule.
func (p *Proxy) ClearAll() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
}

// Status returns the proxy's counters and rules.
func (p *Proxy) Status() Status {
	st := Status{RunID: p.opts.RunID, Accepted: p.accepted.Load(), Requests: p.requests.Load(), Responses: p.responses.Load(), Rules: []RuleStatus{}}
	if p.ln != nil {
		st.Listen = p.Addr()
	}
	p.mu.Lock()
	st.Upstream = p.upstream
	for _, rs := range p.rules {
		st.Rules = append(st.Rules, RuleStatus{Rule: rs.c.Rule, Matched: rs.matched, Acted: rs.acted})
	}
	p.mu.Unlock()
	p.pairsMu.Lock()
	st.Conns = len(p.pairs)
	p.pairsMu.Unlock()
	return st
}

// decision is what the rules decided for one request: req acts on the
// request, resp on its response.
type decision struct {
	req, resp *compiled
}

// decide runs the rules of the request's API on it. noResponse is a
// Produce with acks=0, whose response rules cannot act.
func (p *Proxy) decide(h reqHeader, body []byte, prod *produceInfo, noResponse bool) decision {
	var d decision
	if !h.Known {
		return d
	}
	p.mu.Lock()
	var rules []*ruleState
	filtered := false
	for _, rs := range p.rules {
		if rs.c.key == h.Key {
			rules = append(rules, rs)
			filtered = filtered || rs.c.filtered()
		}
	}
	p.mu.Unlock()
	if len(rules) == 0 {
		return d
	}
	var topics map[string]bool
	var txnIDs map[string]bool
	if filtered {
		topics, txnIDs = map[string]bool{}, map[string]bool{}
		req := kmsg.RequestForKey(h.Key)
		req.SetVersion(h.Version)
		if err := req.ReadFrom(body); err != nil {
			p.log.Debug("kproxy: request body not decoded for filters", "api", kmsg.NameForKey(h.Key), "version", h.Version, "err", err)
		} else {
			v := reflect.ValueOf(req)
			stringFields(v, topicFields, func(s string) { topics[s] = true })
			stringFields(v, txnFields, func(s string) { txnIDs[s] = true })
		}
		if prod != nil && prod.TransactionalID != nil {
			txnIDs[*prod.TransactionalID] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, dir := range []string{DirRequest, DirResponse} {
		for _, rs := range rules {
			c := rs.c
			if c.dir != dir {
				continue
			}
			if (c.Topic != "" && !topics[c.Topic]) || (c.TransactionalID != "" && !txnIDs[c.TransactionalID]) {
				continue
			}
			rs.matched++
			if dir == DirRequest && d.req != nil || dir == DirResponse && (d.resp != nil || noResponse) {
				continue
			}
			if c.Count > 0 && rs.acted >= int64(c.Count) {
				continue
			}
			if c.prob < 1 && p.rng.Float64() >= c.prob {
				continue
			}
			rs.acted++
			if dir == DirRequest {
				d.req = c
			} else {
				d.resp = c
			}
		}
		if d.req != nil && d.req.Action != ActDelay && d.req.Action != ActDuplicate {
			break // the request goes nowhere: no response to act on
		}
	}
	return d
}

// Serve accepts connections until ctx ends, then closes every connection
// pair and returns once their goroutines are done.
func (p *Proxy) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		p.ln.Close()
		p.closeAll()
	})
	defer stop()
	defer p.wg.Wait()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.ln.Close()
			p.closeAll()
			return fmt.Errorf("kproxy: accept: %w", err)
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(ctx, c)
		}()
	}
}

func (p *Proxy) closeAll() {
	p.pairsMu.Lock()
	p.stopped = true
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.pairsMu.Unlock()
	for _, pr := range pairs {
		pr.close("proxy stopped")
	}
}

// handle serves one client connection: it dials the broker and forwards
// frames both ways until either side closes.
func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	p.mu.Lock()
	upstream := p.upstream
	p.mu.Unlock()
	log := p.log.With("conn", p.nextID.Add(1), "client", c.RemoteAddr().String())
	if upstream == "" {
		log.Warn("kproxy: no upstream yet, connection closed")
		c.Close()
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.DialContext(ctx, "tcp", upstream)
	if err != nil {
		log.Warn("kproxy: dial upstream", "upstream", upstream, "err", err)
		c.Close()
		return
	}
	p.servePair(c, up, log.With("upstream", upstream))
}

// DialFunc dials a broker (net.Dialer.DialContext's signature).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewInline returns a proxy that listens nowhere: clients reach it
// through DialVia, as the dialer of their Kafka client. It serves the
// client side of a cluster the lab cannot put a proxy in front of (the
// user's own hosts, containers): requests and responses between this
// process's clients and the brokers, not between brokers. Close ends it.
func NewInline(o Options) *Proxy { return newProxy(o) }

// DialVia dials addr with dial and returns a connection to it through the
// proxy: the client's end of a socket pair whose other end the proxy
// serves, forwarding frames to and from the broker as a listening proxy
// does. A socket pair, not an in-memory pipe: when the proxy closes it (a
// close rule, Close), the client sees what a TCP client sees, an EOF on
// read and EPIPE on write, errors Kafka clients know to retry.
func (p *Proxy) DialVia(ctx context.Context, network, addr string, dial DialFunc) (net.Conn, error) {
	p.pairsMu.Lock()
	stopped := p.stopped
	p.pairsMu.Unlock()
	if stopped {
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("kproxy: proxy closed: %w", net.ErrClosed)}
	}
	up, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	client, server, err := socketPair()
	if err != nil {
		up.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	p.accepted.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.servePair(server, up, p.log.With("conn", p.nextID.Add(1), "upstream", addr))
	}()
	return client, nil
}

// socketPair returns the two ends of a connected Unix stream socket pair.
func socketPair() (a, b net.Conn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	conn := func(fd int) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), "kproxy-pair")
		defer f.Close() // FileConn holds a duplicate
		return net.FileConn(f)
	}
	if a, err = conn(fds[0]); err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	if b, err = conn(fds[1]); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// Close closes every connection pair of an inline proxy and waits for
// their goroutines.
func (p *Proxy) Close() {
	p.closeAll()
	p.wg.Wait()
}

// servePair forwards frames between the client connection c and the
// broker connection up until either side closes.
func (p *Proxy) servePair(c, up net.Conn, log *slog.Logger) {
	pr := &pair{client: c, up: up, done: make(chan struct{}), s: newPairState(p, log)}
	p.pairsMu.Lock()
	if p.stopped {
		p.pairsMu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.pairs[pr] = struct{}{}
	p.pairsMu.Unlock()
	defer func() {
		p.pairsMu.Lock()
		delete(p.pairs, pr)
		p.pairsMu.Unlock()
	}()
	log.Debug("kproxy: connection pair open")
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pr.responses() }()
	go func() { defer wg.Done(); pr.writeClient() }()
	pr.requests()
	wg.Wait()
}

// pair is a client connection and its connection to the broker.
type pair struct {
	client, up net.Conn
	done       chan struct{}
	once       sync.Once
	s          *pairState
}

func (pr *pair) close(why string) {
	pr.once.Do(func() {
		pr.s.log.Debug("kproxy: connection pair closed", "why", why)
		close(pr.done)
		pr.client.Close()
		pr.up.Close()
		pr.s.mu.Lock()
		pr.s.closed = true
		pr.s.cond.Broadcast()
		pr.s.mu.Unlock()
	})
}

// wait waits d or until the pair closes, and reports whether it is open.
func (pr *pair) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-pr.done:
		return false
	}
}

// requests forwards the client's requests to the broker.
func (pr *pair) requests() {
	defer pr.close("client side ended")
	r := bufio.NewReaderSize(pr.client, 64<<10)
	for {
		raw, err := readFrame(r)
		if err != nil {
			switch {
			case errors.Is(err, errFrameSize):
				pr.s.log.Warn("kproxy: request too large, connection closed", "err", err)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				pr.s.log.Info("kproxy: read request", "err", err)
			}
			return
		}
		plan, err := pr.s.onRequest(raw)
		if err != nil {
			pr.s.log.Warn("kproxy: bad request, connection closed", "err", err)
			return
		}
		if plan.delay > 0 && !pr.wait(plan.delay) {
			return
		}
		if plan.close {
			return
		}
		for range plan.forward {
			if _, err := pr.up.Write(raw); err != nil {
				return
			}
			pr.s.p.requests.Add(1)
		}
	}
}

// responses reads the broker's responses and queues what the client gets.
func (pr *pair) responses() {
	defer pr.close("broker side ended")
	r := bufio.NewReaderSize(pr.up, 64<<10)
	for {
		raw, err := readFrame(r)
		if err != nil {
			switch {
			case errors.Is(err, errFrameSize):
				pr.s.log.Warn("kproxy: response too large, connection closed", "err", err)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				pr.s.log.Info("kproxy: read response", "err", err)
			}
			return
		}
		if err := pr.s.onResponse(raw); err != nil {
			pr.s.log.Warn("kproxy: bad response, connection closed", "err", err)
			return
		}
	}
}

// writeClient writes the queued responses to the client, in order.
func (pr *pair) writeClient() {
	defer pr.close("client write ended")
	for {
		it, ok := pr.s.next()
		if !ok {
			return
		}
		if it.delay > 0 && !pr.wait(it.delay) {
			return
		}
		if it.close {
			return
		}
		if _, err := pr.client.Write(it.frame); err != nil {
			return
		}
		if it.fromBroker {
			pr.s.p.responses.Add(1)
		}
	}
}

var errFrameSize = errors.New("frame size out of range")

// readFrame reads one size-prefixed frame, prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", errFrameSize, n, MaxFrame)
	}
	raw := make([]byte, 4+int(n))
	copy(raw, sz[:])
	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return raw, nil
}
