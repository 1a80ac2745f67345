package group

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// expired returns the offsets of g that have expired at nowMs, by Kafka's
// rules (KIP-211): an Empty group loses all its offsets once it has been
// Empty for the retention period (or, without a state timestamp, each
// offset that old); a Stable consumer group loses offsets of topics no
// member subscribes to; a group without a protocol (a consumer that
// assigns partitions itself) loses each offset the retention period after
// its last commit.
func (m *Manager) expired(g *groupState, nowMs int64) []TopicPartition {
	retention := m.cfg.OffsetsRetention.Milliseconds()
	var base func(o Offset) int64
	var keep map[string]bool
	switch {
	case g.cg != nil && len(g.cg.members) > 0:
		// A consumer group with members keeps the offsets of the topics
		// they subscribe to, as a Stable classic group.
		keep = g.cg.subscribedTopics()
		base = func(o Offset) int64 { return o.CommitTimestamp }
	case g.protocolType == "":
		base = func(o Offset) int64 { return o.CommitTimestamp }
	case g.state == Empty:
		base = func(o Offset) int64 {
			if g.stateSince > 0 {
				return g.stateSince
			}
			return o.CommitTimestamp
		}
	case g.state == Stable:
		subscribed, ok := g.subscribedTopics()
		if !ok {
			return nil
		}
		keep = subscribed
		base = func(o Offset) int64 { return o.CommitTimestamp }
	default:
		return nil
	}
	var out []TopicPartition
	for tp, o := range g.offsets {
		if !keep[tp.Topic] && base(o)+retention <= nowMs {
			out = append(out, tp)
		}
	}
	return out
}

// expireOffsets is the periodic offset expiry: tombstones for expired
// offsets, and for Empty groups left without offsets, which then are gone
// (Dead); a group with transactional offsets still pending stays, as
// Kafka's hasOffsets counts them. The cache drops an offset only after
// its tombstone is appended and only if no commit replaced it meanwhile.
func (m *Manager) expireOffsets() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.expiry = m.clock.AfterFunc(m.cfg.RetentionCheckInterval, m.expireOffsets)
	now := m.nowMs()
	type expiry struct {
		g        *groupState
		tps      []TopicPartition
		versions []int64
		drop     bool // the group goes too
	}
	byPartition := map[int32][]expiry{}
	for _, g := range m.groups {
		if o := m.owned.Get(g.partition); o == nil || o.Loading {
			continue
		}
		tps := m.expired(g, now)
		drop := g.state == Empty && g.empty() && len(g.members) == 0 && len(g.pending) == 0 && len(g.pendingTxn) == 0 && len(tps) == len(g.offsets)
		if len(tps) == 0 && !drop {
			continue
		}
		e := expiry{g: g, tps: tps, drop: drop}
		for _, tp := range tps {
			e.versions = append(e.versions, g.offsets[tp].logOffset)
		}
		byPartition[g.partition] = append(byPartition[g.partition], e)
	}
	// Submitted under mu: a commit after this point lands behind the
	// tombstones, so a reload keeps it.
	pending := map[int32]coordlog.Pending{}
	for p, es := range byPartition {
		var recs []record
		for _, e := range es {
			for _, tp := range e.tps {
				recs = append(recs, record{Key: offsetKey(e.g.id, tp.Topic, tp.Partition)})
			}
			if e.drop {
				recs = append(recs, record{Key: groupKey(e.g.id)})
				if e.g.cg != nil {
					recs = append(recs, e.g.cg.tombstones(e.g.id)...)
				}
			}
		}
		pending[p] = m.submitLocked(p, recs)
	}
	m.mu.Unlock()

	for p, es := range byPartition {
		if _, err := m.wait(pending[p]); err != nil {
			m.logger.Warn("expire offsets", "partition", p, "err", err)
			continue
		}
		m.mu.Lock()
		for _, e := range es {
			g := e.g
			if m.groups[g.id] != g {
				continue
			}
			for i, tp := range e.tps {
				if o, ok := g.offsets[tp]; ok && o.logOffset == e.versions[i] {
					delete(g.offsets, tp)
				}
			}
			m.logger.Info("offsets expired", "group", g.id, "partitions", len(e.tps))
			if e.drop && g.state == Empty && g.empty() && len(g.members) == 0 && len(g.pending) == 0 && len(g.pendingTxn) == 0 && len(g.offsets) == 0 {
				m.dropGroupLocked(g, kerr.CoordinatorNotAvailable.Code)
				delete(m.groups, g.id)
				m.logger.Info("group removed: empty and without offsets", "group", g.id)
			}
		}
		m.unlock()
	}
}
