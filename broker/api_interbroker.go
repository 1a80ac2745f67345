package broker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/wire"
)

type brokerClient = wire.Client

var newBrokerClient = wire.NewClient

func kerrFor(code int16) error { return kerr.ErrorForCode(code) }

// checkControllerEpoch fences requests from a deposed controller (§6.3)
// and from a broker epoch this broker no longer has (KIP-380).
func (b *Broker) checkControllerEpoch(epoch int32, brokerEpoch int64) *kerr.Error {
	if b.cluster == nil {
		return kerr.StaleControllerEpoch
	}
	if brokerEpoch >= 0 && brokerEpoch < b.cluster.epoch.Load() {
		return kerr.StaleBrokerEpoch
	}
	for {
		cur := b.cluster.maxControllerEpoch.Load()
		if epoch < cur {
			return kerr.StaleControllerEpoch
		}
		if epoch == cur || b.cluster.maxControllerEpoch.CompareAndSwap(cur, epoch) {
			return nil
		}
	}
}

var _ = serve(4, "LeaderAndIsr", 0, 7, (*Broker).handleLeaderAndISR, in("0.10", 0, 0), in("2.4", 0, 4), in("2.6", 0, 4), not40())

// handleLeaderAndISR applies the controller's leadership decisions: per
// partition only when its leader epoch is newer than ours (§6.3). From v5
// topics carry their IDs and the response lists partitions by topic ID.
func (b *Broker) handleLeaderAndISR(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.LeaderAndISRRequest)
	resp := req.ResponseKind().(*kmsg.LeaderAndISRResponse)
	if e := b.checkControllerEpoch(req.ControllerEpoch, req.BrokerEpoch); e != nil {
		resp.ErrorCode = e.Code
		rq.respond(resp)
		return
	}
	start := time.Now()
	for _, l := range req.LiveLeaders {
		b.meta.setBroker(brokerEndpoint{ID: l.BrokerID, Host: l.Host, Port: l.Port})
	}
	states := req.PartitionStates
	ids := map[string][16]byte{}
	for _, ts := range req.TopicStates {
		ids[ts.Topic] = ts.TopicID
		for _, ps := range ts.PartitionStates {
			ps.Topic = ts.Topic
			states = append(states, ps)
		}
	}
	// Topic configs are looked up once per topic of the request, not once
	// per partition (a new broker's first request lists all its replicas).
	configs := map[string]map[string]string{}
	steps := make([]laiStep, len(states))
	for i, ps := range states {
		cfg, ok := configs[ps.Topic]
		if !ok {
			cfg = b.topicConfigsForReplica(ps.Topic)
			configs[ps.Topic] = cfg
		}
		steps[i] = b.prepareLeaderAndISR(ps, cfg)
	}
	b.applyLeaderAndISR(steps)
	for i, ps := range states {
		b.meta.setTopicID(ps.Topic, ids[ps.Topic])
		rp := kmsg.NewLeaderAndISRResponseTopicPartition()
		rp.Topic, rp.Partition, rp.ErrorCode = ps.Topic, ps.Partition, steps[i].code
		if req.Version < 5 {
			resp.Partitions = append(resp.Partitions, rp)
			continue
		}
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].TopicID != ids[ps.Topic] {
			rt := kmsg.NewLeaderAndISRResponseTopic()
			rt.TopicID = ids[ps.Topic]
			resp.Topics = append(resp.Topics, rt)
		}
		last := &resp.Topics[len(resp.Topics)-1]
		last.Partitions = append(last.Partitions, rp)
	}
	b.log.Info("applied LeaderAndIsr", "controller", req.ControllerID, "controller_epoch", req.ControllerEpoch, "partitions", len(states), "took", time.Since(start))
	rq.respond(resp)
}

// topicConfigsForReplica is a topic's configs for opening a replica: the
// cached ones, or the coordinator's when the topic watch has not brought
// them yet.
func (b *Broker) topicConfigsForReplica(topic string) map[string]string {
	configs := b.meta.topicConfigs(topic)
	if configs == nil && b.cluster != nil {
		ctx, cancel := context.WithTimeout(b.runCtx, 5e9)
		if c, err := b.cluster.coord.TopicConfig(ctx, topic); err == nil {
			configs = c
		}
		cancel()
	}
	return configs
}

// laiStep is one partition of a LeaderAndIsr on its way through
// prepareLeaderAndISR and applyLeaderAndISR.
type laiStep struct {
	ps     kmsg.LeaderAndISRRequestTopicPartition
	p      *partition.Partition
	st     partition.LeaderAndISR
	act    laiAction
	code   int16
	follow bool // MakeFollower started following
}

type laiAction int

const (
	laiDone     laiAction = iota // answered (code) without a role change
	laiLeader                    // become leader
	laiFollower                  // become follower of ps.Leader
	laiStop                      // no leader: stop the replica
)

// prepareLeaderAndISR opens the replica, decides what the partition's
// entry asks (per partition only when its leader epoch is newer than
// ours, §6.3) and does what has to come before the role change: a new
// leader stops fetching, a new follower's group coordinator resigns.
func (b *Broker) prepareLeaderAndISR(ps kmsg.LeaderAndISRRequestTopicPartition, configs map[string]string) laiStep {
	s := laiStep{ps: ps}
	if !slices.Contains(ps.Replicas, b.id) {
		s.code = kerr.UnknownTopicOrPartition.Code
		return s
	}
	p, err := b.ensurePartition(ps.Topic, ps.Partition, configs)
	if err != nil {
		b.log.Error("create partition", "topic", ps.Topic, "partition", ps.Partition, "err", err)
		s.code = kerr.KafkaStorageError.Code
		return s
	}
	s.p = p
	s.st = partition.LeaderAndISR{Leader: ps.Leader, LeaderEpoch: ps.LeaderEpoch, ISR: ps.ISR, ControllerEpoch: ps.ControllerEpoch}
	cur := p.State()
	if cur.Role != partition.None && ps.LeaderEpoch <= cur.LeaderEpoch {
		if ps.LeaderEpoch == cur.LeaderEpoch && cur.Role == partition.Leader && ps.Leader == b.id && int64(ps.ZKVersion) > cur.Version {
			// Same epoch, newer state (the controller committed an ISR
			// change): take it.
			p.UpdateISRFromController(s.st, ps.Replicas, int64(ps.ZKVersion))
			return s
		}
		s.code = kerr.StaleControllerEpoch.Code
		return s
	}
	switch {
	case ps.Leader == b.id:
		s.act = laiLeader
		b.fetchers.Remove(ps.Topic, ps.Partition)
	case ps.Leader < 0:
		s.act = laiStop
		b.groupsOnResign(ps.Topic, ps.Partition)
	default:
		s.act = laiFollower
		b.groupsOnResign(ps.Topic, ps.Partition)
	}
	return s
}

// leaderAndISRWorkers bounds how many partitions of one LeaderAndIsr
// change role at once. Each new leader epoch fsyncs the partition's
// leader-epoch checkpoint (file and directory), as Kafka's does; the
// partitions are independent, so their fsyncs overlap on the disk
// instead of queueing behind each other for the whole request.
const leaderAndISRWorkers = 16

// applyLeaderAndISR changes the prepared partitions' roles, up to
// leaderAndISRWorkers at once, then does what follows each change in
// request order: a new leader's group coordinator loads, a new follower
// starts fetching, a stopped replica stops fetching. A request naming a
// partition twice is applied one entry at a time.
func (b *Broker) applyLeaderAndISR(steps []laiStep) {
	workers := leaderAndISRWorkers
	seen := make(map[*partition.Partition]bool, len(steps))
	for _, s := range steps {
		if s.p != nil && s.act != laiDone {
			if seen[s.p] {
				workers = 1
				break
			}
			seen[s.p] = true
		}
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i := range steps {
		s := &steps[i]
		if s.act == laiDone {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ps := s.ps
			hw := b.hwCheckpoint.HW(ps.Topic, ps.Partition)
			switch s.act {
			case laiLeader:
				if err := s.p.MakeLeader(s.st, ps.Replicas, int64(ps.ZKVersion), hw); err != nil {
					b.log.Error("become leader", "topic", ps.Topic, "partition", ps.Partition, "err", err)
					s.code = kerr.KafkaStorageError.Code
				}
			case laiStop:
				s.p.Stop()
			case laiFollower:
				s.follow = s.p.MakeFollower(s.st, ps.Replicas, int64(ps.ZKVersion), hw)
			}
		}()
		if workers == 1 {
			wg.Wait()
		}
	}
	wg.Wait()
	for _, s := range steps {
		ps := s.ps
		switch {
		case s.act == laiLeader && s.code == 0:
			b.log.Info("became leader", "topic", ps.Topic, "partition", ps.Partition, "leader_epoch", ps.LeaderEpoch, "isr", fmtIDs(ps.ISR))
			b.groupsOnLeader(ps.Topic, ps.Partition, ps.LeaderEpoch)
		case s.act == laiStop:
			b.fetchers.Remove(ps.Topic, ps.Partition)
		case s.act == laiFollower && s.follow:
			b.fetchers.Add(s.p, ps.Leader, ps.LeaderEpoch)
			b.log.Info("became follower", "topic", ps.Topic, "partition", ps.Partition, "leader", ps.Leader, "leader_epoch", ps.LeaderEpoch)
		}
	}
}

var _ = serve(6, "UpdateMetadata", 0, 8, (*Broker).handleUpdateMetadata, in("0.10", 0, 3), in("2.4", 0, 6), in("2.6", 0, 6), not40())

// handleUpdateMetadata refreshes the metadata cache from the controller
// (with topic IDs from v7).
func (b *Broker) handleUpdateMetadata(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.UpdateMetadataRequest)
	resp := req.ResponseKind().(*kmsg.UpdateMetadataResponse)
	if e := b.checkControllerEpoch(req.ControllerEpoch, req.BrokerEpoch); e != nil {
		b.log.Info("rejected UpdateMetadata", "controller", req.ControllerID, "controller_epoch", req.ControllerEpoch, "broker_epoch", req.BrokerEpoch, "err", e)
		resp.ErrorCode = e.Code
		rq.respond(resp)
		return
	}
	start := time.Now()
	n := b.meta.applyUpdateMetadata(req)
	b.log.Info("applied UpdateMetadata", "controller", req.ControllerID, "controller_epoch", req.ControllerEpoch, "brokers", len(req.LiveBrokers), "partitions", n, "took", time.Since(start))
	rq.respond(resp)
}

var _ = serve(5, "StopReplica", 0, 4, (*Broker).handleStopReplica, in("0.10", 0, 0), in("2.4", 0, 2), in("2.6", 0, 3), not40())

// handleStopReplica stops replicas and deletes their data when asked.
func (b *Broker) handleStopReplica(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.StopReplicaRequest)
	resp := req.ResponseKind().(*kmsg.StopReplicaResponse)
	if e := b.checkControllerEpoch(req.ControllerEpoch, req.BrokerEpoch); e != nil {
		resp.ErrorCode = e.Code
		rq.respond(resp)
		return
	}
	for _, t := range req.Topics {
		type one struct {
			p      int32
			delete bool
		}
		var parts []one
		for _, ps := range t.PartitionStates {
			parts = append(parts, one{ps.Partition, ps.Delete})
		}
		for _, p := range t.Partitions {
			parts = append(parts, one{p, req.DeletePartitions})
		}
		if req.Version == 0 { // v0 lists one topic-partition per entry
			parts = append(parts, one{t.Partition, req.DeletePartitions})
		}
		for _, o := range parts {
			b.fetchers.Remove(t.Topic, o.p)
			if p := b.partition(t.Topic, o.p); p != nil {
				p.Stop()
			}
			if o.delete {
				// Delete the data even when this broker has not opened the
				// replica since it restarted: the log manager has it.
				b.mu.Lock()
				delete(b.partitions, tp{t.Topic, o.p})
				b.mu.Unlock()
				b.hwCheckpoint.Forget(t.Topic, o.p)
				if _, ok := b.logs.Get(t.Topic, o.p); ok {
					if err := b.logs.Delete(t.Topic, o.p); err != nil {
						b.log.Warn("delete replica", "topic", t.Topic, "partition", o.p, "err", err)
					}
				}
			}
			rp := kmsg.NewStopReplicaResponsePartition()
			rp.Topic, rp.Partition = t.Topic, o.p
			resp.Partitions = append(resp.Partitions, rp)
		}
	}
	rq.respond(resp)
}

var _ = serve(23, "OffsetForLeaderEpoch", 0, 4, (*Broker).handleOffsetForLeaderEpoch, notIn("0.10"), in("2.4", 0, 3), in("2.6", 0, 3), k40(2, 4))

// handleOffsetForLeaderEpoch answers a follower's (or client's) epoch
// query from the leader's epoch cache (§5.2).
func (b *Broker) handleOffsetForLeaderEpoch(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			p := b.partition(rt.Topic, rp.Partition)
			if p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else if e, off, err := p.EndOffsetForEpoch(rp.LeaderEpoch, rp.CurrentLeaderEpoch, true); err != nil {
				sp.ErrorCode = errCode(err)
			} else {
				sp.LeaderEpoch, sp.EndOffset = e, off
				if req.Version == 0 {
					sp.LeaderEpoch = -1
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}

// controllerAPI hands the controller's requests to the controller this
// broker runs while it is the active one; otherwise they are answered
// with NOT_CONTROLLER, which clients retry against the controller named
// in the metadata.
type controllerAPI struct {
	ctrl Controller // nil standalone or without a controller
	meta *metadata
}

var controllerHandler = handlerOn(func(b *Broker) *controllerAPI { return b.api.controller })

// active returns the controller if this broker runs it now.
func (a *controllerAPI) active() Controller {
	if a.ctrl == nil || !a.ctrl.Active() {
		return nil
	}
	return a.ctrl
}

// ControlledShutdown v0 has a request header without client id (wire.Decode
// knows); Kafka 0.10.2 no longer served v0.
var _ = serve(7, "ControlledShutdown", 0, 3, controllerHandler((*controllerAPI).handleControlledShutdown), in("0.10", 1, 1), not40())

func (a *controllerAPI) handleControlledShutdown(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ControlledShutdownRequest)
	c := a.active()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.ControlledShutdownResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.ControlledShutdown(ctx, req)) }()
}

var _ = serve(43, "ElectLeaders", 0, 2, controllerHandler((*controllerAPI).handleElectLeaders), notIn("0.10"), k40(0, 2))

func (a *controllerAPI) handleElectLeaders(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.ElectLeadersRequest)
	c := a.active()
	if c == nil {
		// Answer every partition (all known ones for a null topic list)
		// with NOT_CONTROLLER, which clients retry against the controller.
		resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
		topics := req.Topics
		if topics == nil {
			for _, name := range a.meta.topicNames() {
				t, _ := a.meta.topic(name)
				rt := kmsg.NewElectLeadersRequestTopic()
				rt.Topic = name
				for i := range t.Partitions {
					rt.Partitions = append(rt.Partitions, int32(i))
				}
				topics = append(topics, rt)
			}
		}
		for _, rt := range topics {
			st := kmsg.NewElectLeadersResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewElectLeadersResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p, kerr.NotController.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.ElectLeaders(ctx, req)) }()
}

// AlterPartition came with Kafka 2.7 (as AlterIsr); v2+ names topics by ID.
var _ = serve(56, "AlterPartition", 0, 3, controllerHandler((*controllerAPI).handleAlterPartition), notIn("0.10", "2.4", "2.6"), not40())

func (a *controllerAPI) handleAlterPartition(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterPartitionRequest)
	c := a.active()
	if c == nil {
		resp := req.ResponseKind().(*kmsg.AlterPartitionResponse)
		resp.ErrorCode = kerr.NotController.Code
		rq.respond(resp)
		return
	}
	go func() { rq.respond(c.AlterPartition(ctx, req)) }()
}
