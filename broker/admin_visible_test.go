package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// TestAdminAnswersWhenVisible: CreateTopics, CreatePartitions and
// DeleteTopics with a timeout answer once the answering broker's metadata
// shows the change (Kafka's DelayedCreatePartitions and
// DelayedDeleteTopics), so a Metadata request sent right after the answer,
// to the same broker, sees it. Clients rely on this: kadm's
// CreatePartitions reads the partition count right after CreateTopics,
// and kafka-python and kafkajs produce to a topic they just created.
func TestAdminAnswersWhenVisible(t *testing.T) {
	tc := startCluster(t, 3)
	for id := range tc.brokers {
		addr := fmt.Sprintf("127.0.0.1:%d", tc.ports[id])
		cl := wire.NewClient(addr, "visible-test", nil)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		topic := fmt.Sprintf("visible-%d", id)
		meta := func() *kmsg.MetadataResponseTopic {
			t.Helper()
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(9)
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &topic
			req.Topics = append(req.Topics, rt)
			raw, err := cl.Request(ctx, req)
			if err != nil {
				t.Fatalf("b%d metadata: %v", id, err)
			}
			return &raw.(*kmsg.MetadataResponse).Topics[0]
		}
		online := func(step string, n int) {
			t.Helper()
			mt := meta()
			if err := kerr.ErrorForCode(mt.ErrorCode); err != nil || len(mt.Partitions) != n {
				t.Fatalf("b%d right after %s: metadata %v with %d partitions, want %d", id, step, err, len(mt.Partitions), n)
			}
			for _, p := range mt.Partitions {
				if p.Leader < 0 {
					t.Fatalf("b%d right after %s: partition %d has no leader", id, step, p.Partition)
				}
			}
		}

		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.TimeoutMillis = 30000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 3, 3
		ct.Topics = append(ct.Topics, rt)
		raw, err := cl.Request(ctx, ct)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(raw.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode); err != nil {
			t.Fatalf("b%d create: %v", id, err)
		}
		online("CreateTopics", 3)

		cp := kmsg.NewPtrCreatePartitionsRequest()
		cp.TimeoutMillis = 30000
		cpt := kmsg.NewCreatePartitionsRequestTopic()
		cpt.Topic, cpt.Count = topic, 5
		cp.Topics = append(cp.Topics, cpt)
		if raw, err = cl.Request(ctx, cp); err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(raw.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode); err != nil {
			t.Fatalf("b%d create partitions: %v", id, err)
		}
		online("CreatePartitions", 5)

		dt := kmsg.NewPtrDeleteTopicsRequest()
		dt.TimeoutMillis = 30000
		dt.SetVersion(5)
		dt.TopicNames = []string{topic}
		if raw, err = cl.Request(ctx, dt); err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(raw.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode); err != nil {
			t.Fatalf("b%d delete: %v", id, err)
		}
		if mt := meta(); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("b%d right after DeleteTopics: metadata error %v, want UNKNOWN_TOPIC_OR_PARTITION", id, kerr.ErrorForCode(mt.ErrorCode))
		}
	}
}
