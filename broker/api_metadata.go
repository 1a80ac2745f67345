package broker

import (
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var _ = serve(3, "Metadata", 0, 9, (*Broker).handleMetadata)

// handleMetadata answers from the metadata cache, creating requested
// topics first when auto.create.topics.enable allows it.
func (b *Broker) handleMetadata(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	for _, be := range b.meta.brokerList() {
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = be.ID, be.Host, be.Port, be.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	b.meta.mu.RLock()
	resp.ControllerID = b.meta.controller
	b.meta.mu.RUnlock()
	clusterID := "isrlab"
	resp.ClusterID = &clusterID

	var names []string
	if req.Topics == nil {
		names = b.meta.topicNames()
	} else {
		for _, t := range req.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	autoCreate := b.cfg.Bool("auto.create.topics.enable") && (req.Version < 4 || req.AllowAutoTopicCreation)
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
			for i, pm := range t.Partitions {
				rp := kmsg.NewMetadataResponseTopicPartition()
				rp.Partition = int32(i)
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
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	rq.respond(resp)
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
