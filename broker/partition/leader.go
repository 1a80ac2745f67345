package partition

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// MakeLeader applies a LeaderAndIsr that makes this replica the leader
// (§1.5, §2.5): ISR followers count as caught up now, others not at all,
// every follower LEO becomes unknown (so the HW holds until each has
// fetched), the new epoch is recorded at the LEO, and the HW stays where it
// was (from the checkpoint on a fresh start).
func (p *Partition) MakeLeader(st LeaderAndISR, replicas []int32, version int64, checkpointHW int64) error {
	p.wlock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	leo := p.log.LogEndOffset()
	if _, err := p.log.Epochs().Assign(st.LeaderEpoch, leo); err != nil {
		return err
	}
	wasLeader := p.role == Leader
	p.role, p.leader, p.leaderEpoch, p.controllerEpoch = Leader, p.self, st.LeaderEpoch, st.ControllerEpoch
	p.version = version
	p.replicas, p.isr = slices.Clone(replicas), slices.Clone(st.ISR)
	p.pending, p.alterWait = nil, nil
	p.epochStart = leo
	now := p.nowMs()
	p.remotes = map[int32]*remote{}
	for _, r := range replicas {
		if r == p.self {
			continue
		}
		rm := &remote{leo: -1, sinceMs: now, logStart: -1}
		if slices.Contains(st.ISR, r) {
			rm.lastCaughtUpTimeMs = now
		}
		p.remotes[r] = rm
	}
	if !wasLeader {
		p.hw = clamp(max(p.hw, checkpointHW), p.log.LogStartOffset(), leo)
	}
	p.maybeIncrementHWLocked(now)
	p.notifyLocked()
	return nil
}

// UpdateISRFromController applies a LeaderAndIsr that keeps this replica the
// leader in the same epoch or an ISR/version change pushed by the
// controller.
func (p *Partition) UpdateISRFromController(st LeaderAndISR, replicas []int32, version int64) {
	p.wlock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isr, p.replicas, p.version, p.controllerEpoch = slices.Clone(st.ISR), slices.Clone(replicas), version, st.ControllerEpoch
	p.pending, p.alterWait = nil, nil
	for _, r := range replicas {
		if _, ok := p.remotes[r]; !ok && r != p.self {
			p.remotes[r] = &remote{leo: -1, sinceMs: p.nowMs(), logStart: -1}
		}
	}
	p.maybeIncrementHWLocked(p.nowMs())
	p.notifyLocked()
}

// maybeIncrementHWLocked recomputes the HW (§2.1): the smallest LEO among the
// leader and every follower that is in the maximal ISR or caught up within
// replica.lag.time.max.ms on a live broker. It never moves backwards; with the 3.7 switch it
// does not move while the ISR is below min.insync.replicas (§2.2).
func (p *Partition) maybeIncrementHWLocked(nowMs int64) bool {
	if p.role != Leader {
		return false
	}
	maximal := p.maximalISRLocked()
	if p.sw.HWRequiresMinISR && len(maximal) < p.minISRLocked() {
		return false
	}
	candidate := p.log.LogEndOffset()
	for id, r := range p.remotes {
		// A caught-up replica outside the ISR is waited for too, unless its
		// broker is gone (Kafka skips dead and shutting-down brokers).
		caughtUp := nowMs-r.lastCaughtUpTimeMs <= p.sw.ReplicaLagTimeMaxMs && (p.live == nil || p.live(id))
		if slices.Contains(maximal, id) || caughtUp {
			if r.leo < candidate {
				candidate = r.leo
			}
		}
	}
	if candidate > p.hw {
		p.hw = candidate
		return true
	}
	return false
}

// AppendResult describes a leader append.
type AppendResult struct {
	FirstOffset, LastOffset int64
	LogStartOffset          int64
	LogAppendTime           int64 // the stamped time with LogAppendTime, else -1
	Records                 int
	Duplicate               bool
}

// AppendAsLeader validates and appends a produce payload (§3.1–§3.3).
// acks=-1 below min.insync.replicas is refused before anything is written.
// Errors are Kafka errors from kerr.
func (p *Partition) AppendAsLeader(data []byte, requiredAcks int16) (AppendResult, error) {
	return p.AppendAsLeaderWith(data, AppendOptions{RequiredAcks: requiredAcks})
}

// AppendAsLeaderWith is AppendAsLeader with options. Besides the checks
// above it applies the producer rules: an idempotent or transactional
// batch is checked against its producer's epoch and sequences (a retried
// duplicate answers with its original offsets), clients may not write
// control batches, and with the txn-verification switch a batch opening a
// transaction needs a valid o.TxnGuard (else INVALID_TXN_STATE).
func (p *Partition) AppendAsLeaderWith(data []byte, o AppendOptions) (AppendResult, error) {
	requiredAcks := o.RequiredAcks
	p.rlock()
	defer p.lock.RUnlock()

	p.mu.Lock()
	role, epoch, cfg, isrLen, minISR := p.role, p.leaderEpoch, p.cfg, len(p.isr), p.minISRLocked()
	p.mu.Unlock()
	if role != Leader {
		return AppendResult{}, kerr.NotLeaderForPartition
	}
	batches, err := klog.ParseBatches(data, cfg.MaxMessageBytes)
	if err != nil {
		return AppendResult{}, kafkaError(err)
	}
	if len(batches) == 0 {
		return AppendResult{}, kerr.CorruptMessage
	}
	if requiredAcks == -1 && isrLen < minISR {
		return AppendResult{}, kerr.NotEnoughReplicas
	}

	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	records := 0
	for _, bi := range batches {
		records += int(bi.LastOffset-bi.BaseOffset) + 1
	}
	dup, err := p.checkProducerLocked(batches, o)
	if err != nil {
		return AppendResult{}, err
	}
	if dup != nil {
		return AppendResult{FirstOffset: dup.FirstOffset, LastOffset: dup.LastOffset, LogStartOffset: p.log.LogStartOffset(), LogAppendTime: -1, Duplicate: true}, nil
	}
	res, err := p.log.AppendParsedAsLeader(data, batches, epoch)
	if err != nil {
		return AppendResult{}, kafkaError(err)
	}
	return p.appended(res, records), nil
}

// appended moves the HW after a leader append (a single-replica ISR
// commits at once) and wakes the waiters.
func (p *Partition) appended(res klog.AppendResult, records int) AppendResult {
	p.mu.Lock()
	p.maybeIncrementHWLocked(p.nowMs())
	p.notifyLocked()
	p.mu.Unlock()
	return AppendResult{FirstOffset: res.FirstOffset, LastOffset: res.LastOffset, LogStartOffset: p.log.LogStartOffset(), LogAppendTime: res.LogAppendTime, Records: records}
}

// AcksAllStatus reports whether an acks=-1 append ending before
// requiredOffset is complete (§3.4): the HW covers it. It then succeeds if
// the maximal ISR still meets min.insync.replicas and otherwise gets
// NOT_ENOUGH_REPLICAS_AFTER_APPEND (the data stays committed); a lost
// leadership gets NOT_LEADER_OR_FOLLOWER.
func (p *Partition) AcksAllStatus(requiredOffset int64) (bool, error) {
	p.rlock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != Leader {
		return true, kerr.NotLeaderForPartition
	}
	if p.hw < requiredOffset {
		return false, nil
	}
	if len(p.maximalISRLocked()) < p.minISRLocked() {
		return true, kerr.NotEnoughReplicasAfterAppend
	}
	return true, nil
}

// ReadResult is what a fetch gets from one partition.
type ReadResult struct {
	Records          []byte
	HighWatermark    int64
	LogStartOffset   int64
	LastStableOffset int64
	LogEndOffset     int64
	// DivergingEpoch is set (Epoch >= 0) when a follower's last fetched
	// epoch does not match the leader's log at its fetch offset (KIP-595).
	DivergingEpoch     int32
	DivergingEndOffset int64
	// AbortedTxns (read_committed only, else nil) are the aborted
	// transactions overlapping the records returned.
	AbortedTxns []klog.AbortedTxn
}

// FetchRequest is one partition of a Fetch.
type FetchRequest struct {
	ReplicaID          int32 // -1 for consumers
	Offset             int64
	MaxBytes           int
	CurrentLeaderEpoch int32 // -1: not given
	LastFetchedEpoch   int32 // -1: not given
	// LogStartOffset is a follower's own log start offset (-1: not
	// given); the leader's low watermark for DeleteRecords waits on it.
	LogStartOffset int64
	MinOneBatch    bool
	// Isolation is the consumer's isolation level: 0 read_uncommitted
	// reads up to the HW, 1 read_committed up to the LSO.
	Isolation int8
	// Alloc provides the read buffer (nil: allocate); see log.ReadWith.
	Alloc func(n int) []byte
}

// Read serves a fetch. Consumers read up to the HW, followers up to the
// LEO (§2.4). A follower's fetch offset is its LEO: it updates the
// follower's caught-up time, may expand the ISR and advance the HW.
func (p *Partition) Read(req FetchRequest) (ReadResult, error) {
	res, err, expand := p.read(req)
	if expand {
		p.maybeExpandISR(req.ReplicaID)
	}
	return res, err
}

func (p *Partition) read(req FetchRequest) (res ReadResult, err error, expand bool) {
	follower := req.ReplicaID >= 0
	res.DivergingEpoch = -1
	p.rlock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	role, epoch := p.role, p.leaderEpoch
	if err := checkEpoch(req.CurrentLeaderEpoch, epoch); err != nil {
		p.mu.Unlock()
		return res, err, false
	}
	if role != Leader {
		p.mu.Unlock()
		return res, kerr.NotLeaderForPartition, false
	}
	diverging := false
	if follower {
		if _, ok := p.remotes[req.ReplicaID]; !ok {
			p.mu.Unlock()
			return res, kerr.NotLeaderForPartition, false
		}
		// A diverging follower's fetch offset is not a position in this
		// log: as in Kafka's Partition.fetchRecords it neither counts as a
		// fetch nor moves the HW, so a follower stuck diverging leaves the
		// ISR and shows as stalled.
		if req.LastFetchedEpoch >= 0 && p.sw.Truncation == TruncateDiverging {
			e, end := p.log.Epochs().EndOffsetForEpoch(req.LastFetchedEpoch, p.log.LogEndOffset())
			if e != req.LastFetchedEpoch || end < req.Offset {
				diverging = true
				res.DivergingEpoch, res.DivergingEndOffset = e, end
			}
		}
		if !diverging {
			moved := p.updateFollowerLocked(req.ReplicaID, req.Offset)
			if r := p.remotes[req.ReplicaID]; r.logStart != req.LogStartOffset {
				r.logStart = req.LogStartOffset // may complete a DeleteRecords
				moved = true
			}
			if moved {
				p.notifyLocked()
			}
			expand = !slices.Contains(p.isr, req.ReplicaID)
		}
	}
	hw := p.hw
	p.mu.Unlock()

	res.HighWatermark, res.LastStableOffset = hw, p.log.LastStableOffset(hw)
	res.LogStartOffset, res.LogEndOffset = p.log.LogStartOffset(), p.log.LogEndOffset()
	if diverging {
		res.Records = []byte{}
		return res, nil, false
	}
	limit := hw
	committed := !follower && req.Isolation == 1
	switch {
	case follower:
		limit = res.LogEndOffset
	case committed:
		limit = res.LastStableOffset
		res.AbortedTxns = []klog.AbortedTxn{}
	}
	if req.Offset > res.LogEndOffset || req.Offset < res.LogStartOffset {
		return res, kerr.OffsetOutOfRange, false
	}
	res.Records = []byte{}
	if req.Offset >= limit {
		return res, nil, expand
	}
	rr, err := p.log.ReadWith(req.Alloc, req.Offset, req.MaxBytes, limit, req.MinOneBatch)
	if err != nil {
		return res, kafkaError(err), expand
	}
	if rr.Records != nil {
		res.Records = rr.Records
	}
	if committed && len(res.Records) > 0 {
		res.AbortedTxns = p.log.AbortedTxns(req.Offset, endOffset(res.Records))
	}
	return res, nil, expand
}

// endOffset is the offset after the last whole batch in records.
func endOffset(records []byte) int64 {
	end := int64(-1)
	for pos := 0; pos < len(records); {
		b, err := klog.ParseBatchHeader(records[pos:])
		if err != nil || b.Size <= 0 {
			break
		}
		end = b.NextOffset()
		pos += b.Size
	}
	return end
}

// updateFollowerLocked records a follower fetch at fetchOffset (§1.1) and
// recomputes the HW; it reports whether the HW moved.
func (p *Partition) updateFollowerLocked(id int32, fetchOffset int64) bool {
	r := p.remotes[id]
	now := p.nowMs()
	leaderLEO := p.log.LogEndOffset()
	if fetchOffset >= leaderLEO {
		r.lastCaughtUpTimeMs = max(r.lastCaughtUpTimeMs, now)
	} else if fetchOffset >= r.lastFetchLeaderLEO {
		r.lastCaughtUpTimeMs = max(r.lastCaughtUpTimeMs, r.lastFetchTimeMs)
	}
	r.lastFetchLeaderLEO, r.lastFetchTimeMs = leaderLEO, now
	r.leo = fetchOffset
	return p.maybeIncrementHWLocked(now)
}

// ErrStaleState: an ISR change was skipped because the cached partition
// state version no longer matches the coordinator's (Kafka's "Cached
// zkVersion ... not equal ... skip updating ISR").
var ErrStaleState = kerr.InvalidUpdateVersion

// TimestampOffset is the answer to a ListOffsets lookup by time.
type TimestampOffset struct{ Offset, Timestamp int64 }

// OffsetForTimestamp finds the first offset whose batch has a timestamp at
// or after ts, below the HW (below the LSO when committed, for
// read_committed), and the leader epoch of that offset.
func (p *Partition) OffsetForTimestamp(ts int64, committed bool) (TimestampOffset, bool, int32) {
	p.rlock()
	defer p.lock.RUnlock()
	hw := p.HighWatermark()
	if committed {
		hw = p.log.LastStableOffset(hw)
	}
	off, t, ok := p.log.OffsetForTimestamp(ts)
	if !ok || off >= hw {
		return TimestampOffset{}, false, -1
	}
	epoch := int32(-1)
	for _, e := range p.log.Epochs().Entries() {
		if e.StartOffset <= off {
			epoch = e.Epoch
		}
	}
	return TimestampOffset{Offset: off, Timestamp: t}, true, epoch
}

// MaxTimestampOffset answers ListOffsets MAX_TIMESTAMP (-3, KIP-734): the
// first record with the log's largest timestamp, if it is below the HW,
// and its leader epoch. (Kafka 3.7 answers with the last offset of that
// record's produce request, KAFKA-16310; this is the record itself.)
func (p *Partition) MaxTimestampOffset(committed bool) (TimestampOffset, bool, int32) {
	ts := p.log.MaxTimestamp()
	if ts < 0 {
		return TimestampOffset{}, false, -1
	}
	return p.OffsetForTimestamp(ts, committed)
}

// LegacyOffsets answers ListOffsets v0 (Kafka's
// Partition.legacyFetchOffsetsForTimestamp): segment offsets before ts,
// newest first; a consumer's list starts at the HW instead of anything
// past it. leaderOnly refuses a replica that does not lead.
func (p *Partition) LegacyOffsets(ts int64, maxNum int, fromConsumer, leaderOnly bool) ([]int64, error) {
	p.lock.RLock()
	defer p.lock.RUnlock()
	s := p.State()
	if leaderOnly && s.Role != Leader {
		return nil, kerr.NotLeaderForPartition
	}
	all := p.log.LegacyOffsetsBefore(ts, maxNum)
	if !fromConsumer {
		return all, nil
	}
	hw := p.HighWatermark()
	i := 0
	for i < len(all) && all[i] > hw {
		i++
	}
	if i == 0 {
		return all, nil
	}
	return append([]int64{hw}, all[i:]...), nil
}

// ListOffsetsState returns what ListOffsets needs under the read lock
// (Kafka's fetchOffsetForTimestamp holds it): a LATEST query before the HW
// reaches the leader's epoch start gets OFFSET_NOT_AVAILABLE (KIP-207).
func (p *Partition) ListOffsetsState(currentLeaderEpoch int32) (State, error) {
	p.rlock()
	defer p.lock.RUnlock()
	s := p.State()
	if err := checkEpoch(currentLeaderEpoch, s.LeaderEpoch); err != nil {
		return s, err
	}
	if s.Role != Leader {
		return s, kerr.NotLeaderForPartition
	}
	return s, nil
}
