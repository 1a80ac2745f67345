package group

import (
	"bytes"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func joinError(req *kmsg.JoinGroupRequest, code int16) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.ErrorCode, resp.Generation, resp.MemberID = code, -1, req.MemberID
	return resp
}

// JoinGroup handles a JoinGroup. respond is called once, possibly later
// and from another goroutine, when the rebalance completes or fails.
// clientHost is the client's address as Kafka shows it ("/127.0.0.1").
func (m *Manager) JoinGroup(req *kmsg.JoinGroupRequest, clientID, clientHost string, respond func(*kmsg.JoinGroupResponse)) {
	// The request's bytes alias the connection's read buffer, which the
	// next request overwrites; the group keeps the metadata.
	for i := range req.Protocols {
		req.Protocols[i].Metadata = bytes.Clone(req.Protocols[i].Metadata)
	}
	m.mu.Lock()
	defer m.unlock()
	fail := func(code int16) { m.later(func() { respond(joinError(req, code)) }) }
	if e := m.checkLocked(req.Group); e != nil {
		fail(e.Code)
		return
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	if session < m.cfg.MinSessionTimeout || session > m.cfg.MaxSessionTimeout {
		fail(kerr.InvalidSessionTimeout.Code)
		return
	}
	if req.Version == 0 {
		req.RebalanceTimeoutMillis = req.SessionTimeoutMillis
	}
	g := m.groups[req.Group]
	if g == nil {
		if req.MemberID != "" {
			fail(kerr.UnknownMemberID.Code)
			return
		}
		g = newGroupState(req.Group, m.partitionLocked(req.Group))
		g.stateSince = m.nowMs()
		m.groups[req.Group] = g
	}
	if g.state == Dead {
		fail(kerr.CoordinatorNotAvailable.Code)
		return
	}
	if g.cg != nil {
		if !g.empty() {
			// Kafka 4.0 would let a classic member join a consumer group
			// (the online migration); isrlab does not convert groups with
			// members, and answers as for a protocol the group cannot take.
			fail(kerr.InconsistentGroupProtocol.Code)
			return
		}
		// An empty consumer group becomes a classic group, keeping its
		// offsets, as Kafka converts it.
		m.submitLocked(g.partition, g.cg.tombstones(g.id))
		g.cg, g.protocolType = nil, ""
	}
	if !g.supports(req.ProtocolType, req.Protocols) {
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	if req.MemberID == "" && req.InstanceID != nil {
		// KIP-345: a known instance takes its predecessor's place; a new
		// one joins at once.
		if old, ok := g.static[*req.InstanceID]; ok && g.members[old] != nil {
			m.replaceStaticLocked(g, old, req, clientID, clientHost, respond)
			return
		}
		m.addMemberLocked(g, m.newID(*req.InstanceID), req, clientID, clientHost, respond)
		return
	}
	if req.MemberID == "" {
		id := m.newID(clientID)
		if req.Version >= 4 {
			// KIP-394: hand out the id first; the member joins with it.
			g.pending[id] = m.clock.AfterFunc(session, func() { m.expirePending(g, id) })
			m.later(func() {
				resp := joinError(req, kerr.MemberIDRequired.Code)
				resp.MemberID = id
				respond(resp)
			})
			return
		}
		m.addMemberLocked(g, id, req, clientID, clientHost, respond)
		return
	}
	if t, ok := g.pending[req.MemberID]; ok {
		t.Stop()
		delete(g.pending, req.MemberID)
		m.addMemberLocked(g, req.MemberID, req, clientID, clientHost, respond)
		return
	}
	if g.fenced(req.MemberID, req.InstanceID) {
		fail(kerr.FencedInstanceID.Code)
		return
	}
	mem := g.members[req.MemberID]
	if mem == nil {
		fail(kerr.UnknownMemberID.Code)
		return
	}
	switch g.state {
	case Empty:
		fail(kerr.UnknownMemberID.Code)
	case PreparingRebalance:
		m.updateMemberLocked(g, mem, req, respond)
	case CompletingRebalance, Stable:
		if mem.sameProtocols(req.Protocols) && (g.state == CompletingRebalance || mem.id != g.leader) {
			// A retried join of the current generation: answer it again.
			resp := m.joinResponseLocked(g, mem)
			m.later(func() { respond(resp) })
			return
		}
		m.updateMemberLocked(g, mem, req, respond)
	}
}

func (m *Manager) addMemberLocked(g *groupState, id string, req *kmsg.JoinGroupRequest, clientID, clientHost string, respond func(*kmsg.JoinGroupResponse)) {
	mem := &member{
		id: id, clientID: clientID, clientHost: clientHost, instanceID: req.InstanceID,
		sessionTimeoutMs: req.SessionTimeoutMillis, rebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		protocolType: req.ProtocolType, protocols: req.Protocols, awaitingJoin: respond,
	}
	if g.state == PreparingRebalance && g.generation == 0 {
		g.newMember = true
	}
	g.add(mem)
	mem.deadline = m.clock.Now().Add(time.Duration(mem.sessionTimeoutMs) * time.Millisecond)
	m.armMemberLocked(g, mem)
	m.logger.Info("member joined", "group", g.id, "member", id, "generation", g.generation, "state", string(g.state))
	m.maybePrepareRebalanceLocked(g, "member "+id+" joined")
	m.tryCompleteJoinLocked(g)
}

// replaceStaticLocked gives a restarted static member its predecessor's
// place. In a Stable group whose protocol stays, that is no rebalance: the
// group is stored with the new member id and the member gets the current
// generation (Kafka's updateStaticMemberAndRebalance).
func (m *Manager) replaceStaticLocked(g *groupState, oldID string, req *kmsg.JoinGroupRequest, clientID, clientHost string, respond func(*kmsg.JoinGroupResponse)) {
	newID := m.newID(*req.InstanceID)
	mem := g.members[oldID]
	m.failJoinLocked(mem, kerr.FencedInstanceID.Code)
	m.failSyncLocked(mem, kerr.FencedInstanceID.Code)
	g.replace(oldID, newID)
	mem.clientID, mem.clientHost = clientID, clientHost
	m.heartbeatLocked(mem)
	m.logger.Info("static member replaced", "group", g.id, "instance", *req.InstanceID, "old", oldID, "member", newID)
	if g.state != Stable {
		m.updateMemberLocked(g, mem, req, respond)
		return
	}
	// Kafka rebalances only if the group's protocol would change; the
	// metadata itself may differ (a restarted member owns nothing yet).
	oldProtocols := mem.protocols
	mem.protocols = req.Protocols
	if g.selectProtocol() != g.protocol {
		mem.protocols = oldProtocols
		m.updateMemberLocked(g, mem, req, respond)
		return
	}
	mem.sessionTimeoutMs, mem.rebalanceTimeoutMs = req.SessionTimeoutMillis, req.RebalanceTimeoutMillis
	gen := g.generation
	m.storeGroupLater(g, func(code int16) {
		if code != 0 {
			resp := joinError(req, code)
			m.later(func() { respond(resp) })
			return
		}
		if m.groups[g.id] != g || g.members[newID] != mem || g.generation != gen {
			resp := joinError(req, kerr.RebalanceInProgress.Code)
			m.later(func() { respond(resp) })
			return
		}
		resp := m.joinResponseLocked(g, mem)
		resp.SkipAssignment = mem.id == g.leader
		m.later(func() { respond(resp) })
	})
}

func (m *Manager) updateMemberLocked(g *groupState, mem *member, req *kmsg.JoinGroupRequest, respond func(*kmsg.JoinGroupResponse)) {
	mem.protocols, mem.rebalanceTimeoutMs, mem.sessionTimeoutMs = req.Protocols, req.RebalanceTimeoutMillis, req.SessionTimeoutMillis
	if mem.awaitingJoin != nil {
		m.failJoinLocked(mem, kerr.RebalanceInProgress.Code)
	}
	mem.awaitingJoin = respond
	m.maybePrepareRebalanceLocked(g, "member "+mem.id+" rejoined")
	m.tryCompleteJoinLocked(g)
}

func (m *Manager) failJoinLocked(mem *member, code int16) {
	if cb := mem.awaitingJoin; cb != nil {
		mem.awaitingJoin = nil
		id := mem.id
		m.later(func() {
			resp := kmsg.NewPtrJoinGroupResponse()
			resp.ErrorCode, resp.Generation, resp.MemberID = code, -1, id
			cb(resp)
		})
	}
}

func (m *Manager) failSyncLocked(mem *member, code int16) {
	if cb := mem.awaitingSync; cb != nil {
		mem.awaitingSync = nil
		m.later(func() {
			resp := kmsg.NewPtrSyncGroupResponse()
			resp.ErrorCode = code
			cb(resp)
		})
	}
}

// joinResponseLocked is mem's JoinGroup answer for the current generation:
// the leader also gets every member's metadata for the chosen protocol.
func (m *Manager) joinResponseLocked(g *groupState, mem *member) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.LeaderID, resp.MemberID = g.generation, g.leader, mem.id
	pt, p := g.protocolType, g.protocol
	resp.ProtocolType, resp.Protocol = &pt, &p
	if mem.id == g.leader {
		for _, id := range g.order {
			o := g.members[id]
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = o.id, o.instanceID, o.metadata(g.protocol)
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

func (m *Manager) maybePrepareRebalanceLocked(g *groupState, reason string) {
	switch g.state {
	case Stable, CompletingRebalance, Empty:
		m.prepareRebalanceLocked(g, reason)
	}
}

func (m *Manager) setState(g *groupState, s State) {
	g.state = s
	g.stateSince = m.nowMs()
}

// prepareRebalanceLocked starts a rebalance: members have the largest
// rebalance timeout to rejoin; an empty group first waits
// group.initial.rebalance.delay.ms for more members.
func (m *Manager) prepareRebalanceLocked(g *groupState, reason string) {
	if g.state == CompletingRebalance {
		for _, mem := range g.sorted() {
			mem.assignment = nil
			m.failSyncLocked(mem, kerr.RebalanceInProgress.Code)
		}
	}
	if g.joinTimer != nil {
		g.joinTimer.Stop()
	}
	wasEmpty := g.state == Empty
	m.setState(g, PreparingRebalance)
	m.logger.Info("preparing rebalance", "group", g.id, "generation", g.generation, "reason", reason)
	if wasEmpty {
		delay := m.cfg.InitialRebalanceDelay
		remaining := max(g.maxRebalanceTimeout()-delay, 0)
		g.initialJoin = true
		m.scheduleInitialJoinLocked(g, delay, remaining)
		return
	}
	g.initialJoin = false
	var t Timer
	t = m.clock.AfterFunc(g.maxRebalanceTimeout(), func() {
		m.mu.Lock()
		defer m.unlock()
		if m.groups[g.id] == g && g.joinTimer == t && g.state == PreparingRebalance {
			m.completeJoinLocked(g)
		}
	})
	g.joinTimer = t
}

// scheduleInitialJoinLocked is Kafka's InitialDelayedJoin: each member
// that joins during the delay extends it, within the rebalance timeout.
func (m *Manager) scheduleInitialJoinLocked(g *groupState, delay, remaining time.Duration) {
	var t Timer
	t = m.clock.AfterFunc(delay, func() {
		m.mu.Lock()
		defer m.unlock()
		if m.groups[g.id] != g || g.joinTimer != t || g.state != PreparingRebalance {
			return
		}
		if g.newMember && remaining > 0 {
			g.newMember = false
			d := min(m.cfg.InitialRebalanceDelay, remaining)
			m.scheduleInitialJoinLocked(g, d, max(remaining-d, 0))
			return
		}
		m.completeJoinLocked(g)
	})
	g.joinTimer = t
}

func (m *Manager) tryCompleteJoinLocked(g *groupState) {
	if g.state == PreparingRebalance && !g.initialJoin && g.allJoined() {
		m.completeJoinLocked(g)
	}
}

// completeJoinLocked ends the join phase: members that did not rejoin
// leave, the generation advances and every member gets its answer.
func (m *Manager) completeJoinLocked(g *groupState) {
	if g.joinTimer != nil {
		g.joinTimer.Stop()
		g.joinTimer = nil
	}
	g.initialJoin, g.newMember = false, false
	for _, id := range append([]string(nil), g.order...) {
		if mem := g.members[id]; mem.awaitingJoin == nil {
			m.logger.Info("member did not rejoin in time", "group", g.id, "member", id)
			g.remove(id)
		}
	}
	g.generation++
	now := m.clock.Now()
	if len(g.members) == 0 {
		g.protocol, g.leader = "", ""
		m.setState(g, Empty)
		m.logger.Info("group is empty", "group", g.id, "generation", g.generation)
		m.storeGroupLater(g, nil)
		return
	}
	if g.members[g.leader] == nil {
		g.leader = g.order[0]
	}
	g.protocol = g.selectProtocol()
	m.setState(g, CompletingRebalance)
	m.logger.Info("rebalance: join complete", "group", g.id, "generation", g.generation, "members", len(g.members), "leader", g.leader, "protocol", g.protocol)
	for _, mem := range g.sorted() {
		resp := m.joinResponseLocked(g, mem)
		cb := mem.awaitingJoin
		mem.awaitingJoin = nil
		mem.deadline = now.Add(time.Duration(mem.sessionTimeoutMs) * time.Millisecond)
		m.later(func() { cb(resp) })
	}
}

// storeGroupLater submits g's metadata (with assignments when given) now,
// under the lock, and waits for it after the lock is released; done, if
// set, gets the outcome under the lock.
func (m *Manager) storeGroupLater(g *groupState, done func(code int16)) {
	p, id := g.partition, g.id
	owner := m.owned.Get(p)
	pending := m.submitLocked(p, []record{{Key: groupKey(id), Value: groupValue(g)}})
	m.later(func() {
		_, err := m.wait(pending)
		code := int16(0)
		if err != nil {
			code = appendErr(err, false)
			m.logger.Warn("store group metadata", "group", id, "err", err)
		}
		m.mu.Lock()
		defer m.unlock()
		if err != nil {
			m.lostLeadershipLocked(p, owner, err)
		}
		if done != nil {
			done(code)
		}
	})
}

// armMemberLocked (re)starts mem's session timer for its deadline.
func (m *Manager) armMemberLocked(g *groupState, mem *member) {
	if mem.timer != nil {
		mem.timer.Stop()
	}
	d := mem.deadline.Sub(m.clock.Now())
	mem.timer = m.clock.AfterFunc(max(d, 0), func() { m.memberTimer(g, mem) })
}

// memberTimer expires a member whose session ran out; members waiting
// for a join or sync answer are kept alive.
func (m *Manager) memberTimer(g *groupState, mem *member) {
	m.mu.Lock()
	defer m.unlock()
	if m.groups[g.id] != g || g.members[mem.id] != mem {
		return
	}
	now := m.clock.Now()
	if mem.awaitingJoin != nil || mem.awaitingSync != nil {
		mem.deadline = now.Add(time.Duration(mem.sessionTimeoutMs) * time.Millisecond)
	}
	if now.Before(mem.deadline) {
		m.armMemberLocked(g, mem)
		return
	}
	m.logger.Info("member session expired", "group", g.id, "member", mem.id, "generation", g.generation)
	m.removeMemberLocked(g, mem.id)
}

func (m *Manager) expirePending(g *groupState, id string) {
	m.mu.Lock()
	defer m.unlock()
	if m.groups[g.id] != g {
		return
	}
	if _, ok := g.pending[id]; ok {
		delete(g.pending, id)
		m.tryCompleteJoinLocked(g)
	}
}

// removeMemberLocked removes a member and moves the group on.
func (m *Manager) removeMemberLocked(g *groupState, id string) {
	mem := g.remove(id)
	if mem == nil {
		return
	}
	m.failJoinLocked(mem, kerr.UnknownMemberID.Code)
	m.failSyncLocked(mem, kerr.UnknownMemberID.Code)
	switch g.state {
	case Stable, CompletingRebalance:
		m.prepareRebalanceLocked(g, "member "+id+" left")
	case PreparingRebalance:
		m.tryCompleteJoinLocked(g)
	}
}

func (m *Manager) heartbeatLocked(mem *member) {
	mem.deadline = m.clock.Now().Add(time.Duration(mem.sessionTimeoutMs) * time.Millisecond)
}

// SyncGroup handles a SyncGroup. respond is called once: at once, or when
// the leader's assignment is stored, or when the rebalance fails.
func (m *Manager) SyncGroup(req *kmsg.SyncGroupRequest, respond func(*kmsg.SyncGroupResponse)) {
	// As in JoinGroup: the group keeps the assignments beyond the request.
	for i := range req.GroupAssignment {
		req.GroupAssignment[i].MemberAssignment = bytes.Clone(req.GroupAssignment[i].MemberAssignment)
	}
	m.mu.Lock()
	defer m.unlock()
	fail := func(code int16) {
		m.later(func() {
			resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
			resp.ErrorCode = code
			respond(resp)
		})
	}
	if e := m.checkLocked(req.Group); e != nil {
		fail(e.Code)
		return
	}
	g := m.groups[req.Group]
	if g == nil {
		fail(kerr.UnknownMemberID.Code)
		return
	}
	mem := g.members[req.MemberID]
	switch {
	case g.state == Dead:
		fail(kerr.CoordinatorNotAvailable.Code)
		return
	case g.fenced(req.MemberID, req.InstanceID):
		fail(kerr.FencedInstanceID.Code)
		return
	case mem == nil:
		fail(kerr.UnknownMemberID.Code)
		return
	case req.Generation != g.generation:
		fail(kerr.IllegalGeneration.Code)
		return
	case req.ProtocolType != nil && *req.ProtocolType != g.protocolType,
		req.Protocol != nil && *req.Protocol != g.protocol:
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	switch g.state {
	case Empty:
		fail(kerr.UnknownMemberID.Code)
	case PreparingRebalance:
		fail(kerr.RebalanceInProgress.Code)
	case Stable:
		m.heartbeatLocked(mem)
		resp := m.syncResponse(g, mem)
		m.later(func() { respond(resp) })
	case CompletingRebalance:
		m.failSyncLocked(mem, kerr.RebalanceInProgress.Code)
		mem.awaitingSync = respond
		m.heartbeatLocked(mem)
		if mem.id != g.leader {
			return
		}
		assigned := map[string][]byte{}
		for _, a := range req.GroupAssignment {
			assigned[a.MemberID] = a.MemberAssignment
		}
		for id, o := range g.members {
			o.assignment = assigned[id]
			if o.assignment == nil {
				o.assignment = []byte{}
			}
		}
		gen := g.generation
		m.storeGroupLater(g, func(code int16) {
			if m.groups[g.id] != g || g.generation != gen || g.state != CompletingRebalance {
				return
			}
			if code != 0 {
				for _, o := range g.sorted() {
					o.assignment = nil
					m.failSyncLocked(o, code)
				}
				m.prepareRebalanceLocked(g, "storing the assignment failed")
				return
			}
			m.setState(g, Stable)
			m.logger.Info("rebalance: group stable", "group", g.id, "generation", g.generation, "members", len(g.members))
			for _, o := range g.sorted() {
				if cb := o.awaitingSync; cb != nil {
					o.awaitingSync = nil
					resp := m.syncResponse(g, o)
					m.later(func() { cb(resp) })
				}
			}
		})
	}
}

func (m *Manager) syncResponse(g *groupState, mem *member) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	pt, p := g.protocolType, g.protocol
	resp.ProtocolType, resp.Protocol = &pt, &p
	resp.MemberAssignment = mem.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	return resp
}

// Heartbeat handles a Heartbeat.
func (m *Manager) Heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = m.heartbeatCodeLocked(req)
	return resp
}

func (m *Manager) heartbeatCodeLocked(req *kmsg.HeartbeatRequest) int16 {
	if e := m.checkLocked(req.Group); e != nil {
		return e.Code
	}
	g := m.groups[req.Group]
	if g == nil {
		return kerr.UnknownMemberID.Code
	}
	mem := g.members[req.MemberID]
	switch {
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case g.fenced(req.MemberID, req.InstanceID):
		return kerr.FencedInstanceID.Code
	case g.state == Empty, mem == nil:
		return kerr.UnknownMemberID.Code
	case req.Generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	m.heartbeatLocked(mem)
	if g.state == PreparingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// LeaveGroup handles a LeaveGroup (v0–v2 one member, v3+ a batch).
func (m *Manager) LeaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	m.mu.Lock()
	defer m.unlock()
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	top := int16(0)
	if e := m.checkLocked(req.Group); e != nil {
		top = e.Code
	} else if g := m.groups[req.Group]; g != nil && g.state == Dead {
		top = kerr.CoordinatorNotAvailable.Code
	}
	g := m.groups[req.Group]
	for _, l := range leaving {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = l.MemberID, l.InstanceID
		switch {
		case top != 0:
		case g == nil:
			rm.ErrorCode = kerr.UnknownMemberID.Code
		case l.InstanceID != nil:
			id, ok := g.static[*l.InstanceID]
			switch {
			case !ok:
				rm.ErrorCode = kerr.UnknownMemberID.Code
			case l.MemberID != "" && l.MemberID != id:
				rm.ErrorCode = kerr.FencedInstanceID.Code
			default:
				m.logger.Info("static member left", "group", g.id, "instance", *l.InstanceID, "member", id)
				m.removeMemberLocked(g, id)
			}
		default:
			if t, ok := g.pending[l.MemberID]; ok {
				t.Stop()
				delete(g.pending, l.MemberID)
				m.tryCompleteJoinLocked(g)
			} else if g.members[l.MemberID] != nil {
				m.logger.Info("member left", "group", g.id, "member", l.MemberID)
				m.removeMemberLocked(g, l.MemberID)
			} else {
				rm.ErrorCode = kerr.UnknownMemberID.Code
			}
		}
		resp.Members = append(resp.Members, rm)
	}
	resp.ErrorCode = top
	if req.Version < 3 && top == 0 && len(resp.Members) == 1 {
		resp.ErrorCode = resp.Members[0].ErrorCode
	}
	return resp
}
