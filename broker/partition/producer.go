package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// producerBatchesKept is how many recent batches per producer are kept for
// duplicate detection; Kafka keeps five (max.in.flight for idempotence).
const producerBatchesKept = 5

type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

type producerState struct {
	epoch   int16
	batches []producerBatch // oldest first
}

// Producers tracks idempotent producers' sequence numbers for one
// partition, as Kafka's ProducerStateManager does for a leader.
type Producers struct {
	m map[int64]*producerState
}

// NewProducers returns an empty table.
func NewProducers() *Producers { return &Producers{m: map[int64]*producerState{}} }

// Check decides whether a batch from producer id/epoch with sequence range
// [firstSeq, lastSeq] may be appended. A duplicate of a recent batch returns
// its original offsets and dup=true (the broker answers success without
// appending again). An unknown producer is accepted at any sequence, as
// Kafka does when it holds no state for it.
func (p *Producers) Check(id int64, epoch int16, firstSeq, lastSeq int32) (dupFirst, dupLast int64, dup bool, err error) {
	if id < 0 {
		return 0, 0, false, nil
	}
	st, ok := p.m[id]
	if !ok {
		return 0, 0, false, nil
	}
	switch {
	case epoch < st.epoch:
		return 0, 0, false, kerr.InvalidProducerEpoch
	case epoch > st.epoch:
		if firstSeq != 0 {
			return 0, 0, false, kerr.OutOfOrderSequenceNumber
		}
		return 0, 0, false, nil
	}
	for _, b := range st.batches {
		if b.firstSeq == firstSeq && b.lastSeq == lastSeq {
			return b.firstOffset, b.lastOffset, true, nil
		}
	}
	if len(st.batches) > 0 {
		last := st.batches[len(st.batches)-1].lastSeq
		if firstSeq != nextSeq(last) {
			return 0, 0, false, kerr.OutOfOrderSequenceNumber
		}
	}
	return 0, 0, false, nil
}

// Record notes an appended batch.
func (p *Producers) Record(id int64, epoch int16, firstSeq, lastSeq int32, firstOffset, lastOffset int64) {
	if id < 0 {
		return
	}
	st, ok := p.m[id]
	if !ok || epoch > st.epoch {
		st = &producerState{epoch: epoch}
		p.m[id] = st
	}
	st.batches = append(st.batches, producerBatch{firstSeq, lastSeq, firstOffset, lastOffset})
	if len(st.batches) > producerBatchesKept {
		st.batches = append(st.batches[:0], st.batches[len(st.batches)-producerBatchesKept:]...)
	}
}

// TruncateFrom forgets batches at or above offset (after log truncation).
func (p *Producers) TruncateFrom(offset int64) {
	for id, st := range p.m {
		kept := st.batches[:0]
		for _, b := range st.batches {
			if b.lastOffset < offset {
				kept = append(kept, b)
			}
		}
		st.batches = kept
		if len(kept) == 0 {
			delete(p.m, id)
		}
	}
}

// nextSeq is the sequence after s; sequences wrap at MaxInt32.
func nextSeq(s int32) int32 {
	if s == 1<<31-1 {
		return 0
	}
	return s + 1
}

// RecordBatch notes a batch appended by any path (leader, follower,
// recovery) so that whichever replica leads next detects retried
// duplicates, as Kafka's followers keep producer state too.
func (p *Producers) RecordBatch(b klog.BatchInfo) {
	if b.ProducerID < 0 || b.BaseSequence < 0 {
		return
	}
	last := b.BaseSequence + int32(b.LastOffset-b.BaseOffset)
	p.Record(b.ProducerID, b.ProducerEpoch, b.BaseSequence, last, b.BaseOffset, b.LastOffset)
}
