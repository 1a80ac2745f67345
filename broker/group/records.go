package group

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
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
type record = coordlog.Record

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
