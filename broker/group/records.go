package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record key and value versions written to __consumer_offsets, as Kafka
// 2.3+ writes them: OffsetCommitKey v1, OffsetCommitValue v3,
// GroupMetadataKey v2, GroupMetadataValue v3.
const (
	offsetKeyVersion   = 1
	offsetValueVersion = 3
	groupKeyVersion    = 2
	groupValueVersion  = 3
)

// record is one key/value of __consumer_offsets; a nil value is a tombstone.
type record struct {
	key, value []byte
}

func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

func offsetValue(o Offset) []byte {
	v := kmsg.OffsetCommitValue{Version: offsetValueVersion, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommitTimestamp: o.CommitTimestamp}
	return v.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

func groupValue(g *groupState) []byte {
	v := kmsg.GroupMetadataValue{Version: groupValueVersion, ProtocolType: g.protocolType, Generation: g.generation, CurrentStateTimestamp: g.stateSince}
	if g.protocol != "" {
		p := g.protocol
		v.Protocol = &p
	}
	if g.leader != "" {
		l := g.leader
		v.Leader = &l
	}
	for _, m := range g.sorted() {
		gm := kmsg.NewGroupMetadataValueMember()
		gm.MemberID, gm.InstanceID, gm.ClientID, gm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
		gm.RebalanceTimeoutMillis, gm.SessionTimeoutMillis = m.rebalanceTimeoutMs, m.sessionTimeoutMs
		gm.Subscription = m.metadata(g.protocol)
		gm.Assignment = m.assignment
		if gm.Subscription == nil {
			gm.Subscription = []byte{}
		}
		if gm.Assignment == nil {
			gm.Assignment = []byte{}
		}
		v.Members = append(v.Members, gm)
	}
	return v.AppendTo(nil)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBatch builds an uncompressed magic-2 record batch of recs with
// timestamp nowMs; the broker assigns its offsets on append.
func encodeBatch(recs []record, nowMs int64) []byte {
	var body []byte
	for i, r := range recs {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: r.key, Value: r.value}
		// Length counts what follows it: encode once with a zero length
		// (one varint byte) to measure.
		rec.Length = int32(len(rec.AppendTo(nil)) - 1)
		body = rec.AppendTo(body)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: nowMs, MaxTimestamp: nowMs, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: body,
	}
	b.Length = int32(49 + len(body))
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], castagnoli))
	return out
}

// decodeBatches calls fn for every record of the whole batches in data, in
// order, and returns the offset after the last batch. Compressed and
// control batches are not written by the coordinator and are skipped.
func decodeBatches(data []byte, fn func(offset int64, r record) error) (int64, error) {
	next := int64(-1)
	for len(data) >= 12 {
		size := int(int32(binary.BigEndian.Uint32(data[8:12]))) + 12
		if size < 61 || size > len(data) {
			return next, fmt.Errorf("truncated batch (%d of %d bytes)", len(data), size)
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(data[:size]); err != nil {
			return next, fmt.Errorf("decode batch: %w", err)
		}
		data = data[size:]
		next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		if b.Attributes&0x07 != 0 || b.Attributes&0x20 != 0 {
			continue
		}
		recs := b.Records
		for i := int32(0); i < b.NumRecords; i++ {
			n, w := binary.Varint(recs)
			if w <= 0 || int(n) < 0 || w+int(n) > len(recs) {
				return next, errors.New("truncated record")
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:w+int(n)]); err != nil {
				return next, fmt.Errorf("decode record: %w", err)
			}
			recs = recs[w+int(n):]
			if err := fn(b.FirstOffset+int64(r.OffsetDelta), record{key: r.Key, value: r.Value}); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// parsedKey is a decoded __consumer_offsets key.
type parsedKey struct {
	group    string
	isOffset bool
	tp       TopicPartition
}

func parseKey(b []byte) (parsedKey, error) {
	if len(b) < 2 {
		return parsedKey{}, errors.New("short key")
	}
	switch v := int16(binary.BigEndian.Uint16(b)); v {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(b); err != nil {
			return parsedKey{}, fmt.Errorf("offset key: %w", err)
		}
		return parsedKey{group: k.Group, isOffset: true, tp: TopicPartition{k.Topic, k.Partition}}, nil
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(b); err != nil {
			return parsedKey{}, fmt.Errorf("group key: %w", err)
		}
		return parsedKey{group: k.Group}, nil
	default:
		return parsedKey{}, fmt.Errorf("unknown key version %d", v)
	}
}

func parseOffsetValue(b []byte) (Offset, error) {
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(b); err != nil {
		return Offset{}, err
	}
	o := Offset{Offset: v.Offset, LeaderEpoch: -1, Metadata: v.Metadata, CommitTimestamp: v.CommitTimestamp}
	if v.Version >= 3 {
		o.LeaderEpoch = v.LeaderEpoch
	}
	return o, nil
}

// groupRecord is a decoded GroupMetadataValue.
type groupRecord struct {
	protocolType, protocol, leader string
	generation                     int32
	stateSince                     int64 // ms; -1 when the record has none
	members                        []*member
}

func parseGroupValue(b []byte) (*groupRecord, error) {
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(b); err != nil {
		return nil, err
	}
	gr := &groupRecord{protocolType: v.ProtocolType, generation: v.Generation, stateSince: -1}
	if v.Version >= 2 {
		gr.stateSince = v.CurrentStateTimestamp
	}
	if v.Protocol != nil {
		gr.protocol = *v.Protocol
	}
	if v.Leader != nil {
		gr.leader = *v.Leader
	}
	for _, vm := range v.Members {
		rt := vm.RebalanceTimeoutMillis
		if rt < 0 {
			rt = vm.SessionTimeoutMillis
		}
		gr.members = append(gr.members, &member{
			id: vm.MemberID, instanceID: vm.InstanceID, clientID: vm.ClientID, clientHost: vm.ClientHost,
			sessionTimeoutMs: vm.SessionTimeoutMillis, rebalanceTimeoutMs: rt, protocolType: v.ProtocolType,
			protocols:  []kmsg.JoinGroupRequestProtocol{{Name: gr.protocol, Metadata: vm.Subscription}},
			assignment: vm.Assignment,
		})
	}
	return gr, nil
}
