package broker

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var _ = serve(19, "CreateTopics", 0, 5, (*Broker).handleCreateTopics)

// handleCreateTopics validates and creates topics.
func (b *Broker) handleCreateTopics(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	live := int16(len(b.meta.brokerList()))
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
		switch {
		case !validTopicName(rt.Topic):
			fail(kerr.InvalidTopicException, "topic name is illegal: it must be 1-249 characters of [a-zA-Z0-9._-] and not '.' or '..'")
		case exists:
			fail(kerr.TopicAlreadyExists, "topic '"+rt.Topic+"' already exists")
		case len(rt.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment, "manual replica assignment is not supported")
		case np <= 0:
			fail(kerr.InvalidPartitions, "number of partitions must be larger than 0")
		case rf <= 0:
			fail(kerr.InvalidReplicationFactor, "replication factor must be larger than 0")
		case rf > live:
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
			if err := b.createTopic(rt.Topic, np, rf, configs); err != nil {
				if errors.Is(err, errTopicExists) {
					fail(kerr.TopicAlreadyExists, "topic '"+rt.Topic+"' already exists")
				} else {
					fail(kerr.UnknownServerError, err.Error())
				}
				break
			}
			if t, ok := b.meta.topic(rt.Topic); ok {
				st.TopicID = t.ID
			}
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
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}

var _ = serve(20, "DeleteTopics", 0, 5, (*Broker).handleDeleteTopics)

// handleDeleteTopics deletes topics and their data.
func (b *Broker) handleDeleteTopics(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := req.TopicNames
	for _, t := range req.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		st := kmsg.NewDeleteTopicsResponseTopic()
		n := name
		st.Topic = &n
		switch {
		case !b.cfg.Bool("delete.topic.enable"):
			st.ErrorCode = kerr.TopicDeletionDisabled.Code
		default:
			if err := b.deleteTopic(name); err != nil {
				if errors.Is(err, errUnknownTopic) {
					st.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else {
					st.ErrorCode = kerr.UnknownServerError.Code
					msg := err.Error()
					st.ErrorMessage = &msg
				}
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}
