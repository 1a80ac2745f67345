package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Consumer group records (KIP-848), keyed as Kafka 4 keys them in
// __consumer_offsets: the key version tells the record type, and each
// value is the flexible version 0 of Kafka's message after an int16
// value version. isrlab writes and reads the group epoch, the member
// metadata, the target assignment and each member's current assignment;
// the subscription metadata (key 4) is recomputed from the broker's
// metadata on load and is not written.
const (
	cgMetadataKeyVersion        = 3
	cgMemberKeyVersion          = 5
	targetMetadataKeyVersion    = 6
	targetMemberKeyVersion      = 7
	currentAssignmentKeyVersion = 8
)

// memberStateCodes are Kafka's MemberState values.
var memberStateCodes = map[string]int8{memberStable: 0, memberUnrevoked: 1, memberUnreleased: 2}

func cgKey(version int16, group string, member ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(version))
	b = appendStr16(b, group)
	for _, m := range member {
		b = appendStr16(b, m)
	}
	return b
}

func appendStr16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// flex writes a flexible message body.
type flex struct{ b []byte }

func newFlex() *flex { return &flex{b: []byte{0, 0}} } // value version 0

func (f *flex) i32(v int32) { f.b = binary.BigEndian.AppendUint32(f.b, uint32(v)) }
func (f *flex) i8(v int8)   { f.b = append(f.b, byte(v)) }
func (f *flex) uv(v int)    { f.b = binary.AppendUvarint(f.b, uint64(v)) }
func (f *flex) str(s string) {
	f.uv(len(s) + 1)
	f.b = append(f.b, s...)
}
func (f *flex) nstr(s *string) {
	if s == nil {
		f.uv(0)
		return
	}
	f.str(*s)
}
func (f *flex) tags() { f.uv(0) }

// topicParts writes an assignment as []TopicPartitions; topics without
// an id (deleted) are left out.
func (f *flex) topicParts(a assignment, topics Topics) {
	type tp struct {
		id [16]byte
		ps []int32
	}
	var out []tp
	for _, t := range a.topics() {
		if topics == nil {
			continue
		}
		id, _, ok := topics.Topic(t)
		if !ok {
			continue
		}
		out = append(out, tp{id, a[t]})
	}
	f.uv(len(out) + 1)
	for _, x := range out {
		f.b = append(f.b, x.id[:]...)
		f.uv(len(x.ps) + 1)
		for _, p := range x.ps {
			f.i32(p)
		}
		f.tags()
	}
}

func groupEpochRecord(group string, cg *consumerGroup) record {
	f := newFlex()
	f.i32(cg.epoch)
	f.tags()
	return record{Key: cgKey(cgMetadataKeyVersion, group), Value: f.b}
}

func memberRecord(group string, mem *cmember) record {
	f := newFlex()
	f.nstr(mem.instanceID)
	f.nstr(mem.rackID)
	f.str(mem.clientID)
	f.str(mem.clientHost)
	f.uv(len(mem.topics) + 1)
	for _, t := range mem.topics {
		f.str(t)
	}
	var regex *string
	if mem.regex != "" {
		regex = &mem.regex
	}
	f.nstr(regex)
	f.i32(mem.rebalanceTimeoutMs)
	var assignor *string
	if mem.assignor != "" {
		assignor = &mem.assignor
	}
	f.nstr(assignor)
	f.tags()
	return record{Key: cgKey(cgMemberKeyVersion, group, mem.id), Value: f.b}
}

func targetMetadataRecord(group string, epoch int32) record {
	f := newFlex()
	f.i32(epoch)
	f.tags()
	return record{Key: cgKey(targetMetadataKeyVersion, group), Value: f.b}
}

func targetMemberRecord(group, member string, a assignment, topics Topics) record {
	f := newFlex()
	f.topicParts(a, topics)
	f.tags()
	return record{Key: cgKey(targetMemberKeyVersion, group, member), Value: f.b}
}

func (m *Manager) currentRecord(group string, mem *cmember) record {
	f := newFlex()
	f.i32(mem.epoch)
	f.i32(mem.prevEpoch)
	f.i8(memberStateCodes[mem.state])
	f.topicParts(mem.assigned, m.topics)
	f.topicParts(mem.revoking, m.topics)
	f.tags()
	return record{Key: cgKey(currentAssignmentKeyVersion, group, mem.id), Value: f.b}
}

// memberTombstones remove a member's records (Kafka writes them in this
// order: current assignment, target, metadata).
func memberTombstones(group, member string) []record {
	return []record{
		{Key: cgKey(currentAssignmentKeyVersion, group, member)},
		{Key: cgKey(targetMemberKeyVersion, group, member)},
		{Key: cgKey(cgMemberKeyVersion, group, member)},
	}
}

var errShort = errors.New("short record")

// reader decodes a flexible message body.
type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err == nil && len(r.b) < n {
		r.err = errShort
	}
	return r.err == nil
}

func (r *reader) i16() int16 {
	if !r.need(2) {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *reader) i32() int32 {
	if !r.need(4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *reader) i8() int8 {
	if !r.need(1) {
		return 0
	}
	v := int8(r.b[0])
	r.b = r.b[1:]
	return v
}

func (r *reader) uv() int {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *reader) nstr() *string {
	n := r.uv() - 1
	if n < 0 || !r.need(n) {
		return nil
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return &s
}

func (r *reader) str() string {
	if s := r.nstr(); s != nil {
		return *s
	}
	return ""
}

func (r *reader) str16() string {
	n := int(r.i16())
	if n < 0 || !r.need(n) {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// skipTags skips a tagged-field section.
func (r *reader) skipTags() {
	n := r.uv()
	for i := 0; i < n && r.err == nil; i++ {
		r.uv()
		size := r.uv()
		if r.need(size) {
			r.b = r.b[size:]
		}
	}
}

func (r *reader) topicParts(topics Topics) assignment {
	a := assignment{}
	n := r.uv() - 1
	for i := 0; i < n && r.err == nil; i++ {
		var id [16]byte
		if r.need(16) {
			copy(id[:], r.b)
			r.b = r.b[16:]
		}
		k := r.uv() - 1
		var ps []int32
		for j := 0; j < k && r.err == nil; j++ {
			ps = append(ps, r.i32())
		}
		r.skipTags()
		if topics == nil {
			continue
		}
		if name, ok := topics.TopicName(id); ok {
			for _, p := range ps {
				a.add(name, p)
			}
		}
	}
	return a
}

// cgRecord is one decoded consumer group record; value nil is a tombstone.
type cgRecord struct {
	version       int16
	group, member string
	value         []byte
}

func parseCGKey(b []byte) (cgRecord, error) {
	r := &reader{b: b}
	c := cgRecord{version: r.i16()}
	c.group = r.str16()
	switch c.version {
	case cgMemberKeyVersion, targetMemberKeyVersion, currentAssignmentKeyVersion:
		c.member = r.str16()
	}
	if r.err != nil {
		return c, fmt.Errorf("consumer group key v%d: %w", c.version, r.err)
	}
	return c, nil
}

// loadedCG rebuilds consumer groups from their records.
type loadedCG struct {
	epoch, assignmentEpoch int32
	members                map[string]*cmember
	target                 map[string]assignment
}

func (m *Manager) applyCGRecord(l *loadedCG, c cgRecord) error {
	get := func() *cmember {
		mem := l.members[c.member]
		if mem == nil {
			mem = &cmember{id: c.member, state: memberStable, assigned: assignment{}, revoking: assignment{}}
			l.members[c.member] = mem
		}
		return mem
	}
	r := &reader{b: c.value}
	if c.value != nil {
		r.i16() // value version
	}
	switch c.version {
	case cgMetadataKeyVersion:
		if c.value != nil {
			l.epoch = r.i32()
		}
	case targetMetadataKeyVersion:
		if c.value != nil {
			l.assignmentEpoch = r.i32()
		}
	case cgMemberKeyVersion:
		if c.value == nil {
			delete(l.members, c.member)
			delete(l.target, c.member)
			return nil
		}
		mem := get()
		mem.instanceID, mem.rackID = r.nstr(), r.nstr()
		mem.clientID, mem.clientHost = r.str(), r.str()
		n := r.uv() - 1
		mem.topics = nil
		for i := 0; i < n && r.err == nil; i++ {
			mem.topics = append(mem.topics, r.str())
		}
		sort.Strings(mem.topics)
		mem.regex = ""
		if re := r.nstr(); re != nil {
			mem.regex = *re
		}
		mem.rebalanceTimeoutMs = r.i32()
		if a := r.nstr(); a != nil {
			mem.assignor = *a
		}
	case targetMemberKeyVersion:
		if c.value == nil {
			delete(l.target, c.member)
			return nil
		}
		l.target[c.member] = r.topicParts(m.topics)
	case currentAssignmentKeyVersion:
		if c.value == nil {
			if mem := l.members[c.member]; mem != nil {
				mem.assigned, mem.revoking = assignment{}, assignment{}
			}
			return nil
		}
		mem := get()
		mem.epoch, mem.prevEpoch = r.i32(), r.i32()
		st := r.i8()
		mem.state = memberStable
		for name, code := range memberStateCodes {
			if code == st {
				mem.state = name
			}
		}
		mem.assigned = r.topicParts(m.topics)
		mem.revoking = r.topicParts(m.topics)
	}
	if r.err != nil {
		return fmt.Errorf("consumer group record v%d: %w", c.version, r.err)
	}
	return nil
}
