package checker

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/history"
)

// TestTxnGolden checks one transactional history per anomaly from
// testdata/txn-*.jsonl: the anomaly counts and validity must be exactly
// the expected ones, the first example must name the expected key, value
// and operations, and the verdict must match txn-<name>.verdict.json.
func TestTxnGolden(t *testing.T) {
	tests := []struct {
		name      string
		valid     Validity
		anomalies map[string]int64
		// The first example of each anomaly (of exKind only, when set):
		// key, value (-1: none), ops.
		exKind  string
		exKey   string
		exValue int64
		exOps   int
		// note is a part of the verdict's notes.
		note string
	}{
		{name: "clean", valid: Valid},
		{name: "info-commit-resolved", valid: Valid},
		{name: "seek-reread", valid: Valid},
		{name: "none-committed", valid: Unknown, note: "no transaction committed"},
		{name: "aborted-read", valid: Invalid, anomalies: map[string]int64{AbortedRead: 1}, exKey: "t/0", exValue: 3, exOps: 3},
		{name: "info-never-committed", valid: Invalid, anomalies: map[string]int64{AbortedRead: 1}, exKey: "t/0", exValue: 2, exOps: 3},
		{name: "lost-committed", valid: Invalid, anomalies: map[string]int64{LostWrite: 1}, exKey: "t/0", exValue: 2, exOps: 2},
		{name: "info-lost", valid: Invalid, anomalies: map[string]int64{LostWrite: 1}, exKey: "t/1", exValue: 2, exOps: 2},
		{name: "duplicate", valid: Invalid, anomalies: map[string]int64{Duplicate: 1}, exKey: "t/0", exValue: 1, exOps: 2},
		{name: "inconsistent-offsets", valid: Invalid, anomalies: map[string]int64{InconsistentOffsets: 1, LostWrite: 1}, exKind: InconsistentOffsets, exKey: "t/0", exValue: -1, exOps: 2},
		{name: "nonmonotonic-poll", valid: Invalid, anomalies: map[string]int64{NonmonotonicPoll: 1}, exKey: "t/0", exValue: -1, exOps: 2},
		{name: "precommitted-read", valid: Invalid, anomalies: map[string]int64{PrecommittedRead: 2}, exKey: "t/0", exValue: 1, exOps: 1},
		{name: "g1b", valid: Invalid, anomalies: map[string]int64{G1b: 1}, exKey: "t/0", exValue: 2, exOps: 2},
		{name: "out-of-order", valid: Invalid, anomalies: map[string]int64{TxnOutOfOrder: 1}, exKey: "t/0", exValue: 2, exOps: 2},
		{name: "eos-duplicate", valid: Invalid, anomalies: map[string]int64{EOSDuplicate: 1}, exKey: "t/0", exValue: 1, exOps: 2},
		// An unknown transaction's consumption counts when it committed
		// (its value was read), and not when it aborted.
		{name: "info-committed-eos-duplicate", valid: Invalid, anomalies: map[string]int64{EOSDuplicate: 1}, exKey: "t/0", exValue: 1, exOps: 2},
		{name: "info-aborted-reconsume", valid: Valid},
		{name: "unseen-no-drain", valid: Unknown, anomalies: map[string]int64{Unseen: 1}, exKey: "t/0", exValue: 2, exOps: 2},
		// Cycles are reported, not judged, except one of wr edges alone
		// (whose reads are also precommitted).
		{name: "g0", valid: Valid, anomalies: map[string]int64{G0: 1}, exValue: -1, exOps: 2, note: "reported, not judged"},
		{name: "g1c", valid: Valid, anomalies: map[string]int64{G1c: 1}, exValue: -1, exOps: 2, note: "reported, not judged"},
		{name: "g-single", valid: Valid, anomalies: map[string]int64{GSingle: 1}, exValue: -1, exOps: 2, note: "reported, not judged"},
		{name: "g1c-wr", valid: Invalid, anomalies: map[string]int64{G1c: 1, PrecommittedRead: 1}, exKind: G1c, exValue: -1, exOps: 2, note: "wr dependencies alone"},
		{name: "g2-item", valid: Valid, anomalies: map[string]int64{G2Item: 1}, exValue: -1, exOps: 2, note: "reported, not judged"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "txn-"+tc.name+".jsonl")
			v, err := Check(openFile(path), path, Options{Linearizable: LinOn})
			if err != nil {
				t.Fatal(err)
			}
			if v.Valid != tc.valid {
				t.Errorf("valid = %s, want %s (anomalies %v, notes %q)", v.Valid, tc.valid, v.Anomalies, v.Notes)
			}
			want := tc.anomalies
			if want == nil {
				want = map[string]int64{}
			}
			if fmt.Sprint(v.Anomalies) != fmt.Sprint(want) {
				t.Errorf("anomalies = %v, want %v", v.Anomalies, want)
			}
			if v.Stats.Txn == nil || v.Stats.Txn.Txns == 0 || v.Stats.Txn.Polls == 0 {
				t.Errorf("stats.txn = %+v", v.Stats.Txn)
			}
			for kind := range tc.anomalies {
				if tc.exKind != "" && kind != tc.exKind {
					continue
				}
				if len(v.Examples[kind]) == 0 {
					t.Errorf("no %s example", kind)
					continue
				}
				ex := v.Examples[kind][0]
				if ex.Key != tc.exKey {
					t.Errorf("%s example key = %q, want %q", kind, ex.Key, tc.exKey)
				}
				if tc.exValue >= 0 && (ex.Value == nil || *ex.Value != tc.exValue) {
					t.Errorf("%s example value = %v, want %d", kind, ex.Value, tc.exValue)
				}
				if len(ex.Ops) != tc.exOps {
					t.Errorf("%s example has %d ops, want %d: %s", kind, len(ex.Ops), tc.exOps, ex.Ops)
				}
			}
			if tc.note != "" && !strings.Contains(strings.Join(v.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", v.Notes, tc.note)
			}
			compareGolden(t, "txn-"+tc.name, v)
		})
	}
}

// TestTxnFarValuesAndOffsets: values and offsets outside the dense range
// (negative, or beyond it) are checked like the others.
func TestTxnFarValuesAndOffsets(t *testing.T) {
	far := int64(1) << 40
	send := func(proc int, typ history.Type, key string, v, off int64) []history.Op {
		inv := history.NewOp(proc, history.Invoke, history.FTxn)
		inv.Txn = []history.MicroOp{history.Send(key, v)}
		done := history.NewOp(proc, typ, history.FTxn)
		done.Txn = []history.MicroOp{{F: history.MSend, Key: key, Value: v, Offset: off, Done: true}}
		done.CommitAt = 1
		return []history.Op{inv, done}
	}
	var ops []history.Op
	ops = append(ops, send(0, history.OK, "t/0", -5, far)...)
	ops = append(ops, send(0, history.OK, "t/0", far, far+2)...)
	ops = append(ops, send(1, history.OK, "t/0", 3, 1)...)
	poll := history.NewOp(2, history.OK, history.FTxn)
	// far+2 then far: nonmonotonic; 1 then far+2 skips the committed -5
	// at far (another transaction: out of order).
	poll.Txn = []history.MicroOp{{F: history.MPoll, Offset: -1, Reads: []history.KeyRecords{{Key: "t/0",
		Records: []history.Record{{Offset: 1, Value: 3}, {Offset: far + 2, Value: far}, {Offset: far, Value: -5}}}}}}
	ops = append(ops, poll)
	for i := range ops {
		ops[i].Index, ops[i].Time = int64(i), int64(i+1)*10
	}
	v := CheckOps(ops, Options{Linearizable: LinOff})
	want := map[string]int64{NonmonotonicPoll: 1, TxnOutOfOrder: 1}
	if fmt.Sprint(v.Anomalies) != fmt.Sprint(want) {
		t.Errorf("anomalies = %v, want %v: %+v", v.Anomalies, want, v.Examples)
	}
	if ex := v.Examples[TxnOutOfOrder]; len(ex) != 1 || *ex[0].Value != -5 {
		t.Errorf("out-of-order example %+v", ex)
	}
}

// TestTxnEOSDuplicateUnknownOutcome: a record consumed by an ok
// transaction and by one of unknown outcome is processed twice exactly when
// the unknown one committed (a value it sent was read), whichever came
// first.
func TestTxnEOSDuplicateUnknownOutcome(t *testing.T) {
	tests := []struct {
		name      string
		typ       history.Type
		commitAt  int64 // of the second consumer
		read      bool  // the second consumer's value is read
		infoFirst bool  // the second consumer completes first
		want      int64
		infoRead  int64
	}{
		{name: "info read", typ: history.Info, commitAt: 1, read: true, want: 1, infoRead: 1},
		{name: "info read, first", typ: history.Info, commitAt: 1, read: true, infoFirst: true, want: 1, infoRead: 1},
		{name: "info unread", typ: history.Info, commitAt: 1},
		{name: "info unread, first", typ: history.Info, commitAt: 1, infoFirst: true},
		{name: "fail", typ: history.Fail, commitAt: 1},
		// Read although it never asked to commit: an aborted read, and its
		// offsets were not committed.
		{name: "info never asked to commit", typ: history.Info, read: true},
		{name: "ok", typ: history.OK, commitAt: 1, read: true, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			consume := func(proc int, typ history.Type, commitAt, out, off int64) history.Op {
				op := history.NewOp(proc, typ, history.FTxn)
				op.Txn = []history.MicroOp{
					{F: history.MPoll, Offset: -1, Reads: []history.KeyRecords{{Key: "t/0", Records: []history.Record{{Offset: 0, Value: 1}}}}},
					{F: history.MSend, Key: "t/1", Value: out, Offset: off, Done: true},
					{F: history.MSendOffsets, Offset: -1, Group: "g", Offsets: []history.KeyOffset{{Key: "t/0", Offset: 1}}},
				}
				op.CommitAt = commitAt
				return op
			}
			src := history.NewOp(0, history.OK, history.FTxn)
			src.Txn = []history.MicroOp{{F: history.MSend, Key: "t/0", Value: 1, Offset: 0, Done: true}}
			src.CommitAt = 1
			first, second := consume(1, history.OK, 1, 2, 0), consume(2, tc.typ, tc.commitAt, 3, 2)
			if tc.infoFirst {
				first, second = second, first
			}
			drain := history.NewOp(9, history.OK, history.FTxnDrain)
			recs := []history.Record{{Offset: 0, Value: 2}}
			if tc.read {
				recs = append(recs, history.Record{Offset: 2, Value: 3})
			}
			drain.Txn = []history.MicroOp{{F: history.MPoll, Offset: -1, Reads: []history.KeyRecords{{Key: "t/1", Records: recs}}}}
			ops := []history.Op{src, first, second, drain}
			for i := range ops {
				ops[i].Index, ops[i].Time = int64(i), int64(i+1)*10
			}
			v := CheckOps(ops, Options{Linearizable: LinOff})
			if got := v.Anomalies[EOSDuplicate]; got != tc.want {
				t.Errorf("eos-duplicate = %d, want %d: %v %+v", got, tc.want, v.Anomalies, v.Examples)
			}
			if exs := v.Examples[EOSDuplicate]; len(exs) > 0 && !strings.Contains(exs[0].Note, "(txns 1 and 2)") {
				t.Errorf("note %q does not name txns 1 and 2", v.Examples[EOSDuplicate][0].Note)
			}
			if got := v.Stats.Txn.InfoRead; got != tc.infoRead {
				t.Errorf("info_committed_by_read = %d, want %d", got, tc.infoRead)
			}
		})
	}
}
