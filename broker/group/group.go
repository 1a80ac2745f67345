package group

import (
	"bytes"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// State is a group's state, named as Kafka names it.
type State string

// Group states (KAFKA-SPEC §9.2).
const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

// Offset is one committed offset.
type Offset struct {
	Offset          int64
	LeaderEpoch     int32
	Metadata        string
	CommitTimestamp int64
	// logOffset orders concurrent commits: the cache keeps the one
	// appended last.
	logOffset int64
}

// TopicPartition names a partition of a consumed topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// member is one group member (JoinGroup's view of a client).
type member struct {
	id, clientID, clientHost string
	instanceID               *string
	sessionTimeoutMs         int32
	rebalanceTimeoutMs       int32
	protocolType             string
	protocols                []kmsg.JoinGroupRequestProtocol
	assignment               []byte

	awaitingJoin func(*kmsg.JoinGroupResponse)
	awaitingSync func(*kmsg.SyncGroupResponse)

	deadline time.Time // session expiry, moved by heartbeats
	timer    Timer
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func (m *member) hasProtocol(name string) bool {
	return slices.ContainsFunc(m.protocols, func(p kmsg.JoinGroupRequestProtocol) bool { return p.Name == name })
}

func (m *member) sameProtocols(ps []kmsg.JoinGroupRequestProtocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b kmsg.JoinGroupRequestProtocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}

// groupState is one group and its committed offsets.
type groupState struct {
	id        string
	partition int32

	state        State
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	order        []string          // member ids in join order
	static       map[string]string // group.instance.id -> member id (KIP-345)
	pending      map[string]Timer  // two-step join: ids handed out, not yet joined
	newMember    bool              // a member joined during the initial delay
	initialJoin  bool              // the running join is the delayed initial one
	joinTimer    Timer             // completes the running join
	stateSince   int64             // ms: when the state last changed (expiry, records)
	offsets      map[TopicPartition]Offset
	// pendingTxn holds the transactional offsets (TxnOffsetCommit) of
	// each producer, visible only once its commit marker arrives.
	pendingTxn map[int64]map[TopicPartition]Offset
	// cg is set when the group's type is consumer (KIP-848): its members
	// use ConsumerGroupHeartbeat and the fields above for classic
	// membership stay unused.
	cg *consumerGroup
}

func newGroupState(id string, partition int32) *groupState {
	return &groupState{id: id, partition: partition, state: Empty, members: map[string]*member{}, static: map[string]string{}, pending: map[string]Timer{}, offsets: map[TopicPartition]Offset{}, pendingTxn: map[int64]map[TopicPartition]Offset{}}
}

// sorted returns the members in join order, so that answers and records
// come out in a deterministic order.
func (g *groupState) sorted() []*member {
	out := make([]*member, 0, len(g.order))
	for _, id := range g.order {
		out = append(out, g.members[id])
	}
	return out
}

func (g *groupState) add(m *member) {
	g.members[m.id] = m
	g.order = append(g.order, m.id)
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
	if g.protocolType == "" {
		g.protocolType = m.protocolType
	}
}

func (g *groupState) remove(id string) *member {
	m := g.members[id]
	if m == nil {
		return nil
	}
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(s string) bool { return s == id })
	if m.instanceID != nil && g.static[*m.instanceID] == id {
		delete(g.static, *m.instanceID)
	}
	if m.timer != nil {
		m.timer.Stop()
	}
	if g.leader == id {
		g.leader = ""
		if len(g.order) > 0 {
			g.leader = g.order[0]
		}
	}
	return m
}

// replace gives a static member a new member id (a restarted instance
// takes over its predecessor's place, KIP-345).
func (g *groupState) replace(oldID, newID string) *member {
	m := g.members[oldID]
	delete(g.members, oldID)
	m.id = newID
	g.members[newID] = m
	for i, id := range g.order {
		if id == oldID {
			g.order[i] = newID
		}
	}
	if g.leader == oldID {
		g.leader = newID
	}
	g.static[*m.instanceID] = newID
	return m
}

// fenced reports whether instanceID belongs to another member id.
func (g *groupState) fenced(memberID string, instanceID *string) bool {
	if instanceID == nil {
		return false
	}
	id, ok := g.static[*instanceID]
	return ok && id != memberID
}

// supports reports whether a member with these protocols may join
// (Kafka's supportsProtocols).
func (g *groupState) supports(protocolType string, ps []kmsg.JoinGroupRequestProtocol) bool {
	if protocolType == "" || len(ps) == 0 {
		return false
	}
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range ps {
		all := true
		for _, m := range g.members {
			if !m.hasProtocol(p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// selectProtocol picks the protocol every member supports that most
// members prefer; ties go to the leader's preference.
func (g *groupState) selectProtocol() string {
	supportedByAll := func(name string) bool {
		for _, m := range g.members {
			if !m.hasProtocol(name) {
				return false
			}
		}
		return true
	}
	votes := map[string]int{}
	for _, id := range g.order {
		for _, p := range g.members[id].protocols {
			if supportedByAll(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best, bestVotes := "", -1
	ref := g.members[g.leader]
	if ref == nil {
		ref = g.members[g.order[0]]
	}
	for _, p := range ref.protocols {
		if v, ok := votes[p.Name]; ok && v > bestVotes {
			best, bestVotes = p.Name, v
		}
	}
	return best
}

func (g *groupState) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.awaitingJoin == nil {
			return false
		}
	}
	return true
}

func (g *groupState) maxRebalanceTimeout() time.Duration {
	var max int32
	for _, m := range g.members {
		if m.rebalanceTimeoutMs > max {
			max = m.rebalanceTimeoutMs
		}
	}
	return time.Duration(max) * time.Millisecond
}

// subscribedTopics parses the consumer protocol's subscriptions; ok is
// false when they cannot be known.
func (g *groupState) subscribedTopics() (map[string]bool, bool) {
	if g.protocolType != "consumer" || g.protocol == "" {
		return nil, false
	}
	out := map[string]bool{}
	for _, m := range g.members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.metadata(g.protocol)); err != nil {
			return nil, false
		}
		for _, t := range md.Topics {
			out[t] = true
		}
	}
	return out, true
}
