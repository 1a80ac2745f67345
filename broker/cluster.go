package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/partition"
)

// Controller is the controller component a clustered broker runs while it
// holds the coordinator's controller election (package controller).
type Controller interface {
	Run(ctx context.Context, l *coord.Leadership) error
	Active() bool
	ElectLeaders(ctx context.Context, req *kmsg.ElectLeadersRequest) *kmsg.ElectLeadersResponse
	ControlledShutdown(ctx context.Context, req *kmsg.ControlledShutdownRequest) *kmsg.ControlledShutdownResponse
	AlterPartition(ctx context.Context, req *kmsg.AlterPartitionRequest) *kmsg.AlterPartitionResponse
	AlterPartitionReassignments(ctx context.Context, req *kmsg.AlterPartitionAssignmentsRequest) *kmsg.AlterPartitionAssignmentsResponse
	ListPartitionReassignments(ctx context.Context, req *kmsg.ListPartitionReassignmentsRequest) *kmsg.ListPartitionReassignmentsResponse
}

// ControllerFactory builds the broker's controller once the coordinator
// client exists.
type ControllerFactory func(b *Broker, c *coord.Client) Controller

// WithController sets how a clustered broker builds its controller.
func WithController(f ControllerFactory) Option {
	return optFunc(func(b *Broker) { b.newController = f })
}

// cluster is a broker's link to the coordinator and the controller.
type cluster struct {
	b     *Broker
	coord *coord.Client
	ctrl  Controller
	kraft *kraftLink // KRaft mode's link to the controller quorum, nil in the ZooKeeper era

	reg   atomic.Pointer[coord.Registration]
	epoch atomic.Int64 // broker epoch (KIP-380)
	// registered is set once the process has registered (register runs
	// in one goroutine at a time).
	registered bool

	maxControllerEpoch atomic.Int32

	isrMu      sync.Mutex
	isrChanged map[coord.TopicPartition]struct{}

	alterMu      sync.Mutex
	alterQueue   []alterItem // proposals waiting for the next request
	alterSending bool        // a goroutine is sending alterQueue
}

// BrokerEpoch returns the broker's current registration epoch (-1 before
// registration or standalone).
func (b *Broker) BrokerEpoch() int64 {
	if b.cluster == nil {
		return -1
	}
	if e := b.cluster.epoch.Load(); e > 0 {
		return e
	}
	return -1
}

// Coord returns the coordinator client (nil standalone).
func (b *Broker) Coord() *coord.Client {
	if b.cluster == nil {
		return nil
	}
	return b.cluster.coord
}

// ID returns the broker id.
func (b *Broker) ID() int32 { return b.id }

// dialCoord connects to coordinator.connect.
func (b *Broker) dialCoord(ctx context.Context) error {
	endpoints := b.cfg.List("coordinator.connect")
	session := time.Duration(b.cfg.Long("coordinator.session.timeout.ms")) * time.Millisecond
	c, err := coord.Dial(ctx, endpoints, coord.WithSessionTimeout(session), coord.WithLogger(b.log), coord.WithoutConnectCheck())
	if err != nil {
		return fmt.Errorf("coordinator.connect %v: %w", endpoints, err)
	}
	b.cluster = &cluster{b: b, coord: c, isrChanged: map[coord.TopicPartition]struct{}{}}
	b.producerIDs = newCoordProducerIDs(c, b.id)
	if b.cfg.String("process.roles") == "broker" {
		k, err := newKRaftLink(b.cfg)
		if err != nil {
			c.Close()
			return err
		}
		b.cluster.kraft = k // a KRaft broker runs no controller
		return nil
	}
	if b.newController != nil {
		b.cluster.ctrl = b.newController(b, c)
	}
	return nil
}

// register registers the broker, retrying while an earlier session of the
// same id is still alive (after a crash it lasts until the session times
// out). A live duplicate broker id is reported once as an error.
func (c *cluster) register(ctx context.Context) (*coord.Registration, error) {
	// Host and port are the inter-broker listener's, which the controller
	// dials; Endpoints list every advertised listener, which
	// UpdateMetadata passes on so each client gets its own listener's.
	self := c.b.selfEndpoint()
	// Only the process's first registration tells of an unclean
	// shutdown: a re-registration after a lost session is the same
	// incarnation.
	info := coord.BrokerInfo{ID: c.b.id, Host: self.Host, Port: self.Port, Timestamp: time.Now().UnixMilli(),
		UncleanShutdown: c.b.logs.UncleanShutdown() && !c.registered}
	for _, l := range c.b.ls.all {
		if hp, ok := self.Endpoints[l.Name]; ok {
			info.Endpoints = append(info.Endpoints, l.Name+"://"+net.JoinHostPort(hp.Host, strconv.Itoa(int(hp.Port))))
		}
	}
	session := time.Duration(c.b.cfg.Long("coordinator.session.timeout.ms")) * time.Millisecond
	warned := false
	for {
		reg, err := c.coord.RegisterBroker(ctx, info, session)
		if err == nil {
			c.registered = true
			return reg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, coord.ErrBrokerIDInUse) && !warned {
			c.b.log.Warn("broker id is registered by a live session; waiting for it to expire", "err", err)
			warned = true
		} else if !errors.Is(err, coord.ErrBrokerIDInUse) {
			c.b.log.Warn("register with coordinator", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// registrationLoop keeps the broker registered: after a lost session it
// re-registers and gets a new, larger epoch (§6.2). It runs the controller
// election on each registration's session.
func (c *cluster) registrationLoop(ctx context.Context) error {
	for ctx.Err() == nil {
		reg, err := c.register(ctx)
		if err != nil {
			return nil
		}
		c.reg.Store(reg)
		c.epoch.Store(reg.Epoch())
		c.b.log.Info("registered with coordinator", "broker_epoch", reg.Epoch())
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if c.ctrl != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.campaignLoop(rctx, reg)
			}()
		}
		select {
		case <-ctx.Done():
		case <-reg.Done():
			c.b.log.Warn("coordinator session lost; re-registering")
		}
		cancel()
		wg.Wait()
		if ctx.Err() != nil {
			reg.Close()
		}
	}
	return nil
}

// campaignLoop runs the controller whenever this broker wins the election.
func (c *cluster) campaignLoop(ctx context.Context, reg *coord.Registration) {
	for ctx.Err() == nil {
		l, err := reg.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.b.log.Warn("controller campaign", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		c.b.log.Info("elected controller", "controller_epoch", l.Epoch())
		if err := c.ctrl.Run(ctx, l); err != nil && ctx.Err() == nil {
			c.b.log.Warn("controller stopped", "err", err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.Resign(rctx)
		cancel()
	}
}

// isrNotifyLoop propagates leader-made ISR changes to the controller every
// 2500 ms (Kafka's ZooKeeper-era isr-change-propagation).
func (c *cluster) isrNotifyLoop(ctx context.Context) {
	t := time.NewTicker(2500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.isrMu.Lock()
		var list []coord.TopicPartition
		for k := range c.isrChanged {
			list = append(list, k)
		}
		c.isrChanged = map[coord.TopicPartition]struct{}{}
		c.isrMu.Unlock()
		if len(list) == 0 {
			continue
		}
		if err := c.coord.NotifyISRChange(ctx, list); err != nil {
			c.b.log.Warn("ISR change notification", "err", err)
			c.isrMu.Lock()
			for _, k := range list {
				c.isrChanged[k] = struct{}{}
			}
			c.isrMu.Unlock()
		}
	}
}

// topicConfigLoop keeps topic configs current from the coordinator.
func (c *cluster) topicConfigLoop(ctx context.Context) {
	for ev := range c.coord.WatchTopics(ctx) {
		for _, t := range ev.Topics {
			c.b.meta.setTopicConfigs(t.Name, t.Configs, len(t.Assignment))
			tc, err := c.b.cfg.TopicConfig(t.Configs)
			if err != nil {
				continue
			}
			for pi := range t.Assignment {
				c.b.applyTopicConfig(t.Name, pi, tc)
			}
		}
	}
}

// isrWriter implements partition.ISRWriter for the broker.
type isrWriter struct{ b *Broker }

// WriteISR conditionally writes a leader's ISR change, retrying while the
// coordinator does not answer; the caller holds the partition's write lock.
func (w isrWriter) WriteISR(topic string, p int32, st partition.LeaderAndISR, expected int64) (int64, error) {
	c := w.b.cluster
	if c == nil {
		return expected, nil
	}
	ctx := w.b.runCtx
	for {
		vers, err := c.coord.SetPartitionStates(ctx, nil, []coord.PartitionStateUpdate{{
			Topic: topic, Partition: p, ExpectedVersion: expected,
			State: coord.PartitionState{ControllerEpoch: int64(st.ControllerEpoch), Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, ISR: st.ISR},
		}})
		switch {
		case err == nil:
			w.b.log.Info("ISR updated", "topic", topic, "partition", p, "isr", fmt.Sprint(st.ISR), "version", vers[0])
			return vers[0], nil
		case errors.Is(err, coord.ErrVersionMismatch):
			w.b.log.Info("cached partition state version not equal to the coordinator's; skip updating ISR", "topic", topic, "partition", p, "cached_version", expected)
			return 0, partition.ErrVersionMismatch
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		w.b.log.Warn("ISR write waits for the coordinator", "topic", topic, "partition", p, "err", err)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (w isrWriter) NotifyISRChange(topic string, p int32) {
	c := w.b.cluster
	if c == nil {
		return
	}
	c.isrMu.Lock()
	c.isrChanged[coord.TopicPartition{Topic: topic, Partition: p}] = struct{}{}
	c.isrMu.Unlock()
}

// AlterPartition queues the proposal for the controller. Proposals are
// sent in batches, one request in flight at a time, as Kafka's
// AlterPartitionManager sends them: whatever queued while a request was
// out goes in the next one, so a broker rejoining thousands of ISRs sends
// a few requests instead of one per partition.
func (w isrWriter) AlterPartition(p *partition.Partition, leaderEpoch int32, isr []int32, partitionEpoch int64) {
	c := w.b.cluster
	item := alterItem{p: p, leaderEpoch: leaderEpoch, isr: isr, partitionEpoch: partitionEpoch}
	if c == nil {
		go p.CompleteAlterPartition(leaderEpoch, nil, 0, errors.New("standalone broker"))
		return
	}
	c.alterMu.Lock()
	c.alterQueue = append(c.alterQueue, item)
	start := !c.alterSending
	c.alterSending = true
	c.alterMu.Unlock()
	if start {
		go c.sendAlters()
	}
}

// alterItem is one queued AlterPartition proposal.
type alterItem struct {
	p              *partition.Partition
	leaderEpoch    int32
	isr            []int32
	partitionEpoch int64
}

// sendAlters sends the queued proposals until the queue is empty.
func (c *cluster) sendAlters() {
	for {
		c.alterMu.Lock()
		batch := c.alterQueue
		c.alterQueue = nil
		if len(batch) == 0 {
			c.alterSending = false
			c.alterMu.Unlock()
			return
		}
		c.alterMu.Unlock()
		results, err := c.b.sendAlterPartition(batch)
		for i, it := range batch {
			r := results[i]
			if err != nil {
				r.err = err
			}
			if r.err != nil {
				c.b.log.Info("AlterPartition failed", "topic", it.p.Topic, "partition", it.p.Index, "isr", fmt.Sprint(it.isr), "err", r.err)
			}
			it.p.CompleteAlterPartition(it.leaderEpoch, r.isr, r.epoch, r.err)
		}
	}
}

// alterResult is the controller's answer for one proposal.
type alterResult struct {
	isr   []int32
	epoch int64
	err   error
}

// sendAlterPartition sends one AlterPartition (v1, topics by name) with
// every proposal of batch and returns each one's answer, in batch order.
func (b *Broker) sendAlterPartition(batch []alterItem) ([]alterResult, error) {
	results := make([]alterResult, len(batch))
	c := b.cluster
	ctrlID, addr, ok := b.controllerTarget()
	if !ok {
		return results, fmt.Errorf("controller %d unknown", ctrlID)
	}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.SetVersion(1)
	req.BrokerID, req.BrokerEpoch = b.id, c.epoch.Load()
	topicAt := map[string]int{}
	for _, it := range batch {
		i, ok := topicAt[it.p.Topic]
		if !ok {
			i = len(req.Topics)
			topicAt[it.p.Topic] = i
			rt := kmsg.NewAlterPartitionRequestTopic()
			rt.Topic = it.p.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.NewISR, rp.PartitionEpoch = it.p.Index, it.leaderEpoch, it.isr, int32(it.partitionEpoch)
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
	defer cancel()
	raw, err := b.brokerClient(ctrlID, addr).Request(ctx, req)
	if err != nil {
		return results, err
	}
	resp := raw.(*kmsg.AlterPartitionResponse)
	if err := kerrFor(resp.ErrorCode); err != nil {
		return results, err
	}
	// Answers by topic and partition, in the order asked (a partition
	// has one proposal at a time, but order keeps even repeats apart).
	answers := map[tp][]kmsg.AlterPartitionResponseTopicPartition{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			k := tp{t.Topic, p.Partition}
			answers[k] = append(answers[k], p)
		}
	}
	for i, it := range batch {
		k := tp{it.p.Topic, it.p.Index}
		as := answers[k]
		if len(as) == 0 {
			results[i].err = errors.New("AlterPartition response without the partition")
			continue
		}
		a := as[0]
		answers[k] = as[1:]
		if err := kerrFor(a.ErrorCode); err != nil {
			results[i].err = err
			continue
		}
		results[i] = alterResult{isr: a.ISR, epoch: int64(a.PartitionEpoch)}
	}
	return results, nil
}

// createTopicClustered writes a new topic's assignment to the coordinator;
// the controller creates its partition states and tells the brokers.
func (b *Broker) createTopicClustered(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) ([16]byte, error) {
	c := b.cluster
	brokers, err := c.coord.Brokers(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	ids := make([]int32, 0, len(brokers))
	for _, br := range brokers {
		ids = append(ids, br.ID)
	}
	assign, err := controller.AssignReplicas(ids, partitions, rf, rand.New(rand.NewSource(time.Now().UnixNano())))
	if err != nil {
		return [16]byte{}, err
	}
	// The topic ID is chosen here, as Kafka's admin manager does, so the
	// CreateTopics response can carry it before metadata has propagated.
	id := coord.NewTopicID()
	err = c.coord.CreateTopic(ctx, nil, coord.TopicSpec{Name: name, ID: id, Assignment: assign, Configs: configs}, nil)
	if errors.Is(err, coord.ErrTopicExists) {
		return [16]byte{}, errTopicExists
	}
	return id, err
}

// brokerClient returns a cached connection to another broker.
func (b *Broker) brokerClient(id int32, addr string) *brokerClient {
	b.clientsMu.Lock()
	defer b.clientsMu.Unlock()
	if cl, ok := b.clients[id]; ok && cl.Addr() == addr {
		return cl
	}
	cl := newBrokerClient(addr, "broker-"+strconv.Itoa(int(b.id)), b.dialer)
	if old, ok := b.clients[id]; ok {
		old.Close()
	}
	b.clients[id] = cl
	return cl
}

func fmtIDs(ids []int32) string { return fmt.Sprint(ids) }

// controlledShutdown asks the controller to move this broker's leaderships
// away before it stops (§4.5), retrying controlled.shutdown.max.retries
// times, then shuts down anyway.
func (b *Broker) controlledShutdown() {
	if b.kraft() != nil {
		b.kraftControlledShutdown()
		return
	}
	c := b.cluster
	retries := b.cfg.Int("controlled.shutdown.max.retries")
	backoff := time.Duration(b.cfg.Long("controlled.shutdown.retry.backoff.ms")) * time.Millisecond
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff)
		}
		ctrlID := b.meta.controllerID()
		addr, ok := b.meta.brokerAddr(ctrlID)
		if !ok {
			b.log.Warn("controlled shutdown: controller unknown", "attempt", attempt+1)
			continue
		}
		req := kmsg.NewPtrControlledShutdownRequest()
		req.SetVersion(3)
		req.BrokerID, req.BrokerEpoch = b.id, c.epoch.Load()
		ctx, cancel := context.WithTimeout(b.runCtx, 30*time.Second)
		raw, err := b.brokerClient(ctrlID, addr).Request(ctx, req)
		cancel()
		if err != nil {
			b.log.Warn("controlled shutdown", "attempt", attempt+1, "err", err)
			continue
		}
		resp := raw.(*kmsg.ControlledShutdownResponse)
		if err := kerrFor(resp.ErrorCode); err != nil {
			b.log.Warn("controlled shutdown", "attempt", attempt+1, "err", err)
			continue
		}
		if len(resp.PartitionsRemaining) == 0 {
			b.log.Info("controlled shutdown complete")
			return
		}
		b.log.Info("controlled shutdown: partitions still led here", "count", len(resp.PartitionsRemaining), "attempt", attempt+1)
	}
	b.log.Warn("controlled shutdown did not complete; shutting down anyway")
}
