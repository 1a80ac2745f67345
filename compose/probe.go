package compose

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
)

// ErrNotReady reports a node that did not answer its probe in time.
var ErrNotReady = errors.New("node not ready")

// probeTimeout bounds one probe attempt; Ready retries until its ctx ends.
const probeTimeout = 2 * time.Second

// Ready waits until every node of c answers its probe, dialing from the
// client namespace. It polls and never sleeps a fixed time before the first
// attempt. exited, if not nil, reports a node whose process died; that fails
// the wait at once, even while a probe attempt is in flight.
func Ready(ctx context.Context, c *Cluster, exited func(*Node) error) error {
	dial := c.Dial()
	kafka, err := c.KafkaOpts()
	if err != nil {
		return err
	}
	var brokerIDs []int
	for _, b := range c.Of(RoleBroker) {
		brokerIDs = append(brokerIDs, b.ID)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The first failure is the cause; the probes it cancels report only that.
	var firstMu sync.Mutex
	var first error
	fail := func(err error) {
		firstMu.Lock()
		if first == nil {
			first = err
		}
		firstMu.Unlock()
		cancel()
	}
	var probes errgroup.Group
	for _, n := range c.Nodes {
		if n.Probe == ProbeNone {
			continue
		}
		probes.Go(func() error {
			err := poll(ctx, n, func(ctx context.Context) error {
				err := ProbeNodeWith(ctx, dial, kafka, n.NodeSpec, brokerIDs)
				if err != nil && n.Probe == ProbeKafka {
					err = errors.Join(err, c.TLSMismatch(ctx, n.NodeSpec))
				}
				return err
			})
			if err != nil {
				fail(err)
			}
			return err
		})
	}
	var watch errgroup.Group
	stop := make(chan struct{})
	if exited != nil {
		watch.Go(func() error {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return nil
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				for _, n := range c.Nodes {
					if err := exited(n); err != nil {
						fail(fmt.Errorf("%s: %w: %w", n.Name, ErrNotReady, err))
						return nil
					}
				}
			}
		})
	}
	probes.Wait() //nolint:errcheck // the probes report through fail
	close(stop)
	watch.Wait() //nolint:errcheck // the watcher reports through fail
	return first
}

// poll runs try until it succeeds, backing off from 10 ms to 200 ms.
func poll(ctx context.Context, n *Node, try func(context.Context) error) error {
	wait := 10 * time.Millisecond
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = try(actx)
		cancel()
		if last == nil {
			return nil
		}
		if errors.Is(last, ErrTLSListener) {
			return last
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			err := fmt.Errorf("%s (%s probe): %w: %w (last: %v)", n.Name, n.Probe, ErrNotReady, ctx.Err(), last)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && n.LogFile != "" {
				err = fmt.Errorf("%w; end of %s:\n%s", err, n.LogFile, LogTail(n.LogFile, 8))
			}
			return err
		case <-t.C:
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// ProbeNode checks once that node n answers its protocol.
func ProbeNode(ctx context.Context, dial DialFunc, n NodeSpec, brokerIDs []int) error {
	return ProbeNodeWith(ctx, dial, []kgo.Opt{kgo.Dialer(dial)}, n, brokerIDs)
}

// ProbeNodeWith is ProbeNode with the options that reach a broker (the
// cluster's KafkaOpts: TLS and SASL on a secured cluster).
func ProbeNodeWith(ctx context.Context, dial DialFunc, kafka []kgo.Opt, n NodeSpec, brokerIDs []int) error {
	switch n.Probe {
	case ProbeNone:
		return nil
	case ProbeTCP:
		return probeTCP(ctx, dial, netip.AddrPortFrom(n.Addr, uint16(n.Port)).String())
	case ProbeEtcd:
		return probeEtcd(ctx, dial, "http://"+netip.AddrPortFrom(n.Addr, CoordinatorClientPort).String())
	case ProbeKafka:
		return probeKafka(ctx, dial, kafka, n.KafkaAddr(), brokerIDs)
	}
	return fmt.Errorf("unknown probe %q", n.Probe)
}

// ErrTLSListener reports a broker whose listener speaks TLS to clients
// that connect without it: waiting for it to answer would not help.
var ErrTLSListener = errors.New("speaks TLS, and the lab's clients connect without it: give them the cluster's client security config (the ssh backend's cluster file: client:, docs/external.md)")

// TLSMismatch is ErrTLSListener, naming broker n, when the cluster's
// clients connect without TLS and n's listener, on the user's own hosts,
// speaks it; nil otherwise (the listeners of a cluster the lab laid out
// are what its clients expect). Waits for a broker call it when a
// request failed, to fail at once.
func (c *Cluster) TLSMismatch(ctx context.Context, n NodeSpec) error {
	if !c.Caps().UserHosts {
		return nil
	}
	if cs, _ := c.ClientSecurity(); cs != nil && cs.TLS() {
		return nil
	}
	if !speaksTLS(ctx, c.Dial(), n.KafkaAddr()) {
		return nil
	}
	return fmt.Errorf("%s (%s) %w", n.Name, n.KafkaAddr(), ErrTLSListener)
}

// speaksTLS reports whether the listener at addr completes (or answers
// with an alert) a TLS handshake: it is a TLS listener, which a
// plaintext client's requests never reach.
func speaksTLS(ctx context.Context, dial DialFunc, addr string) bool {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	// Only whether it answers in TLS counts: its certificate is not checked.
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe of the protocol, nothing is sent over it
	defer tc.Close()
	err = tc.HandshakeContext(ctx)
	var alert tls.AlertError
	return err == nil || errors.As(err, &alert)
}

func probeTCP(ctx context.Context, dial DialFunc, addr string) error {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// probeEtcd asks the member for its status and requires a known leader and a
// linearizable read to succeed.
func probeEtcd(ctx context.Context, dial DialFunc, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: probeTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if _, rest, ok := strings.Cut(addr, "://"); ok {
				addr = rest
			}
			return dial(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return fmt.Errorf("etcd status: %w", err)
	}
	if st.Leader == 0 {
		return errors.New("etcd has no leader")
	}
	if _, err := cli.Get(ctx, "/isrlab-health"); err != nil {
		return fmt.Errorf("etcd read: %w", err)
	}
	return nil
}

// probeKafka requires ApiVersions to answer and Metadata from this broker to
// list every broker of the cluster and name a controller.
func probeKafka(ctx context.Context, dial DialFunc, kafka []kgo.Opt, addr string, want []int) error {
	// A plain connect fails fast while the port is closed; kgo would retry.
	if err := probeTCP(ctx, dial, addr); err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.RequestRetries(0),
		kgo.WithLogger(kgo.BasicLogger(io.Discard, kgo.LogLevelNone, nil)),
	}, kafka...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	seed := cl.Broker(-2147483648) // the first seed broker
	av := kmsg.NewPtrApiVersionsRequest()
	av.ClientSoftwareName = "isrlab-probe"
	av.ClientSoftwareVersion = "1"
	avr, err := seed.Request(ctx, av)
	if err != nil {
		return fmt.Errorf("kafka ApiVersions: %w", err)
	}
	if code := avr.(*kmsg.ApiVersionsResponse).ErrorCode; code != 0 {
		return fmt.Errorf("kafka ApiVersions: error code %d", code)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{} // no topics: brokers only
	mr, err := seed.Request(ctx, md)
	if err != nil {
		return fmt.Errorf("kafka Metadata: %w", err)
	}
	resp := mr.(*kmsg.MetadataResponse)
	// Without a controller, the first CreateTopics of a client would fail.
	if resp.ControllerID < 0 {
		return errors.New("kafka Metadata names no controller")
	}
	var got []int
	for _, b := range resp.Brokers {
		got = append(got, int(b.NodeID))
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			return fmt.Errorf("kafka Metadata lists brokers %v, missing %d", got, id)
		}
	}
	return nil
}

// LogTail returns the last lines of a log file, indented, for error messages
// (the run directory may be gone by the time the error is read).
func LogTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return "    " + strings.Join(ls, "\n    ")
}
