package partition

import (
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// needsExpand decides whether follower id may join the ISR (§1.4): it has
// reached the HW and, from 2.0.1 (KAFKA-7128), the start of the leader's
// epoch.
func (p *Partition) needsExpandLocked(id int32) bool {
	if p.role != Leader || slices.Contains(p.isr, id) || (p.pending != nil && slices.Contains(p.pending.isr, id)) {
		return false
	}
	r, ok := p.remotes[id]
	if !ok || r.leo < 0 || r.leo < p.hw {
		return false
	}
	if p.sw.ExpandNeedsEpochStart && r.leo < p.epochStart {
		return false
	}
	return true
}

// maybeExpandISR adds a caught-up follower to the ISR, with the lock
// discipline of the configured isr.update mode (§7).
func (p *Partition) maybeExpandISR(id int32) {
	switch p.sw.ISRUpdate {
	case ISRSyncAlways:
		// <= 2.4: the write lock on every fetch from a non-ISR follower.
		p.wlock()
		defer p.lock.Unlock()
		p.mu.Lock()
		ok := p.needsExpandLocked(id)
		isr := append(slices.Clone(p.isr), id)
		p.mu.Unlock()
		if ok {
			p.writeISRLocked(isr, true)
		}
	case ISRSyncChecked:
		p.mu.Lock()
		ok := p.needsExpandLocked(id)
		p.mu.Unlock()
		if !ok {
			return
		}
		p.wlock()
		defer p.lock.Unlock()
		p.mu.Lock()
		ok = p.needsExpandLocked(id)
		isr := append(slices.Clone(p.isr), id)
		p.mu.Unlock()
		if ok {
			p.writeISRLocked(isr, true)
		}
	default:
		p.mu.Lock()
		if !p.needsExpandLocked(id) || p.pending != nil || p.alterBlockedLocked() {
			p.mu.Unlock()
			return
		}
		isr := append(slices.Clone(p.isr), id)
		p.pending = &pendingAlter{isr: isr, expand: true}
		epoch, version := p.leaderEpoch, p.version
		// The maximal ISR now includes the new member (§1.6b).
		p.maybeIncrementHWLocked(p.nowMs())
		p.notifyLocked()
		p.mu.Unlock()
		p.writer.AlterPartition(p, epoch, isr, version)
	}
}

// outOfSyncLocked lists ISR followers that are behind and have not caught
// up within replica.lag.time.max.ms (§1.2).
func (p *Partition) outOfSyncLocked(nowMs int64) []int32 {
	var out []int32
	leo := p.log.LogEndOffset()
	for _, id := range p.isr {
		if id == p.self {
			continue
		}
		r, ok := p.remotes[id]
		if !ok {
			continue
		}
		if r.leo != leo && nowMs-r.lastCaughtUpTimeMs > p.sw.ReplicaLagTimeMaxMs {
			out = append(out, id)
		}
	}
	return out
}

func without(isr, drop []int32) []int32 {
	out := make([]int32, 0, len(isr))
	for _, id := range isr {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// MaybeShrinkISR drops followers that fell out of sync. The broker calls it
// every replica.lag.time.max.ms / 2 for every partition it leads (§1.3),
// and it takes the partition lock the way the configured Kafka era did.
func (p *Partition) MaybeShrinkISR() {
	switch p.sw.ISRUpdate {
	case ISRSyncAlways:
		// <= 2.4: the write lock on every tick, changed or not.
		p.wlock()
		defer p.lock.Unlock()
		p.mu.Lock()
		if p.role != Leader {
			p.mu.Unlock()
			return
		}
		drop := p.outOfSyncLocked(p.nowMs())
		isr := without(p.isr, drop)
		p.mu.Unlock()
		if len(drop) > 0 {
			p.writeISRLocked(isr, false)
		}
	case ISRSyncChecked:
		p.rlock()
		p.mu.Lock()
		need := p.role == Leader && len(p.outOfSyncLocked(p.nowMs())) > 0
		p.mu.Unlock()
		p.lock.RUnlock()
		if !need {
			return
		}
		p.wlock()
		defer p.lock.Unlock()
		p.mu.Lock()
		drop := p.outOfSyncLocked(p.nowMs())
		isr := without(p.isr, drop)
		ok := p.role == Leader && len(drop) > 0
		p.mu.Unlock()
		if ok {
			p.writeISRLocked(isr, false)
		}
	default:
		p.mu.Lock()
		if p.role != Leader || p.pending != nil || p.alterBlockedLocked() {
			p.mu.Unlock()
			return
		}
		drop := p.outOfSyncLocked(p.nowMs())
		if len(drop) == 0 {
			p.mu.Unlock()
			return
		}
		isr := without(p.isr, drop)
		// A pending shrink leaves the maximal ISR as it was until the
		// controller commits it (§1.6b).
		p.pending = &pendingAlter{isr: isr}
		epoch, version := p.leaderEpoch, p.version
		p.mu.Unlock()
		p.writer.AlterPartition(p, epoch, isr, version)
	}
}

// writeISRLocked writes a new ISR to the coordinator while the caller holds
// the partition's write lock — the ZooKeeper-era behaviour behind the
// seed 004 incident: produce and fetch wait for the coordinator round trip
// (and for as long as the coordinator does not answer).
func (p *Partition) writeISRLocked(isr []int32, expand bool) {
	p.mu.Lock()
	st := LeaderAndISR{Leader: p.self, LeaderEpoch: p.leaderEpoch, ISR: isr, ControllerEpoch: p.controllerEpoch}
	version := p.version
	p.mu.Unlock()
	newVersion, err := p.writer.WriteISR(p.Topic, p.Index, st, version)
	if err != nil {
		if p.stats != nil && errors.Is(err, ErrVersionMismatch) {
			p.stats.FailedIsrUpdate()
		}
		return
	}
	p.mu.Lock()
	p.isr, p.version = isr, newVersion
	p.maybeIncrementHWLocked(p.nowMs())
	p.notifyLocked()
	p.mu.Unlock()
	p.countISRChange(expand)
	p.writer.NotifyISRChange(p.Topic, p.Index)
}

func (p *Partition) countISRChange(expand bool) {
	if p.stats == nil {
		return
	}
	if expand {
		p.stats.IsrExpand()
	} else {
		p.stats.IsrShrink()
	}
}

// CompleteAlterPartition applies the controller's answer to an
// AlterPartition (async mode). On success the committed ISR and partition
// epoch replace the cached ones. On error the proposal is dropped; after a
// retriable one (no answer, NOT_CONTROLLER, STALE_BROKER_EPOCH) the next
// fetch or shrink check proposes again, after a refusal (RetriableAlter is
// false) nothing is proposed until new metadata or a new partition state
// arrives, as in Kafka's Partition.handleAlterPartitionError.
func (p *Partition) CompleteAlterPartition(leaderEpoch int32, isr []int32, partitionEpoch int64, err error) {
	p.wlock()
	defer p.lock.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	pending := p.pending
	p.pending = nil
	if err != nil || pending == nil || p.role != Leader || leaderEpoch != p.leaderEpoch {
		if p.stats != nil && err != nil {
			p.stats.FailedIsrUpdate()
		}
		if err != nil && !RetriableAlter(err) && p.role == Leader && leaderEpoch == p.leaderEpoch {
			p.alterWait = p.awaitMetadata()
		}
		p.notifyLocked()
		return
	}
	p.isr, p.version = slices.Clone(isr), partitionEpoch
	p.maybeIncrementHWLocked(p.nowMs())
	p.notifyLocked()
	if p.stats != nil {
		if pending.expand {
			p.stats.IsrExpand()
		} else {
			p.stats.IsrShrink()
		}
	}
}

// StalledFollowers lists, for a partition this replica leads, the followers
// whose broker is live (registered and not shutting down, as the controller
// last said) but that have not fetched for longer than
// replica.lag.time.max.ms: a fetch answered with a diverging epoch does not
// count. A follower in that state is not lagging because of the load or a
// fault the lab injected; its fetcher has stopped, and the run should say so.
func (p *Partition) StalledFollowers() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != Leader {
		return nil
	}
	now := p.nowMs()
	var out []int32
	for _, id := range p.replicas {
		r, ok := p.remotes[id]
		if id == p.self || !ok || (p.live != nil && !p.live(id)) {
			continue
		}
		if now-max(r.lastFetchTimeMs, r.sinceMs) > p.sw.ReplicaLagTimeMaxMs {
			out = append(out, id)
		}
	}
	return out
}

// RetriableAlter reports whether an AlterPartition error is worth proposing
// again at once. The controller's refusals are not: INELIGIBLE_REPLICA and
// OPERATION_NOT_ATTEMPTED (KIP-841: the replica is fenced, shutting down or
// of another broker epoch) until new metadata says otherwise, and
// FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION,
// UNKNOWN_TOPIC_ID, INVALID_REQUEST, NEW_LEADER_ELECTED and
// NOT_LEADER_OR_FOLLOWER until a new partition state arrives. Anything
// else (no answer, NOT_CONTROLLER, STALE_BROKER_EPOCH) is retried.
func RetriableAlter(err error) bool {
	for _, refused := range []error{kerr.IneligibleReplica, kerr.OperationNotAttempted, kerr.FencedLeaderEpoch,
		kerr.InvalidUpdateVersion, kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.InvalidRequest,
		kerr.NewLeaderElected, kerr.NotLeaderForPartition} {
		if errors.Is(err, refused) {
			return false
		}
	}
	return true
}

// awaitMetadata is the channel an ISR proposal refused by the controller
// waits on: the broker's next metadata change, or (without one) a channel
// only a new partition state replaces.
func (p *Partition) awaitMetadata() <-chan struct{} {
	if p.meta != nil {
		if ch := p.meta(); ch != nil {
			return ch
		}
	}
	return make(chan struct{})
}

// alterBlockedLocked reports whether ISR proposals wait for new metadata
// after a refusal, ending the wait once it has come.
func (p *Partition) alterBlockedLocked() bool {
	if p.alterWait == nil {
		return false
	}
	select {
	case <-p.alterWait:
		p.alterWait = nil
		return false
	default:
		return true
	}
}

// AwaitingMetadata reports whether the leader holds its ISR proposals until
// new metadata after the controller refused one.
func (p *Partition) AwaitingMetadata() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alterBlockedLocked()
}
