package history

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func txnOps() []Op {
	inv := NewOp(2, Invoke, FTxn)
	inv.Txn = []MicroOp{{F: MPoll, Offset: -1}, Send("t/1", 40), Send("t/0", 41)}
	ok := NewOp(2, OK, FTxn)
	ok.Txn = []MicroOp{
		{F: MPoll, Offset: -1, Reads: []KeyRecords{{Key: "t/0", Records: []Record{{Offset: 3, Value: 17}, {Offset: 4, Value: BadValue, Raw: "x"}}}, {Key: "t/2", Records: []Record{}}}},
		{F: MSend, Key: "t/1", Value: 40, Offset: 8, Done: true},
		{F: MSend, Key: "t/0", Value: 41, Offset: -1, Done: true},
		{F: MSendOffsets, Group: "g", Offset: -1, Offsets: []KeyOffset{{Key: "t/0", Offset: 5}}},
	}
	ok.CommitAt = 850
	drain := NewOp(9, OK, FTxnDrain)
	drain.Txn = []MicroOp{{F: MPoll, Offset: -1, Reads: []KeyRecords{}}}
	drained := NewOp(9, OK, FDrained)
	drained.Key, drained.Offset, drained.Value, drained.HasValue = "t/0", 12, 0, true
	ops := []Op{inv, ok, drain, drained}
	for i := range ops {
		ops[i].Index, ops[i].Time = int64(i), int64(i+1)*1000
	}
	return ops
}

func TestTxnRoundTrip(t *testing.T) {
	ops := txnOps()
	data := writeHistory(t, ops, Header{Topic: "t", Partitions: 3})
	_, got, err := ReadAll(bytes.NewReader(data), "h.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if want := ops[i].Clone(); !reflect.DeepEqual(got[i], want) {
			t.Errorf("op %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	want := `{"index":1,"time":2000,"process":2,"type":"ok","f":"txn","value":[["poll",{"t/0":[[3,17],[4,"x"]],"t/2":[]}],["send","t/1",[8,40]],["send","t/0",[null,41]],["send-offsets","g",{"t/0":5}]],"commit_at":850}`
	if line := bytes.Split(data, []byte("\n"))[2]; string(line) != want {
		t.Errorf("line:\n got %s\nwant %s", line, want)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if !json.Valid(line) {
			t.Errorf("line %d is not valid JSON: %s", i+1, line)
		}
	}
}

func TestTxnDecodeValueBeforeF(t *testing.T) {
	var op Op
	line := `{"value":[["send","t/0",[3,7]],["poll",{"t/1":[[0,1]]}],["later-op",1,{"a":2}]],"process":1,"type":"ok","f":"txn"}`
	if err := DecodeOp([]byte(line), &op); err != nil {
		t.Fatal(err)
	}
	if len(op.Txn) != 3 || op.RawValue != nil {
		t.Fatalf("txn = %+v raw %s", op.Txn, op.RawValue)
	}
	if m := op.Txn[0]; m.Key != "t/0" || m.Offset != 3 || m.Value != 7 || !m.Done {
		t.Errorf("send = %+v", m)
	}
	if m := op.Txn[1]; m.Reads[0].Key != "t/1" || m.Reads[0].Records[0] != (Record{Offset: 0, Value: 1}) {
		t.Errorf("poll = %+v", m)
	}
	if op.Txn[2].F != "later-op" {
		t.Errorf("unknown micro-op = %+v", op.Txn[2])
	}
	// Outside a transaction a list value stays raw, as before.
	if err := DecodeOp([]byte(`{"process":"nemesis","type":"info","f":"start-kill","value":["b1"]}`), &op); err != nil {
		t.Fatal(err)
	}
	if op.Txn != nil || string(op.RawValue) != `["b1"]` {
		t.Errorf("fault value = %s, txn %+v", op.RawValue, op.Txn)
	}
	for _, bad := range []string{
		`{"process":1,"type":"ok","f":"txn","value":[["send","t/0"]]}`,
		`{"process":1,"type":"ok","f":"txn","value":[["send","t/0",[1]]]}`,
		`{"value":[["poll",{"t/0":[[1]]}]],"process":1,"type":"ok","f":"txn"}`,
	} {
		if err := DecodeOp([]byte(bad), &op); err == nil {
			t.Errorf("%s: decoded without error", bad)
		}
	}
}

func TestParseTxnKey(t *testing.T) {
	if tp, p, ok := ParseTxnKey(TxnKey("a/b", 12)); !ok || tp != "a/b" || p != 12 {
		t.Errorf("ParseTxnKey = %q %d %v", tp, p, ok)
	}
	for _, k := range []string{"t", "t/", "t/-1", "t/x"} {
		if _, _, ok := ParseTxnKey(k); ok {
			t.Errorf("ParseTxnKey(%q) ok", k)
		}
	}
}
