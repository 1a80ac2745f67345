package checker

import (
	"strings"
	"testing"

	"github.com/isrlab/isrlab/history"
)

// TestReadThenTruncatedIsLost: a value acknowledged and read, then missing
// from a complete final drain of its partition (an unclean election cut the
// log shorter), is a lost write. Without the drain's "drained" marker the
// same history cannot tell, and is not flagged.
func TestReadThenTruncatedIsLost(t *testing.T) {
	ops := func(withDrained bool) []history.Op {
		var out []history.Op
		send := func(v, off int64) {
			inv := history.NewOp(0, history.Invoke, history.FSend)
			inv.Value, inv.HasValue, inv.Partition = v, true, 0
			ok := inv
			ok.Type, ok.Offset = history.OK, off
			out = append(out, inv, ok)
		}
		poll := func(proc int, f string, recs ...history.Record) {
			inv := history.NewOp(proc, history.Invoke, f)
			ok := history.NewOp(proc, history.OK, f)
			ok.Reads = []history.PartitionRecords{{Partition: 0, Records: recs}}
			out = append(out, inv, ok)
		}
		send(1, 0)
		send(2, 1)
		poll(1, history.FPoll, history.Record{Offset: 0, Value: 1}, history.Record{Offset: 1, Value: 2})
		// The final log holds only offset 0.
		poll(2, history.FDrain, history.Record{Offset: 0, Value: 1})
		if withDrained {
			d := history.NewOp(2, history.OK, history.FDrained)
			d.Partition, d.Offset, d.Value, d.HasValue = 0, 1, 0, true
			out = append(out, d)
		}
		return out
	}
	v := CheckOps(ops(true), Options{Linearizable: LinOff})
	if v.Valid != Invalid || v.Anomalies[LostWrite] != 1 {
		t.Fatalf("valid %v anomalies %v, want one lost-write", v.Valid, v.Anomalies)
	}
	if ex := v.Examples[LostWrite][0]; *ex.Value != 2 || !strings.Contains(ex.Note, "complete final drain") {
		t.Fatalf("example %+v", ex)
	}
	if v := CheckOps(ops(false), Options{Linearizable: LinOff}); v.Anomalies[LostWrite] != 0 {
		t.Fatalf("flagged without a drained marker: %v", v.Anomalies)
	}
}

// TestUnreadMissingFromDrainIsLost: an acknowledged value nobody read and
// a complete drain does not return is lost, not merely unseen.
func TestUnreadMissingFromDrainIsLost(t *testing.T) {
	inv := history.NewOp(0, history.Invoke, history.FSend)
	inv.Value, inv.HasValue, inv.Partition = 7, true, 0
	ok := inv
	ok.Type, ok.Offset = history.OK, 3
	dinv := history.NewOp(1, history.Invoke, history.FDrain)
	dok := history.NewOp(1, history.OK, history.FDrain)
	d := history.NewOp(1, history.OK, history.FDrained)
	d.Partition, d.Offset, d.Value, d.HasValue = 0, 0, 0, true
	v := CheckOps([]history.Op{inv, ok, dinv, dok, d}, Options{Linearizable: LinOff})
	if v.Valid != Invalid || v.Anomalies[LostWrite] != 1 || v.Anomalies[Unseen] != 0 {
		t.Fatalf("valid %v anomalies %v, want one lost-write", v.Valid, v.Anomalies)
	}
}
