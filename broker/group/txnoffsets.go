package group

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// TxnOffsetCommit handles a TxnOffsetCommit (KIP-98, KIP-447): the
// offsets are appended to __consumer_offsets as a transactional batch of
// the producer and held pending, invisible to OffsetFetch, until the
// producer's transaction marker reaches this partition (CompleteTxn). It
// blocks until the append is acknowledged with acks=-1.
func (m *Manager) TxnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	codes := newCodes(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) int { return len(t.Partitions) })
	build := func() *kmsg.TxnOffsetCommitResponse {
		for i, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for j, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, codes[i][j]
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	setAll := codes.setAll

	m.mu.Lock()
	if code := m.txnCommitCheckLocked(req); code != 0 {
		m.unlock()
		setAll(code)
		return build()
	}
	part := m.partitionLocked(req.Group)
	g := m.groups[req.Group]
	if g == nil {
		g = newGroupState(req.Group, part)
		g.stateSince = m.nowMs()
		m.groups[req.Group] = g
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
			if req.Version >= 2 {
				epoch = p.LeaderEpoch
			}
			o := Offset{Offset: p.Offset, LeaderEpoch: epoch, Metadata: md, CommitTimestamp: now, logOffset: -1}
			tp := TopicPartition{t.Topic, p.Partition}
			recs = append(recs, record{Key: offsetKey(req.Group, tp.Topic, tp.Partition), Value: offsetValue(o)})
			tps, vals = append(tps, tp), append(vals, o)
		}
	}
	if len(recs) == 0 {
		m.unlock()
		return build()
	}
	// Pending from before the append, so that require_stable fetches wait
	// for it as Kafka's prepareTxnOffsetCommit makes them.
	offs := g.pendingTxn[req.ProducerID]
	if offs == nil {
		offs = map[TopicPartition]Offset{}
		g.pendingTxn[req.ProducerID] = offs
	}
	prev := map[TopicPartition]Offset{}
	for i, tp := range tps {
		if cur, ok := offs[tp]; ok {
			prev[tp] = cur
		} else {
			offs[tp] = vals[i]
		}
	}
	owner := m.owned.Get(part)
	producer := coordlog.Producer{ID: req.ProducerID, Epoch: req.ProducerEpoch, Transactional: true}
	pending := m.log.Submit(part, coordlog.Encode(recs, now, producer))
	m.unlock()

	base, err := m.wait(pending)

	m.mu.Lock()
	defer m.unlock()
	live := m.owned.Get(part) == owner && m.groups[req.Group] == g && g.pendingTxn[req.ProducerID] != nil
	if err != nil {
		m.logger.Info("transactional offset commit failed", "group", req.Group, "partition", part, "producer_id", req.ProducerID, "err", err)
		setAll(txnAppendErr(err))
		m.lostLeadershipLocked(part, owner, err)
		if live {
			for _, tp := range tps {
				if o, ok := prev[tp]; ok {
					g.pendingTxn[req.ProducerID][tp] = o
				} else if g.pendingTxn[req.ProducerID][tp].logOffset < 0 {
					delete(g.pendingTxn[req.ProducerID], tp)
				}
			}
			if len(g.pendingTxn[req.ProducerID]) == 0 {
				delete(g.pendingTxn, req.ProducerID)
			}
		}
		return build()
	}
	if live {
		for i, tp := range tps {
			o := vals[i]
			o.logOffset = base + int64(i)
			g.pendingTxn[req.ProducerID][tp] = o
		}
	}
	return build()
}

// txnAppendErr maps an append error as Kafka's storeOffsets does for a
// transactional commit: the producer-state errors reach the producer.
func txnAppendErr(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.InvalidProducerEpoch, kerr.ProducerFenced, kerr.InvalidProducerIDMapping, kerr.InvalidTxnState, kerr.TransactionCoordinatorFenced:
			return ke.Code
		}
	}
	return appendErr(err, true)
}

// txnCommitCheckLocked is Kafka 3.7's validateOffsetCommit for a
// transactional commit (GroupCoordinator.doTxnCommitOffsets): a producer
// commits for a group it is no member of (generation -1, no member id, no
// instance id: v0-v2 carry none), or with KIP-447's group metadata as a
// member of the current generation. Group metadata is checked against a
// group the coordinator does not hold too (Kafka adds it Empty), so a
// member the coordinator forgot gets UNKNOWN_MEMBER_ID, never a commit.
func (m *Manager) txnCommitCheckLocked(req *kmsg.TxnOffsetCommitRequest) int16 {
	if e := m.checkLocked(req.Group); e != nil {
		return e.Code
	}
	g := m.groups[req.Group]
	generation, member, instance := int32(-1), "", (*string)(nil)
	if req.Version >= 3 {
		generation, member, instance = req.Generation, req.MemberID, req.InstanceID
	}
	switch {
	case g != nil && g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case generation < 0 && member == "" && instance == nil && (g == nil || g.empty()):
		return 0
	case g == nil:
		return kerr.UnknownMemberID.Code
	case g.cg != nil:
		// Kafka answers a transactional commit at a stale member epoch
		// with ILLEGAL_GENERATION, which every TxnOffsetCommit version
		// knows (OffsetMetadataManager.validateTransactionalOffsetCommit).
		code := g.commitCheck848(member, generation, true, req.Version)
		if code == kerr.StaleMemberEpoch.Code {
			code = kerr.IllegalGeneration.Code
		}
		return code
	}
	if instance != nil {
		// validateCurrentMember: the instance must be known and mapped to
		// the member.
		id, ok := g.static[*instance]
		switch {
		case ok && id != member:
			return kerr.FencedInstanceID.Code
		case !ok:
			return kerr.UnknownMemberID.Code
		}
	}
	switch {
	case g.members[member] == nil:
		return kerr.UnknownMemberID.Code
	case generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	return 0
}

// CompleteTxn applies a transaction marker written to partition of
// __consumer_offsets: on commit the producer's pending offsets of every
// group of the partition become the committed ones (where no later
// commit replaced them), on abort they are dropped. The partition
// leader's WriteTxnMarkers handler calls it once the marker is written;
// a marker that arrives while the partition loads is applied after the
// load, which may have stopped reading before it.
func (m *Manager) CompleteTxn(partition int32, producerID int64, producerEpoch int16, commit bool) {
	m.mu.Lock()
	defer m.unlock()
	c := txnCompletion{producerID, producerEpoch, commit}
	if o := m.owned.Get(partition); o != nil && o.Loading {
		if m.markersWhileLoading == nil {
			m.markersWhileLoading = map[int32][]txnCompletion{}
		}
		m.markersWhileLoading[partition] = append(m.markersWhileLoading[partition], c)
		return
	}
	m.completeTxnLocked(partition, c)
}

// txnCompletion is a transaction marker written to a partition.
type txnCompletion struct {
	producerID    int64
	producerEpoch int16
	commit        bool
}

func (m *Manager) completeTxnLocked(partition int32, c txnCompletion) {
	n := 0
	for _, g := range m.groups {
		if g.partition != partition {
			continue
		}
		offs, ok := g.pendingTxn[c.producerID]
		if !ok {
			continue
		}
		delete(g.pendingTxn, c.producerID)
		n++
		if c.commit {
			applyNewer(g.offsets, offs)
		}
	}
	if n > 0 {
		m.logger.Debug("transaction completed on the group partition", "partition", partition, "producer_id", c.producerID, "producer_epoch", c.producerEpoch, "commit", c.commit, "groups", n)
	}
}

// applyNewer copies each offset of from into to unless to holds a later
// commit of that partition.
func applyNewer(to, from map[TopicPartition]Offset) {
	for tp, o := range from {
		if o.logOffset < 0 {
			continue
		}
		if cur, ok := to[tp]; !ok || cur.logOffset < o.logOffset {
			to[tp] = o
		}
	}
}

// hasPendingTxn reports whether a transactional offset of tp waits for
// its marker.
func (g *groupState) hasPendingTxn(tp TopicPartition) bool {
	if g == nil {
		return false
	}
	for _, offs := range g.pendingTxn {
		if _, ok := offs[tp]; ok {
			return true
		}
	}
	return false
}

// PendingTxn returns a copy of the transactional offsets of group that
// wait for producerID's marker.
func (m *Manager) PendingTxn(group string, producerID int64) map[TopicPartition]Offset {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return nil
	}
	out := map[TopicPartition]Offset{}
	for tp, o := range g.pendingTxn[producerID] {
		out[tp] = o
	}
	return out
}
