package txn

import (
	"fmt"
	"math"
)

// State is a transaction's state, with the ids Kafka's TransactionLog
// stores.
type State int8

// The states of Kafka's TransactionState.
const (
	Empty State = iota
	Ongoing
	PrepareCommit
	PrepareAbort
	CompleteCommit
	CompleteAbort
	Dead
	PrepareEpochFence
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// String is Kafka's state name (DescribeTransactions, ListTransactions).
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// stateNamed parses a state name; false when there is none.
func stateNamed(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// validPrevious is Kafka's TransactionState.validPreviousStates.
var validPrevious = map[State][]State{
	Empty:             {Empty, CompleteCommit, CompleteAbort},
	Ongoing:           {Ongoing, Empty, CompleteCommit, CompleteAbort},
	PrepareCommit:     {Ongoing},
	PrepareAbort:      {Ongoing, PrepareEpochFence},
	CompleteCommit:    {PrepareCommit},
	CompleteAbort:     {PrepareAbort},
	Dead:              {Empty, CompleteCommit, CompleteAbort},
	PrepareEpochFence: {Ongoing},
}

func validTransition(from, to State) bool {
	for _, s := range validPrevious[to] {
		if s == from {
			return true
		}
	}
	return false
}

// TopicPartition names a partition in a transaction.
type TopicPartition struct {
	Topic     string
	Partition int32
}

const (
	noProducerID    = -1
	noProducerEpoch = -1
)

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted: the
// last epoch is kept for fencing, so Short.MaxValue-1 is the last one
// handed out.
func epochExhausted(epoch int16) bool { return epoch >= math.MaxInt16-1 }

// txnMeta is the coordinator's metadata of one transactional id
// (Kafka's TransactionMetadata).
type txnMeta struct {
	id        string
	partition int32 // of __transaction_state

	producerID, lastProducerID int64
	epoch, lastEpoch           int16
	timeoutMs                  int32
	state                      State
	partitions                 map[TopicPartition]bool
	startMs, updateMs          int64

	// pending is the transition being written; nil when none is.
	pending *transit
	// failedFence: a fencing epoch bump was not written, so the next
	// fence does not bump again (the bumped epoch was never returned).
	failedFence bool
	// markers is the marker run of a PrepareCommit or PrepareAbort.
	markers *markerRun
}

// transit is a transition being written (Kafka's TxnTransitMetadata).
type transit struct {
	state                      State
	producerID, lastProducerID int64
	epoch, lastEpoch           int16
	timeoutMs                  int32
	partitions                 map[TopicPartition]bool
	startMs, updateMs          int64
}

func (t *txnMeta) record() record {
	return record{producerID: t.producerID, lastProducerID: t.lastProducerID, epoch: t.epoch, timeoutMs: t.timeoutMs, state: t.state, partitions: t.partitions, startMs: t.startMs, updateMs: t.updateMs}
}

func (x *transit) record() record {
	return record{producerID: x.producerID, lastProducerID: x.lastProducerID, epoch: x.epoch, timeoutMs: x.timeoutMs, state: x.state, partitions: x.partitions, startMs: x.startMs, updateMs: x.updateMs}
}

// prepare starts the transition to state (Kafka's prepareTransitionTo);
// on InitProducerId (to Empty) the current producer id becomes the last.
func (t *txnMeta) prepare(state State, producerID int64, epoch, lastEpoch int16, timeoutMs int32, parts map[TopicPartition]bool, startMs, nowMs int64) (*transit, error) {
	if t.pending != nil {
		return nil, fmt.Errorf("transactional id %s: transition to %s while %s is pending", t.id, state, t.pending.state)
	}
	if !validTransition(t.state, state) {
		return nil, fmt.Errorf("transactional id %s: invalid transition %s -> %s", t.id, t.state, state)
	}
	last := t.lastProducerID
	if state == Empty {
		last = t.producerID
	}
	x := &transit{state: state, producerID: producerID, lastProducerID: last, epoch: epoch, lastEpoch: lastEpoch, timeoutMs: timeoutMs, partitions: parts, startMs: startMs, updateMs: nowMs}
	t.pending = x
	return x, nil
}

// complete applies the written transition x (Kafka's
// completeTransitionTo): only InitProducerId (to Empty) changes the
// producer ids.
func (t *txnMeta) complete(x *transit) {
	t.state = x.state
	if x.state == Empty {
		t.producerID, t.lastProducerID = x.producerID, x.lastProducerID
	}
	t.epoch, t.lastEpoch = x.epoch, x.lastEpoch
	t.timeoutMs = x.timeoutMs
	t.partitions = x.partitions
	t.startMs, t.updateMs = x.startMs, x.updateMs
	t.pending = nil
}

func copyParts(m map[TopicPartition]bool) map[TopicPartition]bool {
	out := make(map[TopicPartition]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
