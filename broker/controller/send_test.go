package controller

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func umFor(liveBrokers []int32, states ...string) *kmsg.UpdateMetadataRequest {
	req := kmsg.NewPtrUpdateMetadataRequest()
	req.SetVersion(updateMetadataVersion)
	var ps []kmsg.UpdateMetadataRequestTopicPartition
	for _, s := range states {
		var topic string
		var p, leader int32
		fmt.Sscanf(s, "%1s-%d@%d", &topic, &p, &leader)
		x := kmsg.NewUpdateMetadataRequestTopicPartition()
		x.Topic, x.Partition, x.Leader = topic, p, leader
		ps = append(ps, x)
	}
	req.TopicStates = groupUM(ps, fakeTopicID)
	for _, id := range liveBrokers {
		lb := kmsg.NewUpdateMetadataRequestLiveBroker()
		lb.ID = id
		req.LiveBrokers = append(req.LiveBrokers, lb)
	}
	return req
}

// fakeTopicID gives every topic an ID starting with its name's first byte.
func fakeTopicID(topic string) [16]byte { return [16]byte{0: topic[0], 15: 1} }

func describeUM(req *kmsg.UpdateMetadataRequest) string {
	out := ""
	for _, ts := range req.TopicStates {
		for _, p := range ts.PartitionStates {
			out += fmt.Sprintf("%s-%d@%d ", ts.Topic, p.Partition, p.Leader)
		}
	}
	for _, b := range req.LiveBrokers {
		out += fmt.Sprintf("b%d ", b.ID)
	}
	return out
}

func TestMergeUpdateMetadata(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prev, next *kmsg.UpdateMetadataRequest
		want       string
	}{
		{"newer state wins, others stay, live brokers from the newer",
			umFor(ids(1, 2, 3), "a-0@1", "a-1@2", "b-0@3"), umFor(ids(1, 2), "a-1@1", "c-0@2"),
			"a-0@1 a-1@1 b-0@3 c-0@2 b1 b2 "},
		{"broker-list-only update keeps queued partitions",
			umFor(ids(1), "a-0@1"), umFor(ids(1, 2)),
			"a-0@1 b1 b2 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			merged := mergeUpdateMetadata(tc.prev, tc.next)
			if got := describeUM(merged); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for _, ts := range merged.TopicStates {
				if ts.TopicID != fakeTopicID(ts.Topic) {
					t.Fatalf("topic %s lost its ID in the merge: %x", ts.Topic, ts.TopicID)
				}
			}
		})
	}
}

func TestSenderQueueMergesUpdateMetadata(t *testing.T) {
	s := &sender{wake: make(chan struct{}, 1)}
	lai := kmsg.NewPtrLeaderAndISRRequest()
	s.enqueue(umFor(ids(1), "a-0@1"), nil)
	s.enqueue(umFor(ids(1), "a-0@2"), nil)
	s.enqueue(lai, nil)
	s.enqueue(umFor(ids(1), "a-1@1"), nil)
	if len(s.queue) != 3 {
		t.Fatalf("queue length %d, want 3 (UM, LAI, UM)", len(s.queue))
	}
	if got := describeUM(s.queue[0].req.(*kmsg.UpdateMetadataRequest)); got != "a-0@2 b1 " {
		t.Errorf("merged head %q", got)
	}
	if s.queue[1].req != kmsg.Request(lai) {
		t.Error("LeaderAndIsr moved")
	}
}
