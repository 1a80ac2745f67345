package controller

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/wire"
)

// Versions of the controller-to-broker requests: LeaderAndIsr v5 and
// UpdateMetadata v7 carry topic IDs (KIP-516), as Kafka 2.8+ controllers
// send them.
const (
	leaderAndISRVersion   = 5
	updateMetadataVersion = 7
	stopReplicaVersion    = 3
)

// leaderDuringDelete is the leader an UpdateMetadata carries for a deleted
// partition (Kafka's LeaderAndIsr.LeaderDuringDelete); brokers drop it.
const leaderDuringDelete = -2

// epochDuringDelete is the leader epoch of a StopReplica that deletes a
// topic (Kafka's LeaderAndIsr.EpochDuringDelete).
const epochDuringDelete = -2

// sender delivers requests to one incarnation of a broker in order, each
// retried with back-off until it is answered (Kafka's
// ControllerChannelManager). A slow or unreachable broker only delays its
// own queue. It stops when the broker's registration changes or the term
// ends; undelivered requests are dropped then.
type sender struct {
	id      int32
	epoch   int64
	client  *wire.Client
	log     *slog.Logger
	timeout time.Duration
	backoff time.Duration

	mu    sync.Mutex
	queue []queued
	wake  chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// queued is a request waiting for delivery; done, if set, runs on the
// sender's goroutine once the broker answered it.
type queued struct {
	req  kmsg.Request
	done func()
}

func (s *sender) enqueue(req kmsg.Request, done func()) {
	s.mu.Lock()
	merged := false
	if um, ok := req.(*kmsg.UpdateMetadataRequest); ok && done == nil && len(s.queue) > 0 {
		last := &s.queue[len(s.queue)-1]
		if prev, ok := last.req.(*kmsg.UpdateMetadataRequest); ok && last.done == nil {
			last.req = mergeUpdateMetadata(prev, um)
			merged = true
		}
	}
	if !merged {
		s.queue = append(s.queue, queued{req: req, done: done})
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) run(ctx context.Context) {
	defer close(s.done)
	defer s.client.Close()
	for {
		s.mu.Lock()
		var q queued
		if len(s.queue) > 0 {
			q = s.queue[0]
			s.queue[0] = queued{}
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		if q.req == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		if !s.deliver(ctx, q.req) {
			return
		}
		if q.done != nil {
			q.done()
		}
	}
}

// deliver sends req until it is answered or ctx ends.
func (s *sender) deliver(ctx context.Context, req kmsg.Request) bool {
	back := s.backoff
	for {
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.client.Request(rctx, req)
		cancel()
		if err == nil {
			s.logErrors(req, resp)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.log.Debug("controller request failed, retrying", "node", s.id, "request", kmsg.NameForKey(req.Key()), "err", err)
		t := time.NewTimer(back)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		back = min(2*back, 5*time.Second)
	}
}

func (s *sender) logErrors(req kmsg.Request, resp kmsg.Response) {
	name := kmsg.NameForKey(req.Key())
	top := int16(0)
	switch r := resp.(type) {
	case *kmsg.LeaderAndISRResponse:
		top = r.ErrorCode
		for _, p := range r.Partitions {
			if p.ErrorCode != 0 {
				s.log.Warn("controller request partition error", "node", s.id, "request", name, "topic", p.Topic, "partition", p.Partition, "err", kerr.ErrorForCode(p.ErrorCode))
			}
		}
		for _, t := range r.Topics { // v5+: by topic ID
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					s.log.Warn("controller request partition error", "node", s.id, "request", name, "topic_id", coord.FormatTopicID(t.TopicID), "partition", p.Partition, "err", kerr.ErrorForCode(p.ErrorCode))
				}
			}
		}
	case *kmsg.UpdateMetadataResponse:
		top = r.ErrorCode
	case *kmsg.StopReplicaResponse:
		top = r.ErrorCode
		for _, p := range r.Partitions {
			if p.ErrorCode != 0 {
				s.log.Warn("controller request partition error", "node", s.id, "request", name, "topic", p.Topic, "partition", p.Partition, "err", kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	if top != 0 {
		s.log.Warn("controller request error", "node", s.id, "request", name, "err", kerr.ErrorForCode(top))
	}
}

// brokerAddr is where the controller reaches a broker.
func brokerAddr(b coord.BrokerInfo) string {
	return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
}

// endpoints turns a registration's listener URLs into UpdateMetadata
// endpoints; a registration without them gets one PLAINTEXT endpoint.
func endpoints(b coord.BrokerInfo) []kmsg.UpdateMetadataRequestLiveBrokerEndpoint {
	var out []kmsg.UpdateMetadataRequestLiveBrokerEndpoint
	for _, u := range b.Endpoints {
		name, hp, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			continue
		}
		ep := kmsg.NewUpdateMetadataRequestLiveBrokerEndpoint()
		ep.Host, ep.Port, ep.ListenerName = host, int32(p), name
		ep.SecurityProtocol = securityProtocol(name)
		out = append(out, ep)
	}
	if len(out) == 0 {
		ep := kmsg.NewUpdateMetadataRequestLiveBrokerEndpoint()
		ep.Host, ep.Port, ep.ListenerName = b.Host, b.Port, "PLAINTEXT"
		out = append(out, ep)
	}
	return out
}

// securityProtocol maps a listener name to Kafka's protocol id; custom
// listener names count as PLAINTEXT.
func securityProtocol(listener string) int16 {
	switch listener {
	case "SSL":
		return 1
	case "SASL_PLAINTEXT":
		return 2
	case "SASL_SSL":
		return 3
	}
	return 0
}

// umPartition is one partition of an UpdateMetadata.
func umPartition(p *partition, live func(int32) bool) kmsg.UpdateMetadataRequestTopicPartition {
	ps := kmsg.NewUpdateMetadataRequestTopicPartition()
	ps.Topic = p.tp.Topic
	ps.Partition = p.tp.Partition
	ps.ControllerEpoch = int32(p.state.ControllerEpoch)
	ps.Leader = p.state.Leader
	ps.LeaderEpoch = p.state.LeaderEpoch
	ps.ISR = nonNil(p.state.ISR)
	ps.ZKVersion = int32(p.state.Version)
	ps.Replicas = nonNil(p.replicas)
	ps.OfflineReplicas = []int32{}
	for _, r := range p.replicas {
		if !live(r) {
			ps.OfflineReplicas = append(ps.OfflineReplicas, r)
		}
	}
	return ps
}

// laiPartition is one partition of a LeaderAndIsr.
func laiPartition(p *partition, isNew bool) kmsg.LeaderAndISRRequestTopicPartition {
	ps := kmsg.NewLeaderAndISRRequestTopicPartition()
	ps.Topic = p.tp.Topic
	ps.Partition = p.tp.Partition
	ps.ControllerEpoch = int32(p.state.ControllerEpoch)
	ps.Leader = p.state.Leader
	ps.LeaderEpoch = p.state.LeaderEpoch
	ps.ISR = nonNil(p.state.ISR)
	ps.ZKVersion = int32(p.state.Version)
	ps.Replicas = nonNil(p.replicas)
	ps.AddingReplicas = nonNil(p.adding)
	ps.RemovingReplicas = nonNil(p.removing)
	ps.IsNew = isNew
	return ps
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return append([]int32(nil), s...)
}

// groupUM groups UpdateMetadata partitions by topic, keeping order; id
// gives each topic's ID.
func groupUM(ps []kmsg.UpdateMetadataRequestTopicPartition, id func(topic string) [16]byte) []kmsg.UpdateMetadataRequestTopicState {
	var out []kmsg.UpdateMetadataRequestTopicState
	for _, p := range ps {
		if n := len(out); n == 0 || out[n-1].Topic != p.Topic {
			ts := kmsg.NewUpdateMetadataRequestTopicState()
			ts.Topic = p.Topic
			ts.TopicID = id(p.Topic)
			out = append(out, ts)
		}
		out[len(out)-1].PartitionStates = append(out[len(out)-1].PartitionStates, p)
	}
	return out
}

// groupLAI groups LeaderAndIsr partitions by topic, keeping order; id
// gives each topic's ID.
func groupLAI(ps []kmsg.LeaderAndISRRequestTopicPartition, id func(topic string) [16]byte) []kmsg.LeaderAndISRRequestTopicState {
	var out []kmsg.LeaderAndISRRequestTopicState
	for _, p := range ps {
		if n := len(out); n == 0 || out[n-1].Topic != p.Topic {
			ts := kmsg.NewLeaderAndISRRequestTopicState()
			ts.Topic = p.Topic
			ts.TopicID = id(p.Topic)
			out = append(out, ts)
		}
		out[len(out)-1].PartitionStates = append(out[len(out)-1].PartitionStates, p)
	}
	return out
}

// mergeUpdateMetadata folds next into an UpdateMetadata still waiting in a
// queue behind it: partition states are upserts, so next's win and the
// others stay; the live broker list is next's. This bounds the queue of a
// broker the controller cannot reach while events keep coming.
func mergeUpdateMetadata(prev, next *kmsg.UpdateMetadataRequest) *kmsg.UpdateMetadataRequest {
	out := *next
	type key struct {
		topic string
		p     int32
	}
	seen := map[key]bool{}
	ids := map[string][16]byte{}
	for _, ts := range prev.TopicStates {
		ids[ts.Topic] = ts.TopicID
	}
	for _, ts := range next.TopicStates {
		ids[ts.Topic] = ts.TopicID
	}
	var ps []kmsg.UpdateMetadataRequestTopicPartition
	for _, ts := range next.TopicStates {
		for _, p := range ts.PartitionStates {
			p.Topic = ts.Topic
			seen[key{ts.Topic, p.Partition}] = true
			ps = append(ps, p)
		}
	}
	for _, ts := range prev.TopicStates {
		for _, p := range ts.PartitionStates {
			if !seen[key{ts.Topic, p.Partition}] {
				p.Topic = ts.Topic
				ps = append(ps, p)
			}
		}
	}
	slices.SortStableFunc(ps, func(a, b kmsg.UpdateMetadataRequestTopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	out.TopicStates = groupUM(ps, func(t string) [16]byte { return ids[t] })
	return &out
}
