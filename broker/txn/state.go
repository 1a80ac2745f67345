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
	PrepareAbort:      {Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort}, // the last three: Kafka 4.0's empty abort
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
	// tv2 is Kafka's clientTransactionVersion >= 2 (KIP-890 part 2): the
	// last transition came from a client speaking transaction.version 2,
	// whose every EndTxn bumps the epoch. nextProducerID is the producer
	// id allocated when such a bump exhausted the epoch (-1 otherwise);
	// the Complete record switches to it at epoch 0.
	tv2            bool
	nextProducerID int64
}

// transit is a transition being written (Kafka's TxnTransitMetadata).
type transit struct {
	state                      State
	producerID, lastProducerID int64
	epoch, lastEpoch           int16
	timeoutMs                  int32
	partitions                 map[TopicPartition]bool
	startMs, updateMs          int64
	// tv2 and nextProducerID as in txnMeta; prepare leaves them false and
	// -1 (Kafka's transitions default to TV_0), the callers that speak
	// transaction.version 2 set them.
	tv2            bool
	nextProducerID int64
}

func (x *transit) record() record {
	return record{producerID: x.producerID, lastProducerID: x.lastProducerID, nextProducerID: x.nextProducerID, epoch: x.epoch, timeoutMs: x.timeoutMs, state: x.state, partitions: x.partitions, startMs: x.startMs, updateMs: x.updateMs, tv2: x.tv2}
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
	x := &transit{state: state, producerID: producerID, lastProducerID: last, epoch: epoch, lastEpoch: lastEpoch, timeoutMs: timeoutMs, partitions: parts, startMs: startMs, updateMs: nowMs, nextProducerID: noProducerID}
	t.pending = x
	return x, nil
}

// complete applies the written transition x (Kafka's
// completeTransitionTo): InitProducerId (to Empty) changes the producer
// ids, and so, under transaction.version 2, do PrepareX (the next id) and
// CompleteX (the switch to it after an exhausted epoch).
func (t *txnMeta) complete(x *transit) {
	t.state = x.state
	switch {
	case x.state == Empty:
		t.producerID, t.lastProducerID = x.producerID, x.lastProducerID
	case x.tv2 && (x.state == PrepareCommit || x.state == PrepareAbort):
		t.nextProducerID = x.nextProducerID
	case x.tv2 && (x.state == CompleteCommit || x.state == CompleteAbort):
		t.producerID, t.lastProducerID, t.nextProducerID = x.producerID, x.lastProducerID, x.nextProducerID
	}
	t.tv2 = x.tv2
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
