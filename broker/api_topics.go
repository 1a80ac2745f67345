package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

var _ = serve(19, "CreateTopics", 0, 7, (*Broker).handleCreateTopics, in("0.10", 0, 1), in("2.4", 0, 5), in("2.6", 0, 5), k40(2, 7))

// handleCreateTopics validates and creates topics.
func (b *Broker) handleCreateTopics(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	live := int16(len(b.meta.brokerList()))
	var created []awaited
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		fail := func(e *kerr.Error, msg string) {
			st.ErrorCode = e.Code
			st.ErrorMessage = &msg
		}
		np, rf := rt.NumPartitions, rt.ReplicationFactor
		if np == -1 {
			np = int32(b.cfg.Int("num.partitions"))
		}
		if rf == -1 {
			rf = int16(b.cfg.Int("default.replication.factor"))
		}
		configs := map[string]string{}
		for _, c := range rt.Configs {
			if c.Value != nil {
				configs[c.Name] = *c.Value
			}
		}
		_, exists := b.meta.topic(rt.Topic)
		var assign map[int32][]int32
		badAssign := ""
		if len(rt.ReplicaAssignment) > 0 {
			assign, badAssign = b.manualAssignment(rt)
			np, rf = int32(len(assign)), int16(len(assign[0]))
		}
		switch {
		case !validTopicName(rt.Topic):
			fail(kerr.InvalidTopicException, "topic name is illegal: it must be 1-249 characters of [a-zA-Z0-9._-] and not '.' or '..'")
		case exists:
			fail(kerr.TopicAlreadyExists, "topic '"+rt.Topic+"' already exists")
		case len(rt.ReplicaAssignment) > 0 && (rt.NumPartitions != -1 || rt.ReplicationFactor != -1):
			fail(kerr.InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
		case badAssign != "":
			fail(kerr.InvalidReplicaAssignment, badAssign)
		case np <= 0:
			fail(kerr.InvalidPartitions, "number of partitions must be larger than 0")
		case rf <= 0:
			fail(kerr.InvalidReplicationFactor, "replication factor must be larger than 0")
		case assign == nil && rf > live:
			fail(kerr.InvalidReplicationFactor, "replication factor is larger than the number of available brokers")
		default:
			tc, err := b.cfg.TopicConfig(configs)
			if err != nil {
				fail(kerr.InvalidConfig, err.Error())
				break
			}
			st.NumPartitions, st.ReplicationFactor = np, rf
			if req.ValidateOnly {
				break
			}
			id, err := b.createTopicAssigned(rt.Topic, np, rf, assign, configs)
			if err != nil {
				if errors.Is(err, errTopicExists) {
					fail(kerr.TopicAlreadyExists, "topic '"+rt.Topic+"' already exists")
				} else {
					fail(kerr.UnknownServerError, err.Error())
				}
				break
			}
			st.TopicID = id
			for _, k := range tc.Keys() {
				c := kmsg.NewCreateTopicsResponseTopicConfig()
				c.Name = k
				v := tc.String(k)
				c.Value = &v
				c.Source = 5 // DEFAULT_CONFIG
				if _, ok := configs[k]; ok {
					c.Source = 1 // DYNAMIC_TOPIC_CONFIG
				}
				st.Configs = append(st.Configs, c)
			}
		}
		if st.ErrorCode == 0 && !req.ValidateOnly {
			created = append(created, awaited{index: len(resp.Topics), topic: rt.Topic, partitions: np})
		}
		resp.Topics = append(resp.Topics, st)
	}
	b.respondWhenVisible(rq, req.TimeoutMillis, created, func(w awaited) {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic, st.ErrorCode = w.topic, kerr.RequestTimedOut.Code
		resp.Topics[w.index] = st
	}, resp)
}

// awaited is a topic a request created, grew or deleted: its response
// entry waits until the broker's metadata has its partitions with leaders,
// or no longer has it when gone.
type awaited struct {
	index      int // of the topic's entry in the response
	topic      string
	partitions int32
	gone       bool
}

func (b *Broker) visible(w awaited) bool {
	if w.gone {
		_, ok := b.meta.topic(w.topic)
		return !ok
	}
	return b.meta.online(w.topic, w.partitions)
}

// respondWhenVisible answers rq with resp once every awaited topic is
// online in this broker's metadata, as Kafka's DelayedCreatePartitions
// (and DelayedDeleteTopics) does: a client may use a topic it was told is
// created. A topic still
// not online after timeoutMs is answered REQUEST_TIMED_OUT (timedOut
// rewrites its entry); with timeoutMs <= 0 the answer does not wait.
func (b *Broker) respondWhenVisible(rq *request, timeoutMs int32, ws []awaited, timedOut func(awaited), resp kmsg.Response) {
	if timeoutMs <= 0 || len(ws) == 0 {
		rq.respond(resp)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(b.runCtx, time.Duration(timeoutMs)*time.Millisecond)
		defer cancel()
		for _, w := range ws {
			if !b.meta.await(ctx, func() bool { return b.visible(w) }) {
				timedOut(w)
			}
		}
		rq.respond(resp)
	}()
}

var _ = serve(20, "DeleteTopics", 0, 6, (*Broker).handleDeleteTopics, in("0.10", 0, 0), in("2.4", 0, 4), in("2.6", 0, 4), k40(1, 6))

// handleDeleteTopics deletes topics and their data. From v6 a topic may be
// named by its ID instead (KIP-516): an unknown ID is UNKNOWN_TOPIC_ID, and
// naming one topic both ways fails the request with INVALID_REQUEST, as
// Kafka 3.7 does.
func (b *Broker) handleDeleteTopics(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	for _, n := range req.TopicNames {
		targets = append(targets, target{name: &n})
	}
	invalid := false
	for _, t := range req.Topics {
		invalid = invalid || (t.Topic != nil && t.TopicID != [16]byte{})
		targets = append(targets, target{name: t.Topic, id: t.TopicID})
	}
	disabled := !b.cfg.Bool("delete.topic.enable")
	var deleted []awaited
	for _, t := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = t.name, t.id
		switch {
		case invalid:
			st.ErrorCode = kerr.InvalidRequest.Code
		case disabled && req.Version < 3:
			st.ErrorCode = kerr.InvalidRequest.Code
		case disabled:
			st.ErrorCode = kerr.TopicDeletionDisabled.Code
		case t.name == nil:
			name, ok := b.meta.topicByID(t.id)
			if !ok {
				st.ErrorCode = kerr.UnknownTopicID.Code
				break
			}
			st.Topic = &name
			st.ErrorCode, st.ErrorMessage = b.deleteTopicResult(name)
		default:
			st.ErrorCode, st.ErrorMessage = b.deleteTopicResult(*t.name)
		}
		if st.ErrorCode == 0 {
			deleted = append(deleted, awaited{index: len(resp.Topics), topic: *st.Topic, gone: true})
		}
		resp.Topics = append(resp.Topics, st)
	}
	b.respondWhenVisible(rq, req.TimeoutMillis, deleted, func(w awaited) {
		resp.Topics[w.index].ErrorCode = kerr.RequestTimedOut.Code
	}, resp)
}

// deleteTopicResult deletes one topic and returns the error code and
// message for its response entry.
func (b *Broker) deleteTopicResult(name string) (int16, *string) {
	err := b.deleteTopic(name)
	switch {
	case err == nil:
		return 0, nil
	case errors.Is(err, errUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, nil
	default:
		msg := err.Error()
		return kerr.UnknownServerError.Code, &msg
	}
}

// manualAssignment reads CreateTopics' replica assignment and checks it as
// Kafka does (AdminZkClient.validateTopicCreate): partitions numbered
// 0..n-1, the same replica count everywhere, no broker twice in a
// partition, only registered brokers. It returns the reason when the
// assignment is invalid.
func (b *Broker) manualAssignment(rt kmsg.CreateTopicsRequestTopic) (map[int32][]int32, string) {
	assign := map[int32][]int32{}
	for _, ra := range rt.ReplicaAssignment {
		if _, dup := assign[ra.Partition]; dup {
			return nil, fmt.Sprintf("Duplicate partition %d in replica assignment", ra.Partition)
		}
		assign[ra.Partition] = ra.Replicas
	}
	known := map[int32]bool{}
	for _, be := range b.meta.brokerList() {
		known[be.ID] = true
	}
	n := len(assign)
	for p := int32(0); p < int32(n); p++ {
		rs, ok := assign[p]
		if !ok {
			return nil, "partitions should be a consecutive 0-based integer sequence"
		}
		switch {
		case len(rs) == 0:
			return nil, fmt.Sprintf("Replica assignment of partition %d is empty", p)
		case len(rs) != len(assign[0]):
			return nil, "All partitions should have the same number of replicas"
		case len(slices.Compact(slices.Sorted(slices.Values(rs)))) != len(rs):
			return nil, fmt.Sprintf("Duplicate replica assignment found: %v", rs)
		}
		for _, r := range rs {
			if !known[r] {
				return nil, fmt.Sprintf("Unknown broker %d in replica assignment of partition %d", r, p)
			}
		}
	}
	return assign, ""
}

// createTopicAssigned creates a topic with the given assignment, or with
// one the broker computes when assign is nil.
func (b *Broker) createTopicAssigned(name string, partitions int32, rf int16, assign map[int32][]int32, configs map[string]string) ([16]byte, error) {
	if assign == nil {
		return b.createTopic(name, partitions, rf, configs)
	}
	if b.cluster == nil {
		// Standalone the broker holds every replica; validation allowed
		// only itself.
		return b.createTopicStandalone(name, partitions, configs)
	}
	ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
	defer cancel()
	id := coord.NewTopicID()
	err := b.cluster.coord.CreateTopic(ctx, nil, coord.TopicSpec{Name: name, ID: id, Assignment: assign, Configs: configs}, nil)
	if errors.Is(err, coord.ErrTopicExists) {
		return [16]byte{}, errTopicExists
	}
	return id, err
}
