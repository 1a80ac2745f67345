// Package checker turns a history into a verdict. It is pure: history in,
// verdict out, no network, no clock except the linearizability search's time
// budget, and the same history always gives the same verdict (except that a
// linearizability search cut short by its timeout says unknown).
//
// Anomalies follow Jepsen's Kafka workload (jepsen.tests.kafka):
//
//   - lost-write: an acknowledged send that no poll returned, although some
//     poll returned a later (or the same) offset of its partition; or a
//     value missing from a complete final drain of its partition (f
//     "drained") that was acknowledged there or that a poll returned. A
//     value a poll returned was committed (below the high watermark), so
//     it is lost whether its send was acknowledged or ended info.
//   - unseen: an acknowledged send that no poll returned, with no later
//     offset of its partition read either. It makes the verdict invalid only
//     when the history has a final drain (f "drain"); without one it is
//     unknown, since the value may just not have been read yet.
//   - duplicate: one value observed at more than one offset (reads and
//     acknowledged offsets together).
//   - inconsistent-offsets: one offset observed with different values.
//   - nonmonotonic-send: a process's acknowledged sends to one partition
//     whose offsets do not increase.
//   - nonmonotonic-poll: a process read an offset lower than or equal to one
//     it read before, with no assign, subscribe, rebalance or crash between.
//   - poll-skip: a process read two offsets in a row with a known offset
//     between them that it did not read (same resets as above).
//   - aborted-read: a value was read whose send definitely failed.
//   - unexpected: a value was read that no process ever sent; every record
//     value that is not a number counts as one of its own, by its text.
//
// Consumer groups' delivery semantics (redelivered, skipped) are counted
// from f "processed" and commits with their offsets, in delivery.go;
// they are reported, not judged.
//
// Transactional ops (f "txn") have their own checks, in txn.go; they
// share the names above where the anomaly is the same and add
// precommitted-read, G1b, txn-out-of-order, eos-duplicate and the cycles G0, G1c,
// G-single and G2-item (aborted-read is G1a).
//
// Three more are orderings in real time that a log forbids, found in the
// same pass without a search, at any history size. A log only grows at its
// end, so an operation invoked after another completed comes after it:
//
//   - future-read: a poll returned a value, and completed, before the send
//     of that value was invoked. Minimal: p1's poll returns [0:1] at t=40;
//     p0 invokes send(1) at t=100.
//   - send-below-read: a send landed (acknowledged at, or first read at) an
//     offset at or below one that a poll had returned before the send was
//     invoked: the log was cut below what consumers had read as committed
//     and written again. Minimal: send(1) is acknowledged at offset 1;
//     p1's poll returns [1:1] at t=40; p3 invokes send(2) at t=50 and it is
//     acknowledged at offset 0.
//   - nonmonotonic-send-realtime: a send landed at or below the offset of a
//     send to the same partition that was acknowledged before it was
//     invoked (by any process; between two sends of one process this is
//     nonmonotonic-send, and below a read offset it is send-below-read,
//     which are reported instead). Minimal: p0's send(1) is acknowledged at
//     offset 1 at t=20; p3 invokes send(2) at t=30 and it is acknowledged
//     at offset 0.
//
// The checks compare times of the history's one clock: "before" is strictly
// earlier. A send is checked against its partition as its invocation names
// it.
//
// Sends that ended info (unknown) and whose value is read later are not
// anomalies: info means the send may or may not have happened.
//
// The verdict also holds Jepsen's queue analyses over time (Unseen,
// RealtimeLag), availability and unavailability, latency, the cluster's
// state changes and linearizability against a log model (LinResult), which
// is checked on pieces of each partition's history cut at quiescent points.
package checker

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/isrlab/isrlab/history"
)

// Anomaly names, as in Jepsen's Kafka workload.
const (
	LostWrite           = "lost-write"
	Unseen              = "unseen"
	Duplicate           = "duplicate"
	InconsistentOffsets = "inconsistent-offsets"
	NonmonotonicSend    = "nonmonotonic-send"
	NonmonotonicPoll    = "nonmonotonic-poll"
	PollSkip            = "poll-skip"
	AbortedRead         = "aborted-read"
	Unexpected          = "unexpected"
	// Real-time orderings the log forbids, found without a search.
	FutureRead               = "future-read"
	SendBelowRead            = "send-below-read"
	NonmonotonicSendRealtime = "nonmonotonic-send-realtime"
)

// AnomalyNames lists every anomaly the checker looks for.
var AnomalyNames = []string{LostWrite, Unseen, Duplicate, InconsistentOffsets,
	NonmonotonicSend, NonmonotonicPoll, PollSkip, AbortedRead, Unexpected,
	FutureRead, SendBelowRead, NonmonotonicSendRealtime,
	PrecommittedRead, G1b, TxnOutOfOrder, EOSDuplicate, G0, G1c, GSingle, G2Item,
	Redelivered, Skipped}

// LinMode chooses whether to check linearizability.
type LinMode int

// Linearizability modes.
const (
	// LinAuto checks unless Options.LinMaxOps is set and the history has
	// more client operations.
	LinAuto LinMode = iota
	LinOn
	LinOff
)

// Options tune a check. The zero value is usable.
type Options struct {
	Linearizable LinMode
	// LinMaxOps, when positive, skips the linearizability check under
	// LinAuto for histories with more client operations (default 0: no
	// limit; the check's memory is bounded by LinMaxPieceOps, not by the
	// history).
	LinMaxOps int
	// LinMaxPieceOps bounds the operations of one piece of a partition's
	// history between quiescent points (default 20000): a larger piece is
	// not searched and makes the result unknown, naming the piece. The
	// search's memory grows with the square of a piece's size.
	LinMaxPieceOps int
	// LinTimeout bounds the linearizability check, its pass over the
	// history included (default 5 min); pieces not decided by then are
	// unknown, never a pass.
	LinTimeout time.Duration
	// MaxExamples is the number of examples kept per anomaly (default 5).
	MaxExamples int
	// Workers decode the history in parallel (0: GOMAXPROCS).
	Workers int
	// UnavailableAfter is how long sends on a partition must go without a
	// success before it counts as unavailable (default 1 s), so that
	// ordinary latency does not count; see Unavailability.
	UnavailableAfter time.Duration
	// Partitions is the topic's partition count, so that Unavailability
	// lists partitions no send went to. Check takes it from the history
	// header when it is zero; CheckOps has no header.
	Partitions int
	// Also are given every op of Check's pass over the history, so that
	// other analyses of the same history need no pass of their own.
	Also []history.Consumer
}

func (o Options) withDefaults() Options {
	if o.LinMaxPieceOps <= 0 {
		o.LinMaxPieceOps = DefaultLinMaxPieceOps
	}
	if o.LinTimeout <= 0 {
		o.LinTimeout = DefaultLinTimeout
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 5
	}
	if o.UnavailableAfter <= 0 {
		o.UnavailableAfter = DefaultUnavailableAfter
	}
	return o
}

// Defaults of Options.
const (
	DefaultLinMaxPieceOps = 20000
	DefaultLinTimeout     = 5 * time.Minute
)

// Validity is true, false or unknown; it encodes in JSON as true, false or
// "unknown".
type Validity int

// Validity values.
const (
	Unknown Validity = iota
	Valid
	Invalid
)

func (v Validity) String() string {
	switch v {
	case Valid:
		return "true"
	case Invalid:
		return "false"
	}
	return "unknown"
}

// MarshalJSON encodes true, false or "unknown".
func (v Validity) MarshalJSON() ([]byte, error) {
	switch v {
	case Valid:
		return []byte("true"), nil
	case Invalid:
		return []byte("false"), nil
	}
	return []byte(`"unknown"`), nil
}

// UnmarshalJSON decodes true, false or "unknown".
func (v *Validity) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*v = Valid
	case "false":
		*v = Invalid
	case `"unknown"`:
		*v = Unknown
	default:
		return fmt.Errorf("validity %s: want true, false or \"unknown\"", b)
	}
	return nil
}

// Verdict is the result of a check, written as verdict.json.
type Verdict struct {
	Valid     Validity             `json:"valid"`
	Anomalies map[string]int64     `json:"anomalies"`
	Examples  map[string][]Example `json:"examples"`
	Stats     Stats                `json:"stats"`
	// Availability is the fraction of send and poll operations that ended
	// ok: overall, while a fault was active, and after the last heal.
	Availability Availability `json:"availability"`
	// Unavailability has, per partition, the longest and total time in
	// which sends were attempted and none succeeded.
	Unavailability Unavailability `json:"unavailability"`
	// Latency has quantiles per operation (f) over ok completions.
	Latency map[string]Quantiles `json:"latency"`
	// Unseen is the count of acknowledged values not yet read, over time,
	// per partition and overall; RealtimeLag the time from acknowledgement
	// to first read (Jepsen's queue analyses).
	Unseen      UnseenOverTime `json:"unseen"`
	RealtimeLag RealtimeLag    `json:"realtime_lag"`
	// Delivery has, per consumer group, the records processed more than
	// once or committed and never processed, and the committed offsets
	// over time; absent when the history has no processed records or
	// commits that name their offsets.
	Delivery     *Delivery `json:"delivery,omitempty"`
	Linearizable LinResult `json:"linearizable"`
	// Cluster summarizes the cluster-state timeline (process "cluster").
	Cluster ClusterSummary `json:"cluster"`
	// Timeline has outcomes per second and the fault windows, for plots.
	Timeline Timeline `json:"timeline"`
	// TruncatedHistory is set when the history ended in a torn line; the
	// verdict then is at best unknown.
	TruncatedHistory bool   `json:"truncated_history"`
	Truncation       string `json:"truncation,omitempty"`
	// Notes explain a verdict that is unknown for a reason other than the
	// above.
	Notes []string `json:"notes,omitempty"`

	lin *linSearch
}

// Example is one instance of an anomaly with the operations that show it.
type Example struct {
	Partition int32 `json:"partition"`
	// Key is the topic-partition of a transactional anomaly ("t/0").
	Key     string  `json:"key,omitempty"`
	Value   *int64  `json:"value,omitempty"`
	Offset  *int64  `json:"offset,omitempty"`
	Offsets []int64 `json:"offsets,omitempty"`
	Values  []int64 `json:"values,omitempty"`
	// Raw is the text of a record value that is not a number.
	Raw     string `json:"raw,omitempty"`
	Process *int   `json:"process,omitempty"`
	Note    string `json:"note,omitempty"`
	// Ops are the operations involved, in history order.
	Ops []json.RawMessage `json:"ops"`

	positions []int64
}

// Stats counts what the history held.
type Stats struct {
	Ops          int64 `json:"ops"`
	ClientOps    int64 `json:"client_ops"`
	Sends        int64 `json:"sends"`
	SendsOK      int64 `json:"sends_ok"`
	SendsFail    int64 `json:"sends_fail"`
	SendsInfo    int64 `json:"sends_info"`
	SendsPending int64 `json:"sends_pending"`
	Polls        int64 `json:"polls"`
	PollsOK      int64 `json:"polls_ok"`
	Records      int64 `json:"records_read"`
	Values       int64 `json:"distinct_values"`
	ReadValues   int64 `json:"values_read"`
	InfoRead     int64 `json:"info_sends_read"`
	Partitions   int   `json:"partitions"`
	FaultOps     int64 `json:"fault_ops"`
	StateEvents  int64 `json:"cluster_events"`
	Ignored      int64 `json:"ignored_ops"`
	// Txn counts transactional ops, when the history has any.
	Txn *TxnStats `json:"txn,omitempty"`
}

// OpenFunc opens the history for one streaming pass. Check calls it once,
// and once more only to pull out the operations of examples from a
// history that is not an io.ReaderAt.
type OpenFunc func() (io.ReadCloser, error)
