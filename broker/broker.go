// Package broker is isrlab's Kafka-wire-compatible broker, the system under
// test. Requests are read per connection, queued (queued.max.requests) and
// handled by num.io.threads goroutines, as in Kafka; partition data lives in
// broker/log, per-partition replica state in broker/partition and the
// replica fetchers, fetch sessions and HW checkpoint in broker/replication.
// The handlers of coherent API groups (groups, transactions, quotas,
// configs, the controller's) are methods of small types holding what they
// use (apis.go's apiGroups), not of Broker.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/replication"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Option configures a Broker.
type Option interface{ apply(*Broker) }

type optFunc func(*Broker)

func (f optFunc) apply(b *Broker) { f(b) }

// WithLogger sets the broker's logger.
func WithLogger(l *slog.Logger) Option { return optFunc(func(b *Broker) { b.log = l }) }

// WithClock injects the broker's clock.
func WithClock(now func() time.Time) Option { return optFunc(func(b *Broker) { b.now = now }) }

// Broker is one isrlab broker.
type Broker struct {
	cfg      *kafkaconfig.Config
	id       int32
	log      *slog.Logger
	now      func() time.Time
	versions wire.Table // advertised by ApiVersions under kafka.profile
	served   wire.Table // every request is checked against it
	handlers map[int16]handler
	queue    chan *request
	metrics  *metrics

	logs *klog.Manager
	meta *metadata

	mu         sync.RWMutex
	partitions map[tp]*partition.Partition

	producerIDs producerIDAllocator // set by New standalone, by Run with a coordinator

	// Clustered mode (coordinator.connect set); nil standalone.
	cluster       *cluster
	newController ControllerFactory
	fetchers      *replication.Fetchers
	isrWriter     isrWriter
	dialer        func(ctx context.Context, network, addr string) (net.Conn, error)
	runCtx        context.Context // lives until the broker stops serving

	hwCheckpoint *replication.HWCheckpoint

	clientsMu sync.Mutex
	clients   map[int32]*brokerClient

	side *sideChannel
	api  apiGroups // the API groups whose handlers are not the broker's methods (apis.go)

	fetchSessions *replication.SessionCache

	clockSkew atomic.Int64 // ms added to the clock (clock faults)

	testHooks *testHooks // test.hooks.enable only (testhook.go)

	// txnMarkerHook, if set, is called after each transaction marker this
	// broker wrote as leader is committed (WriteTxnMarkers), so the group
	// coordinator can complete the transaction's offset commits on a
	// __consumer_offsets partition. It is called for every partition,
	// whatever its topic, off the request handler threads.
	txnMarkerHook func(topic string, partition int32, producerID int64, producerEpoch int16, commit bool)
	// txnCoordinator finds the transaction coordinator of a transactional
	// id for partition verification (txnverify.go); nil asks this
	// broker's FindCoordinator logic (key type 1).
	txnCoordinator func(transactionalID string) (id int32, addr string, code int16, msg string)

	ls        *listeners // listeners with their TLS and SASL configuration (listeners.go)
	ready     chan struct{}
	addrs     []string // bound listener addresses, set before ready closes
	metricsAt string
}

// InterBrokerDial is how this broker's controller dials other brokers:
// the dialer WithDialer set, speaking the inter-broker listener's
// security protocol (TLS, SASL) when it has one.
func (b *Broker) InterBrokerDial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return b.dialer
}

// WithDialer sets how the broker dials other brokers.
func WithDialer(d func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return optFunc(func(b *Broker) { b.dialer = d })
}

type tp struct {
	topic     string
	partition int32
}

type handler func(ctx context.Context, rq *request)

// New validates cfg and opens the broker's log directories (recovering
// logs after an unclean shutdown). Run starts serving.
func New(cfg *kafkaconfig.Config, opts ...Option) (*Broker, error) {
	b := &Broker{
		cfg:        cfg,
		id:         int32(cfg.Int("broker.id")),
		log:        slog.Default(),
		now:        time.Now,
		partitions: map[tp]*partition.Partition{},
		clients:    map[int32]*brokerClient{},
		ready:      make(chan struct{}),
		runCtx:     context.Background(),
	}
	b.isrWriter = isrWriter{b: b}
	b.txnMarkerHook = b.onTxnMarker
	for _, o := range opts {
		o.apply(b)
	}
	// Everything reads time through b.now, which adds the skew a clock
	// fault sets through /v1/clock.
	base := b.now
	b.now = func() time.Time { return base().Add(time.Duration(b.clockSkew.Load()) * time.Millisecond) }
	b.log = b.log.With("node", "b"+strconv.Itoa(int(b.id)))
	if tv := cfg.Int("transaction.version"); tv >= 1 {
		switch {
		case cfg.String("kafka.profile") != "3.7" && cfg.String("kafka.profile") != "4.0":
			return nil, fmt.Errorf("transaction.version=%d needs kafka.profile 3.7 or 4.0: Kafka 4.0's transaction protocol builds on 3.7's, not on %s's", tv, cfg.String("kafka.profile"))
		case tv >= 2 && cfg.String("transaction.partition.verification.enable") != "true":
			return nil, fmt.Errorf("transaction.version=2 needs transaction.partition.verification.enable=true: the partition leader adds a produce request's partitions to the transaction through the coordinator")
		}
	}
	ls, err := newListeners(cfg, b.dialer, b.now, b.id)
	if err != nil {
		return nil, err
	}
	b.ls, b.dialer = ls, ls.dial
	b.versions = advertisedTable(cfg.String("kafka.profile"), cfg.Int("transaction.version"))
	b.served = servedTable(cfg.String("kafka.profile"), cfg.Int("transaction.version"))
	b.handlers = b.handlerTable()
	if cfg.Bool("test.hooks.enable") {
		b.testHooks = newTestHooks(b)
	}
	b.side = &sideChannel{id: b.id, partitions: b.partitionList, brokerEpoch: b.BrokerEpoch, now: b.now, skew: &b.clockSkew, hooks: b.testHooks, log: b.log}
	b.queue = make(chan *request, cfg.Int("queued.max.requests"))
	b.metrics = newMetrics(b)
	b.fetchSessions = replication.NewSessionCache(cfg.Int("max.incremental.fetch.session.cache.slots"), b.now, b.metrics.reg)

	dirs := cfg.LogDirs()
	logs, err := klog.OpenManager(dirs, b.logConfig(cfg.TopicDefaults()), klog.WithClock(b.now), klog.WithLogger(b.log))
	if err != nil {
		return nil, fmt.Errorf("open log dirs %s: %w", strings.Join(dirs, ","), err)
	}
	b.logs = logs
	if b.hwCheckpoint, err = replication.LoadHWCheckpoint(logs, b.log); err != nil {
		logs.Close()
		return nil, err
	}
	if b.clustered() {
		// Partitions come from the controller's LeaderAndIsr.
		b.meta = newClusterMetadata(b)
		return b, nil
	}
	if b.producerIDs, err = openProducerIDs(dirs[0]); err != nil {
		logs.Close()
		return nil, err
	}
	b.meta, err = openStandaloneMetadata(b, dirs[0])
	if err != nil {
		logs.Close()
		return nil, err
	}
	if err := b.loadPartitions(); err != nil {
		logs.Close()
		return nil, err
	}
	return b, nil
}

// clustered reports whether the broker runs with a coordinator.
func (b *Broker) clustered() bool { return len(b.cfg.List("coordinator.connect")) > 0 }

// logConfig converts a resolved topic config into the log's config.
func (b *Broker) logConfig(tc *kafkaconfig.Config) klog.Config {
	lc := klog.DefaultConfig()
	lc.SegmentBytes = tc.Long("segment.bytes")
	lc.SegmentMs = tc.Long("segment.ms")
	lc.SegmentIndexBytes = tc.Int("segment.index.bytes")
	lc.IndexIntervalBytes = tc.Int("index.interval.bytes")
	lc.RetentionMs = tc.Long("retention.ms")
	lc.RetentionBytes = tc.Long("retention.bytes")
	lc.FlushIntervalMessages = tc.Long("flush.messages")
	lc.FlushIntervalMs = tc.Long("flush.ms")
	lc.FileDeleteDelayMs = tc.Long("file.delete.delay.ms")
	lc.MaxMessageBytes = tc.Int("max.message.bytes")
	lc.LogAppendTime = tc.String("message.timestamp.type") == "LogAppendTime"
	lc.RetentionCheckIntervalMs = b.cfg.Long("log.retention.check.interval.ms")
	lc.FlushOffsetCheckpointIntervalMs = b.cfg.Long("log.flush.offset.checkpoint.interval.ms")
	// Kafka's scheduler default is "never"; checking once a second keeps
	// log.flush.interval.ms meaningful unless the scheduler is set.
	if b.cfg.IsSet("log.flush.scheduler.interval.ms") {
		lc.FlushSchedulerIntervalMs = b.cfg.Long("log.flush.scheduler.interval.ms")
	}
	return lc
}

// Run serves until ctx ends, then shuts down cleanly: connections close,
// logs are flushed and the clean-shutdown marker is written.
func (b *Broker) Run(ctx context.Context) error {
	var lns []net.Listener
	var err error
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for _, l := range b.ls.all {
		ln, err := net.Listen("tcp", l.Addr())
		if err != nil {
			closeAll()
			return fmt.Errorf("listen %s: %w", l.URL(), err)
		}
		lns = append(lns, ln)
		b.addrs = append(b.addrs, ln.Addr().String())
	}
	var mln net.Listener
	if ma := b.cfg.String("metrics.listen"); ma != "" {
		if mln, err = net.Listen("tcp", ma); err != nil {
			closeAll()
			return fmt.Errorf("metrics.listen %s: %w", ma, err)
		}
		b.metricsAt = mln.Addr().String()
	}
	b.meta.setSelf(b.selfEndpoint())

	// The broker serves on serveCtx, which outlives ctx by the controlled
	// shutdown: leadership moves away while the broker still answers.
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	b.runCtx = serveCtx
	if b.clustered() {
		if err := b.dialCoord(serveCtx); err != nil {
			closeAll()
			if mln != nil {
				mln.Close()
			}
			return err
		}
		defer b.cluster.coord.Close()
	}
	b.api = b.newAPIGroups()
	for _, l := range b.ls.all {
		if l.sasl != nil {
			l.sasl.Scram = b.api.scram
		}
	}
	rcfg := replication.NewConfig(b.cfg)
	b.fetchers = replication.NewFetchers(serveCtx, rcfg, replicaHost{b}, b.dialer, b.log)
	maxLag := b.fetchers.MaxLag
	b.metrics.maxLag.Store(&maxLag)
	g, gctx := errgroup.WithContext(serveCtx)
	var conns sync.WaitGroup
	for i, ln := range lns {
		g.Go(func() error {
			<-gctx.Done()
			ln.Close()
			return nil
		})
		g.Go(func() error { b.acceptLoop(gctx, ln, b.ls.all[i], &conns); return nil })
	}
	for i := 0; i < b.cfg.Int("num.io.threads"); i++ {
		clock := &b.metrics.handlerClock[i]
		g.Go(func() error { b.handlerLoop(gctx, clock); return nil })
	}
	g.Go(func() error {
		b.metrics.sampleLoop(gctx, b.cfg.Int("num.io.threads"), b.cfg.Int("num.network.threads"))
		return nil
	})
	if mln != nil {
		g.Go(func() error { return b.metrics.serve(gctx, mln, b.side.register) })
	}
	g.Go(func() error {
		err := b.logs.Run(gctx, b.highWatermark)
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("log manager: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		replication.RunTasks(gctx, rcfg, replicaHost{b}, b.fetchers, b.hwCheckpoint, b.log)
		return nil
	})
	g.Go(func() error { b.side.watch(gctx); return nil })
	if b.cluster != nil {
		if b.cluster.kraft != nil {
			g.Go(func() error { b.cluster.watchActiveController(gctx); return nil })
			g.Go(func() error { return b.cluster.lifecycleLoop(gctx) })
		} else {
			g.Go(func() error { return b.cluster.registrationLoop(gctx) })
			g.Go(func() error { b.cluster.isrNotifyLoop(gctx); return nil })
		}
		g.Go(func() error { b.cluster.topicConfigLoop(gctx); return nil })
	}
	g.Go(func() error {
		select {
		case <-ctx.Done():
			if b.cluster != nil && b.cfg.Bool("controlled.shutdown.enable") {
				b.controlledShutdown()
			}
			stopServing()
		case <-gctx.Done():
		}
		return nil
	})
	close(b.ready)
	b.log.Info("broker started", "listeners", strings.Join(b.addrs, ","), "metrics", b.metricsAt, "log.dirs", strings.Join(b.cfg.LogDirs(), ","), "coordinator", strings.Join(b.cfg.List("coordinator.connect"), ","))
	err = g.Wait()
	b.fetchers.Close()
	conns.Wait()
	if cerr := b.close(); err == nil {
		err = cerr
	}
	b.log.Info("broker stopped")
	return err
}

// close checkpoints the high watermarks, flushes and closes every log
// and marks the shutdown clean.
func (b *Broker) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := make([]*partition.Partition, 0, len(b.partitions))
	for _, p := range b.partitions {
		ps = append(ps, p)
	}
	b.hwCheckpoint.Write(ps)
	return b.logs.Close()
}

// Ready is closed once the broker listens.
func (b *Broker) Ready() <-chan struct{} { return b.ready }

// Addrs returns the bound listener addresses (valid after Ready).
func (b *Broker) Addrs() []string { return b.addrs }

// MetricsAddr returns the bound metrics address, if any (valid after Ready).
func (b *Broker) MetricsAddr() string { return b.metricsAt }

// selfEndpoint is this broker's metadata entry: the inter-broker
// listener's advertised address and every advertised listener's.
func (b *Broker) selfEndpoint() brokerEndpoint {
	eps := b.ls.endpoints(b.addrs)
	e := brokerEndpoint{ID: b.id, Endpoints: eps}
	hp, ok := eps[b.ls.interBroker]
	if !ok {
		for _, l := range b.ls.all {
			if hp, ok = eps[l.Name]; ok {
				break
			}
		}
	}
	e.Host, e.Port = hp.Host, hp.Port
	return e
}

// highWatermark is the log manager's view of a partition's HW (retention
// only deletes below it).
func (b *Broker) highWatermark(k klog.TopicPartition) int64 {
	b.mu.RLock()
	p := b.partitions[tp{k.Topic, k.Partition}]
	b.mu.RUnlock()
	if p == nil {
		return 0
	}
	return p.HighWatermark()
}

func (b *Broker) partition(topic string, p int32) *partition.Partition {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.partitions[tp{topic, p}]
}
