package partition

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// ActiveProducer is an idempotent producer's last batch on this replica,
// what DescribeProducers reports.
type ActiveProducer struct {
	ID            int64
	Epoch         int16
	LastSequence  int32
	LastOffset    int64
	LastTimestamp int64 // max timestamp of the last batch, -1 if unread
}

// ActiveProducers lists the producers the leader tracks, by id. A replica
// that does not lead gets NOT_LEADER_OR_FOLLOWER, as in Kafka.
func (p *Partition) ActiveProducers() ([]ActiveProducer, error) {
	// The read lock keeps truncation out while batch headers are read.
	p.lock.RLock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	role := p.role
	p.mu.Unlock()
	if role != Leader {
		return nil, kerr.NotLeaderForPartition
	}
	p.appendMu.Lock()
	out := make([]ActiveProducer, 0, len(p.producers.m))
	for id, st := range p.producers.m {
		if len(st.batches) == 0 {
			continue
		}
		last := st.batches[len(st.batches)-1]
		out = append(out, ActiveProducer{ID: id, Epoch: st.epoch, LastSequence: last.lastSeq, LastOffset: last.lastOffset, LastTimestamp: -1})
	}
	p.appendMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	for i := range out {
		off := out[i].LastOffset
		p.log.Batches(off, func(b klog.BatchInfo) bool {
			if b.LastOffset >= off {
				out[i].LastTimestamp = b.MaxTimestamp
				return false
			}
			return true
		})
	}
	return out, nil
}
