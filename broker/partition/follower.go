package partition

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// MakeFollower applies a LeaderAndIsr that makes this replica a follower of
// st.Leader. It reports whether the leader or epoch changed, in which case
// the caller (re)starts fetching with truncation first. The HW is kept,
// clamped to the log.
func (p *Partition) MakeFollower(st LeaderAndISR, replicas []int32, version int64, checkpointHW int64) bool {
	p.wlock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.role != Follower || p.leader != st.Leader || p.leaderEpoch != st.LeaderEpoch
	if p.role == None {
		p.hw = clamp(max(p.hw, checkpointHW), p.log.LogStartOffset(), p.log.LogEndOffset())
	}
	p.role, p.leader, p.leaderEpoch, p.controllerEpoch = Follower, st.Leader, st.LeaderEpoch, st.ControllerEpoch
	p.version = version
	p.replicas, p.isr = slices.Clone(replicas), slices.Clone(st.ISR)
	p.pending, p.alterWait = nil, nil
	p.remotes = map[int32]*remote{}
	p.notifyLocked()
	return changed
}

// Stop ends this replica's role (StopReplica); the caller deletes the log
// if asked to.
func (p *Partition) Stop() {
	p.wlock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.role, p.leader = None, -1
	p.pending, p.alterWait = nil, nil
	p.notifyLocked()
}

// Leader returns the current leader id and epoch as last told.
func (p *Partition) Leader() (int32, int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader, p.leaderEpoch
}

// Role returns this replica's role.
func (p *Partition) Role() Role {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.role
}

// AppendAsFollower appends batches fetched from the leader at their own
// offsets and epochs, then takes the leader's HW, clamped to the local log
// (§2.3). leaderEpoch fences a fetch that raced a leadership change.
func (p *Partition) AppendAsFollower(records []byte, leaderHW, leaderLogStart int64, leaderEpoch int32) error {
	p.rlock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	ok := p.role == Follower && p.leaderEpoch == leaderEpoch
	p.mu.Unlock()
	if !ok {
		return kerr.FencedLeaderEpoch
	}
	if len(records) > 0 {
		p.appendMu.Lock()
		// The log applies the batches to its producer state, control
		// batches included, so a new leader knows the open transactions.
		_, err := p.log.AppendAsFollower(records)
		p.appendMu.Unlock()
		if err != nil {
			return err
		}
	}
	if leaderLogStart > p.log.LogStartOffset() && leaderLogStart <= p.log.LogEndOffset() {
		if err := p.log.IncrementLogStartOffset(leaderLogStart); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.hw = clamp(leaderHW, p.log.LogStartOffset(), p.log.LogEndOffset())
	p.notifyLocked()
	p.mu.Unlock()
	return nil
}

// TruncateTo drops the log from offset on (follower truncation); the HW
// follows it down. It holds the write lock so no read sees the range
// while it is cut. At or past the LEO the log stays, but epochs starting at
// the LEO go, as in Kafka's UnifiedLog.truncateTo: a replica that led an
// epoch in which nothing was appended keeps that epoch's entry at its LEO,
// and a follower naming it as its last fetched epoch is told it diverges
// at its own LEO on every fetch, never appending again.
func (p *Partition) TruncateTo(offset int64) error {
	p.wlock()
	defer p.lock.Unlock()
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if leo := p.log.LogEndOffset(); offset >= leo {
		if p.Role() == Leader {
			return nil // a stale fetcher's no-op must not drop the leader's own epoch
		}
		return p.log.Epochs().TruncateFromEnd(leo)
	}
	if err := p.log.TruncateTo(offset); err != nil {
		return err
	}
	p.mu.Lock()
	p.hw = min(p.hw, p.log.LogEndOffset())
	p.notifyLocked()
	p.mu.Unlock()
	return nil
}

// TruncateFullyAndStartAt empties the log and restarts it at offset (a
// follower whose fetch offset fell below the leader's log start).
func (p *Partition) TruncateFullyAndStartAt(offset int64) error {
	p.wlock()
	defer p.lock.Unlock()
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.log.TruncateFullyAndStartAt(offset); err != nil {
		return err
	}
	p.mu.Lock()
	p.hw = offset
	p.notifyLocked()
	p.mu.Unlock()
	return nil
}

// LatestEpoch returns the latest leader epoch in the local epoch cache (-1
// when empty).
func (p *Partition) LatestEpoch() int32 {
	es := p.log.Epochs().Entries()
	if len(es) == 0 {
		return -1
	}
	return es[len(es)-1].Epoch
}

// LocalEndOffsetForEpoch answers an epoch query against the local log.
func (p *Partition) LocalEndOffsetForEpoch(epoch int32) (int32, int64) {
	return p.log.Epochs().EndOffsetForEpoch(epoch, p.log.LogEndOffset())
}

// PreviousEpoch returns the largest local epoch below e (-1 if none).
func (p *Partition) PreviousEpoch(e int32) int32 {
	prev := int32(-1)
	for _, en := range p.log.Epochs().Entries() {
		if en.Epoch < e {
			prev = en.Epoch
		}
	}
	return prev
}

// TruncationPoint decides how far a follower truncates after the leader
// answered OffsetsForLeaderEpoch(requested) with (leaderEpoch, leaderEnd)
// (§5.3, KIP-279). done=false means the follower must ask again about
// nextEpoch, the largest local epoch below leaderEpoch.
func (p *Partition) TruncationPoint(requested, leaderEpoch int32, leaderEnd int64) (offset int64, done bool, nextEpoch int32) {
	leo := p.log.LogEndOffset()
	if leaderEpoch == klog.UndefinedEpoch || leaderEnd == klog.UndefinedEpochOffset {
		return min(p.HighWatermark(), leo), true, -1
	}
	if e, localEnd := p.LocalEndOffsetForEpoch(leaderEpoch); e == leaderEpoch {
		return min(leaderEnd, localEnd, leo), true, -1
	}
	prev := p.PreviousEpoch(leaderEpoch)
	if prev < 0 {
		return min(leaderEnd, leo), true, -1
	}
	return 0, false, prev
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch on the leader (§5.2),
// fenced by the requester's current leader epoch.
func (p *Partition) EndOffsetForEpoch(epoch, currentLeaderEpoch int32, fromFollower bool) (int32, int64, error) {
	p.rlock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	role, cur := p.role, p.leaderEpoch
	p.mu.Unlock()
	if err := checkEpoch(currentLeaderEpoch, cur); err != nil {
		return -1, -1, err
	}
	if role != Leader && fromFollower {
		return -1, -1, kerr.NotLeaderForPartition
	}
	e, off := p.log.Epochs().EndOffsetForEpoch(epoch, p.log.LogEndOffset())
	return e, off, nil
}
