package broker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var _ = serve(3, "Metadata", 0, 12, (*Broker).handleMetadata, in("0.10", 0, 2), in("2.4", 0, 9), in("2.6", 0, 9), k40(0, 13), serve40(13))

// handleMetadata answers from the metadata cache, creating requested
// topics first when auto.create.topics.enable allows it. Kafka 3.7's
// version differences: in v0 an empty topic list means every topic and
// replicas on dead brokers are left out with REPLICA_NOT_AVAILABLE; v10+
// return topic IDs; v12 may ask by topic ID (unknown ones first, with
// UNKNOWN_TOPIC_ID), while a null name or a topic ID before v12 fails the
// request with INVALID_REQUEST.
func (b *Broker) handleMetadata(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	allTopics := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if !allTopics && req.Version < 12 {
		for _, t := range req.Topics {
			if t.Topic == nil || t.TopicID != ([16]byte{}) {
				rq.respond(metadataError(req, kerr.InvalidRequest))
				return
			}
		}
	}
	for _, be := range b.meta.brokersOn(rq.listener()) {
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = be.ID, be.Host, be.Port, be.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	b.meta.mu.RLock()
	resp.ControllerID = b.meta.controller
	b.meta.mu.RUnlock()
	if b.kraft() != nil {
		// A KRaft controller is no broker a client can reach: Kafka's
		// brokers name a live broker (KRaftMetadataCache's
		// getRandomAliveBrokerId), which forwards what belongs to the
		// controller. This one names itself.
		resp.ControllerID = b.id
	}
	clusterID := "isrlab"
	resp.ClusterID = &clusterID

	var names []string
	byID := false
	switch {
	case allTopics:
		names = b.meta.topicNames()
	default:
		for _, t := range req.Topics {
			if t.TopicID == ([16]byte{}) {
				continue
			}
			byID = true // names given beside IDs are not looked at
			if name, ok := b.meta.topicByID(t.TopicID); ok {
				names = append(names, name)
				continue
			}
			rt := kmsg.NewMetadataResponseTopic()
			rt.TopicID, rt.ErrorCode = t.TopicID, kerr.UnknownTopicID.Code
			resp.Topics = append(resp.Topics, rt)
		}
		if !byID {
			for _, t := range req.Topics {
				if t.Topic != nil {
					names = append(names, *t.Topic)
				}
			}
		}
	}
	autoCreate := b.cfg.Bool("auto.create.topics.enable") && (req.Version < 4 || req.AllowAutoTopicCreation) && !allTopics && !byID
	resp.Topics = slices.Grow(resp.Topics, len(names))
	for _, name := range names {
		rt := kmsg.NewMetadataResponseTopic()
		n := name
		rt.Topic = &n
		t, ok := b.meta.topic(name)
		// Internal topics (__consumer_offsets) are created by their owners,
		// never by a metadata request.
		if !ok && autoCreate && validTopicName(name) && !strings.HasPrefix(name, "__") {
			_, err := b.createTopic(name, int32(b.cfg.Int("num.partitions")), int16(b.cfg.Int("default.replication.factor")), nil)
			if err != nil && err != errTopicExists {
				b.log.Warn("auto-create topic", "topic", name, "err", err)
			}
			t, ok = b.meta.topic(name)
		}
		switch {
		case !ok && !validTopicName(name):
			rt.ErrorCode = kerr.InvalidTopicException.Code
		case !ok:
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		default:
			rt.TopicID = t.ID
			rt.IsInternal = strings.HasPrefix(name, "__")
			rt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(t.Partitions))
			for i, pm := range t.Partitions {
				rt.Partitions = append(rt.Partitions, b.partitionMetadata(req.Version, int32(i), pm))
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	rq.respond(resp)
}

// partitionMetadata is one partition of a Metadata response.
func (b *Broker) partitionMetadata(version int16, idx int32, pm partitionMeta) kmsg.MetadataResponseTopicPartition {
	rp := kmsg.NewMetadataResponseTopicPartition()
	rp.Partition = idx
	rp.Leader = pm.Leader
	rp.LeaderEpoch = pm.LeaderEpoch
	rp.Replicas = pm.Replicas
	rp.ISR = pm.ISR
	rp.OfflineReplicas = pm.Offline
	if rp.OfflineReplicas == nil {
		rp.OfflineReplicas = []int32{}
	}
	if pm.Leader < 0 {
		rp.ErrorCode = kerr.LeaderNotAvailable.Code
		return rp
	}
	if version == 0 {
		// v0 lists only replicas on live brokers and says when one is missing.
		live := func(ids []int32) []int32 {
			out := []int32{}
			for _, id := range ids {
				if b.meta.brokerLive(id) {
					out = append(out, id)
				}
			}
			return out
		}
		rp.Replicas, rp.ISR = live(pm.Replicas), live(pm.ISR)
		if len(rp.Replicas) < len(pm.Replicas) || len(rp.ISR) < len(pm.ISR) {
			rp.ErrorCode = kerr.ReplicaNotAvailable.Code
		}
	}
	return rp
}

// metadataError is Kafka's MetadataRequest.getErrorResponse: every
// requested topic with the error and nothing else.
func metadataError(req *kmsg.MetadataRequest, e *kerr.Error) *kmsg.MetadataResponse {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewMetadataResponseTopic()
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		rt.Topic, rt.TopicID, rt.ErrorCode = &name, t.TopicID, e.Code
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// createTopic creates a topic through whatever owns topic metadata and
// returns the topic ID it was given.
func (b *Broker) createTopic(name string, partitions int32, rf int16, configs map[string]string) ([16]byte, error) {
	if b.cluster != nil {
		ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
		defer cancel()
		return b.createTopicClustered(ctx, name, partitions, rf, configs)
	}
	return b.createTopicStandalone(name, partitions, configs)
}

// deleteTopic deletes a topic through whatever owns topic metadata.
func (b *Broker) deleteTopic(name string) error {
	if b.cluster != nil {
		ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
		defer cancel()
		if _, ok := b.meta.topic(name); !ok {
			return errUnknownTopic
		}
		return b.cluster.coord.MarkTopicForDeletion(ctx, name)
	}
	return b.deleteTopicStandalone(name)
}
