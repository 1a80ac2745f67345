package coord

import (
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary stored keys and values to the decoders that
// read the coordinator (a corrupt or foreign value must be an error, never
// a panic) and checks that what isrlab writes reads back unchanged.
func FuzzDecode(f *testing.F) {
	f.Add("t1", int32(0), int32(1), int32(3), []byte(`{"version":1,"controller_epoch":5,"leader":1,"leader_epoch":0,"isr":[1,2,3]}`))
	f.Add("a.b-c_d", int32(7), int32(-1), int32(0), []byte(`{"version":1,"partitions":{"0":[1,2,3]}}`))
	f.Add("x", int32(2147483647), int32(2), int32(9), []byte(`{"id":1,"host":"h","port":9092}`))
	f.Add("", int32(-5), int32(0), int32(0), []byte(`{"partitions":{"x":[1]}}`))
	f.Fuzz(func(t *testing.T, topic string, p, leader, epoch int32, raw []byte) {
		// Arbitrary bytes: decoders may fail but must not panic.
		decodeState(raw, 1)
		decodeTopic(topic, raw)
		decodeBroker(raw, 1)
		decodeConfigs(raw)
		parsePartitionStateKey(topicsPrefix + topic)
		topicFromKey(topicsPrefix + topic)

		if ValidateTopicName(topic) != nil || p < 0 {
			return
		}
		// Keys isrlab builds parse back.
		if gt, gp, ok := parsePartitionStateKey(partitionStateKey(topic, p)); !ok || gt != topic || gp != p {
			t.Fatalf("state key of %s-%d parsed as %q, %d, %v", topic, p, gt, gp, ok)
		}
		if gt, ok := topicFromKey(topicKey(topic)); !ok || gt != topic {
			t.Fatalf("topic key of %s parsed as %q, %v", topic, gt, ok)
		}
		// Values isrlab writes decode to what was written.
		st := PartitionState{ControllerEpoch: int64(epoch), Leader: leader, LeaderEpoch: epoch, ISR: []int32{leader, p}}
		v, err := encodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeState([]byte(v), 9)
		st.Version = 9
		if err != nil || !reflect.DeepEqual(got, st) {
			t.Fatalf("state round trip: %+v, %v; want %+v", got, err, st)
		}
		assign := map[int32][]int32{p: {leader, epoch}}
		var id [16]byte
		copy(id[:], raw)
		tv, err := encodeTopicSpec(TopicSpec{ID: id, Assignment: assign})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := decodeTopic(topic, []byte(tv))
		if err != nil || !reflect.DeepEqual(spec.Assignment, assign) || spec.ID != id {
			t.Fatalf("topic round trip: %+v %x, %v; want %v %x", spec.Assignment, spec.ID, err, assign, id)
		}
	})
}
