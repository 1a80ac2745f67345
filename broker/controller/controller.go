package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Defaults of the Config durations.
const (
	// DefaultISRChangeCheckInterval is how often pending ISR change
	// notifications are propagated (Kafka's ZooKeeper-era 2500 ms).
	DefaultISRChangeCheckInterval = 2500 * time.Millisecond
	// DefaultRequestTimeout bounds one controller request to a broker
	// (controller.socket.timeout.ms).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultRetryBackoff is the first pause before a failed request or
	// coordinator call is retried; it doubles up to 5 s.
	DefaultRetryBackoff = 100 * time.Millisecond
)

// Config configures a Controller. Coord is required; everything else has a
// default.
type Config struct {
	// BrokerID is the broker this controller runs in.
	BrokerID int32
	// Coord is the broker's coordinator client.
	Coord *coord.Client
	// Broker is the broker configuration: unclean.leader.election.enable
	// (resolved per topic with the topic's overrides),
	// auto.leader.rebalance.enable, leader.imbalance.per.broker.percentage
	// and leader.imbalance.check.interval.seconds. nil means Kafka's
	// defaults.
	Broker *kafkaconfig.Config
	// ImbalanceCheckInterval overrides leader.imbalance.check.interval.seconds
	// when positive (tests use sub-second intervals).
	ImbalanceCheckInterval time.Duration
	// ISRChangeCheckInterval is DefaultISRChangeCheckInterval when zero.
	ISRChangeCheckInterval time.Duration
	// RequestTimeout is DefaultRequestTimeout when zero.
	RequestTimeout time.Duration
	// RetryBackoff is DefaultRetryBackoff when zero.
	RetryBackoff time.Duration
	// Dial connects to brokers; nil uses a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives the controller's log; nil discards it.
	Logger *slog.Logger
	// Registerer receives the controller metrics when not nil.
	Registerer prometheus.Registerer
	// KRaft runs the controller of the KRaft era (kafka.profile 4.0) on a
	// controller quorum node: brokers register with it and heartbeat
	// (BrokerRegistration, BrokerHeartbeat), it writes their registrations
	// and fences a broker whose heartbeats stop for BrokerSessionTimeout;
	// a fenced broker is not live. Without it a broker is live while its
	// coordinator session lasts (the ZooKeeper era).
	KRaft bool
	// BrokerSessionTimeout is broker.session.timeout.ms (default 9 s).
	BrokerSessionTimeout time.Duration
	// Now is the clock the heartbeat deadlines read; nil is time.Now.
	Now func() time.Time
}

// Controller is the controller runtime of one broker. It is idle until Run
// is called with a won leadership; then one goroutine owns the cluster
// state and processes coordinator watches, timers and the requests that
// belong to the controller, one event at a time (Kafka's
// ControllerEventManager). The methods are safe for concurrent use.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	broker  *kafkaconfig.Config
	metrics *metrics

	active atomic.Bool
	mu     sync.Mutex
	cur    *term // the running term, nil when not controller
}

// New returns an idle controller.
func New(cfg Config) *Controller {
	if cfg.ISRChangeCheckInterval <= 0 {
		cfg.ISRChangeCheckInterval = DefaultISRChangeCheckInterval
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.BrokerSessionTimeout <= 0 {
		cfg.BrokerSessionTimeout = 9 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := cfg.Broker
	if b == nil {
		b = kafkaconfig.NewBroker()
	}
	return &Controller{cfg: cfg, log: log.With("node", cfg.BrokerID), broker: b, metrics: newMetrics(cfg.Registerer)}
}

// Active reports whether this controller is running a term now. The broker
// answers NOT_CONTROLLER for controller requests when it is not.
func (c *Controller) Active() bool { return c.active.Load() }

// Run does the controller's work for one term of leadership l. On entry it
// reads the live brokers, topics and partition states, initializes new
// partitions, elects leaders for offline ones and sends UpdateMetadata to
// every live broker and LeaderAndIsr to every replica, as Kafka's
// controller does on failover; then it reacts to events until l ends (nil),
// ctx ends (ctx.Err()), or a fenced write fails (coord.ErrNotController).
// Coordinator timeouts (coord.ErrNoQuorum) are retried with back-off.
// The broker calls it in a loop: l := reg.Campaign(ctx); ctrl.Run(ctx, l).
func (c *Controller) Run(ctx context.Context, l *coord.Leadership) error {
	tctx, cancel := context.WithCancel(ctx)
	t := &term{
		c: c, l: l, epoch: l.Epoch(), log: c.log.With("controller_epoch", l.Epoch()),
		calls: make(chan call), done: make(chan struct{}),
		brokers: map[int32]coord.BrokerInfo{}, shuttingDown: map[int32]bool{},
		registered: map[int32]coord.BrokerInfo{}, lastContact: map[int32]time.Time{},
		topics: map[string]coord.TopicSpec{}, parts: map[coord.TopicPartition]*partition{},
		senders: map[int32]*sender{}, deleting: map[string]map[int32]int64{}, acks: make(chan stopAck),
	}
	c.mu.Lock()
	if c.cur != nil {
		c.mu.Unlock()
		cancel()
		return errors.New("controller: Run called while a term is running")
	}
	c.cur = t
	c.mu.Unlock()
	c.active.Store(true)
	c.metrics.active.Set(1)
	t.log.Info("became controller")
	err := t.run(tctx)
	c.active.Store(false)
	c.metrics.active.Set(0)
	c.metrics.offline.Set(0)
	c.metrics.global.Set(0)
	c.metrics.imbalance.Set(0)
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
	close(t.done)
	cancel()
	t.stopSenders()
	t.log.Info("controller term ended", "err", err)
	return err
}

// call is a request method's work, run on the event loop.
type call struct {
	fn    func(ctx context.Context) error
	reply chan struct{}
}

// submit runs fn on the running term's event loop and waits for it. ok is
// false when no term is running or it ended first (NOT_CONTROLLER).
func (c *Controller) submit(ctx context.Context, fn func(ctx context.Context, t *term) error) bool {
	c.mu.Lock()
	t := c.cur
	c.mu.Unlock()
	if t == nil {
		return false
	}
	cl := call{reply: make(chan struct{})}
	ran := false
	cl.fn = func(lctx context.Context) error {
		ran = true
		return fn(lctx, t)
	}
	select {
	case t.calls <- cl:
	case <-t.done:
		return false
	case <-ctx.Done():
		return false
	}
	select {
	case <-cl.reply:
		return ran
	case <-t.done:
		return false
	}
}

// term is the controller state of one leadership, owned by the event loop
// goroutine (only the senders run elsewhere).
type term struct {
	c     *Controller
	l     *coord.Leadership
	epoch int64
	log   *slog.Logger
	calls chan call
	done  chan struct{}

	brokers map[int32]coord.BrokerInfo // live registrations
	// registered holds every registration, fenced ones too (KRaft), and
	// lastContact each registered broker's last heartbeat.
	registered  map[int32]coord.BrokerInfo
	lastContact map[int32]time.Time
	// brokersRev is the revision of this term's newest registration
	// write: older broker snapshots, still on their way from the watch,
	// are stale and skipped.
	brokersRev   int64
	shuttingDown map[int32]bool // brokers in controlled shutdown
	topics       map[string]coord.TopicSpec
	topicIDs     map[[16]byte]string // topic ID -> name, as of the last topics snapshot
	parts        map[coord.TopicPartition]*partition

	senders map[int32]*sender
	wg      sync.WaitGroup

	deleting map[string]map[int32]int64 // topic -> replicas still to answer StopReplica(delete), with the epoch asked
	acks     chan stopAck

	resync bool // a coordinator call failed: re-read and reconcile

	gaugesAt    time.Time // last updateGauges
	gaugesDirty bool      // an event since then may have changed them
}

func (t *term) run(ctx context.Context) error {
	cc := t.c.cfg.Coord
	brokersCh := cc.WatchBrokers(ctx)
	topicsCh := cc.WatchTopics(ctx)

	// The first snapshot of each watch is the starting point.
	var bev coord.BrokersEvent
	var tev coord.TopicsEvent
	for gotB, gotT := false, false; !gotB || !gotT; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.l.Done():
			return nil
		case ev, ok := <-brokersCh:
			if !ok {
				return t.closedErr(ctx)
			}
			bev, gotB = ev, true
		case ev, ok := <-topicsCh:
			if !ok {
				return t.closedErr(ctx)
			}
			tev, gotT = ev, true
		}
	}
	t.setBrokers(ctx, t.liveOf(bev.Brokers))
	t.setTopics(tev.Topics)
	// A new active controller gives every registered broker a full session
	// to heartbeat it (BrokerHeartbeatManager's touch on activation).
	for id := range t.registered {
		t.lastContact[id] = t.c.cfg.Now()
	}
	var fenceTick, uncleanTick <-chan time.Time
	if t.c.cfg.KRaft {
		tk := time.NewTicker(min(t.c.cfg.BrokerSessionTimeout/4, 500*time.Millisecond))
		defer tk.Stop()
		fenceTick = tk.C
		uk := time.NewTicker(time.Duration(t.c.broker.Long("unclean.leader.election.interval.ms")) * time.Millisecond)
		defer uk.Stop()
		uncleanTick = uk.C
	}
	t.resync = true

	isrTick := time.NewTicker(t.c.cfg.ISRChangeCheckInterval)
	defer isrTick.Stop()
	var rebalance <-chan time.Time
	if t.c.broker.Bool("auto.leader.rebalance.enable") {
		iv := t.c.cfg.ImbalanceCheckInterval
		if iv <= 0 {
			iv = time.Duration(t.c.broker.Long("leader.imbalance.check.interval.seconds")) * time.Second
		}
		tk := time.NewTicker(iv)
		defer tk.Stop()
		rebalance = tk.C
	}
	// resyncTimer retries the failover sequence after a failed coordinator
	// call; while a resync is pending the periodic work waits for it.
	backoff := t.c.cfg.RetryBackoff
	resyncTimer := time.NewTimer(backoff)
	defer resyncTimer.Stop()
	armed := true
	gaugeTick := time.NewTicker(gaugeInterval)
	defer gaugeTick.Stop()
	t.gaugesDirty = true
	// The failover sequence runs before any other event is looked at.
	if err := t.doResync(ctx); err != nil {
		if errors.Is(err, coord.ErrNotController) || ctx.Err() != nil {
			return err
		}
		t.log.Warn("controller failover sequence failed; retrying", "err", err, "retry_in", backoff)
		backoff = min(2*backoff, maxResyncBackoff)
	}

	for {
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.l.Done():
			return nil
		case <-resyncTimer.C:
			armed = false
			if t.resync {
				if err = t.doResync(ctx); err == nil {
					backoff = t.c.cfg.RetryBackoff
				}
			}
		case ev, ok := <-brokersCh:
			if !ok {
				return t.closedErr(ctx)
			}
			if ev.Revision < t.brokersRev {
				continue
			}
			err = t.onBrokers(ctx, t.liveOf(ev.Brokers))
		case <-fenceTick:
			err = t.fenceExpired(ctx)
		case <-uncleanTick:
			if !t.resync {
				err = t.uncleanCheck(ctx)
			}
		case ev, ok := <-topicsCh:
			if !ok {
				return t.closedErr(ctx)
			}
			err = t.onTopics(ctx, ev.Topics)
		case <-isrTick.C:
			if !t.resync {
				if err = t.onISRChanges(ctx); err == nil {
					err = t.pollReassignments(ctx)
				}
			}
		case <-rebalance:
			if !t.resync {
				err = t.onRebalance(ctx)
			}
		case cl := <-t.calls:
			err = cl.fn(ctx)
			close(cl.reply)
		case a := <-t.acks:
			err = t.onStopAck(ctx, a)
		case <-gaugeTick.C:
			if t.gaugesDirty {
				t.updateGauges()
			}
			continue
		}
		if err != nil {
			if errors.Is(err, coord.ErrNotController) {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t.resync = true
			if !armed {
				t.log.Warn("controller action failed; will re-read the coordinator and reconcile", "err", err, "retry_in", backoff)
				resyncTimer.Reset(backoff)
				armed = true
				backoff = min(2*backoff, maxResyncBackoff)
			} else {
				t.log.Debug("controller action failed while a resync is pending", "err", err)
			}
		}
		if time.Since(t.gaugesAt) >= gaugeInterval {
			t.updateGauges()
		} else {
			t.gaugesDirty = true
		}
	}
}

// gaugeInterval bounds how often the partition gauges, a walk over every
// partition, are recomputed: at once after an event in a quiet period, at
// most once per interval during a burst of events (thousands of
// AlterPartition calls while a broker rejoins every ISR).
const gaugeInterval = time.Second

// maxResyncBackoff caps the pause between resync attempts, which bounds how
// long the controller stays idle after the coordinator is back.
const maxResyncBackoff = 2 * time.Second

func (t *term) closedErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("controller: coordinator client closed")
}

// up reports whether a broker is registered.
func (t *term) up(id int32) bool {
	_, ok := t.brokers[id]
	return ok
}

// live reports whether a broker may be elected: registered and not in
// controlled shutdown.
func (t *term) live(id int32) bool { return t.up(id) && !t.shuttingDown[id] }

// uncleanByTopic is unclean remembered per topic, for one decision over
// many partitions (resolving a topic's configs is not free).
func (t *term) uncleanByTopic() func(topic string) bool {
	seen := map[string]bool{}
	return func(topic string) bool {
		v, ok := seen[topic]
		if !ok {
			v = t.unclean(topic)
			seen[topic] = v
		}
		return v
	}
}

// elr is the term's eligible leader replicas policy: on with
// eligible.leader.replicas.enable, with each topic's min.insync.replicas
// remembered for one decision.
func (t *term) elr() elrPolicy {
	if !t.c.broker.Bool("eligible.leader.replicas.enable") {
		return elrPolicy{}
	}
	seen := map[string]int{}
	return elrPolicy{on: true, minISR: func(topic string) int {
		v, ok := seen[topic]
		if !ok {
			v = t.c.broker.Int("min.insync.replicas")
			if tc, err := t.c.broker.TopicConfig(t.topics[topic].Configs); err == nil {
				v = tc.Int("min.insync.replicas")
			}
			seen[topic] = v
		}
		return v
	}}
}

func (t *term) unclean(topic string) bool {
	tc, err := t.c.broker.TopicConfig(t.topics[topic].Configs)
	if err != nil {
		return t.c.broker.Bool("unclean.leader.election.enable")
	}
	return tc.Bool("unclean.leader.election.enable")
}

func (t *term) updateGauges() {
	t.gaugesAt, t.gaugesDirty = time.Now(), false
	n, off, imb := 0, 0, 0
	for _, p := range t.parts {
		n++
		if offline(p, t.up) {
			off++
		}
		if p.hasState && len(p.replicas) > 0 && p.state.Leader != p.replicas[0] {
			imb++
		}
	}
	t.c.metrics.global.Set(float64(n))
	t.c.metrics.offline.Set(float64(off))
	t.c.metrics.imbalance.Set(float64(imb))
}

// sortedParts returns the cached partitions in topic/partition order.
func (t *term) sortedParts() []*partition {
	tps := slices.Collect(maps.Keys(t.parts))
	sortTPs(tps)
	out := make([]*partition, len(tps))
	for i, tp := range tps {
		out[i] = t.parts[tp]
	}
	return out
}

func (t *term) allTPs() []coord.TopicPartition {
	tps := slices.Collect(maps.Keys(t.parts))
	sortTPs(tps)
	return tps
}

// setBrokers replaces the live broker set and starts or stops senders so
// there is exactly one per live incarnation.
func (t *term) setBrokers(ctx context.Context, bs []coord.BrokerInfo) {
	next := make(map[int32]coord.BrokerInfo, len(bs))
	for _, b := range bs {
		next[b.ID] = b
	}
	for id, s := range t.senders {
		if b, ok := next[id]; !ok || b.Epoch != s.epoch || brokerAddr(b) != s.client.Addr() {
			s.cancel()
			delete(t.senders, id)
		}
	}
	for id := range t.shuttingDown {
		if b, ok := next[id]; !ok || b.Epoch != t.brokers[id].Epoch {
			delete(t.shuttingDown, id)
		}
	}
	t.brokers = next
	for id, b := range next {
		if _, ok := t.senders[id]; ok {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		s := &sender{
			id: id, epoch: b.Epoch, log: t.log, timeout: t.c.cfg.RequestTimeout, backoff: t.c.cfg.RetryBackoff,
			client: wire.NewClient(brokerAddr(b), "isrlab-controller-"+strconv.Itoa(int(t.c.cfg.BrokerID)), t.c.cfg.Dial),
			wake:   make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
		}
		t.senders[id] = s
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			s.run(sctx)
		}()
	}
}

func (t *term) stopSenders() {
	for id, s := range t.senders {
		s.cancel()
		delete(t.senders, id)
	}
	t.wg.Wait()
}

// setTopics replaces the topic cache, adding partitions (without state) for
// new assignments and dropping partitions of topics that are gone.
func (t *term) setTopics(ts []coord.TopicSpec) {
	next := make(map[string]coord.TopicSpec, len(ts))
	for i, s := range ts {
		// A snapshot read before this controller's own assignment write
		// (a reassignment step) must not undo it.
		if old, ok := t.topics[s.Name]; ok && old.Version > s.Version {
			ts[i] = old
			s = old
		}
		next[s.Name] = s
	}
	for tp := range t.parts {
		s, ok := next[tp.Topic]
		if !ok || s.MarkedForDeletion {
			delete(t.parts, tp)
			continue
		}
		if _, ok := s.Assignment[tp.Partition]; !ok {
			delete(t.parts, tp)
		}
	}
	for _, s := range ts {
		if s.MarkedForDeletion {
			continue // no elections for a topic being deleted
		}
		for p, replicas := range s.Assignment {
			tp := coord.TopicPartition{Topic: s.Name, Partition: p}
			p, ok := t.parts[tp]
			if !ok {
				p = &partition{tp: tp}
				t.parts[tp] = p
			}
			p.setAssignment(reassignment{replicas: replicas, adding: s.Adding[tp.Partition], removing: s.Removing[tp.Partition]})
		}
	}
	t.topics = next
	t.topicIDs = make(map[[16]byte]string, len(next))
	for name, s := range next {
		if s.ID != ([16]byte{}) {
			t.topicIDs[s.ID] = name
		}
	}
}

// readStates refreshes the cached states of topics from the coordinator,
// with one round trip per coord.MaxTxnOps topics.
func (t *term) readStates(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	states, err := t.c.cfg.Coord.PartitionStatesOf(ctx, topics)
	if err != nil {
		return err
	}
	for _, name := range topics {
		t.setStates(name, states[name], nil)
	}
	return nil
}

// setStates caches a topic's states as read (a partition without one has
// none); only limits it to some partitions when not nil.
func (t *term) setStates(topic string, states map[int32]coord.PartitionState, only []int32) {
	set := func(p int32) {
		tp := coord.TopicPartition{Topic: topic, Partition: p}
		if part, ok := t.parts[tp]; ok {
			st, ok := states[p]
			part.state, part.hasState = st, ok
		}
	}
	if only != nil {
		for _, p := range only {
			set(p)
		}
		return
	}
	for p := range t.topics[topic].Assignment {
		set(p)
	}
}

// doResync is the failover sequence, also used to recover after a failed
// coordinator call: re-read every partition state, initialize and elect
// where needed, then send full UpdateMetadata to every live broker and
// LeaderAndIsr to every live replica.
func (t *term) doResync(ctx context.Context) error {
	if err := t.readStates(ctx, slices.Sorted(maps.Keys(t.topics))); err != nil {
		return err
	}
	if err := t.processDeletions(ctx); err != nil {
		return err
	}
	changes, err := t.apply(ctx, t.allTPs(), livenessDecision(t.live, t.up, t.uncleanByTopic(), t.elr(), t.epoch))
	if err != nil {
		return err
	}
	isNew := map[coord.TopicPartition]bool{}
	for _, ch := range changes {
		if ch.IsNew {
			isNew[ch.TP] = true
		}
	}
	t.sendLeaderAndISR(t.allTPs(), isNew, nil)
	t.sendUpdateMetadata(t.allTPs(), nil)
	if err := t.resumeReassignments(ctx); err != nil {
		return err
	}
	t.resync = false
	t.log.Info("controller state synchronized", "brokers", len(t.brokers), "partitions", len(t.parts), "changed", len(changes))
	return nil
}

// apply decides and writes state changes for tps, fenced on the
// leadership. A version mismatch (a leader changed its ISR meanwhile)
// re-reads the partition and decides again, up to three rounds. The cache
// holds the written states afterwards; the applied changes are returned.
func (t *term) apply(ctx context.Context, tps []coord.TopicPartition, decide decision) ([]stateChange, error) {
	var applied []stateChange
	pending := tps
	for round := 0; len(pending) > 0; round++ {
		var parts []*partition
		for _, tp := range pending {
			if p, ok := t.parts[tp]; ok {
				parts = append(parts, p)
			}
		}
		changes := plan(parts, decide)
		if len(changes) == 0 {
			break
		}
		ups := make([]coord.PartitionStateUpdate, len(changes))
		for i, ch := range changes {
			ups[i] = coord.PartitionStateUpdate{Topic: ch.TP.Topic, Partition: ch.TP.Partition, State: ch.New, ExpectedVersion: ch.Old.Version}
		}
		versions, err := t.c.cfg.Coord.SetPartitionStates(ctx, t.l, ups)
		pending = nil
		for i, ch := range changes {
			if i < len(versions) && versions[i] != 0 {
				ch.New.Version = versions[i]
				p := t.parts[ch.TP]
				p.state, p.hasState = ch.New, true
				applied = append(applied, ch)
				if ch.Unclean {
					t.c.metrics.unclean.Inc()
					t.log.Warn("unclean leader election", "topic", ch.TP.Topic, "partition", ch.TP.Partition, "leader", ch.New.Leader, "leader_epoch", ch.New.LeaderEpoch)
				}
				continue
			}
			pending = append(pending, ch.TP)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrVersionMismatch) || round >= 2 {
			return applied, err
		}
		// Re-read the rest (one range read per topic, batched), as Kafka
		// reads the current states before an election batch.
		byTopic := map[string][]int32{}
		for _, tp := range pending {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		names := slices.Sorted(maps.Keys(byTopic))
		fresh, err := t.c.cfg.Coord.PartitionStatesOf(ctx, names)
		if err != nil {
			return applied, err
		}
		for _, name := range names {
			t.setStates(name, fresh[name], byTopic[name])
		}
	}
	for _, ch := range applied {
		t.log.Info("partition state changed", "topic", ch.TP.Topic, "partition", ch.TP.Partition,
			"leader", ch.New.Leader, "leader_epoch", ch.New.LeaderEpoch, "isr", ch.New.ISR, "elr", ch.New.ELR, "version", ch.New.Version)
	}
	return applied, nil
}

func changedTPs(chs []stateChange) []coord.TopicPartition {
	out := make([]coord.TopicPartition, len(chs))
	for i, ch := range chs {
		out[i] = ch.TP
	}
	return out
}

// announce sends LeaderAndIsr for changed partitions to their live replicas
// and UpdateMetadata for them to every live broker.
func (t *term) announce(chs []stateChange) {
	if len(chs) == 0 {
		return
	}
	isNew := map[coord.TopicPartition]bool{}
	for _, ch := range chs {
		if ch.IsNew {
			isNew[ch.TP] = true
		}
	}
	tps := changedTPs(chs)
	sortTPs(tps)
	t.sendLeaderAndISR(tps, isNew, nil)
	t.sendUpdateMetadata(tps, nil)
}

// topicID is a topic's ID (zero for a deleted topic or one written before
// topic IDs).
func (t *term) topicID(topic string) [16]byte { return t.topics[topic].ID }

// sendLeaderAndISR sends the cached state of tps to their live replicas
// (only to the brokers in only, when not nil).
func (t *term) sendLeaderAndISR(tps []coord.TopicPartition, isNew map[coord.TopicPartition]bool, only map[int32]bool) {
	per := map[int32][]kmsg.LeaderAndISRRequestTopicPartition{}
	leaders := map[int32]map[int32]bool{}
	for _, tp := range tps {
		p, ok := t.parts[tp]
		if !ok || !p.hasState {
			continue
		}
		for _, r := range p.replicas {
			if _, ok := t.brokers[r]; !ok || (only != nil && !only[r]) {
				continue
			}
			per[r] = append(per[r], laiPartition(p, isNew[tp]))
			if leaders[r] == nil {
				leaders[r] = map[int32]bool{}
			}
			if p.state.Leader >= 0 {
				leaders[r][p.state.Leader] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(per)) {
		b := t.brokers[id]
		req := kmsg.NewPtrLeaderAndISRRequest()
		req.SetVersion(leaderAndISRVersion)
		req.ControllerID = t.c.cfg.BrokerID
		req.ControllerEpoch = int32(t.epoch)
		req.BrokerEpoch = b.Epoch
		req.TopicStates = groupLAI(per[id], t.topicID)
		for _, lid := range slices.Sorted(maps.Keys(leaders[id])) {
			lb, ok := t.brokers[lid]
			if !ok {
				continue
			}
			ll := kmsg.NewLeaderAndISRRequestLiveLeader()
			ll.BrokerID, ll.Host, ll.Port = lid, lb.Host, lb.Port
			req.LiveLeaders = append(req.LiveLeaders, ll)
		}
		t.enqueue(id, req)
	}
}

// sendUpdateMetadata sends the cached state of tps and the live brokers to
// every live broker. deleted partitions go out with leader -2 so brokers
// drop them.
func (t *term) sendUpdateMetadata(tps []coord.TopicPartition, deleted []coord.TopicPartition) {
	var ps []kmsg.UpdateMetadataRequestTopicPartition
	for _, tp := range tps {
		if p, ok := t.parts[tp]; ok && p.hasState {
			ps = append(ps, umPartition(p, t.live))
		}
	}
	for _, tp := range deleted {
		d := kmsg.NewUpdateMetadataRequestTopicPartition()
		d.Topic, d.Partition, d.Leader = tp.Topic, tp.Partition, leaderDuringDelete
		d.ControllerEpoch = int32(t.epoch)
		d.ISR, d.Replicas, d.OfflineReplicas = []int32{}, []int32{}, []int32{}
		ps = append(ps, d)
	}
	var live []kmsg.UpdateMetadataRequestLiveBroker
	for _, id := range slices.Sorted(maps.Keys(t.brokers)) {
		b := t.brokers[id]
		lb := kmsg.NewUpdateMetadataRequestLiveBroker()
		lb.ID = id
		lb.Endpoints = endpoints(b)
		if b.Rack != "" {
			rack := b.Rack
			lb.Rack = &rack
		}
		live = append(live, lb)
	}
	topics := groupUM(ps, t.topicID)
	for _, id := range slices.Sorted(maps.Keys(t.brokers)) {
		req := kmsg.NewPtrUpdateMetadataRequest()
		req.SetVersion(updateMetadataVersion)
		req.ControllerID = t.c.cfg.BrokerID
		req.ControllerEpoch = int32(t.epoch)
		req.BrokerEpoch = t.brokers[id].Epoch
		req.TopicStates = topics
		req.LiveBrokers = live
		t.enqueue(id, req)
	}
}

// sendStopReplica tells broker id to stop its replicas of tps, deleting
// them when del is set; done runs once the broker answered.
func (t *term) sendStopReplica(id int32, tps []coord.TopicPartition, del bool, done func()) {
	b, ok := t.brokers[id]
	if !ok || len(tps) == 0 {
		return
	}
	req := kmsg.NewPtrStopReplicaRequest()
	req.SetVersion(stopReplicaVersion)
	req.ControllerID = t.c.cfg.BrokerID
	req.ControllerEpoch = int32(t.epoch)
	req.BrokerEpoch = b.Epoch
	for _, tp := range tps {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != tp.Topic {
			rt := kmsg.NewStopReplicaRequestTopic()
			rt.Topic = tp.Topic
			req.Topics = append(req.Topics, rt)
		}
		ps := kmsg.NewStopReplicaRequestTopicPartitionState()
		ps.Partition = tp.Partition
		ps.Delete = del
		ps.LeaderEpoch = epochDuringDelete
		if p, ok := t.parts[tp]; ok && p.hasState && !del {
			ps.LeaderEpoch = p.state.LeaderEpoch
		}
		req.Topics[len(req.Topics)-1].PartitionStates = append(req.Topics[len(req.Topics)-1].PartitionStates, ps)
	}
	if s, ok := t.senders[id]; ok {
		s.enqueue(req, done)
	}
}

func (t *term) enqueue(id int32, req kmsg.Request) {
	if s, ok := t.senders[id]; ok {
		s.enqueue(req, nil)
	}
}

// onBrokers handles a new live-broker snapshot: failures first (elections
// and ISR removals without the dead and bounced brokers), then startups
// (full metadata, LeaderAndIsr to the new incarnations, elections that the
// returning brokers make possible).
func (t *term) onBrokers(ctx context.Context, bs []coord.BrokerInfo) error {
	prev := map[int32]int64{}
	for id, b := range t.brokers {
		prev[id] = b.Epoch
	}
	cur := map[int32]int64{}
	for _, b := range bs {
		cur[b.ID] = b.Epoch
	}
	dead, started := brokerDiff(prev, cur)
	if len(dead) == 0 && len(started) == 0 {
		t.setBrokers(ctx, bs)
		return nil
	}
	t.log.Info("live brokers changed", "dead", dead, "started", started)
	var failed []stateChange
	if len(dead) > 0 {
		gone := map[int32]bool{}
		for _, id := range dead {
			gone[id] = true
		}
		alive := func(id int32) bool { return t.live(id) && !gone[id] }
		up := func(id int32) bool { return t.up(id) && !gone[id] }
		chs, err := t.apply(ctx, t.allTPs(), livenessDecision(alive, up, t.uncleanByTopic(), t.elr(), t.epoch))
		failed = chs
		if err != nil {
			t.setBrokers(ctx, bs)
			return fmt.Errorf("handle failure of brokers %v: %w", dead, err)
		}
	}
	t.setBrokers(ctx, bs)
	// Replicas on the brokers that (re)started learn every partition they
	// host; everyone learns the new broker list and the failover changes.
	if len(started) > 0 {
		only := map[int32]bool{}
		for _, id := range started {
			only[id] = true
		}
		t.sendLeaderAndISR(t.allTPs(), nil, only)
	}
	if len(failed) > 0 {
		t.sendLeaderAndISR(changedTPs(failed), nil, nil)
	}
	t.sendUpdateMetadata(t.allTPs(), nil)
	if len(started) == 0 {
		return nil
	}
	if err := t.dropUncleanFromELR(ctx, bs, started); err != nil {
		return fmt.Errorf("handle startup of brokers %v: %w", started, err)
	}
	chs, err := t.apply(ctx, t.allTPs(), livenessDecision(t.live, t.up, t.uncleanByTopic(), t.elr(), t.epoch))
	t.announce(chs)
	if err != nil {
		return fmt.Errorf("handle startup of brokers %v: %w", started, err)
	}
	// Reassignments whose target includes a returning broker go on
	// (Kafka's onBrokerStartup).
	for _, tp := range t.reassigning() {
		p := t.parts[tp]
		if slices.ContainsFunc(p.assignment().target(), func(r int32) bool { return slices.Contains(started, r) }) {
			if err := t.reassign(ctx, tp, p.assignment()); err != nil {
				return err
			}
		}
	}
	// Deletions waiting for these brokers resume.
	return t.processDeletions(ctx)
}

// dropUncleanFromELR removes the started brokers that registered after
// an unclean shutdown from every ELR, before they can be elected from it
// (KIP-966: ReplicationControlManager.handleBrokerUncleanShutdown on a
// new incarnation's registration).
func (t *term) dropUncleanFromELR(ctx context.Context, bs []coord.BrokerInfo, started []int32) error {
	if !t.elr().on {
		return nil
	}
	unclean := map[int32]bool{}
	for _, b := range bs {
		if b.UncleanShutdown && slices.Contains(started, b.ID) {
			unclean[b.ID] = true
		}
	}
	if len(unclean) == 0 {
		return nil
	}
	chs, err := t.apply(ctx, t.allTPs(), uncleanShutdownDecision(func(r int32) bool { return unclean[r] }, t.epoch))
	for _, ch := range chs {
		t.log.Info("ELR loses replicas that shut down uncleanly", "topic", ch.TP.Topic, "partition", ch.TP.Partition, "elr", ch.New.ELR, "was", ch.Old.ELR)
	}
	t.announce(chs)
	return err
}

// onTopics handles a new topic snapshot: states for new topics, deletions,
// and elections when unclean election became allowed.
func (t *term) onTopics(ctx context.Context, ts []coord.TopicSpec) error {
	old := t.topics
	t.setTopics(ts)
	var added []string
	var uncleanOn []string
	var gone []coord.TopicPartition
	for name, spec := range t.topics {
		o, ok := old[name]
		// A new assignment version is a new topic (possibly deleted and
		// recreated under the same name) or added partitions.
		if !ok || o.Version != spec.Version || len(o.Assignment) != len(spec.Assignment) {
			added = append(added, name)
			continue
		}
		// The ZooKeeper era's controller elects at once when a topic's
		// unclean.leader.election.enable is turned on
		// (TopicUncleanLeaderElectionEnable); KRaft's waits for its
		// periodic check (uncleanCheck).
		before, _ := t.c.broker.TopicConfig(o.Configs)
		if !t.c.cfg.KRaft && before != nil && !before.Bool("unclean.leader.election.enable") && t.unclean(name) {
			uncleanOn = append(uncleanOn, name)
		}
	}
	for name, o := range old {
		if _, ok := t.topics[name]; !ok {
			delete(t.deleting, name)
			for _, p := range o.Partitions() {
				gone = append(gone, coord.TopicPartition{Topic: name, Partition: p})
			}
		}
	}
	slices.Sort(added)
	if len(gone) > 0 {
		sortTPs(gone)
		t.sendUpdateMetadata(nil, gone)
	}
	if err := t.readStates(ctx, added); err != nil {
		return err
	}
	isAdded := map[string]bool{}
	for _, name := range added {
		isAdded[name] = true
	}
	var tps []coord.TopicPartition
	for _, name := range slices.Sorted(slices.Values(append(slices.Clone(added), uncleanOn...))) {
		for _, p := range t.topics[name].Partitions() {
			tp := coord.TopicPartition{Topic: name, Partition: p}
			if _, ok := t.parts[tp]; ok {
				tps = append(tps, tp)
			}
		}
	}
	chs, err := t.apply(ctx, tps, livenessDecision(t.live, t.up, t.uncleanByTopic(), t.elr(), t.epoch))
	t.announce(chs)
	if err != nil {
		return err
	}
	// Partitions of new topics that already had state (written by an
	// earlier controller) are announced too.
	changed := make(map[coord.TopicPartition]bool, len(chs))
	for _, ch := range chs {
		changed[ch.TP] = true
	}
	var known []coord.TopicPartition
	for _, tp := range tps {
		if isAdded[tp.Topic] && !changed[tp] {
			known = append(known, tp)
		}
	}
	if len(known) > 0 {
		t.sendLeaderAndISR(known, nil, nil)
		t.sendUpdateMetadata(known, nil)
	}
	return t.processDeletions(ctx)
}

// stopAck reports that a broker incarnation answered a deleting
// StopReplica for a topic.
type stopAck struct {
	broker int32
	epoch  int64
	topic  string
}

// processDeletions advances the deletion of topics marked for deletion, as
// Kafka's TopicDeletionManager does: the partitions leave the metadata at
// once (UpdateMetadata with leader -2) and take no part in elections; every
// replica gets StopReplica(delete); the coordinator entries go only when
// every replica has answered, so a deletion waits while a replica's broker
// is down and resumes when it comes back.
func (t *term) processDeletions(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(t.topics)) {
		spec := t.topics[name]
		if !spec.MarkedForDeletion {
			continue
		}
		per := map[int32][]coord.TopicPartition{}
		var tps []coord.TopicPartition
		for _, p := range spec.Partitions() {
			tp := coord.TopicPartition{Topic: name, Partition: p}
			tps = append(tps, tp)
			for _, r := range spec.Assignment[p] {
				per[r] = append(per[r], tp)
			}
		}
		pending, ok := t.deleting[name]
		if !ok {
			t.log.Info("topic deletion started", "topic", name)
			pending = map[int32]int64{}
			for r := range per {
				pending[r] = 0
			}
			t.deleting[name] = pending
			t.sendUpdateMetadata(nil, tps)
		}
		// A replica gets the request once per incarnation until it answers.
		for _, id := range slices.Sorted(maps.Keys(pending)) {
			b, live := t.brokers[id]
			if !live || pending[id] == b.Epoch {
				continue
			}
			pending[id] = b.Epoch
			ack := stopAck{broker: id, epoch: b.Epoch, topic: name}
			acks, done := t.acks, t.done
			t.sendStopReplica(id, per[id], true, func() {
				select {
				case acks <- ack:
				case <-done:
				}
			})
		}
		if len(pending) > 0 {
			continue
		}
		if err := t.c.cfg.Coord.DeleteTopic(ctx, t.l, name); err != nil && !errors.Is(err, coord.ErrTopicNotFound) {
			return fmt.Errorf("delete topic %s: %w", name, err)
		}
		t.log.Info("topic deleted", "topic", name)
		delete(t.topics, name)
		delete(t.deleting, name)
	}
	return nil
}

// onStopAck records a replica's answer to a deleting StopReplica and
// finishes deletions that no longer wait for anyone.
func (t *term) onStopAck(ctx context.Context, a stopAck) error {
	pending, ok := t.deleting[a.topic]
	if !ok || pending[a.broker] != a.epoch {
		return nil
	}
	delete(pending, a.broker)
	if len(pending) > 0 {
		return nil
	}
	return t.processDeletions(ctx)
}

// onISRChanges propagates ISR changes that leaders wrote themselves
// (Kafka's lazy isr_change_notification handling): re-read the notified
// partitions, UpdateMetadata to all brokers, delete the notifications.
func (t *term) onISRChanges(ctx context.Context) error {
	ns, err := t.c.cfg.Coord.ISRChangeNotifications(ctx)
	if err != nil || len(ns) == 0 {
		return err
	}
	seen := map[coord.TopicPartition]bool{}
	var tps []coord.TopicPartition
	byTopic := map[string][]int32{}
	keys := make([]string, 0, len(ns))
	for _, n := range ns {
		keys = append(keys, n.Key)
		for _, tp := range n.Partitions {
			if _, ok := t.parts[tp]; ok && !seen[tp] {
				seen[tp] = true
				tps = append(tps, tp)
				byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
			}
		}
	}
	// The notified partitions' states, read by topic in batches (a
	// broker coming back notifies thousands at once).
	names := slices.Sorted(maps.Keys(byTopic))
	fresh, err := t.c.cfg.Coord.PartitionStatesOf(ctx, names)
	if err != nil {
		return err
	}
	for _, name := range names {
		for _, p := range byTopic[name] {
			if st, ok := fresh[name][p]; ok {
				part := t.parts[coord.TopicPartition{Topic: name, Partition: p}]
				part.state, part.hasState = st, true
			}
		}
	}
	sortTPs(tps)
	t.sendUpdateMetadata(tps, nil)
	if err := t.c.cfg.Coord.DeleteISRChangeNotifications(ctx, t.l, keys); err != nil {
		return err
	}
	return t.maybeCompleteReassignments(ctx, tps)
}

// onRebalance is the automatic preferred-leader rebalance (§4.4).
// uncleanCheck is the KRaft controller's periodic unclean election
// (QuorumController's maybeElectUncleanLeaders, every
// unclean.leader.election.interval.ms): each leaderless partition of a
// topic with unclean.leader.election.enable gets a leader, from its ELR
// first, then from outside the ISR. It is how a dynamic enable takes
// effect in KRaft mode; a leader lost while unclean election is already
// on is replaced at once, as before.
func (t *term) uncleanCheck(ctx context.Context) error {
	unclean := t.uncleanByTopic()
	var tps []coord.TopicPartition
	for _, p := range t.sortedParts() {
		if p.hasState && (p.state.Leader == NoLeader || !t.up(p.state.Leader)) && unclean(p.tp.Topic) {
			tps = append(tps, p.tp)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	chs, err := t.apply(ctx, tps, uncleanDecision(t.live, t.up, t.elr(), t.epoch))
	if len(chs) > 0 {
		t.log.Warn("periodic unclean leader election for leaderless partitions", "elected", len(chs))
	}
	t.announce(chs)
	return err
}

func (t *term) onRebalance(ctx context.Context) error {
	tps := imbalancedPartitions(t.sortedParts(), t.c.broker.Int("leader.imbalance.per.broker.percentage"))
	if len(tps) == 0 {
		return nil
	}
	chs, err := t.apply(ctx, tps, preferredDecision(t.live, t.epoch))
	if len(chs) > 0 {
		t.log.Info("auto leader rebalance", "moved", len(chs))
	}
	t.announce(chs)
	return err
}
