package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDescribeTopicPartitions: under the 4.0 profile the broker answers
// DescribeTopicPartitions (KIP-966) with every partition's leader,
// replicas, ISR and ELR, topics in name order and at most
// ResponsePartitionLimit partitions per answer, the rest from the cursor;
// an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION. Profiles before it do
// not advertise the API.
func TestDescribeTopicPartitions(t *testing.T) {
	b := startBroker(t, t.TempDir(), "kafka.profile=4.0", "controller.quorum.voters=3001@127.0.0.1:1")
	cl := b.client(t)
	createTopic(t, cl, "b-topic", 3, nil)
	createTopic(t, cl, "a-topic", 2, nil)
	c := dialRaw(t, b.Addrs()[0])
	ask := func(limit int32, cursor *kmsg.DescribeTopicPartitionsRequestCursor, topics ...string) *kmsg.DescribeTopicPartitionsResponse {
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		req.ResponsePartitionLimit, req.Cursor = limit, cursor
		for _, name := range topics {
			rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			rt.Topic = name
			req.Topics = append(req.Topics, rt)
		}
		return c.roundTrip(req).(*kmsg.DescribeTopicPartitionsResponse)
	}
	type seen struct {
		topic string
		p     int32
	}
	var got []seen
	var cursor *kmsg.DescribeTopicPartitionsRequestCursor
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the cursor does not end")
		}
		resp := ask(2, cursor, "b-topic", "a-topic")
		for _, rt := range resp.Topics {
			if rt.ErrorCode != 0 {
				t.Fatalf("%s: %v", *rt.Topic, kerr.ErrorForCode(rt.ErrorCode))
			}
			for _, rp := range rt.Partitions {
				if rp.LeaderID != b.ID() || len(rp.ISR) != 1 || rp.EligibleLeaderReplicas == nil || len(rp.EligibleLeaderReplicas) != 0 {
					t.Errorf("%s/%d: leader %d isr %v elr %v", *rt.Topic, rp.Partition, rp.LeaderID, rp.ISR, rp.EligibleLeaderReplicas)
				}
				got = append(got, seen{*rt.Topic, rp.Partition})
			}
		}
		if resp.NextCursor == nil {
			break
		}
		cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	want := []seen{{"a-topic", 0}, {"a-topic", 1}, {"b-topic", 0}, {"b-topic", 1}, {"b-topic", 2}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if resp := ask(0, nil, "nope"); len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %+v", resp.Topics)
	}
	for _, k := range c.apiVersions(3, "t", "1").ApiKeys {
		if k.ApiKey == 75 {
			return
		}
	}
	t.Fatal("the 4.0 profile does not advertise DescribeTopicPartitions")
}
