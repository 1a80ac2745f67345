package log

import (
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ProducerBatchesKept is how many recent batches per producer are kept for
// duplicate detection; Kafka keeps five (max.in.flight for idempotence).
const ProducerBatchesKept = 5

// ProducerBatch is one recent batch of a producer.
type ProducerBatch struct {
	FirstSeq, LastSeq       int32
	FirstOffset, LastOffset int64
	MaxTimestamp            int64
}

// ProducerEntry is what a partition knows of one producer id (Kafka's
// ProducerStateEntry): its epoch, its recent batches, the first offset of
// its ongoing transaction and the coordinator epoch of its last marker.
type ProducerEntry struct {
	ID    int64
	Epoch int16
	// Batches are the recent batches, oldest first (at most
	// ProducerBatchesKept).
	Batches []ProducerBatch
	// TxnFirstOffset is the first offset of the ongoing transaction, -1
	// when there is none.
	TxnFirstOffset int64
	// CoordinatorEpoch is that of the last transaction marker, -1 before
	// any.
	CoordinatorEpoch int32
	LastTimestamp    int64
	// markers counts the markers applied since the log was opened: a
	// verified transaction start is valid only if none came in between.
	markers uint64
}

// CompletedTxn is a transaction whose marker is in the log.
type CompletedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64 // the marker's offset
	Aborted     bool
}

// ProducerState is the producer and transaction state of one partition
// (Kafka's ProducerStateManager), kept by the Log: every append (leader,
// follower) and recovery updates it, truncation reloads it from the latest
// snapshot at or below the cut, and Open loads it from the latest snapshot
// plus the batches after it.
type ProducerState struct {
	mu        sync.Mutex
	producers map[int64]*ProducerEntry
	ongoing   map[int64]int64 // producer id -> first offset of its open transaction
	// unreplicated are completed transactions whose marker may still be at
	// or above the high watermark: their first offset bounds the last
	// stable offset until the high watermark passes the marker.
	unreplicated []CompletedTxn
	mapEnd       int64  // offset after the last batch applied
	gen          uint64 // bumped when the state is reloaded, to void guards
}

func newProducerState(mapEnd int64) *ProducerState {
	return &ProducerState{producers: map[int64]*ProducerEntry{}, ongoing: map[int64]int64{}, mapEnd: mapEnd}
}

// reset replaces the state with s's (s is discarded).
func (ps *ProducerState) reset(s *ProducerState) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.producers, ps.ongoing, ps.unreplicated, ps.mapEnd = s.producers, s.ongoing, s.unreplicated, s.mapEnd
	ps.gen++
}

// apply updates the state with a batch appended to the log; m is the
// marker of a control batch. It returns the transaction a marker
// completed, and for an abort the entry for the transaction index.
func (ps *ProducerState) apply(b BatchInfo, m *Marker) (*CompletedTxn, *AbortedTxn) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.mapEnd = b.NextOffset()
	if b.ProducerID < 0 {
		return nil, nil
	}
	e, ok := ps.producers[b.ProducerID]
	if !ok {
		e = &ProducerEntry{ID: b.ProducerID, Epoch: b.ProducerEpoch, TxnFirstOffset: -1, CoordinatorEpoch: -1, LastTimestamp: -1}
		ps.producers[b.ProducerID] = e
	}
	if b.ProducerEpoch != e.Epoch {
		// A new epoch starts the sequences over (the ongoing transaction,
		// if any, stays until its marker).
		e.Epoch = b.ProducerEpoch
		e.Batches = nil
	}
	e.LastTimestamp = b.MaxTimestamp
	if b.Control() {
		if m == nil {
			return nil, nil
		}
		c := &CompletedTxn{ProducerID: b.ProducerID, FirstOffset: b.BaseOffset, LastOffset: b.BaseOffset, Aborted: !m.Commit}
		if e.TxnFirstOffset >= 0 {
			c.FirstOffset = e.TxnFirstOffset
		}
		e.TxnFirstOffset = -1
		e.CoordinatorEpoch = m.CoordinatorEpoch
		e.markers++
		delete(ps.ongoing, b.ProducerID)
		ps.unreplicated = append(ps.unreplicated, *c)
		if !c.Aborted {
			return c, nil
		}
		lso := c.LastOffset + 1
		for _, first := range ps.ongoing {
			lso = min(lso, first)
		}
		return c, &AbortedTxn{ProducerID: c.ProducerID, FirstOffset: c.FirstOffset, LastOffset: c.LastOffset, LastStableOffset: lso}
	}
	if b.BaseSequence >= 0 {
		last := b.BaseSequence + int32(b.LastOffset-b.BaseOffset)
		e.Batches = append(e.Batches, ProducerBatch{FirstSeq: b.BaseSequence, LastSeq: last, FirstOffset: b.BaseOffset, LastOffset: b.LastOffset, MaxTimestamp: b.MaxTimestamp})
		if len(e.Batches) > ProducerBatchesKept {
			e.Batches = append(e.Batches[:0], e.Batches[len(e.Batches)-ProducerBatchesKept:]...)
		}
	}
	if b.Transactional() && e.TxnFirstOffset < 0 {
		e.TxnFirstOffset = b.BaseOffset
		ps.ongoing[b.ProducerID] = b.BaseOffset
	}
	return nil, nil
}

// MapEndOffset is the offset after the last batch the state has seen.
func (ps *ProducerState) MapEndOffset() int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.mapEnd
}

// LastStableOffset is Kafka's LSO for high watermark hw: the first offset
// of the earliest transaction that is open, or whose marker is not yet
// below hw, but at most hw.
func (ps *ProducerState) LastStableOffset(hw int64) int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	kept := ps.unreplicated[:0]
	lso := hw
	for _, c := range ps.unreplicated {
		if c.LastOffset >= hw {
			kept = append(kept, c)
			lso = min(lso, c.FirstOffset)
		}
	}
	clear(ps.unreplicated[len(kept):])
	ps.unreplicated = kept
	for _, first := range ps.ongoing {
		lso = min(lso, first)
	}
	return lso
}

// Entry returns a copy of producer id's state.
func (ps *ProducerState) Entry(id int64) (ProducerEntry, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e, ok := ps.producers[id]
	if !ok {
		return ProducerEntry{}, false
	}
	return e.copy(), true
}

func (e *ProducerEntry) copy() ProducerEntry {
	c := *e
	c.Batches = slices.Clone(e.Batches)
	return c
}

// Entries returns a copy of every producer's state, by id.
func (ps *ProducerState) Entries() []ProducerEntry {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]ProducerEntry, 0, len(ps.producers))
	for _, e := range ps.producers {
		out = append(out, e.copy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// OngoingTxns returns the open transactions' first offsets by producer id.
func (ps *ProducerState) OngoingTxns() map[int64]int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return maps.Clone(ps.ongoing)
}

// nextSeq is the sequence after s; sequences wrap at MaxInt32.
func nextSeq(s int32) int32 {
	if s == 1<<31-1 {
		return 0
	}
	return s + 1
}

// CheckData decides whether a client's data batch b may be appended, as
// Kafka's ProducerAppendInfo does for a leader: an older producer epoch is
// INVALID_PRODUCER_EPOCH; a new epoch must start at sequence 0; a
// duplicate of a recent batch returns that batch (the caller answers with
// its offsets without appending); otherwise the sequence must follow the
// last one. An unknown producer is accepted at any sequence, as Kafka does
// when it holds no state for it.
func (ps *ProducerState) CheckData(b BatchInfo) (*ProducerBatch, error) {
	if b.ProducerID < 0 {
		return nil, nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e, ok := ps.producers[b.ProducerID]
	if !ok {
		return nil, nil
	}
	firstSeq := b.BaseSequence
	lastSeq := firstSeq + int32(b.LastOffset-b.BaseOffset)
	switch {
	case b.ProducerEpoch < e.Epoch:
		return nil, kerr.InvalidProducerEpoch
	case b.ProducerEpoch > e.Epoch:
		if firstSeq != 0 {
			return nil, kerr.OutOfOrderSequenceNumber
		}
		return nil, nil
	case firstSeq < 0:
		return nil, nil
	case len(e.Batches) == 0:
		// Known only from a marker, which may have bumped the epoch: the
		// epoch's first batch starts at sequence 0.
		if firstSeq != 0 {
			return nil, kerr.OutOfOrderSequenceNumber
		}
		return nil, nil
	}
	for i := range e.Batches {
		if e.Batches[i].FirstSeq == firstSeq && e.Batches[i].LastSeq == lastSeq {
			d := e.Batches[i]
			return &d, nil
		}
	}
	if n := len(e.Batches); n > 0 && firstSeq != nextSeq(e.Batches[n-1].LastSeq) {
		return nil, kerr.OutOfOrderSequenceNumber
	}
	return nil, nil
}

// CheckMarker decides whether the coordinator may write a marker for
// producer id at producerEpoch and coordinatorEpoch: an older producer
// epoch is INVALID_PRODUCER_EPOCH, a coordinator epoch below that of the
// producer's last marker TRANSACTION_COORDINATOR_FENCED.
func (ps *ProducerState) CheckMarker(id int64, producerEpoch int16, coordinatorEpoch int32) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e, ok := ps.producers[id]
	if !ok {
		return nil
	}
	if producerEpoch < e.Epoch {
		return kerr.InvalidProducerEpoch
	}
	if coordinatorEpoch < e.CoordinatorEpoch {
		return kerr.TransactionCoordinatorFenced
	}
	return nil
}

// TxnGuard is what a leader checks a transaction start against after
// verifying it with the transaction coordinator (KIP-890): the producer
// had seen this many markers, and had an open transaction of another
// epoch or none (open).
type TxnGuard struct {
	ProducerID int64
	markers    uint64
	gen        uint64
	open       bool
}

// NeedsTxnStart reports whether a transactional batch of producer id at
// epoch would open a new transaction here, and the guard to append it
// with once verified. A batch at another epoch than the open
// transaction's belongs to another transaction too (Kafka 4.0's
// hasOngoingTransaction(producerId, producerEpoch)): with an epoch bump
// per transaction (KIP-890 part 2) the next transaction's first write can
// reach a partition before the previous one's marker, and must not join
// it.
func (ps *ProducerState) NeedsTxnStart(id int64, epoch int16) (TxnGuard, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e, ok := ps.producers[id]
	if !ok {
		return TxnGuard{ProducerID: id, gen: ps.gen}, true
	}
	return TxnGuard{ProducerID: id, markers: e.markers, gen: ps.gen, open: e.TxnFirstOffset >= 0}, e.TxnFirstOffset < 0 || e.Epoch != epoch
}

// GuardValid reports whether g still describes producer g.ProducerID: no
// marker was written since it was taken, or, when a transaction of
// another epoch was open then, only the one that ended it. The
// coordinator confirms the new transaction only after every marker of
// the previous one is written, so that marker is expected; a second one
// would have ended the transaction the coordinator confirmed.
func (ps *ProducerState) GuardValid(g TxnGuard) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if g.gen != ps.gen {
		return false
	}
	e, ok := ps.producers[g.ProducerID]
	if !ok {
		return g.markers == 0
	}
	return e.markers == g.markers || (g.open && e.markers == g.markers+1 && e.TxnFirstOffset < 0)
}

// clone copies the state (for a snapshot).
func (ps *ProducerState) clone() *ProducerState {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	c := newProducerState(ps.mapEnd)
	for id, e := range ps.producers {
		ce := e.copy()
		c.producers[id] = &ce
	}
	maps.Copy(c.ongoing, ps.ongoing)
	c.unreplicated = slices.Clone(ps.unreplicated)
	return c
}
