package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// The producer and transaction state of a partition lives in its log
// (klog.ProducerState), which every append, truncation and recovery keeps
// up to date; this file holds the leader's checks against it.

// AppendOptions are the leader append's parameters besides the data.
type AppendOptions struct {
	RequiredAcks int16
	// TxnGuard is the transaction coordinator's confirmation, taken by
	// TxnVerificationNeeded before asking it, that the producer's
	// transaction includes this partition (KIP-890). With the
	// txn-verification switch on, a transactional batch that opens a new
	// transaction here needs it.
	TxnGuard *klog.TxnGuard
	// Coordinator marks a coordinator's own append (Kafka's
	// AppendOrigin.COORDINATOR: the group coordinator writing a
	// TxnOffsetCommit to __consumer_offsets on behalf of a producer whose
	// transaction it checked itself). Only the producer epoch is checked:
	// every such batch starts at sequence 0, so neither duplicate
	// detection nor sequence checks apply, and there is nothing to verify.
	Coordinator bool
}

// TxnVerificationNeeded reports whether a produce payload opens a new
// transaction for its producer on this partition while the
// txn-verification switch is on: the leader must then ask the transaction
// coordinator (AddPartitionsToTxn v4, verifyOnly) before appending it with
// the returned guard. It looks at the first batch's header only.
func (p *Partition) TxnVerificationNeeded(data []byte) (klog.TxnGuard, bool) {
	if !p.sw.TxnVerification {
		return klog.TxnGuard{}, false
	}
	b, err := klog.ParseBatchHeader(data)
	if err != nil || !b.Transactional() || b.Control() || b.ProducerID < 0 {
		return klog.TxnGuard{}, false
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.log.Producers().NeedsTxnStart(b.ProducerID, b.ProducerEpoch)
}

// checkProducerLocked applies the producer rules to a client's batch
// (appendMu held): control batches are the coordinator's; the epoch and
// sequence checks of klog.ProducerState.CheckData; and a verified start
// for a new transaction when the switch is on. A coordinator's append
// gets the epoch check only.
func (p *Partition) checkProducerLocked(batches []klog.BatchInfo, o AppendOptions) (*klog.ProducerBatch, error) {
	for _, b := range batches {
		if b.Control() {
			return nil, kerr.InvalidRecord
		}
	}
	first := batches[0]
	if first.ProducerID < 0 {
		return nil, nil
	}
	ps := p.log.Producers()
	if o.Coordinator {
		for _, b := range batches {
			if e, ok := ps.Entry(b.ProducerID); ok && b.ProducerEpoch < e.Epoch {
				return nil, kerr.InvalidProducerEpoch
			}
		}
		return nil, nil
	}
	if len(batches) == 1 {
		dup, err := ps.CheckData(first)
		if err != nil || dup != nil {
			return dup, err
		}
	}
	if guard := o.TxnGuard; p.sw.TxnVerification && first.Transactional() {
		if _, starts := ps.NeedsTxnStart(first.ProducerID, first.ProducerEpoch); starts &&
			(guard == nil || guard.ProducerID != first.ProducerID || !ps.GuardValid(*guard)) {
			return nil, kerr.InvalidTxnState
		}
	}
	return nil, nil
}

// AppendMarker writes a transaction marker for producerID as the leader
// (WriteTxnMarkers): checked against the producer's epoch and the
// coordinator epoch of its last marker, refused below min.insync.replicas
// as an acks=-1 append is. The caller waits with AcksAllStatus for the
// marker to be committed.
func (p *Partition) AppendMarker(producerID int64, producerEpoch int16, m klog.Marker) (AppendResult, error) {
	p.rlock()
	defer p.lock.RUnlock()
	p.mu.Lock()
	role, epoch, isrLen, minISR := p.role, p.leaderEpoch, len(p.isr), p.minISRLocked()
	p.mu.Unlock()
	if role != Leader {
		return AppendResult{}, kerr.NotLeaderForPartition
	}
	if isrLen < minISR {
		return AppendResult{}, kerr.NotEnoughReplicas
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.log.Producers().CheckMarker(producerID, producerEpoch, m.CoordinatorEpoch); err != nil {
		return AppendResult{}, err
	}
	res, err := p.log.AppendAsLeader(klog.ControlBatch(producerID, producerEpoch, m, p.nowMs()), epoch)
	if err != nil {
		return AppendResult{}, kafkaError(err)
	}
	return p.appended(res, 1), nil
}

// LastStableOffset is the partition's LSO: the first offset of its
// earliest undecided transaction, at most the HW.
func (p *Partition) LastStableOffset() int64 {
	return p.log.LastStableOffset(p.HighWatermark())
}

// OngoingTxns returns the open transactions' first offsets by producer id.
func (p *Partition) OngoingTxns() map[int64]int64 { return p.log.Producers().OngoingTxns() }
