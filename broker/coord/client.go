package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// Defaults used when no Option overrides them.
const (
	// DefaultChroot is the key prefix every isrlab key lives under.
	DefaultChroot = "/isrlab"
	// DefaultCallTimeout bounds every call whose ctx has no deadline.
	DefaultCallTimeout = 5 * time.Second
	// DefaultSessionTimeout is Kafka's zookeeper.session.timeout.ms from 2.5
	// on (coordinator.session.timeout.ms here).
	DefaultSessionTimeout = 18000 * time.Millisecond
	// MaxTxnOps is etcd's default limit on operations (and on compares) in
	// one Txn; larger batches are split.
	MaxTxnOps = 128
)

// Client is a connection to the coordinator cluster with isrlab's data
// model on top. It is safe for concurrent use. Close it when done.
type Client struct {
	cli            *clientv3.Client
	callTimeout    time.Duration
	sessionTimeout time.Duration
	chroot         string
	log            *slog.Logger

	// ctx ends on Close; every background goroutine (watches) derives from it
	// and is counted in wg so Close can wait for it.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex // guards closing and wg.Add
	closing bool
	once    sync.Once
}

// Option configures Dial.
type Option interface{ apply(*clientOptions) }

type clientOptions struct {
	callTimeout    time.Duration
	sessionTimeout time.Duration
	dialTimeout    time.Duration
	chroot         string
	log            *slog.Logger
	skipCheck      bool
}

type optionFunc func(*clientOptions)

func (f optionFunc) apply(o *clientOptions) { f(o) }

// WithCallTimeout sets the timeout applied to calls whose ctx has no deadline.
func WithCallTimeout(d time.Duration) Option {
	return optionFunc(func(o *clientOptions) { o.callTimeout = d })
}

// WithSessionTimeout sets the lease TTL used by RegisterBroker and Campaign
// when they are given 0 (coordinator.session.timeout.ms). etcd rounds it up
// to whole seconds.
func WithSessionTimeout(d time.Duration) Option {
	return optionFunc(func(o *clientOptions) { o.sessionTimeout = d })
}

// WithChroot sets the key prefix ("" or "/" for the etcd root).
func WithChroot(p string) Option {
	return optionFunc(func(o *clientOptions) { o.chroot = p })
}

// WithLogger sets the logger for background work (watch retries).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *clientOptions) { o.log = l })
}

// WithoutConnectCheck makes Dial return without checking that an endpoint
// answers, for callers that start before the coordinator does.
func WithoutConnectCheck() Option {
	return optionFunc(func(o *clientOptions) { o.skipCheck = true })
}

// Dial connects to the coordinator endpoints ("127.0.0.1:2379" or
// "http://127.0.0.1:2379"). Unless WithoutConnectCheck is given it checks
// that one endpoint answers a local (serializable) read, which needs no
// quorum.
func Dial(ctx context.Context, endpoints []string, opts ...Option) (*Client, error) {
	o := clientOptions{
		callTimeout:    DefaultCallTimeout,
		sessionTimeout: DefaultSessionTimeout,
		dialTimeout:    2 * time.Second,
		chroot:         DefaultChroot,
	}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if len(endpoints) == 0 {
		return nil, errors.New("dial coordinator: no endpoints")
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	chroot := strings.TrimRight(o.chroot, "/")
	if chroot != "" && !strings.HasPrefix(chroot, "/") {
		return nil, fmt.Errorf("dial coordinator: chroot %q must start with /", o.chroot)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: o.dialTimeout,
		// Keepalive settings measured to survive a paused etcd leader with an
		// 18 s session (MACHINE-NOTES).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		PermitWithoutStream:  true,
		// Reconnect to a member at most 1 s after it is back: gRPC's default
		// backoff grows to 2 minutes, so a client would idle long after a
		// coordinator outage healed and lose sessions meanwhile.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("dial coordinator %v: %w", endpoints, err)
	}
	if chroot != "" {
		cli.KV = namespace.NewKV(cli.KV, chroot)
		cli.Watcher = namespace.NewWatcher(cli.Watcher, chroot)
		cli.Lease = namespace.NewLease(cli.Lease, chroot)
	}
	cli.KV = retryKV{cli.KV}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cli:            cli,
		callTimeout:    o.callTimeout,
		sessionTimeout: o.sessionTimeout,
		chroot:         chroot,
		log:            o.log,
		ctx:            cctx,
		cancel:         cancel,
	}
	if !o.skipCheck {
		rctx, rcancel := c.callCtx(ctx)
		_, err := cli.Get(rctx, "/", clientv3.WithSerializable(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		rcancel()
		if err != nil {
			c.Close()
			return nil, wrapErr(fmt.Sprintf("dial coordinator %v", endpoints), err)
		}
	}
	return c, nil
}

// Close stops the client's watches, waits for them, and closes the
// connection. Leases of open registrations are not revoked: they expire
// after their TTL, as a crashed broker's would. Close is idempotent.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		// Stop our goroutines before the etcd client: its Close rewrites
		// fields they read.
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		err = c.cli.Close()
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	})
	return err
}

// spawn runs f on a goroutine that Close waits for. Once Close has begun it
// runs nothing and returns false.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// Etcd exposes the underlying etcd client (keys are already chrooted) for
// tests and tools; isrlab code should use the typed methods.
func (c *Client) Etcd() *clientv3.Client { return c.cli }

// SessionTimeout is the default lease TTL of registrations and campaigns.
func (c *Client) SessionTimeout() time.Duration { return c.sessionTimeout }

// callCtx applies the default timeout when ctx has none, ends with the
// client (so calls fail at once after Close), and asks the server to fail
// at once when its member has no leader.
func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, c.callTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(c.ctx, cancel)
	return clientv3.WithRequireLeader(ctx), func() {
		stop()
		cancel()
	}
}

// ttlSeconds converts a session timeout to a lease TTL, rounding up.
func ttlSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
