// Package checker turns a history into a verdict. It is pure: history in,
// verdict out, no network, no clock except the linearizability search's time
// budget, and the same history always gives the same verdict (except that a
// linearizability search cut short by its timeout says unknown).
//
// Anomalies follow Jepsen's Kafka workload (jepsen.tests.kafka):
//
//   - lost-write: an acknowledged send that no poll returned, although some
//     poll returned a later (or the same) offset of its partition.
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
//   - unexpected: a value was read that no process ever sent.
//
// Sends that ended info (unknown) and whose value is read later are not
// anomalies: info means the send may or may not have happened.
package checker

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
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
)

// AnomalyNames lists every anomaly the checker looks for.
var AnomalyNames = []string{LostWrite, Unseen, Duplicate, InconsistentOffsets,
	NonmonotonicSend, NonmonotonicPoll, PollSkip, AbortedRead, Unexpected}

// LinMode chooses whether to check linearizability.
type LinMode int

// Linearizability modes.
const (
	// LinAuto checks when the history has at most Options.LinMaxOps ops.
	LinAuto LinMode = iota
	LinOn
	LinOff
)

// Options tune a check. The zero value is usable.
type Options struct {
	Linearizable LinMode
	// LinMaxOps bounds the client ops collected for the linearizability
	// search under LinAuto (default 200000).
	LinMaxOps int
	// LinTimeout bounds the search (default 60 s); when it runs out the
	// result is unknown, never a pass.
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
}

func (o Options) withDefaults() Options {
	if o.LinMaxOps <= 0 {
		o.LinMaxOps = 200000
	}
	if o.LinTimeout <= 0 {
		o.LinTimeout = 60 * time.Second
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 5
	}
	if o.UnavailableAfter <= 0 {
		o.UnavailableAfter = DefaultUnavailableAfter
	}
	return o
}

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
	Latency      map[string]Quantiles `json:"latency"`
	Linearizable LinResult            `json:"linearizable"`
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
	Partition int32   `json:"partition"`
	Value     *int64  `json:"value,omitempty"`
	Offset    *int64  `json:"offset,omitempty"`
	Offsets   []int64 `json:"offsets,omitempty"`
	Values    []int64 `json:"values,omitempty"`
	Process   *int    `json:"process,omitempty"`
	Note      string  `json:"note,omitempty"`
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
}

// OpenFunc opens the history for one streaming pass; the checker calls it
// once, and once more to pull out the operations of examples.
type OpenFunc func() (io.ReadCloser, error)
