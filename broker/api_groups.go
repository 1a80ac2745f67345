package broker

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
	"github.com/isrlab/isrlab/broker/group"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/txn"
)

// groupManagers holds each broker's group coordinator, made on first use.
var groupManagers sync.Map // *Broker -> *groupEntry

type groupEntry struct {
	m      *group.Manager
	closer atomic.Bool // a close on the broker's shutdown is registered
}

// groups returns the broker's group coordinator (KAFKA-SPEC §9). It is
// closed when the broker stops serving.
func (b *Broker) groups() *group.Manager {
	v, ok := groupManagers.Load(b)
	if !ok {
		cfg := group.DefaultConfig()
		cfg.Partitions = b.cfg.Int("offsets.topic.num.partitions")
		cfg.InitialRebalanceDelay = time.Duration(b.cfg.Int("group.initial.rebalance.delay.ms")) * time.Millisecond
		cfg.CommitTimeout = time.Duration(b.cfg.Int("offsets.commit.timeout.ms")) * time.Millisecond
		if b.cfg.Known("group.min.session.timeout.ms") {
			cfg.MinSessionTimeout = time.Duration(b.cfg.Int("group.min.session.timeout.ms")) * time.Millisecond
		}
		if b.cfg.Known("offsets.retention.minutes") {
			cfg.OffsetsRetention = time.Duration(b.cfg.Long("offsets.retention.minutes")) * time.Minute
		}
		if b.cfg.Known("offsets.retention.check.interval.ms") {
			cfg.RetentionCheckInterval = time.Duration(b.cfg.Long("offsets.retention.check.interval.ms")) * time.Millisecond
		}
		if b.cfg.Known("group.max.session.timeout.ms") {
			cfg.MaxSessionTimeout = time.Duration(b.cfg.Int("group.max.session.timeout.ms")) * time.Millisecond
		}
		cfg.ConsumerSessionTimeout = time.Duration(b.cfg.Int("group.consumer.session.timeout.ms")) * time.Millisecond
		cfg.ConsumerHeartbeatInterval = time.Duration(b.cfg.Int("group.consumer.heartbeat.interval.ms")) * time.Millisecond
		e := &groupEntry{m: group.New(cfg, newCoordinatorLog(b, group.Topic), group.WithLogger(b.log.With("component", "group-coordinator")), group.WithTopicCheck(b.partitionExists), group.WithTopics(brokerTopics{b.meta}))}
		v, _ = groupManagers.LoadOrStore(b, e)
	}
	e := v.(*groupEntry)
	if b.runCtx != context.Background() && e.closer.CompareAndSwap(false, true) {
		context.AfterFunc(b.runCtx, func() {
			e.m.Close()
			groupManagers.Delete(b)
		})
	}
	return e.m
}

// brokerTopics is the broker's metadata as consumer groups assign from it.
type brokerTopics struct{ meta *metadata }

func (t brokerTopics) Topic(name string) ([16]byte, int32, bool) {
	t.meta.mu.RLock()
	defer t.meta.mu.RUnlock()
	tm, ok := t.meta.topics[name]
	if !ok {
		return [16]byte{}, 0, false
	}
	return tm.ID, int32(len(tm.Partitions)), true
}

func (t brokerTopics) TopicName(id [16]byte) (string, bool) { return t.meta.topicByID(id) }

func (t brokerTopics) Names() []string {
	t.meta.mu.RLock()
	defer t.meta.mu.RUnlock()
	out := make([]string, 0, len(t.meta.topics))
	for name := range t.meta.topics {
		out = append(out, name)
	}
	return out
}

// consumerProtocol reports whether group.coordinator.rebalance.protocols
// enables consumer groups (KIP-848).
func consumerProtocol(cfg interface{ List(string) []string }) bool {
	return slices.Contains(cfg.List("group.coordinator.rebalance.protocols"), "consumer")
}

// partitionExists reports whether the metadata knows the partition.
func (b *Broker) partitionExists(topic string, p int32) bool {
	b.meta.mu.RLock()
	defer b.meta.mu.RUnlock()
	t, ok := b.meta.topics[topic]
	return ok && p >= 0 && int(p) < len(t.Partitions)
}

// groupsOnLeader is called when this broker becomes leader of a
// partition: for __consumer_offsets it becomes the coordinator of the
// partition's groups, for __transaction_state of its transactional ids.
func (b *Broker) groupsOnLeader(topic string, p, leaderEpoch int32) {
	switch topic {
	case group.Topic:
		b.groups().OnBecomeLeader(p, leaderEpoch)
	case txn.Topic:
		b.txns().OnBecomeLeader(p, leaderEpoch)
	}
}

// groupsOnResign is called when this broker stops leading a partition.
func (b *Broker) groupsOnResign(topic string, p int32) {
	switch topic {
	case group.Topic:
		if v, ok := groupManagers.Load(b); ok {
			v.(*groupEntry).m.OnResign(p)
		}
	case txn.Topic:
		if v, ok := txnManagers.Load(b); ok {
			v.(*txnEntry).m.OnResign(p)
		}
	}
}

// coordinatorLog is the broker's side of a coordinator's persistence:
// the partitions of its internal topic that this broker leads. Batches
// reach each partition's log in the order they were submitted, so a
// coordinator that submits under its own lock writes its state changes in
// the order it made them, as Kafka's coordinators append under the group's
// lock; the local appends run outside that lock, one partition's after
// another's, and a slow disk holds up only that partition's writes.
type coordinatorLog struct {
	b     *Broker
	topic string

	mu     sync.Mutex
	queues map[int32]*appendQueue
}

func newCoordinatorLog(b *Broker, topic string) *coordinatorLog {
	return &coordinatorLog{b: b, topic: topic, queues: map[int32]*appendQueue{}}
}

// appendQueue is one partition's submitted batches not yet appended.
type appendQueue struct {
	waiting  []*submitted
	draining bool
}

// submitted is a batch on its way into the local log.
type submitted struct {
	batch    []byte
	appended chan struct{} // closed when p, res and err are set
	p        *partition.Partition
	res      partition.AppendResult
	err      error
}

// Submit queues batch for partition idx behind the batches submitted
// before it and returns at once.
func (l *coordinatorLog) Submit(idx int32, batch []byte) coordlog.Pending {
	s := &submitted{batch: batch, appended: make(chan struct{})}
	l.mu.Lock()
	q := l.queues[idx]
	if q == nil {
		q = &appendQueue{}
		l.queues[idx] = q
	}
	q.waiting = append(q.waiting, s)
	start := !q.draining
	q.draining = true
	l.mu.Unlock()
	if start {
		go l.drain(idx, q)
	}
	return s.wait
}

// drain appends q's batches in order until q is empty.
func (l *coordinatorLog) drain(idx int32, q *appendQueue) {
	for {
		l.mu.Lock()
		if len(q.waiting) == 0 {
			q.draining = false
			l.mu.Unlock()
			return
		}
		s := q.waiting[0]
		q.waiting = q.waiting[1:]
		l.mu.Unlock()
		s.p = l.b.partition(l.topic, idx)
		if s.p == nil {
			s.err = kerr.NotLeaderForPartition
		} else {
			// A coordinator writes transactional offset commits itself,
			// on behalf of a producer whose transaction it knows: each
			// starts at sequence 0 and none is a retried duplicate of an
			// earlier one.
			s.res, s.err = s.p.AppendAsLeaderWith(s.batch, partition.AppendOptions{RequiredAcks: -1, Coordinator: true})
		}
		close(s.appended)
	}
}

// wait waits until the HW covers the batch or ctx ends
// (offsets.commit.timeout.ms, transaction.state.log's write timeout).
func (s *submitted) wait(ctx context.Context) (int64, error) {
	select {
	case <-s.appended:
	case <-ctx.Done():
		return 0, kerr.RequestTimedOut
	}
	if s.err != nil {
		return 0, s.err
	}
	for {
		ch := s.p.Changed()
		done, err := s.p.AcksAllStatus(s.res.LastOffset + 1)
		if done {
			return s.res.FirstOffset, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, kerr.RequestTimedOut
		}
	}
}

// Append submits batch and waits for it.
func (l *coordinatorLog) Append(ctx context.Context, idx int32, batch []byte) (int64, error) {
	return l.Submit(idx, batch)(ctx)
}

// Read reads whole batches from the local log up to its end.
func (l *coordinatorLog) Read(_ context.Context, idx int32, from int64) ([]byte, error) {
	p := l.b.partition(l.topic, idx)
	if p == nil {
		return nil, kerr.NotLeaderForPartition
	}
	lg := p.Log()
	from = max(from, lg.LogStartOffset())
	end := lg.LogEndOffset()
	if from >= end {
		return nil, nil
	}
	rr, err := lg.Read(from, 1<<20, end, true)
	if err != nil {
		return nil, err
	}
	return rr.Records, nil
}

// offsetsTopicConfigs: only cleanup.policy=delete exists, so committed
// offsets are kept by never deleting by time instead of by compaction.
var offsetsTopicConfigs = map[string]string{"retention.ms": "-1", "segment.bytes": "104857600"}

// ensureOffsetsTopic creates __consumer_offsets on first use, with
// offsets.topic.replication.factor clamped to the live brokers.
func (b *Broker) ensureOffsetsTopic() {
	rf := b.clampRF(group.Topic, "offsets.topic.replication.factor")
	b.ensureInternalTopic(group.Topic, b.cfg.Int("offsets.topic.num.partitions"), rf, offsetsTopicConfigs)
}

// clampRF is the replication factor configured under rfKey, clamped to
// the live brokers with a warning.
func (b *Broker) clampRF(name, rfKey string) int {
	rf := b.cfg.Int(rfKey)
	live := len(b.meta.brokerList())
	if live < 1 {
		live = 1
	}
	if rf > live {
		b.log.Warn(rfKey+" is larger than the live brokers; creating "+name+" with fewer replicas", "configured", rf, "replication_factor", live)
		rf = live
	}
	return rf
}

// ensureInternalTopic creates a coordinator's topic unless it exists.
func (b *Broker) ensureInternalTopic(name string, partitions, rf int, configs map[string]string) {
	_, err := b.createTopic(name, int32(partitions), int16(rf), configs)
	if err != nil && !errors.Is(err, errTopicExists) {
		b.log.Warn("create "+name, "err", err)
	}
}

// coordinatorFor finds the broker leading the partition of key: the
// group's __consumer_offsets partition (key type 0) or the transactional
// id's __transaction_state partition (key type 1). The internal topic is
// created on first use.
func (b *Broker) coordinatorFor(key string, keyType int8) (id int32, host string, port int32, code int16, msg string) {
	id = -1
	var topic string
	var p int32
	// The configured counts, as the coordinators use: changing them after
	// the topic exists is not supported.
	switch keyType {
	case 0:
		if key == "" {
			return id, "", -1, kerr.InvalidRequest.Code, "empty group id"
		}
		topic, p = group.Topic, group.Partition(key, b.cfg.Int("offsets.topic.num.partitions"))
	case 1:
		if key == "" {
			return id, "", -1, kerr.InvalidRequest.Code, "empty transactional id"
		}
		topic, p = txn.Topic, txn.Partition(key, b.cfg.Int("transaction.state.log.num.partitions"))
	default:
		return id, "", -1, kerr.InvalidRequest.Code, "unknown coordinator key type " + strconv.Itoa(int(keyType))
	}
	// UpdateMetadata rewrites partition entries in place: read under the lock.
	b.meta.mu.RLock()
	t, ok := b.meta.topics[topic]
	n, leader := 0, int32(-1)
	if ok {
		n = len(t.Partitions)
		if int(p) < n {
			leader = t.Partitions[p].Leader
		}
	}
	b.meta.mu.RUnlock()
	if n == 0 {
		if keyType == 0 {
			b.ensureOffsetsTopic()
		} else {
			b.ensureTxnTopic()
		}
		return id, "", -1, kerr.CoordinatorNotAvailable.Code, topic + " is being created"
	}
	if int(p) >= n {
		return id, "", -1, kerr.CoordinatorNotAvailable.Code, topic + " has fewer partitions than configured"
	}
	if leader < 0 {
		return id, "", -1, kerr.CoordinatorNotAvailable.Code, "the key's " + topic + " partition has no leader"
	}
	for _, be := range b.meta.brokerList() {
		if be.ID == leader {
			return be.ID, be.Host, be.Port, 0, ""
		}
	}
	return id, "", -1, kerr.CoordinatorNotAvailable.Code, "coordinator " + strconv.Itoa(int(leader)) + " is not live"
}

var _ = serve(10, "FindCoordinator", 0, 4, (*Broker).handleFindCoordinator, in("0.10", 0, 0), in("2.4", 0, 3), in("2.6", 0, 3), k40(0, 6), serve40(6))

func (b *Broker) handleFindCoordinator(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	if req.Version < 4 {
		id, host, port, code, msg := b.coordinatorFor(req.CoordinatorKey, req.CoordinatorType)
		host, port = b.meta.addrOn(id, rq.listener(), host, port)
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode = id, host, port, code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		rq.respond(resp)
		return
	}
	for _, key := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		var msg string
		c.Key = key
		c.NodeID, c.Host, c.Port, c.ErrorCode, msg = b.coordinatorFor(key, req.CoordinatorType)
		c.Host, c.Port = b.meta.addrOn(c.NodeID, rq.listener(), c.Host, c.Port)
		if msg != "" {
			c.ErrorMessage = &msg
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	rq.respond(resp)
}

// clientHost is the client's address as Kafka shows it.
func (rq *request) clientHost() string {
	host, _, err := net.SplitHostPort(rq.conn.remote)
	if err != nil {
		host = rq.conn.remote
	}
	return "/" + host
}

func (rq *request) clientID() string {
	if rq.hdr.ClientID != nil {
		return *rq.hdr.ClientID
	}
	return ""
}

// groupAPI answers the group coordinator's requests (KAFKA-SPEC §9)
// from the broker's group coordinator.
type groupAPI struct {
	groups   func() *group.Manager
	consumer bool // the consumer group protocol is enabled
}

var groupHandler = handlerOn(func(b *Broker) *groupAPI { return b.api.groups })

var _ = serve(11, "JoinGroup", 0, 9, groupHandler((*groupAPI).handleJoinGroup), in("0.10", 0, 1), in("2.4", 0, 6), in("2.6", 0, 7), k40(2, 9))

// handleJoinGroup answers when the rebalance completes; the connection
// stays muted meanwhile, as in Kafka.
func (a *groupAPI) handleJoinGroup(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.JoinGroupRequest)
	m := a.groups()
	go m.JoinGroup(req, rq.clientID(), rq.clientHost(), func(r *kmsg.JoinGroupResponse) { rq.respond(r) })
}

var _ = serve(14, "SyncGroup", 0, 5, groupHandler((*groupAPI).handleSyncGroup), in("0.10", 0, 0), in("2.4", 0, 4), k40(0, 5))

func (a *groupAPI) handleSyncGroup(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.SyncGroupRequest)
	m := a.groups()
	go m.SyncGroup(req, func(r *kmsg.SyncGroupResponse) { rq.respond(r) })
}

var _ = serve(12, "Heartbeat", 0, 4, groupHandler((*groupAPI).handleHeartbeat), in("0.10", 0, 0), k40(0, 4))

func (a *groupAPI) handleHeartbeat(_ context.Context, rq *request) {
	rq.respond(a.groups().Heartbeat(rq.req.(*kmsg.HeartbeatRequest)))
}

// The handlers below may wait for an acks=-1 append, so they answer off
// the handler thread, like a delayed produce.

var _ = serve(13, "LeaveGroup", 0, 5, groupHandler((*groupAPI).handleLeaveGroup), in("0.10", 0, 0), in("2.4", 0, 4), in("2.6", 0, 4), k40(0, 5))

func (a *groupAPI) handleLeaveGroup(_ context.Context, rq *request) {
	m := a.groups()
	go func() { rq.respond(m.LeaveGroup(rq.req.(*kmsg.LeaveGroupRequest))) }()
}

// OffsetCommit and OffsetFetch v9 (KIP-848) are served as v8 for classic
// groups, as Kafka 3.7's group coordinator adapter does.
var _ = serve(8, "OffsetCommit", 0, 9, groupHandler((*groupAPI).handleOffsetCommit), in("0.10", 0, 2), in("2.4", 0, 8), in("2.6", 0, 8), k40(2, 9))

func (a *groupAPI) handleOffsetCommit(_ context.Context, rq *request) {
	m := a.groups()
	go func() { rq.respond(m.OffsetCommit(rq.req.(*kmsg.OffsetCommitRequest))) }()
}

var _ = serve(9, "OffsetFetch", 0, 9, groupHandler((*groupAPI).handleOffsetFetch), in("0.10", 0, 2), in("2.4", 0, 6), in("2.6", 0, 7), k40(1, 9))

func (a *groupAPI) handleOffsetFetch(_ context.Context, rq *request) {
	rq.respond(a.groups().OffsetFetch(rq.req.(*kmsg.OffsetFetchRequest)))
}

var _ = serve(15, "DescribeGroups", 0, 5, groupHandler((*groupAPI).handleDescribeGroups), in("0.10", 0, 0), k40(0, 6), serve40(6))

func (a *groupAPI) handleDescribeGroups(_ context.Context, rq *request) {
	rq.respond(a.groups().DescribeGroups(rq.req.(*kmsg.DescribeGroupsRequest)))
}

var _ = serve(16, "ListGroups", 0, 4, groupHandler((*groupAPI).handleListGroups), in("0.10", 0, 0), in("2.4", 0, 3), k40(0, 5), serve40(5))

func (a *groupAPI) handleListGroups(_ context.Context, rq *request) {
	rq.respond(a.groups().ListGroups(rq.req.(*kmsg.ListGroupsRequest)))
}

var _ = serve(42, "DeleteGroups", 0, 2, groupHandler((*groupAPI).handleDeleteGroups), notIn("0.10"), k40(0, 2))

func (a *groupAPI) handleDeleteGroups(_ context.Context, rq *request) {
	m := a.groups()
	go func() { rq.respond(m.DeleteGroups(rq.req.(*kmsg.DeleteGroupsRequest))) }()
}

var _ = serve(47, "OffsetDelete", 0, 0, groupHandler((*groupAPI).handleOffsetDelete), notIn("0.10"), k40(0, 0))

func (a *groupAPI) handleOffsetDelete(_ context.Context, rq *request) {
	m := a.groups()
	go func() { rq.respond(m.OffsetDelete(rq.req.(*kmsg.OffsetDeleteRequest))) }()
}

// The consumer group protocol (KIP-848) is served only with
// group.coordinator.rebalance.protocols including consumer: otherwise
// ApiVersions leaves both APIs out (apiVersions) and a request is
// answered with UNSUPPORTED_VERSION, as Kafka 4.0's KafkaApis answers
// while the protocol is disabled; franz-go then falls back to the classic
// protocol. The versions are Kafka 4.0's; no earlier release advertised
// them.
var _ = serve(68, "ConsumerGroupHeartbeat", 0, 1, groupHandler((*groupAPI).handleConsumerGroupHeartbeat), notIn("0.10", "2.4", "2.6"), k40(0, 1))

func (a *groupAPI) handleConsumerGroupHeartbeat(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.ConsumerGroupHeartbeatRequest)
	if !a.consumer {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		rq.respond(resp)
		return
	}
	m := a.groups()
	go func() { rq.respond(m.ConsumerGroupHeartbeat(req, rq.clientID(), rq.clientHost())) }()
}

var _ = serve(69, "ConsumerGroupDescribe", 0, 0, groupHandler((*groupAPI).handleConsumerGroupDescribe), notIn("0.10", "2.4", "2.6"), k40(0, 1), serve40(1))

func (a *groupAPI) handleConsumerGroupDescribe(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.ConsumerGroupDescribeRequest)
	if !a.consumer {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		for _, id := range req.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = id, kerr.UnsupportedVersion.Code
			resp.Groups = append(resp.Groups, rg)
		}
		rq.respond(resp)
		return
	}
	rq.respond(a.groups().ConsumerGroupDescribe(req))
}
