package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleOps() []Op {
	send := NewOp(3, Invoke, FSend)
	send.Value, send.HasValue, send.Partition, send.Key = 17, true, 1, "k-17"
	ack := send
	ack.Type, ack.Offset, ack.Node = OK, 9, "n2"
	poll := NewOp(5, OK, FPoll)
	poll.Reads = []PartitionRecords{
		{Partition: 1, Records: []Record{{Offset: 9, Value: 17}, {Offset: 10, Value: -4}}},
		{Partition: 0, Records: []Record{{Offset: 0, Value: BadValue, Raw: "not a number \"quoted\""}}},
	}
	fault := NewOp(Nemesis, Info, "start-partition")
	fault.RawValue = json.RawMessage(`["n1","n2"]`)
	state := NewOp(Cluster, Info, FState)
	state.Partition, state.Leader, state.Epoch, state.ISR, state.HW = 2, 1, 4, []int32{1, 3}, 120
	fail := NewOp(7, Fail, FSend)
	fail.Error = "NOT_ENOUGH_REPLICAS: \u00e9\n\ttab"
	assign := NewOp(5, OK, FAssign)
	assign.Partitions = []int32{}
	emptyPoll := NewOp(5, OK, FPoll)
	emptyPoll.Reads = []PartitionRecords{}
	processed := NewOp(5, OK, FProcessed)
	processed.Group, processed.Partition, processed.Offset, processed.Value, processed.HasValue = "g-1", 1, 9, 17, true
	commit := NewOp(5, OK, FCommit)
	commit.Group, commit.Committed = "g-1", []PartitionOffset{{Partition: 1, Offset: 10}, {Partition: 0, Offset: 1}}
	ops := []Op{send, ack, poll, fault, state, fail, assign, emptyPoll, processed, commit}
	for i := range ops {
		ops[i].Index = int64(i)
		ops[i].Time = int64(i) * 1000
	}
	return ops
}

func writeHistory(t testing.TB, ops []Op, h Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if err := w.Write(&ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	ops := sampleOps()
	data := writeHistory(t, ops, Header{Run: "r1", Seed: 7, Topic: "t", Partitions: 3})
	h, got, err := ReadAll(bytes.NewReader(data), "h.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != Version || h.Run != "r1" || h.Seed != 7 || h.Partitions != 3 {
		t.Errorf("header = %+v", h)
	}
	if len(got) != len(ops) {
		t.Fatalf("read %d ops, wrote %d", len(got), len(ops))
	}
	for i := range ops {
		want := ops[i].Clone()
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("op %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	// Every line is also valid JSON for any other reader.
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if !json.Valid(line) {
			t.Errorf("line %d is not valid JSON: %s", i+1, line)
		}
	}
}

func TestDecodeFields(t *testing.T) {
	tests := []struct {
		name string
		line string
		want func(op *Op) bool
	}{
		{"whitespace and unknown fields", ` { "index" : 4 , "extra": {"a":[1,2.5e3,true,null,"x\"y"]}, "time":9, "process": 2, "type":"ok", "f":"send", "value": 12 } `,
			func(op *Op) bool {
				return op.Index == 4 && op.Time == 9 && op.Process == 2 && op.Type == OK && op.Value == 12 && op.HasValue
			}},
		{"null value is absent", `{"process":0,"type":"ok","f":"send","value":null}`, func(op *Op) bool { return !op.HasValue && op.RawValue == nil }},
		{"string value kept raw", `{"process":"nemesis","type":"info","f":"kill","value":"n1"}`, func(op *Op) bool { return string(op.RawValue) == `"n1"` && op.Process == Nemesis }},
		{"unknown process name", `{"process":"clock","type":"info","f":"skew"}`, func(op *Op) bool { return op.Process == OtherProcess }},
		{"string record value", `{"process":1,"type":"ok","f":"poll","offsets":{"2":[[5,"77"],[6,"x"]]}}`,
			func(op *Op) bool {
				r := op.Reads[0].Records
				return op.Reads[0].Partition == 2 && r[0].Value == 77 && r[1].Value == BadValue && r[1].Raw == "x"
			}},
		{"escapes", `{"process":1,"type":"fail","f":"send","error":"a\u00e9\ud83d\ude00\\n"}`, func(op *Op) bool { return op.Error == "a\u00e9\U0001F600\\n" }},
		{"committed offsets", `{"process":1,"type":"ok","f":"commit","group":"g","committed":{"2":7, "0":0}}`,
			func(op *Op) bool {
				return op.F == FCommit && op.Group == "g" && reflect.DeepEqual(op.Committed, []PartitionOffset{{2, 7}, {0, 0}})
			}},
		{"empty committed is not absent", `{"process":1,"type":"ok","f":"commit","committed":{}}`, func(op *Op) bool { return op.Committed != nil && len(op.Committed) == 0 }},
		{"numeric node", `{"process":1,"type":"ok","f":"send","node":3}`, func(op *Op) bool { return op.Node == "3" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var op Op
			if err := DecodeOp([]byte(tc.line), &op); err != nil {
				t.Fatal(err)
			}
			if !tc.want(&op) {
				t.Errorf("decoded %+v", op)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, line := range []string{
		``, `{`, `{"index":}`, `{"index":1,}`, `{"index":1.5}`, `{"index":99999999999999999999}`,
		`{"type":"maybe"}`, `{"offsets":{"x":[]}}`, `{"offsets":{"1":[[1]]}}`, `{"f":"a` + "\x01" + `"}`,
		`{"index":1} x`, `[1]`, `{"process":-1}`, `{"isr":[1,}`, `{"a":tru}`,
	} {
		var op Op
		if err := DecodeOp([]byte(line), &op); err == nil {
			t.Errorf("%q decoded without error: %+v", line, op)
		}
	}
}

func TestReaderErrorsNameTheLine(t *testing.T) {
	good := `{"index":0,"time":1,"process":0,"type":"invoke","f":"send","value":1}`
	tests := []struct {
		name  string
		text  string
		line  int64
		torn  bool
		count int // ops read before the error
	}{
		{"bad middle line", "{\"isrlab_history\":1}\n" + good + "\n{bad\n" + good + "\n", 3, false, 1},
		{"torn last line", "{\"isrlab_history\":1}\n" + good + "\n" + good[:20], 3, true, 1},
		{"bad last line with newline", "{\"isrlab_history\":1}\n" + good + "\n" + good[:20] + "\n", 3, false, 1},
		{"newer version", "{\"isrlab_history\":99}\n", 1, false, 0},
		{"empty file", "", 1, false, 0},
	}
	for _, tc := range tests {
		for _, mode := range []string{"next", "scan"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				var err error
				n := 0
				r, err := NewReader(strings.NewReader(tc.text), "x.jsonl")
				if err == nil {
					if mode == "next" {
						var op Op
						for err = r.Next(&op); err == nil; err = r.Next(&op) {
							n++
						}
					} else {
						err = r.Scan(2, func(*Op, int64) error { n++; return nil })
					}
				}
				var le *LineError
				if !errors.As(err, &le) {
					t.Fatalf("err = %v, want a *LineError", err)
				}
				if le.Line != tc.line || le.File != "x.jsonl" || errors.Is(err, ErrTruncated) != tc.torn {
					t.Errorf("err = %v (line %d torn %v), want line %d torn %v", err, le.Line, le.Torn, tc.line, tc.torn)
				}
				if n != tc.count {
					t.Errorf("read %d ops before the error, want %d", n, tc.count)
				}
			})
		}
	}
}

// TestScanMatchesNext decodes a multi-chunk history both ways.
func TestScanMatchesNext(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Run: "s"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Synthesize(w, SynthOptions{Ops: 40000, Partitions: 3, Seed: 5, InfoRate: 0.1, FailRate: 0.1, Faults: true, AnomalyEvery: 3000})
	if err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if buf.Len() < 3*chunkSize {
		t.Fatalf("history of %d bytes does not span several chunks", buf.Len())
	}
	data := buf.Bytes()
	// A blank line and a missing final newline must not change anything.
	data = append(bytes.Replace(data, []byte("\n"), []byte("\n\n"), 1), []byte{}...)
	data = bytes.TrimSuffix(data, []byte("\n"))
	r1, err := NewReader(bytes.NewReader(data), "a")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	var op Op
	for err = r1.Next(&op); err == nil; err = r1.Next(&op) {
		want = append(want, string(AppendOp(nil, &op)))
	}
	if err != io.EOF {
		t.Fatal(err)
	}
	r2, _ := NewReader(bytes.NewReader(data), "a")
	i := 0
	err = r2.Scan(3, func(op *Op, off int64) error {
		var at Op
		if err := ReadOpAt(bytes.NewReader(data), off, "a", &at); err != nil {
			t.Fatalf("op %d at byte %d: %v", i, off, err)
		}
		if string(AppendOp(nil, &at)) != string(AppendOp(nil, op)) {
			t.Fatalf("op %d: ReadOpAt(%d) gave another op", i, off)
		}
		if got := string(AppendOp(nil, op)); i >= len(want) || got != want[i] {
			t.Fatalf("op %d differs:\n got %s", i, got)
		}
		i++
		return nil
	})
	if err != nil || i != len(want) || int64(i) != st.Lines {
		t.Fatalf("scan: err %v, %d ops, next read %d, generated %d", err, i, len(want), st.Lines)
	}
}

func TestScanStopsOnCallbackError(t *testing.T) {
	var m Memory
	Synthesize(&m, SynthOptions{Ops: 30000, Seed: 1})
	data := writeHistory(t, m.Ops, Header{})
	r, _ := NewReader(bytes.NewReader(data), "a")
	stop := errors.New("stop")
	n := 0
	err := r.Scan(2, func(*Op, int64) error {
		n++
		if n == 100 {
			return stop
		}
		return nil
	})
	if err != stop || n != 100 {
		t.Errorf("err %v after %d ops", err, n)
	}
}

func TestSynthesizeIsDeterministic(t *testing.T) {
	o := SynthOptions{Ops: 5000, Partitions: 4, Seed: 11, InfoRate: 0.05, FailRate: 0.05, Faults: true, AnomalyEvery: 1000}
	var a, b Memory
	sa, _ := Synthesize(&a, o)
	sb, _ := Synthesize(&b, o)
	ha := writeHistory(t, a.Ops, Header{})
	hb := writeHistory(t, b.Ops, Header{})
	if !bytes.Equal(ha, hb) || !reflect.DeepEqual(sa, sb) {
		t.Error("same options gave different histories")
	}
	o.Seed++
	var c Memory
	Synthesize(&c, o)
	if bytes.Equal(ha, writeHistory(t, c.Ops, Header{})) {
		t.Error("different seeds gave the same history")
	}
}

func TestRecorderStampsInOrder(t *testing.T) {
	var m Memory
	tick := time.Duration(0)
	r := NewRecorder(&m, func() time.Duration { tick += time.Microsecond; return tick })
	for i := range 3 {
		op := r.Record(NewOp(i, Invoke, FSend))
		if op.Index != int64(i) || op.Time != int64(i+1)*1000 {
			t.Errorf("op %d stamped index %d time %d", i, op.Index, op.Time)
		}
	}
	if r.Count() != 3 || len(m.Ops) != 3 || r.Err() != nil {
		t.Errorf("count %d, kept %d, err %v", r.Count(), len(m.Ops), r.Err())
	}
	// Through a Writer, Flush makes the lines visible.
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Header{Run: "r"})
	wr := NewRecorder(w, func() time.Duration { return 0 })
	wr.Record(NewOp(0, Invoke, FPoll))
	if err := wr.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ops, err := ReadAll(&buf, "r"); err != nil || len(ops) != 1 {
		t.Errorf("after Flush: %d ops, %v", len(ops), err)
	}
}

func FuzzDecodeOp(f *testing.F) {
	for _, op := range sampleOps() {
		f.Add(AppendOp(nil, &op))
	}
	f.Add([]byte(`{"offsets":{"1":[[1,"2"]]},"x":[{"y":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var op Op
		if err := DecodeOp(b, &op); err != nil {
			return
		}
		// Whatever decodes re-encodes to valid JSON that decodes the same.
		enc := AppendOp(nil, &op)
		if !json.Valid(enc) {
			t.Fatalf("re-encoding of %q is not JSON: %s", b, enc)
		}
		var back Op
		if err := DecodeOp(enc, &back); err != nil {
			t.Fatalf("re-encoding %s does not decode: %v", enc, err)
		}
		if string(AppendOp(nil, &back)) != string(enc) {
			t.Fatalf("not stable: %s vs %s", enc, AppendOp(nil, &back))
		}
	})
}

func BenchmarkDecodeOp(b *testing.B) {
	var m Memory
	Synthesize(&m, SynthOptions{Ops: 10000, Partitions: 10, Seed: 1, InfoRate: 0.01, FailRate: 0.01})
	var lines [][]byte
	size := 0
	for i := range m.Ops {
		l := AppendOp(nil, &m.Ops[i])
		lines = append(lines, l)
		size += len(l) + 1
	}
	b.SetBytes(int64(size / len(lines)))
	var op Op
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := DecodeOp(lines[i%len(lines)], &op); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScanLinesLongerThanAChunk: a poll of 200k records is one line of
// several MiB, longer than a decoding chunk.
func TestScanLinesLongerThanAChunk(t *testing.T) {
	big := NewOp(1, OK, FPoll)
	recs := make([]Record, 200000)
	for i := range recs {
		recs[i] = Record{Offset: int64(i), Value: int64(i) * 1000003}
	}
	big.Reads = []PartitionRecords{{Partition: 0, Records: recs}}
	small := NewOp(2, Invoke, FPoll)
	ops := []Op{small, big, small, big, small}
	data := writeHistory(t, ops, Header{})
	if len(data) < 2*chunkSize {
		t.Fatalf("only %d bytes", len(data))
	}
	r, err := NewReader(bytes.NewReader(data), "big")
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	err = r.Scan(2, func(op *Op, off int64) error {
		if want := AppendOp(nil, &ops[i]); string(AppendOp(nil, op)) != string(want) {
			t.Fatalf("op %d differs", i)
		}
		var at Op
		if err := ReadOpAt(bytes.NewReader(data), off, "big", &at); err != nil || at.Process != ops[i].Process {
			t.Fatalf("op %d at byte %d: %v", i, off, err)
		}
		i++
		return nil
	})
	if err != nil || i != len(ops) {
		t.Fatalf("err %v after %d ops", err, i)
	}
}
