package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"
)

// ActiveProducer is a producer's state on this replica, what
// DescribeProducers reports.
type ActiveProducer struct {
	ID            int64
	Epoch         int16
	LastSequence  int32 // -1 when no batch with a sequence is kept
	LastOffset    int64 // -1 likewise
	LastTimestamp int64 // max timestamp of its last batch or marker, -1 if none
	// CoordinatorEpoch is that of its last transaction marker, -1 before any.
	CoordinatorEpoch int32
	// CurrentTxnStartOffset is the first offset of its open transaction,
	// -1 when none is open.
	CurrentTxnStartOffset int64
}

// ActiveProducers lists the producers the leader tracks, by id. A replica
// that does not lead gets NOT_LEADER_OR_FOLLOWER, as in Kafka.
func (p *Partition) ActiveProducers() ([]ActiveProducer, error) {
	p.lock.RLock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	role := p.role
	p.mu.Unlock()
	if role != Leader {
		return nil, kerr.NotLeaderForPartition
	}
	entries := p.log.Producers().Entries()
	out := make([]ActiveProducer, 0, len(entries))
	for _, e := range entries {
		a := ActiveProducer{ID: e.ID, Epoch: e.Epoch, LastSequence: -1, LastOffset: -1, LastTimestamp: e.LastTimestamp,
			CoordinatorEpoch: e.CoordinatorEpoch, CurrentTxnStartOffset: e.TxnFirstOffset}
		if n := len(e.Batches); n > 0 {
			a.LastSequence, a.LastOffset = e.Batches[n-1].LastSeq, e.Batches[n-1].LastOffset
		}
		out = append(out, a)
	}
	return out, nil
}
