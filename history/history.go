// Package history is the operation record of an isrlab run and its JSONL
// codec: the contract between the lab, which writes it, and the checkers,
// which read it.
//
// # Format (version 1)
//
// A history file is UTF-8 JSON Lines. The first line is a header:
//
//	{"isrlab_history":1,"run":"r1","seed":7,"topic":"isrlab","partitions":3}
//
// Every following line is one Op, a flat JSON object. Client operations come
// in pairs: an invoke, then a completion (ok, fail or info) by the same
// process, the way Jepsen records them:
//
//	{"index":0,"time":1200,"process":3,"type":"invoke","f":"send","value":17,"partition":1}
//	{"index":1,"time":5400,"process":3,"type":"ok","f":"send","value":17,"partition":1,"offset":9,"node":"n2"}
//	{"index":2,"time":6000,"process":5,"type":"invoke","f":"poll"}
//	{"index":3,"time":9100,"process":5,"type":"ok","f":"poll","offsets":{"1":[[9,17],[10,18]]}}
//
// Fields: index (position in the history), time (nanoseconds since the run's
// monotonic start), process (an int for clients; "nemesis" for faults,
// "cluster" for observed cluster state), type (invoke|ok|fail|info), f (send,
// poll, assign, subscribe, rebalance, commit, crash, drain, start-<fault>,
// stop-<fault>, heal, state, ...), key (record key), value (for sends: the
// record value, a unique int64; for faults: the resolved targets, any JSON),
// partition, offset (the acknowledged offset of a send), offsets (a poll's
// records: partition -> list of [offset, value]), partitions (the partitions
// of assign or rebalance), error, node.
//
// Cluster-state events (process "cluster", type "info", f "state") carry
// partition, leader, epoch (leader epoch), isr and hw. Fault events (process
// "nemesis") come as an invoke and a completion: "start-<fault>" with value
// = the resolved targets, then "stop-<fault>" (or "heal" for all faults);
// a fault is in effect from its start's invocation to its stop's completion.
//
// A drain poll (f "drain") is a poll by a fresh process after the faults
// healed; "rebalance" (type info) records a consumer group member's new
// assignment in partitions; "crash" (type info) ends a process, which never
// comes back under its number.
//
// Delivery (the queue workload): group (a consumer group's id) names the
// group of a subscribe, processed or commit op. "processed" (type ok, no
// invoke) says the process finished its work on one polled record:
// partition, offset and value are the record's. A commit carries
// committed, the offsets it committed (partition -> the next offset to
// read); a commit the client made by itself (auto-commit) is one
// completion with no invoke:
//
//	{"index":7,"time":9300,"process":5,"type":"ok","f":"processed","group":"g","value":17,"partition":1,"offset":9}
//	{"index":8,"time":9400,"process":5,"type":"ok","f":"commit","group":"g","committed":{"1":10}}
//
// Transactional operations (f "txn") carry a list of micro-operations as
// their value; see txn.go's Transactions section for their form.
//
// Outcomes follow Jepsen: ok means the operation happened, fail means it
// definitely did not, info means it is unknown (a timeout, a disconnect).
// Readers ignore fields they do not know, and checkers ignore f values and
// processes they do not understand, so the format can grow without a new
// version. A change that alters the meaning of an existing field bumps
// Version.
package history

import (
	"encoding/json"
	"fmt"
)

// Version is the history format version written in the header.
const Version = 1

// Type is an operation's type: an invocation or one of the three outcomes.
type Type uint8

// Operation types. TypeNone is the zero value of a line that has no type.
const (
	TypeNone Type = iota
	Invoke
	OK
	Fail
	Info
)

var typeNames = [...]string{TypeNone: "", Invoke: "invoke", OK: "ok", Fail: "fail", Info: "info"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", t)
}

// ParseType returns the Type named s.
func ParseType(s string) (Type, bool) {
	for i, n := range typeNames {
		if i > 0 && n == s {
			return Type(i), true
		}
	}
	return TypeNone, false
}

// Special processes. Client processes are numbered from 0.
const (
	// Nemesis is the process of fault operations ("nemesis" in JSON).
	Nemesis = -1
	// Cluster is the process of observed cluster-state events ("cluster").
	Cluster = -2
)

// Operation names (f) that isrlab's workloads, nemesis and checkers use.
const (
	FSend      = "send"
	FPoll      = "poll"
	FAssign    = "assign"
	FSubscribe = "subscribe"
	FRebalance = "rebalance"
	FCrash     = "crash"
	FDrain     = "drain"
	// FDrained closes a complete drain of one partition: Offset is the end
	// offset the drain read up to, Value the partition's start offset.
	// A value acknowledged at or after the start that the drain did not
	// return is gone from the final log.
	FDrained = "drained"
	FCommit  = "commit"
	// FProcessed marks one polled record as processed (see the format).
	FProcessed = "processed"
	FState     = "state"
	FHeal      = "heal"
	// FCondition (process nemesis, type info) marks the moment a
	// schedule's condition held; the fault that waited for it follows.
	// Its value: {"fault": name, "when": the condition, "held": what was
	// seen}.
	FCondition = "condition"
	// FNotSetUp (process nemesis, type info) marks a condition that did
	// not hold in time: the run could not create the state it needed.
	FNotSetUp = "not-set-up"
)

// Record is one record returned by a poll.
type Record struct {
	Offset int64
	Value  int64
	// Raw is set when the record's value was not a decimal int64; Value is
	// then BadValue.
	Raw string
}

// BadValue is the Value of a record whose value could not be parsed as an
// int64 (it cannot be a value that isrlab's workloads sent).
const BadValue int64 = -1 << 63

// PartitionRecords is the part of a poll's result from one partition, in the
// order the consumer returned it.
type PartitionRecords struct {
	Partition int32
	Records   []Record
}

// PartitionOffset is an offset of one partition.
type PartitionOffset struct {
	Partition int32
	Offset    int64
}

// Op is one line of a history. Absent numeric fields are -1 (Partition,
// Offset, Leader, Epoch, HW); HasValue tells whether Value was present.
type Op struct {
	Index   int64
	Time    int64
	Process int
	Type    Type
	F       string
	Key     string

	Value    int64
	HasValue bool
	// RawValue holds a value that is not an integer (for example a fault's
	// targets), as JSON.
	RawValue json.RawMessage

	Partition int32
	Offset    int64
	// Reads are a poll's records, per partition.
	Reads []PartitionRecords
	// Partitions lists the partitions of an assign or rebalance.
	Partitions []int32

	Error string
	Node  string

	// Group is the consumer group of a subscribe, processed or commit op
	// ("group").
	Group string
	// Committed are a commit's offsets, each the next offset to read
	// ("committed": partition -> offset); nil when it does not say.
	Committed []PartitionOffset

	// Txn holds a transactional op's micro-ops (f "txn" or "txn-drain");
	// see the package's Transactions section. Its JSON is the "value".
	Txn []MicroOp
	// CommitAt is when a transaction's commit was requested, on the
	// history's clock ("commit_at"); 0 when none was.
	CommitAt int64

	// Cluster state.
	Leader int32
	Epoch  int32
	ISR    []int32
	HW     int64

	// Spare capacity kept across Reset, so that nil still means absent.
	spareReads []PartitionRecords
	spareParts []int32
	spareISR   []int32
	spareRaw   json.RawMessage
}

// Reset clears op for reuse, keeping the capacity of its slices.
func (op *Op) Reset() {
	reads, parts, isr, raw := op.Reads, op.Partitions, op.ISR, op.RawValue
	if reads == nil {
		reads = op.spareReads
	}
	if parts == nil {
		parts = op.spareParts
	}
	if isr == nil {
		isr = op.spareISR
	}
	if raw == nil {
		raw = op.spareRaw
	}
	*op = Op{Partition: -1, Offset: -1, Leader: -1, Epoch: -1, HW: -1,
		spareReads: reads[:0], spareParts: parts[:0], spareISR: isr[:0], spareRaw: raw[:0]}
}

// NewOp returns an op with every optional numeric field absent.
func NewOp(process int, t Type, f string) Op {
	return Op{Process: process, Type: t, F: f, Partition: -1, Offset: -1, Leader: -1, Epoch: -1, HW: -1}
}

// Clone returns a deep copy of op.
func (op *Op) Clone() Op {
	c := *op
	c.spareReads, c.spareParts, c.spareISR, c.spareRaw = nil, nil, nil, nil
	if op.RawValue != nil {
		c.RawValue = append(json.RawMessage(nil), op.RawValue...)
	}
	if op.Reads != nil {
		c.Reads = make([]PartitionRecords, len(op.Reads))
		for i, pr := range op.Reads {
			c.Reads[i] = PartitionRecords{Partition: pr.Partition, Records: append([]Record(nil), pr.Records...)}
		}
	}
	if op.Partitions != nil {
		c.Partitions = append([]int32(nil), op.Partitions...)
	}
	if op.ISR != nil {
		c.ISR = append([]int32(nil), op.ISR...)
	}
	if op.Committed != nil {
		c.Committed = append([]PartitionOffset{}, op.Committed...)
	}
	c.Txn = cloneMicroOps(op.Txn)
	return c
}

// IsClient reports whether op was made by a client process.
func (op *Op) IsClient() bool { return op.Process >= 0 }

// Header is the first line of a history.
type Header struct {
	Version    int    `json:"isrlab_history"`
	Run        string `json:"run,omitempty"`
	Seed       int64  `json:"seed,omitempty"`
	Topic      string `json:"topic,omitempty"`
	Partitions int    `json:"partitions,omitempty"`
	// Start is the wall-clock start of the run (RFC 3339), for humans only:
	// op times are monotonic nanoseconds from the start.
	Start string `json:"start,omitempty"`
	// Replicas is the topic's replica assignment when the workload began:
	// partition -> broker ids in assignment order, the first the
	// preferred leader (a replay creates the topic with it).
	Replicas map[int32][]int32 `json:"replicas,omitempty"`
}

// MarshalJSON encodes op the way the Writer does.
func (op Op) MarshalJSON() ([]byte, error) {
	return AppendOp(nil, &op), nil
}

// UnmarshalJSON decodes one history line.
func (op *Op) UnmarshalJSON(b []byte) error {
	return DecodeOp(b, op)
}
