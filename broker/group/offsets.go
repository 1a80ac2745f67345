package group

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit handles an OffsetCommit: it blocks until the commit is
// appended with acks=-1 (at most offsets.commit.timeout.ms), and the
// cache changes only after the append succeeded (KAFKA-SPEC §9.3).
func (m *Manager) OffsetCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	codes := newCodes(req.Topics, func(t kmsg.OffsetCommitRequestTopic) int { return len(t.Partitions) })
	build := func() *kmsg.OffsetCommitResponse {
		for i, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for j, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, codes[i][j]
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	setAll := codes.setAll

	m.mu.Lock()
	code := m.commitCheckLocked(req)
	if code != 0 {
		m.unlock()
		setAll(code)
		return build()
	}
	now := m.nowMs()
	var recs []record
	var tps []TopicPartition
	var vals []Offset
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			md := ""
			if p.Metadata != nil {
				md = *p.Metadata
			}
			if m.exists != nil && !m.exists(t.Topic, p.Partition) {
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			if len(md) > m.cfg.MaxMetadataBytes {
				codes[i][j] = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			epoch := int32(-1)
			if req.Version >= 6 {
				epoch = p.LeaderEpoch
			}
			o := Offset{Offset: p.Offset, LeaderEpoch: epoch, Metadata: md, CommitTimestamp: now}
			tp := TopicPartition{t.Topic, p.Partition}
			recs = append(recs, record{Key: offsetKey(req.Group, tp.Topic, tp.Partition), Value: offsetValue(o)})
			tps, vals = append(tps, tp), append(vals, o)
		}
	}
	part := m.partitionLocked(req.Group)
	owner := m.owned.Get(part)
	if len(recs) == 0 {
		m.unlock()
		return build()
	}
	pending := m.submitLocked(part, recs)
	m.unlock()

	base, err := m.wait(pending)
	if err != nil {
		m.logger.Info("offset commit failed", "group", req.Group, "partition", part, "err", err)
		setAll(appendErr(err, true))
		m.mu.Lock()
		m.lostLeadershipLocked(part, owner, err)
		m.unlock()
		return build()
	}
	m.mu.Lock()
	if m.owned.Get(part) == owner {
		g := m.groups[req.Group]
		if g == nil {
			g = newGroupState(req.Group, part)
			g.stateSince = now
			m.groups[req.Group] = g
		}
		for i, tp := range tps {
			o := vals[i]
			o.logOffset = base + int64(i)
			if cur, ok := g.offsets[tp]; !ok || cur.logOffset < o.logOffset {
				g.offsets[tp] = o
			}
		}
	}
	m.unlock()
	return build()
}

// codes are a commit's error codes, by topic and partition.
type codes [][]int16

func newCodes[T any](topics []T, partitions func(T) int) codes {
	c := make(codes, len(topics))
	for i, t := range topics {
		c[i] = make([]int16, partitions(t))
	}
	return c
}

// setAll sets code where no error is set yet.
func (c codes) setAll(code int16) {
	for i := range c {
		for j := range c[i] {
			if c[i][j] == 0 {
				c[i][j] = code
			}
		}
	}
}

// commitCheckLocked decides whether a commit may be written (Kafka's
// doCommitOffsets); a group that does not exist takes commits from
// generation -1 only (a consumer that assigns partitions itself).
func (m *Manager) commitCheckLocked(req *kmsg.OffsetCommitRequest) int16 {
	if e := m.checkLocked(req.Group); e != nil {
		return e.Code
	}
	g := m.groups[req.Group]
	if g == nil {
		switch {
		case req.Generation < 0:
			return 0
		case req.Version >= 9:
			// OffsetCommit v9+ (KIP-848) tells an unknown group apart.
			return kerr.GroupIDNotFound.Code
		}
		return kerr.IllegalGeneration.Code
	}
	if g.cg != nil && g.state != Dead {
		code := g.commitCheck848(req.MemberID, req.Generation, false, req.Version)
		if code == 0 {
			if mem := g.cg.members[req.MemberID]; mem != nil {
				// A commit counts as a heartbeat, as for classic members.
				m.armSession848(g, mem)
			}
		}
		return code
	}
	mem := g.members[req.MemberID]
	switch {
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case req.Generation < 0 && g.state == Empty:
		return 0
	case g.fenced(req.MemberID, req.InstanceID):
		return kerr.FencedInstanceID.Code
	case g.state == CompletingRebalance:
		return kerr.RebalanceInProgress.Code
	case mem == nil:
		return kerr.UnknownMemberID.Code
	case req.Generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	m.heartbeatLocked(mem)
	return 0
}

// OffsetFetch handles an OffsetFetch (v0–v7 one group, v8+ several).
func (m *Manager) OffsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			var topics []kmsg.OffsetFetchRequestTopic
			if rg.Topics != nil {
				topics = []kmsg.OffsetFetchRequestTopic{}
				for _, t := range rg.Topics {
					topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
				}
			}
			code, got := m.fetchLocked(rg.Group, topics, req.RequireStable)
			if g := m.groups[rg.Group]; code == 0 && g != nil && g.cg != nil && req.Version >= 9 {
				if c := g.fetchCheck848(rg.MemberID, rg.MemberEpoch); c != 0 {
					code, got = c, nil
				}
			}
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group, g.ErrorCode = rg.Group, code
			for _, t := range got {
				gt := kmsg.NewOffsetFetchResponseGroupTopic()
				gt.Topic = t.Topic
				for _, p := range t.Partitions {
					gt.Partitions = append(gt.Partitions, kmsg.OffsetFetchResponseGroupTopicPartition{
						Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, ErrorCode: p.ErrorCode,
					})
				}
				g.Topics = append(g.Topics, gt)
			}
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	code, got := m.fetchLocked(req.Group, req.Topics, req.Version >= 7 && req.RequireStable)
	resp.ErrorCode, resp.Topics = code, got
	if req.Version < 2 && code != 0 {
		// v0–v1 have no top-level error: report it per partition.
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return resp
}

// fetchLocked returns the committed offsets of the requested partitions
// (all of the group's when topics is nil); unknown ones are -1. With
// requireStable (KIP-447) a partition with a transactional offset still
// pending answers UNSTABLE_OFFSET_COMMIT.
func (m *Manager) fetchLocked(group string, topics []kmsg.OffsetFetchRequestTopic, requireStable bool) (int16, []kmsg.OffsetFetchResponseTopic) {
	if e := m.checkLocked(group); e != nil {
		return e.Code, nil
	}
	var offsets map[TopicPartition]Offset
	g := m.groups[group]
	if g != nil {
		offsets = g.offsets
	}
	if topics == nil {
		byTopic := map[string][]int32{}
		for tp := range offsets {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		names := make([]string, 0, len(byTopic))
		for t := range byTopic {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			ps := byTopic[t]
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t, Partitions: ps})
		}
	}
	out := []kmsg.OffsetFetchResponseTopic{}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			empty := ""
			rp.Metadata = &empty
			tp := TopicPartition{t.Topic, p}
			if o, ok := offsets[tp]; ok {
				md := o.Metadata
				rp.Offset, rp.LeaderEpoch, rp.Metadata = o.Offset, o.LeaderEpoch, &md
			}
			if requireStable && g.hasPendingTxn(tp) {
				rp.Offset, rp.LeaderEpoch, rp.Metadata = -1, -1, &empty
				rp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return 0, out
}

// Committed returns a copy of a group's committed offsets (nil when this
// manager does not know the group).
func (m *Manager) Committed(group string) map[TopicPartition]Offset {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return nil
	}
	out := make(map[TopicPartition]Offset, len(g.offsets))
	for k, v := range g.offsets {
		out[k] = v
	}
	return out
}

// OffsetDelete handles an OffsetDelete: offsets of topics the group's
// members still subscribe to are kept (GROUP_SUBSCRIBED_TO_TOPIC).
func (m *Manager) OffsetDelete(req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	m.mu.Lock()
	top := int16(0)
	g := m.groups[req.Group]
	var subscribed map[string]bool
	if e := m.checkLocked(req.Group); e != nil {
		top = e.Code
	} else if g == nil || g.state == Dead {
		top = kerr.GroupIDNotFound.Code
	} else if g.state != Empty {
		var ok bool
		if subscribed, ok = g.subscribedTopics(); !ok {
			top = kerr.NonEmptyGroup.Code
		}
	}
	var recs []record
	var del []TopicPartition
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if top == 0 && subscribed[t.Topic] {
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else if top == 0 {
				tp := TopicPartition{t.Topic, p.Partition}
				if _, ok := g.offsets[tp]; ok {
					recs = append(recs, record{Key: offsetKey(req.Group, tp.Topic, tp.Partition)})
					del = append(del, tp)
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	resp.ErrorCode = top
	if top != 0 || len(recs) == 0 {
		m.unlock()
		return resp
	}
	pending := m.submitLocked(m.partitionLocked(req.Group), recs)
	m.unlock()
	if _, err := m.wait(pending); err != nil {
		resp.ErrorCode = appendErr(err, true)
		return resp
	}
	m.mu.Lock()
	if m.groups[req.Group] == g {
		for _, tp := range del {
			delete(g.offsets, tp)
		}
	}
	m.unlock()
	return resp
}

// DeleteGroups handles a DeleteGroups: empty groups lose their metadata
// and offsets (tombstones in __consumer_offsets).
func (m *Manager) DeleteGroups(req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		rg.ErrorCode = m.deleteGroup(id)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (m *Manager) deleteGroup(id string) int16 {
	m.mu.Lock()
	if e := m.checkLocked(id); e != nil {
		m.unlock()
		return e.Code
	}
	g := m.groups[id]
	switch {
	case g == nil || g.state == Dead:
		m.unlock()
		return kerr.GroupIDNotFound.Code
	case g.state != Empty || !g.empty():
		m.unlock()
		return kerr.NonEmptyGroup.Code
	}
	recs := []record{}
	for tp := range g.offsets {
		recs = append(recs, record{Key: offsetKey(id, tp.Topic, tp.Partition)})
	}
	recs = append(recs, record{Key: groupKey(id)})
	if g.cg != nil {
		recs = append(recs, g.cg.tombstones(id)...)
	}
	pending := m.submitLocked(g.partition, recs)
	m.unlock()
	if _, err := m.wait(pending); err != nil {
		return appendErr(err, false)
	}
	m.mu.Lock()
	defer m.unlock()
	if m.groups[id] == g && g.state == Empty && g.empty() {
		m.dropGroupLocked(g, kerr.CoordinatorNotAvailable.Code)
		delete(m.groups, id)
		m.logger.Info("group deleted", "group", id)
	}
	return 0
}
