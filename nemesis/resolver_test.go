package nemesis

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataAnswer is broker's Metadata answer naming controller, with
// partition t/0 at leader epoch epoch and the given ISR.
func metadataAnswer(broker, controller, leader, epoch int32, isr ...int32) brokerMetadata {
	md := kmsg.NewPtrMetadataResponse()
	md.ControllerID = controller
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr("t")
	p := kmsg.NewMetadataResponseTopicPartition()
	p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR = 0, leader, epoch, []int32{1, 2, 3}, isr
	t.Partitions = append(t.Partitions, p)
	md.Topics = append(md.Topics, t)
	return brokerMetadata{broker, md}
}

// TestMergeMetadata: the ISR comes from the controller's own answer when
// the leader epochs tie (a follower cut from a leader that is the
// controller keeps the ISR it had, and its answer may arrive first), and
// a higher leader epoch wins whoever answered.
func TestMergeMetadata(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answers    []brokerMetadata
		controller int32
		leader     int32
		isr        []int32
	}{
		{"the cut follower answers first with the ISR it had",
			[]brokerMetadata{metadataAnswer(3, 2, 2, 4, 1, 2, 3), metadataAnswer(2, 2, 2, 4, 1, 2), metadataAnswer(1, 2, 2, 4, 1, 2)},
			2, 2, []int32{1, 2}},
		{"the controller's answer alone is fresh",
			[]brokerMetadata{metadataAnswer(3, 1, 2, 4, 1, 2, 3), metadataAnswer(2, 1, 2, 4, 1, 2, 3), metadataAnswer(1, 1, 2, 4, 2, 1)},
			1, 2, []int32{2, 1}},
		{"a higher leader epoch wins over the controller's",
			[]brokerMetadata{metadataAnswer(1, 1, 2, 4, 1, 2), metadataAnswer(3, 1, 3, 5, 3)},
			1, 3, []int32{3}},
		{"a stale broker naming itself controller is outvoted",
			[]brokerMetadata{metadataAnswer(3, 3, 2, 4, 1, 2, 3), metadataAnswer(1, 1, 2, 4, 1, 2), metadataAnswer(2, 1, 2, 4, 1, 2)},
			1, 2, []int32{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := View{Controller: -1, Partitions: map[string]PartitionView{}}
			mergeMetadata(tc.answers, &v)
			p := v.Partitions["t/0"]
			if v.Controller != tc.controller || p.Leader != tc.leader || !slices.Equal(p.ISR, tc.isr) {
				t.Fatalf("controller %d, t/0 %+v; want controller %d, leader %d, ISR %v", v.Controller, p, tc.controller, tc.leader, tc.isr)
			}
		})
	}
}
