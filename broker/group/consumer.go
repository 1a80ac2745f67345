package group

// Consumer groups (KIP-848), as Kafka 4.0's group coordinator runs them
// (GroupMetadataManager.consumerGroupHeartbeat, ConsumerGroup,
// CurrentAssignmentBuilder, UniformAssignor, RangeAssignor):
//
//   - A group id is one type. ConsumerGroupHeartbeat at epoch 0 creates a
//     consumer group, or converts an empty classic group (keeping its
//     offsets); a classic group with members answers GROUP_ID_NOT_FOUND.
//     A classic JoinGroup converts an empty consumer group back and gets
//     INCONSISTENT_GROUP_PROTOCOL from one with members: Kafka 4.0's
//     online migration (classic members inside a consumer group) is not
//     modelled. DescribeGroups shows a consumer group as Dead, as Kafka.
//   - Subscriptions are by topic names and/or a regular expression
//     (SubscribedTopicRegex, as Kafka 4.0 released it; the snapshot
//     followed still refused it): the expression must match a whole
//     topic name (Go's RE2 syntax, close to Kafka's RE2/J), internal
//     topics (__*) never match, and it is matched again on every
//     heartbeat, so a new matching topic moves the group epoch then.
//     Racks are stored, not used.
//   - The session (group.consumer.session.timeout.ms) and heartbeat
//     interval (group.consumer.heartbeat.interval.ms) are Config fields
//     at Kafka's defaults; the broker has no keys for them yet.
//   - A member that rejoins at epoch 0 under its own id starts over
//     without partitions (clients do so after FENCED_MEMBER_EPOCH) where
//     the snapshot fences it again.
//   - Records: the group epoch, member metadata, target assignment and
//     each member's current assignment are appended under Kafka 4's keys
//     (3, 5, 6, 7, 8) and reloaded on failover; the subscription metadata
//     (key 4) is recomputed from the broker's metadata instead. State
//     changes are made in memory before their append is acknowledged, so
//     a heartbeat whose append fails (answered with its error) may have
//     changed the state the next heartbeat sees; an append that finds the
//     coordinator no longer leader resigns the partition.

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer group states, as Kafka's ConsumerGroupState names them
// (KIP-848).
const (
	Assigning   State = "Assigning"
	Reconciling State = "Reconciling"
)

// Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
const (
	leaveEpoch       = -1 // the member leaves
	staticLeaveEpoch = -2 // a static member leaves and may come back
)

// Member reconciliation states, as Kafka's MemberState.
const (
	memberStable     = "stable"
	memberUnrevoked  = "unrevoked_partitions"
	memberUnreleased = "unreleased_partitions"
)

// Topics is the broker's metadata as the consumer group protocol needs
// it: topic ids and partition counts.
type Topics interface {
	// Topic returns the id and partition count of a topic that exists.
	Topic(name string) (id [16]byte, partitions int32, ok bool)
	// TopicName returns the name of the topic with id.
	TopicName(id [16]byte) (string, bool)
	// Names lists every topic.
	Names() []string
}

// WithTopics gives the coordinator the broker's topic metadata, which
// consumer groups (KIP-848) assign from. Without it every subscribed
// topic is unknown and members get empty assignments.
func WithTopics(t Topics) Option { return optFunc(func(m *Manager) { m.topics = t }) }

// cmember is one member of a consumer group (ConsumerGroupHeartbeat's
// view of a client), as Kafka's ConsumerGroupMember.
type cmember struct {
	id                   string
	instanceID, rackID   *string
	clientID, clientHost string
	epoch, prevEpoch     int32
	state                string
	rebalanceTimeoutMs   int32
	assignor             string // "" for the group's default
	topics               []string
	regex                string   // "" for none
	matched              []string // the topics regex matched at the last heartbeat
	assigned             assignment
	revoking             assignment // pending revocation

	session, rebalance Timer
}

// consumerGroup is the KIP-848 part of a group whose type is consumer.
type consumerGroup struct {
	epoch           int32 // group epoch
	assignmentEpoch int32 // epoch of the target assignment
	members         map[string]*cmember
	static          map[string]string // group.instance.id -> member id
	target          map[string]assignment
	// metadata is the partition count of every subscribed topic that
	// existed at the last epoch bump (Kafka's subscription metadata): a
	// change bumps the epoch.
	metadata map[string]int32
}

func newConsumerGroup() *consumerGroup {
	return &consumerGroup{members: map[string]*cmember{}, static: map[string]string{}, target: map[string]assignment{}, metadata: map[string]int32{}}
}

// ids returns the member ids, sorted.
func (cg *consumerGroup) ids() []string {
	out := make([]string, 0, len(cg.members))
	for id := range cg.members {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// state is the group's state, as Kafka's ConsumerGroup.maybeUpdateGroupState.
func (cg *consumerGroup) state() State {
	switch {
	case len(cg.members) == 0:
		return Empty
	case cg.epoch > cg.assignmentEpoch:
		return Assigning
	}
	for _, mem := range cg.members {
		if mem.epoch != cg.assignmentEpoch || mem.state != memberStable {
			return Reconciling
		}
	}
	return Stable
}

// ownerEpoch is the epoch of the member that holds tp (assigned or still
// revoking), -1 when it is free: Kafka's currentPartitionEpoch.
func (cg *consumerGroup) ownerEpoch(t string, p int32) int32 {
	for _, mem := range cg.members {
		if mem.assigned.has(t, p) || mem.revoking.has(t, p) {
			return mem.epoch
		}
	}
	return -1
}

// subscribedTopics is the union of the members' subscriptions.
func (cg *consumerGroup) subscribedTopics() map[string]bool {
	out := map[string]bool{}
	for _, mem := range cg.members {
		for _, t := range mem.subscription() {
			out[t] = true
		}
	}
	return out
}

// subscription is the topics mem subscribes to, by name or by its
// regular expression, sorted.
func (mem *cmember) subscription() []string {
	if len(mem.matched) == 0 {
		return mem.topics
	}
	out := append(slices.Clone(mem.topics), mem.matched...)
	sort.Strings(out)
	return slices.Compact(out)
}

// compileRegex compiles a subscription's expression to match whole names.
func compileRegex(re string) (*regexp.Regexp, error) { return regexp.Compile("^(?:" + re + ")$") }

// matchRegexes resolves each member's regular expression against the
// topics that exist now.
func (m *Manager) matchRegexes(cg *consumerGroup) {
	var names []string
	for _, mem := range cg.members {
		mem.matched = nil
		if mem.regex == "" || m.topics == nil {
			continue
		}
		re, err := compileRegex(mem.regex)
		if err != nil {
			continue
		}
		if names == nil {
			names = m.topics.Names()
			sort.Strings(names)
		}
		for _, t := range names {
			if !strings.HasPrefix(t, "__") && re.MatchString(t) {
				mem.matched = append(mem.matched, t)
			}
		}
	}
}

// computeMetadata returns the partition counts of the subscribed topics
// that exist.
func (m *Manager) computeMetadata(cg *consumerGroup) map[string]int32 {
	out := map[string]int32{}
	if m.topics == nil {
		return out
	}
	m.matchRegexes(cg)
	for t := range cg.subscribedTopics() {
		if _, n, ok := m.topics.Topic(t); ok {
			out[t] = n
		}
	}
	return out
}

func sameMetadata(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for t, n := range a {
		if bn, ok := b[t]; !ok || bn != n {
			return false
		}
	}
	return true
}

// cgError is a ConsumerGroupHeartbeat answer with an error.
func cgError(req *kmsg.ConsumerGroupHeartbeatRequest, e *kerr.Error, msg string) *kmsg.ConsumerGroupHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.ErrorCode = e.Code
	if msg != "" {
		resp.ErrorMessage = &msg
	}
	return resp
}

// validHeartbeat checks a request as Kafka's
// throwIfConsumerGroupHeartbeatRequestIsInvalid.
func validHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) (*kerr.Error, string) {
	empty := func(s *string) bool { return s != nil && *s == "" }
	switch {
	case req.Group == "":
		return kerr.InvalidRequest, "GroupId can't be empty."
	case empty(req.InstanceID):
		return kerr.InvalidRequest, "InstanceId can't be empty."
	case empty(req.RackID):
		return kerr.InvalidRequest, "RackId can't be empty."
	}
	if req.SubscribedTopicRegex != nil {
		if _, err := compileRegex(*req.SubscribedTopicRegex); err != nil {
			return kerr.InvalidRegularExpression, "SubscribedTopicRegex " + *req.SubscribedTopicRegex + " is not a valid regular expression: " + err.Error()
		}
	}
	switch e := req.MemberEpoch; {
	case e > 0 || e == leaveEpoch:
		if req.MemberID == "" {
			return kerr.InvalidRequest, "MemberId can't be empty."
		}
	case e == 0:
		switch {
		case req.RebalanceTimeoutMillis == -1:
			return kerr.InvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		case req.Topics == nil || len(req.Topics) > 0:
			return kerr.InvalidRequest, "TopicPartitions must be empty when (re-)joining."
		case len(req.SubscribedTopicNames) == 0 && (req.SubscribedTopicRegex == nil || *req.SubscribedTopicRegex == ""):
			return kerr.InvalidRequest, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
		}
	case e == staticLeaveEpoch:
		if req.MemberID == "" {
			return kerr.InvalidRequest, "MemberId can't be empty."
		}
		if req.InstanceID == nil {
			return kerr.InvalidRequest, "InstanceId can't be null."
		}
	default:
		return kerr.InvalidRequest, "MemberEpoch is invalid."
	}
	if req.ServerAssignor != nil {
		if _, ok := assignors[*req.ServerAssignor]; !ok {
			return kerr.UnsupportedAssignor, "ServerAssignor " + *req.ServerAssignor + " is not supported. Supported assignors: range, uniform."
		}
	}
	return nil, ""
}

// ownedByName resolves the partitions a member reports owning to topic
// names; nil stays nil (not reported). Unknown topic ids are dropped.
func (m *Manager) ownedByName(ts []kmsg.ConsumerGroupHeartbeatRequestTopic) assignment {
	if ts == nil {
		return nil
	}
	out := assignment{}
	for _, t := range ts {
		name, ok := "", false
		if m.topics != nil {
			name, ok = m.topics.TopicName(t.TopicID)
		}
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			out.add(name, p)
		}
	}
	return out
}

// ConsumerGroupHeartbeat handles a ConsumerGroupHeartbeat (KIP-848), as
// Kafka's GroupMetadataManager.consumerGroupHeartbeat: the member joins,
// heartbeats, reports what it owns and leaves through it; the group epoch
// moves when membership, subscriptions or the subscribed topics'
// partitions change; the server-side assignor computes the target
// assignment for each new epoch, and each member reconciles towards its
// target (CurrentAssignmentBuilder): a partition moves to its new owner
// only once its old owner has reported it revoked. The changed records
// are appended to __consumer_offsets before the answer.
func (m *Manager) ConsumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, clientID, clientHost string) *kmsg.ConsumerGroupHeartbeatResponse {
	if e, msg := validHeartbeat(req); e != nil {
		return cgError(req, e, msg)
	}
	m.mu.Lock()
	if e := m.checkLocked(req.Group); e != nil {
		m.unlock()
		return cgError(req, e, "")
	}
	resp, recs := m.heartbeatLocked848(req, clientID, clientHost)
	if resp.ErrorCode != 0 || len(recs) == 0 {
		m.unlock()
		return resp
	}
	part := m.partitionLocked(req.Group)
	owner := m.owned.Get(part)
	pending := m.submitLocked(part, recs)
	m.unlock()
	if _, err := m.wait(pending); err != nil {
		m.logger.Info("consumer group records not written", "group", req.Group, "partition", part, "err", err)
		m.mu.Lock()
		m.lostLeadershipLocked(part, owner, err)
		m.unlock()
		return cgError(req, kerr.ErrorForCode(appendErr(err, false)).(*kerr.Error), "")
	}
	return resp
}

// consumerGroupLocked returns the consumer group id, creating it (or
// converting an empty classic group, as Kafka does) when create is set.
func (m *Manager) consumerGroupLocked(id string, create bool) (*groupState, *kerr.Error, string) {
	g := m.groups[id]
	switch {
	case g == nil && !create:
		return nil, kerr.GroupIDNotFound, "Group " + id + " not found."
	case g == nil:
		g = newGroupState(id, m.partitionLocked(id))
		g.stateSince = m.nowMs()
		g.cg = newConsumerGroup()
		m.groups[id] = g
	case g.cg == nil:
		if !create || len(g.members) > 0 || len(g.pending) > 0 || g.state != Empty {
			return nil, kerr.GroupIDNotFound, "Group " + id + " is not a consumer group."
		}
		// An empty classic group becomes a consumer group and keeps its
		// offsets (Kafka converts it the same way).
		g.cg = newConsumerGroup()
		g.protocolType, g.protocol, g.generation, g.leader = "consumer", "", 0, ""
	}
	return g, nil, ""
}

func (m *Manager) heartbeatLocked848(req *kmsg.ConsumerGroupHeartbeatRequest, clientID, clientHost string) (*kmsg.ConsumerGroupHeartbeatResponse, []record) {
	g, e, msg := m.consumerGroupLocked(req.Group, req.MemberEpoch == 0)
	if e != nil {
		return cgError(req, e, msg), nil
	}
	cg := g.cg
	var recs []record
	if req.MemberEpoch == leaveEpoch || req.MemberEpoch == staticLeaveEpoch {
		return m.leaveLocked848(g, req)
	}
	owned := m.ownedByName(req.Topics)
	mem, e, msg := m.memberFor848(g, req, owned, &recs)
	if e != nil {
		return cgError(req, e, msg), recs
	}
	isNew := cg.members[mem.id] != mem
	old := *mem
	mem.clientID, mem.clientHost = clientID, clientHost
	if req.InstanceID != nil {
		mem.instanceID = req.InstanceID
	}
	if req.RackID != nil {
		mem.rackID = req.RackID
	}
	if req.RebalanceTimeoutMillis != -1 {
		mem.rebalanceTimeoutMs = req.RebalanceTimeoutMillis
	}
	if req.ServerAssignor != nil {
		mem.assignor = *req.ServerAssignor
	}
	if req.SubscribedTopicNames != nil {
		ts := slices.Clone(req.SubscribedTopicNames)
		sort.Strings(ts)
		mem.topics = slices.Compact(ts)
	}
	if req.SubscribedTopicRegex != nil {
		mem.regex = *req.SubscribedTopicRegex
	}
	if mem.assigned == nil {
		mem.assigned, mem.revoking = assignment{}, assignment{}
	}
	// A new member changes the subscriptions; a static member taking its
	// predecessor's place does not (Kafka's hasMemberSubscriptionChanged).
	bump := !slices.Equal(mem.topics, old.topics) || mem.regex != old.regex || mem.assignor != old.assignor
	// Install the member: the subscription metadata and the assignor see it.
	m.putMember848(g, mem)
	if isNew || bump || !sameStr(mem.instanceID, old.instanceID) || !sameStr(mem.rackID, old.rackID) || mem.rebalanceTimeoutMs != old.rebalanceTimeoutMs || mem.clientID != old.clientID || mem.clientHost != old.clientHost {
		recs = append(recs, memberRecord(g.id, mem))
	}
	if md := m.computeMetadata(cg); !sameMetadata(md, cg.metadata) {
		cg.metadata = md
		bump = true
	}
	if bump {
		cg.epoch++
		recs = append(recs, groupEpochRecord(g.id, cg))
		m.logger.Info("consumer group epoch bumped", "group", g.id, "epoch", cg.epoch, "member", mem.id)
	}
	if cg.epoch > cg.assignmentEpoch {
		recs = append(recs, m.updateTargetLocked(g)...)
	}
	before := mem.assigned.clone()
	if r := m.reconcileLocked(g, mem, owned); r != nil {
		recs = append(recs, *r)
	}
	m.armSession848(g, mem)

	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	id := mem.id
	resp.MemberID, resp.MemberEpoch = &id, mem.epoch
	resp.HeartbeatIntervalMillis = int32(m.cfg.ConsumerHeartbeatInterval.Milliseconds())
	full := req.MemberEpoch == 0 || (req.RebalanceTimeoutMillis != -1 && req.SubscribedTopicNames != nil && req.Topics != nil)
	if full || !before.equal(mem.assigned) || isNew {
		resp.Assignment = m.responseAssignment(mem.assigned)
	}
	return resp, recs
}

// memberFor848 finds or makes the request's member, with the checks of
// Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember.
func (m *Manager) memberFor848(g *groupState, req *kmsg.ConsumerGroupHeartbeatRequest, owned assignment, recs *[]record) (*cmember, *kerr.Error, string) {
	cg := g.cg
	join := req.MemberEpoch == 0
	if req.InstanceID == nil {
		mem := cg.members[req.MemberID]
		switch {
		case mem == nil && !join:
			return nil, kerr.UnknownMemberID, "Member " + req.MemberID + " is not a member of group " + g.id + "."
		case mem == nil:
			m.logger.Info("member joins the consumer group", "group", g.id, "member", req.MemberID)
			return &cmember{id: req.MemberID, state: memberStable}, nil, ""
		case join:
			// A known member rejoining at epoch 0 has given up its
			// partitions (clients do so after FENCED_MEMBER_EPOCH): it
			// starts over with nothing, keeping its id.
			return m.rejoin848(g, mem, recs), nil, ""
		}
		if e, msg := checkEpoch848(mem, req.MemberEpoch, owned); e != nil {
			return nil, e, msg
		}
		return mem, nil, ""
	}
	inst := *req.InstanceID
	var existing *cmember
	if id, ok := cg.static[inst]; ok {
		existing = cg.members[id]
	}
	if join {
		if existing == nil {
			if mem := cg.members[req.MemberID]; mem != nil {
				return m.rejoin848(g, mem, recs), nil, ""
			}
			m.logger.Info("static member joins the consumer group", "group", g.id, "member", req.MemberID, "instance", inst)
			return &cmember{id: req.MemberID, state: memberStable}, nil, ""
		}
		if existing.epoch != staticLeaveEpoch {
			if existing.id == req.MemberID {
				return m.rejoin848(g, existing, recs), nil, ""
			}
			return nil, kerr.UnreleasedInstanceID, "Static member " + req.MemberID + " with instance id " + inst + " cannot join the group because the instance id is owned by " + existing.id + " member."
		}
		// The instance comes back under a new member id: it takes over
		// its predecessor's assignment, at epoch 0 (Kafka's replaceMember).
		nm := *existing
		nm.id, nm.epoch, nm.prevEpoch = req.MemberID, 0, 0
		nm.session, nm.rebalance = nil, nil
		nm.assigned, nm.revoking = existing.assigned.clone(), existing.revoking.clone()
		m.dropMember848(g, existing)
		*recs = append(*recs, memberTombstones(g.id, existing.id)...)
		cg.target[nm.id] = cg.target[existing.id]
		delete(cg.target, existing.id)
		*recs = append(*recs, targetMemberRecord(g.id, nm.id, cg.target[nm.id], m.topics))
		m.logger.Info("static member rejoins the consumer group", "group", g.id, "instance", inst, "member", nm.id, "replaces", existing.id)
		return &nm, nil, ""
	}
	if existing == nil {
		return nil, kerr.UnknownMemberID, "Instance id " + inst + " is unknown."
	}
	if existing.id != req.MemberID {
		return nil, kerr.FencedInstanceID, "Static member " + req.MemberID + " with instance id " + inst + " was fenced by member " + existing.id + "."
	}
	if e, msg := checkEpoch848(existing, req.MemberEpoch, owned); e != nil {
		return nil, e, msg
	}
	return existing, nil, ""
}

// rejoin848 resets a known member that rejoins at epoch 0.
func (m *Manager) rejoin848(g *groupState, mem *cmember, recs *[]record) *cmember {
	m.logger.Info("member rejoins the consumer group", "group", g.id, "member", mem.id, "epoch", mem.epoch)
	mem.epoch, mem.prevEpoch, mem.state = 0, 0, memberStable
	mem.assigned, mem.revoking = assignment{}, assignment{}
	if mem.rebalance != nil {
		mem.rebalance.Stop()
		mem.rebalance = nil
	}
	*recs = append(*recs, m.currentRecord(g.id, mem))
	return mem
}

// checkEpoch848 is Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a
// member ahead of the coordinator, or behind it other than by a lost
// answer (the previous epoch, owning a subset of its assignment), is
// fenced.
func checkEpoch848(mem *cmember, epoch int32, owned assignment) (*kerr.Error, string) {
	switch {
	case epoch > mem.epoch:
		return kerr.FencedMemberEpoch, "The consumer group member has a greater member epoch than the one known by the group coordinator. The member must abandon all its partitions and rejoin."
	case epoch < mem.epoch:
		if epoch != mem.prevEpoch || !subset(owned, mem.assigned) {
			return kerr.FencedMemberEpoch, "The consumer group member has a smaller member epoch than the one known by the group coordinator. The member must abandon all its partitions and rejoin."
		}
	}
	return nil, ""
}

// subset is Kafka's isSubset: owned (nil: not reported) is within target.
func subset(owned, target assignment) bool {
	if owned == nil {
		return false
	}
	for t, ps := range owned {
		for _, p := range ps {
			if !target.has(t, p) {
				return false
			}
		}
	}
	return true
}

// putMember848 installs mem in the group under its id.
func (m *Manager) putMember848(g *groupState, mem *cmember) {
	cg := g.cg
	if old := cg.members[mem.id]; old != nil && old != mem {
		mem.session, mem.rebalance = old.session, old.rebalance
	}
	cg.members[mem.id] = mem
	if mem.instanceID != nil {
		cg.static[*mem.instanceID] = mem.id
	}
}

// dropMember848 removes mem and stops its timers.
func (m *Manager) dropMember848(g *groupState, mem *cmember) {
	cg := g.cg
	if cg.members[mem.id] == mem {
		delete(cg.members, mem.id)
	}
	if mem.instanceID != nil && cg.static[*mem.instanceID] == mem.id {
		delete(cg.static, *mem.instanceID)
	}
	for _, t := range []Timer{mem.session, mem.rebalance} {
		if t != nil {
			t.Stop()
		}
	}
}

// updateTargetLocked computes the target assignment of the group epoch
// with the assignor the members ask for (the most asked for, the default
// when none does), as Kafka's updateTargetAssignment.
func (m *Manager) updateTargetLocked(g *groupState) []record {
	cg := g.cg
	spec := assignSpec{members: cg.ids(), subscribed: map[string][]string{}, previous: cg.target, partitions: cg.metadata}
	for id, mem := range cg.members {
		spec.subscribed[id] = mem.subscription()
	}
	name := cg.assignorName()
	target := assignors[name](spec)
	var recs []record
	for _, id := range spec.members {
		if !target[id].equal(cg.target[id]) {
			recs = append(recs, targetMemberRecord(g.id, id, target[id], m.topics))
		}
	}
	for id := range cg.target {
		if _, ok := target[id]; !ok {
			recs = append(recs, record{Key: cgKey(targetMemberKeyVersion, g.id, id)})
		}
	}
	cg.target = target
	cg.assignmentEpoch = cg.epoch
	recs = append(recs, targetMetadataRecord(g.id, cg.epoch))
	m.logger.Info("consumer group target assignment computed", "group", g.id, "epoch", cg.epoch, "assignor", name, "members", len(spec.members))
	return recs
}

// assignorName is the assignor most members ask for, ties to the name
// first in order; the default when no member names one.
func (cg *consumerGroup) assignorName() string {
	votes := map[string]int{}
	for _, mem := range cg.members {
		if mem.assignor != "" {
			votes[mem.assignor]++
		}
	}
	best := defaultAssignor
	n := 0
	for _, name := range []string{"uniform", "range"} {
		if votes[name] > n {
			best, n = name, votes[name]
		}
	}
	return best
}

// reconcileLocked moves mem towards its target assignment, as Kafka's
// CurrentAssignmentBuilder; it returns the member's current assignment
// record when that changed.
func (m *Manager) reconcileLocked(g *groupState, mem *cmember, owned assignment) *record {
	cg := g.cg
	target := cg.target[mem.id]
	if target == nil {
		target = assignment{}
	}
	te := cg.assignmentEpoch
	before := struct {
		epoch, prev int32
		state       string
		a, r        assignment
	}{mem.epoch, mem.prevEpoch, mem.state, mem.assigned.clone(), mem.revoking.clone()}
	ownsRevoked := func(rev assignment) bool {
		if owned == nil {
			return true
		}
		for t, ps := range owned {
			for _, p := range ps {
				if rev.has(t, p) {
					return true
				}
			}
		}
		return false
	}
	next := func(epoch int32) {
		assigned, revoke, pending := assignment{}, assignment{}, assignment{}
		unreleased := false
		topics := map[string]bool{}
		for t := range target {
			topics[t] = true
		}
		for t := range mem.assigned {
			topics[t] = true
		}
		for t := range topics {
			for _, p := range mem.assigned[t] {
				if target.has(t, p) {
					assigned.add(t, p)
				} else {
					revoke.add(t, p)
				}
			}
			for _, p := range target[t] {
				if assigned.has(t, p) {
					continue
				}
				if cg.ownerEpoch(t, p) != -1 {
					unreleased = true
					continue
				}
				pending.add(t, p)
			}
		}
		update := func(e int32) { mem.prevEpoch, mem.epoch = mem.epoch, e }
		switch {
		case len(revoke) > 0 && ownsRevoked(revoke):
			mem.state = memberUnrevoked
			update(epoch)
			mem.assigned, mem.revoking = assigned, revoke
		default:
			for t, ps := range pending {
				for _, p := range ps {
					assigned.add(t, p)
				}
			}
			mem.state = memberStable
			if unreleased {
				mem.state = memberUnreleased
			}
			update(te)
			mem.assigned, mem.revoking = assigned, assignment{}
		}
	}
	switch mem.state {
	case memberStable:
		if mem.epoch != te {
			next(mem.epoch)
		}
	case memberUnrevoked:
		if !ownsRevoked(mem.revoking) {
			next(mem.epoch + 1)
		}
	case memberUnreleased:
		next(mem.epoch)
	}
	if mem.state == memberUnrevoked && before.state != memberUnrevoked {
		m.armRebalance848(g, mem)
	} else if mem.state != memberUnrevoked && mem.rebalance != nil {
		mem.rebalance.Stop()
		mem.rebalance = nil
	}
	if before.epoch == mem.epoch && before.prev == mem.prevEpoch && before.state == mem.state && before.a.equal(mem.assigned) && before.r.equal(mem.revoking) {
		return nil
	}
	r := m.currentRecord(g.id, mem)
	return &r
}

// leaveLocked848 removes a member (epoch -1) or, for a static member
// (epoch -2), keeps its place and assignment for the instance to come
// back to (Kafka's consumerGroupStaticMemberGroupLeave).
func (m *Manager) leaveLocked848(g *groupState, req *kmsg.ConsumerGroupHeartbeatRequest) (*kmsg.ConsumerGroupHeartbeatResponse, []record) {
	cg := g.cg
	var mem *cmember
	if req.InstanceID != nil {
		if id, ok := cg.static[*req.InstanceID]; ok {
			mem = cg.members[id]
		}
		if mem == nil {
			return cgError(req, kerr.UnknownMemberID, "Instance id "+*req.InstanceID+" is unknown."), nil
		}
		if mem.id != req.MemberID {
			return cgError(req, kerr.FencedInstanceID, "Static member "+req.MemberID+" with instance id "+*req.InstanceID+" was fenced by member "+mem.id+"."), nil
		}
	} else if mem = cg.members[req.MemberID]; mem == nil {
		return cgError(req, kerr.UnknownMemberID, "Member "+req.MemberID+" is not a member of group "+g.id+"."), nil
	}
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	id := req.MemberID
	resp.MemberID, resp.MemberEpoch = &id, req.MemberEpoch
	if req.MemberEpoch == staticLeaveEpoch {
		m.logger.Info("static member leaves the consumer group for now", "group", g.id, "member", mem.id, "instance", *req.InstanceID)
		mem.epoch = staticLeaveEpoch
		if mem.session != nil {
			mem.session.Stop()
		}
		if mem.rebalance != nil {
			mem.rebalance.Stop()
			mem.rebalance = nil
		}
		// The session timer still runs: an instance that does not come
		// back within it is removed.
		m.armSession848(g, mem)
		return resp, []record{m.currentRecord(g.id, mem)}
	}
	m.logger.Info("member leaves the consumer group", "group", g.id, "member", mem.id)
	return resp, m.removeLocked848(g, mem)
}

// removeLocked848 removes mem, bumps the group epoch and computes the
// new target (Kafka's consumerGroupFenceMember).
func (m *Manager) removeLocked848(g *groupState, mem *cmember) []record {
	cg := g.cg
	m.dropMember848(g, mem)
	delete(cg.target, mem.id)
	recs := memberTombstones(g.id, mem.id)
	cg.metadata = m.computeMetadata(cg)
	cg.epoch++
	recs = append(recs, groupEpochRecord(g.id, cg))
	recs = append(recs, m.updateTargetLocked(g)...)
	if len(cg.members) == 0 {
		g.stateSince = m.nowMs()
	}
	return recs
}

// armSession848 (re)starts mem's session timer
// (group.consumer.session.timeout.ms): a member that stops heartbeating
// is removed.
func (m *Manager) armSession848(g *groupState, mem *cmember) {
	if mem.session != nil {
		mem.session.Stop()
	}
	mem.session = m.clock.AfterFunc(m.cfg.ConsumerSessionTimeout, func() { m.expire848(g, mem, "session timeout") })
}

// armRebalance848 starts the revocation deadline: a member that has not
// revoked its partitions within its rebalance timeout is removed (Kafka's
// scheduleConsumerGroupRebalanceTimeout).
func (m *Manager) armRebalance848(g *groupState, mem *cmember) {
	if mem.rebalance != nil {
		mem.rebalance.Stop()
	}
	epoch := mem.epoch
	mem.rebalance = m.clock.AfterFunc(time.Duration(mem.rebalanceTimeoutMs)*time.Millisecond, func() {
		m.mu.Lock()
		defer m.unlock()
		if g.cg == nil || m.groups[g.id] != g || g.cg.members[mem.id] != mem || mem.state != memberUnrevoked || mem.epoch != epoch {
			return
		}
		m.expireLocked848(g, mem, "rebalance timeout")
	})
}

func (m *Manager) expire848(g *groupState, mem *cmember, why string) {
	m.mu.Lock()
	defer m.unlock()
	if g.cg == nil || m.groups[g.id] != g || g.cg.members[mem.id] != mem {
		return
	}
	m.expireLocked848(g, mem, why)
}

func (m *Manager) expireLocked848(g *groupState, mem *cmember, why string) {
	m.logger.Info("consumer group member removed", "group", g.id, "member", mem.id, "reason", why)
	recs := m.removeLocked848(g, mem)
	part := g.partition
	owner := m.owned.Get(part)
	pending := m.submitLocked(part, recs)
	// Waited for after mu is released, by the timer's goroutine.
	m.later(func() {
		if _, err := m.wait(pending); err != nil {
			m.logger.Info("consumer group records not written", "group", g.id, "err", err)
			m.mu.Lock()
			m.lostLeadershipLocked(part, owner, err)
			m.unlock()
		}
	})
}

// responseAssignment is a member's assignment by topic id; topics that
// no longer exist are left out.
func (m *Manager) responseAssignment(a assignment) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	out := &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}}
	for _, t := range a.topics() {
		id, ok := m.topicID(t)
		if !ok {
			continue
		}
		out.Topics = append(out.Topics, kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{TopicID: id, Partitions: slices.Clone(a[t])})
	}
	return out
}

func (m *Manager) topicID(name string) ([16]byte, bool) {
	if m.topics == nil {
		return [16]byte{}, false
	}
	id, _, ok := m.topics.Topic(name)
	return id, ok
}

// ConsumerGroupDescribe handles a ConsumerGroupDescribe.
func (m *Manager) ConsumerGroupDescribe(req *kmsg.ConsumerGroupDescribeRequest) *kmsg.ConsumerGroupDescribeResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		rg.AuthorizedOperations = -2147483648
		if e := m.checkLocked(id); e != nil {
			rg.ErrorCode = e.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		g := m.groups[id]
		switch {
		case g == nil:
			msg := "Group " + id + " not found."
			rg.ErrorCode, rg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
		case g.cg == nil:
			msg := "Group " + id + " is not a consumer group."
			rg.ErrorCode, rg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
		default:
			cg := g.cg
			rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = string(cg.state()), cg.epoch, cg.assignmentEpoch, cg.assignorName()
			for _, mid := range cg.ids() {
				mem := cg.members[mid]
				rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				rm.MemberID, rm.InstanceID, rm.RackID, rm.MemberEpoch = mem.id, mem.instanceID, mem.rackID, mem.epoch
				rm.MemberType = 1 // v1 (KIP-1099): every member here speaks the consumer protocol
				rm.ClientID, rm.ClientHost, rm.SubscribedTopics = mem.clientID, mem.clientHost, slices.Clone(mem.topics)
				if rm.SubscribedTopics == nil {
					rm.SubscribedTopics = []string{}
				}
				if mem.regex != "" {
					re := mem.regex
					rm.SubscribedTopicRegex = &re
				}
				rm.Assignment = m.describeAssignment(mem.assigned)
				rm.TargetAssignment = m.describeAssignment(cg.target[mid])
				rm.MemberType = 1 // consumer protocol
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (m *Manager) describeAssignment(a assignment) kmsg.Assignment {
	out := kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}}
	for _, t := range a.topics() {
		id, _ := m.topicID(t)
		out.TopicPartitions = append(out.TopicPartitions, kmsg.AssignmentTopicPartition{TopicID: id, Topic: t, Partitions: slices.Clone(a[t])})
	}
	return out
}

// commitCheck848 is Kafka's ConsumerGroup.validateOffsetCommit: without
// a member epoch only an empty group takes commits; a member of the
// consumer protocol commits with OffsetCommit v9+ (a transactional
// commit at any version) at its current epoch.
func (g *groupState) commitCheck848(memberID string, epoch int32, transactional bool, version int16) int16 {
	cg := g.cg
	if epoch < 0 && len(cg.members) == 0 {
		return 0
	}
	mem := cg.members[memberID]
	switch {
	case mem == nil:
		return kerr.UnknownMemberID.Code
	case !transactional && version < 9:
		return kerr.UnsupportedVersion.Code
	case epoch != mem.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// fetchCheck848 is Kafka's ConsumerGroup.validateOffsetFetch.
func (g *groupState) fetchCheck848(memberID *string, epoch int32) int16 {
	if memberID == nil && epoch < 0 {
		return 0
	}
	var mem *cmember
	if memberID != nil {
		mem = g.cg.members[*memberID]
	}
	switch {
	case mem == nil:
		return kerr.UnknownMemberID.Code
	case epoch != mem.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

func sameStr(a, b *string) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// restoreConsumerGroupLocked installs a consumer group read from the
// log. Every member's session starts anew, as in Kafka after a load;
// members still revoking get their rebalance timeout again.
func (m *Manager) restoreConsumerGroupLocked(g *groupState, l *loadedCG) {
	cg := newConsumerGroup()
	cg.epoch, cg.assignmentEpoch, cg.target = l.epoch, l.assignmentEpoch, l.target
	g.cg, g.protocolType = cg, "consumer"
	for _, mem := range l.members {
		m.putMember848(g, mem)
		m.armSession848(g, mem)
		if mem.state == memberUnrevoked {
			m.armRebalance848(g, mem)
		}
	}
	cg.metadata = m.computeMetadata(cg)
}

// empty reports whether a consumer group has no member; a classic group
// answers true here (its own state says whether it is empty).
func (g *groupState) empty() bool { return g.cg == nil || len(g.cg.members) == 0 }

// tombstones remove a consumer group's own records (its members' are
// removed as they leave).
func (cg *consumerGroup) tombstones(group string) []record {
	return []record{{Key: cgKey(targetMetadataKeyVersion, group)}, {Key: cgKey(cgMetadataKeyVersion, group)}}
}
