package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"
)

// DeleteRecords moves the leader's log start offset to offset (-1: the
// HW), as Kafka's Partition.deleteRecordsOnLeader does, and returns the
// offset it moved to. An offset above the HW, or a negative one other than
// -1, is OFFSET_OUT_OF_RANGE; a replica that does not lead answers
// NOT_LEADER_OR_FOLLOWER. Followers learn the new start from their next
// fetch response; the request completes when LowWatermark reaches the
// returned offset (Kafka's DelayedDeleteRecords).
func (p *Partition) DeleteRecords(offset int64) (int64, error) {
	p.rlock() // a leadership change waits for the write lock
	defer p.lock.RUnlock()
	p.mu.Lock()
	role, hw := p.role, p.hw
	p.mu.Unlock()
	if role != Leader {
		return -1, kerr.NotLeaderForPartition
	}
	if offset == -1 {
		offset = hw
	}
	if offset < 0 || offset > hw {
		return -1, kerr.OffsetOutOfRange
	}
	if err := p.log.IncrementLogStartOffset(offset); err != nil {
		return -1, kafkaError(err)
	}
	// Wakes long-polling follower fetches, so they learn the start sooner.
	p.mu.Lock()
	p.notifyLocked()
	p.mu.Unlock()
	return offset, nil
}

// LowWatermark is Kafka's Partition.lowWatermarkIfLeader: the smallest log
// start offset among the leader and every follower on a live broker, as
// each reported it in its last fetch (-1 for one that has not fetched
// since this replica became leader).
func (p *Partition) LowWatermark() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != Leader {
		return -1, kerr.NotLeaderForPartition
	}
	lw := p.log.LogStartOffset()
	for id, r := range p.remotes {
		if (p.live == nil || p.live(id)) && r.logStart < lw {
			lw = r.logStart
		}
	}
	return lw, nil
}

// DeleteRecordsStatus reports whether a DeleteRecords to requiredOffset is
// complete: the low watermark reached it (DelayedDeleteRecords.tryComplete).
// A lost leadership completes it with NOT_LEADER_OR_FOLLOWER.
func (p *Partition) DeleteRecordsStatus(requiredOffset int64) (done bool, lowWatermark int64, err error) {
	lw, err := p.LowWatermark()
	if err != nil {
		return true, -1, err
	}
	return lw >= requiredOffset, lw, nil
}
