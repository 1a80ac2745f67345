package checker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/scripttest"
)

func openFile(path string) OpenFunc {
	return func() (io.ReadCloser, error) { return os.Open(path) }
}

// TestGolden checks one history per anomaly (and a few valid ones) from
// testdata/: the anomaly counts must be exactly the expected ones, the first
// example must name the expected value or offset and carry its operations,
// and the whole verdict must match the golden <name>.verdict.json.
func TestGolden(t *testing.T) {
	tests := []struct {
		name      string
		valid     Validity
		anomalies map[string]int64
		lin       string
		// exValue/exOffset/exRaw: the first example of the anomaly.
		exValue  int64
		exOffset int64
		exRaw    string
		exOps    int
	}{
		{name: "clean", valid: Valid, lin: "ok"},
		{name: "info-read", valid: Valid, lin: "ok"},
		{name: "faults", valid: Valid, lin: "ok"},
		{name: "outage", valid: Valid, lin: "ok"},
		{name: "lost-write", valid: Invalid, anomalies: map[string]int64{LostWrite: 1}, lin: "ok", exValue: 2, exOffset: 1, exOps: 3},
		{name: "unseen", valid: Invalid, anomalies: map[string]int64{Unseen: 1}, lin: "ok", exValue: 2, exOffset: 1, exOps: 2},
		{name: "unseen-no-drain", valid: Unknown, anomalies: map[string]int64{Unseen: 1}, lin: "ok", exValue: 2, exOffset: 1, exOps: 2},
		{name: "duplicate", valid: Invalid, anomalies: map[string]int64{Duplicate: 1}, lin: "illegal", exValue: 1, exOffset: -1, exOps: 2},
		{name: "inconsistent-offsets", valid: Invalid, anomalies: map[string]int64{InconsistentOffsets: 1}, lin: "illegal", exValue: -1, exOffset: 1, exOps: 2},
		{name: "nonmonotonic-send", valid: Invalid, anomalies: map[string]int64{NonmonotonicSend: 1}, lin: "illegal", exValue: -1, exOffset: -1, exOps: 2},
		{name: "nonmonotonic-poll", valid: Invalid, anomalies: map[string]int64{NonmonotonicPoll: 1}, lin: "ok", exValue: -1, exOffset: -1, exOps: 2},
		{name: "poll-skip", valid: Invalid, anomalies: map[string]int64{PollSkip: 1}, lin: "ok", exValue: -1, exOffset: -1, exOps: 2},
		{name: "aborted-read", valid: Invalid, anomalies: map[string]int64{AbortedRead: 1}, lin: "illegal", exValue: 2, exOffset: 1, exOps: 3},
		{name: "unexpected", valid: Invalid, anomalies: map[string]int64{Unexpected: 1}, lin: "illegal", exValue: 99, exOffset: 1, exOps: 1},
		{name: "future-read", valid: Invalid, anomalies: map[string]int64{FutureRead: 1}, lin: "illegal", exValue: 1, exOffset: 0, exOps: 2},
		{name: "send-below-read", valid: Invalid, anomalies: map[string]int64{SendBelowRead: 1}, lin: "illegal", exValue: 2, exOffset: -1, exOps: 3},
		{name: "nonmonotonic-send-realtime", valid: Invalid, anomalies: map[string]int64{NonmonotonicSendRealtime: 1}, lin: "illegal", exValue: 2, exOffset: -1, exOps: 3},
		{name: "lost-info-read", valid: Invalid, anomalies: map[string]int64{LostWrite: 1}, lin: "ok", exValue: 2, exOffset: 1, exOps: 3},
		{name: "unexpected-text", valid: Invalid, anomalies: map[string]int64{Unexpected: 2}, lin: "illegal", exValue: -1, exOffset: 1, exRaw: "x", exOps: 1},
		{name: "torn", valid: Unknown, lin: "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.name+".jsonl")
			v, err := Check(openFile(path), path, Options{Linearizable: LinOn})
			if err != nil {
				t.Fatal(err)
			}
			if v.Valid != tc.valid {
				t.Errorf("valid = %s, want %s (anomalies %v)", v.Valid, tc.valid, v.Anomalies)
			}
			want := tc.anomalies
			if want == nil {
				want = map[string]int64{}
			}
			if fmt.Sprint(v.Anomalies) != fmt.Sprint(want) {
				t.Errorf("anomalies = %v, want %v", v.Anomalies, want)
			}
			if v.Linearizable.Result != tc.lin {
				t.Errorf("linearizable = %q, want %q", v.Linearizable.Result, tc.lin)
			}
			if v.TruncatedHistory != (tc.name == "torn") {
				t.Errorf("truncated = %v", v.TruncatedHistory)
			}
			for kind, n := range tc.anomalies {
				exs := v.Examples[kind]
				if int64(len(exs)) != n {
					t.Fatalf("%s: %d examples, want %d", kind, len(exs), n)
				}
				ex := exs[0]
				if ex.Raw != tc.exRaw {
					t.Errorf("%s example raw = %q, want %q", kind, ex.Raw, tc.exRaw)
				}
				if tc.exValue >= 0 && (ex.Value == nil || *ex.Value != tc.exValue) {
					t.Errorf("%s example value = %v, want %d", kind, ex.Value, tc.exValue)
				}
				if tc.exOffset >= 0 && (ex.Offset == nil || *ex.Offset != tc.exOffset) {
					t.Errorf("%s example offset = %v, want %d", kind, ex.Offset, tc.exOffset)
				}
				if len(ex.Ops) != tc.exOps {
					t.Errorf("%s example has %d ops, want %d: %s", kind, len(ex.Ops), tc.exOps, ex.Ops)
				}
			}
			compareGolden(t, tc.name, v)
		})
	}
}

// compareGolden compares v with testdata/<name>.verdict.json (rewritten
// with -rewrite).
func compareGolden(t *testing.T, name string, v *Verdict) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	scripttest.Golden(t, filepath.Join("testdata", name+".verdict.json"), string(got)+"\n")
}

// TestCheckOpsMatchesCheck: the in-memory and streaming paths agree.
func TestCheckOpsMatchesCheck(t *testing.T) {
	for _, name := range []string{"clean", "lost-write", "poll-skip", "faults", "duplicate", "aborted-read", "outage", "txn-clean", "txn-g1c", "txn-precommitted-read", "txn-out-of-order",
		"delivery-redelivered", "delivery-skipped", "delivery-clean"} {
		path := filepath.Join("testdata", name+".jsonl")
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		h, ops, err := history.ReadAll(f, path)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		// CheckOps has no header to take the partition count from.
		a := CheckOps(ops, Options{Linearizable: LinOn, Partitions: h.Partitions})
		b, err := Check(openFile(path), path, Options{Linearizable: LinOn})
		if err != nil {
			t.Fatal(err)
		}
		// Without io.ReaderAt, examples come from a second sequential pass.
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Check(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, path, Options{Linearizable: LinOn})
		if err != nil {
			t.Fatal(err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		jc, _ := json.Marshal(c)
		if !bytes.Equal(ja, jb) || !bytes.Equal(jb, jc) {
			t.Errorf("%s: CheckOps, Check and Check without ReaderAt differ:\n%s\n%s\n%s", name, ja, jb, jc)
		}
	}
}

func TestMalformedLineIsAnError(t *testing.T) {
	tests := []struct {
		name string
		text string
		line string
	}{
		{"bad json mid-file", "{\"isrlab_history\":1}\n{\"index\":0,\"time\":1,\"process\":0,\"type\":\"invoke\",\"f\":\"send\",\"value\":1}\n{\"index\":1,oops}\n{\"index\":2,\"time\":3,\"process\":0,\"type\":\"ok\",\"f\":\"send\"}\n", "h.jsonl:3:"},
		{"unknown type", "{\"isrlab_history\":1}\n{\"index\":0,\"time\":1,\"process\":0,\"type\":\"maybe\",\"f\":\"send\"}\n", "h.jsonl:2:"},
		{"no header", "{\"index\":0,\"time\":1,\"process\":0,\"type\":\"ok\",\"f\":\"send\"}\n", "h.jsonl:1:"},
		{"float offset", "{\"isrlab_history\":1}\n{\"index\":0,\"time\":1,\"process\":0,\"type\":\"ok\",\"f\":\"send\",\"offset\":1.5}\n", "h.jsonl:2:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(tc.text)), nil }
			_, err := Check(open, "h.jsonl", Options{})
			if err == nil || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("err = %v, want one naming %s", err, tc.line)
			}
			if errors.Is(err, history.ErrTruncated) {
				t.Errorf("a mid-file error must not be reported as truncation: %v", err)
			}
		})
	}
}

// TestRandomValidHistoriesNeverFlag is the property test: simulated
// linearizable logs, with fail and info outcomes (half of the info sends
// written and later read), faults and cluster events, are always valid, the
// real-time checks and linearizability included, also on a coarse clock.
func TestRandomValidHistoriesNeverFlag(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for i := range 40 {
		o := history.SynthOptions{
			Ops:        int64(200 + rng.IntN(3000)),
			Partitions: 1 + rng.IntN(5),
			Producers:  1 + rng.IntN(6),
			Consumers:  1 + rng.IntN(3),
			Seed:       rng.Uint64(),
			InfoRate:   rng.Float64() * 0.3,
			FailRate:   rng.Float64() * 0.2,
			Faults:     rng.IntN(2) == 0,
		}
		var m history.Memory
		if _, err := history.Synthesize(&m, o); err != nil {
			t.Fatal(err)
		}
		coarse := int64(1)
		if i%2 == 1 {
			// A coarser clock gives many operations the same time: it only
			// removes real-time orderings, so the history stays valid,
			// and operations at one time are not ordered.
			coarse = int64(1000 + rng.IntN(20000))
			for j := range m.Ops {
				m.Ops[j].Time = m.Ops[j].Time / coarse * coarse
			}
		}
		v := CheckOps(m.Ops, Options{Linearizable: LinOn})
		if v.Valid != Valid || len(v.Anomalies) != 0 || v.Linearizable.Result != "ok" {
			t.Fatalf("case %d (%+v, clock %d ns): valid=%s anomalies=%v lin=%s examples=%v", i, o, coarse, v.Valid, v.Anomalies, v.Linearizable.Result, v.Examples)
		}
		if o.InfoRate > 0.05 && v.Stats.InfoRead == 0 && v.Stats.SendsInfo > 20 {
			t.Errorf("case %d: no info send was read; the property is not exercised", i)
		}
	}
}

// TestInjectedAnomaliesAreFound: every kind the generator injects is found.
func TestInjectedAnomaliesAreFound(t *testing.T) {
	var m history.Memory
	st, err := history.Synthesize(&m, history.SynthOptions{Ops: 20000, Partitions: 4, Seed: 9, InfoRate: 0.05, FailRate: 0.05, AnomalyEvery: 5000})
	if err != nil {
		t.Fatal(err)
	}
	v := CheckOps(m.Ops, Options{Linearizable: LinOff})
	for _, kind := range AnomalyNames {
		if slices.Contains(TxnAnomalyNames, kind) {
			continue // transactional only: see TestTxnGolden
		}
		if slices.Contains(deliveryAnomalies, kind) {
			continue // consumer groups' processing only: see TestDeliveryGolden
		}
		if st.Injected[kind] == 0 {
			t.Errorf("generator injected no %s", kind)
		}
		if v.Anomalies[kind] == 0 {
			t.Errorf("injected %d %s, found none", st.Injected[kind], kind)
		}
		for _, ex := range v.Examples[kind] {
			if len(ex.Ops) == 0 {
				t.Errorf("%s example without ops: %+v", kind, ex)
			}
		}
	}
	if v.Valid != Invalid {
		t.Errorf("valid = %s", v.Valid)
	}
}

func TestLinAutoSkipsLargeHistories(t *testing.T) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 3000, Partitions: 2, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	v := CheckOps(m.Ops, Options{LinMaxOps: 100})
	if v.Linearizable.Result != "skipped" || v.Valid != Valid {
		t.Errorf("lin = %+v, valid = %s", v.Linearizable, v.Valid)
	}
}

func TestValidityJSON(t *testing.T) {
	for _, v := range []Validity{Valid, Invalid, Unknown} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back Validity
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Errorf("%s -> %s -> %s (%v)", v, b, back, err)
		}
	}
}

func TestVisualizeIllegal(t *testing.T) {
	path := filepath.Join("testdata", "future-read.jsonl")
	v, err := Check(openFile(path), path, Options{Linearizable: LinOn})
	if err != nil {
		t.Fatal(err)
	}
	if !v.HasVisualization() {
		t.Fatal("no visualization for an illegal history")
	}
	var buf bytes.Buffer
	if err := v.Visualize(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "<html") {
		t.Errorf("visualization is not HTML: %.200s", buf.String())
	}
}

// TestVisualizeIllegalPieceAfterOthers: the visualization of an illegal
// piece that starts from a log earlier pieces left (its search does not
// start empty) replays it from that log.
func TestVisualizeIllegalPieceAfterOthers(t *testing.T) {
	var ops []history.Op
	at := int64(0)
	add := func(op history.Op) {
		at += 10
		op.Time = at
		ops = append(ops, op)
	}
	send := func(proc int, v, off int64) {
		op := history.NewOp(proc, history.Invoke, history.FSend)
		op.Value, op.HasValue, op.Partition = v, true, 0
		add(op)
		op.Type, op.Offset = history.OK, off
		add(op)
	}
	for i := range int64(5) {
		send(0, i, i)
	}
	// A send and a poll in flight together: the send appends offset 5, and
	// the poll returns it and an offset 6 nobody wrote. The piece's longest
	// partial linearization is the send, from the log of offsets 0-4.
	inv := history.NewOp(0, history.Invoke, history.FSend)
	inv.Value, inv.HasValue, inv.Partition = 10, true, 0
	add(inv)
	add(history.NewOp(1, history.Invoke, history.FPoll))
	ack := inv
	ack.Type, ack.Offset = history.OK, 5
	add(ack)
	poll := history.NewOp(1, history.OK, history.FPoll)
	poll.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: 5, Value: 10}, {Offset: 6, Value: 77}}}}
	add(poll)
	v := CheckOps(ops, Options{Linearizable: LinOn})
	if v.Linearizable.Result != "illegal" || v.Linearizable.Illegal[0].Piece != 5 {
		t.Fatalf("lin %+v, anomalies %v", v.Linearizable, v.Anomalies)
	}
	var buf bytes.Buffer
	if err := v.Visualize(&buf); err != nil || !strings.Contains(buf.String(), "<html") {
		t.Fatalf("visualization: %v", err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := int64(1); i <= 1000; i++ {
		h.add(i * 1000) // 1 µs .. 1 ms
	}
	q := h.quantiles()
	tests := []struct {
		name      string
		got, want float64
	}{
		{"p50", q.P50, 0.5}, {"p90", q.P90, 0.9}, {"p99", q.P99, 0.99}, {"max", q.Max, 1.0}, {"min", q.Min, 0.001},
	}
	for _, tc := range tests {
		if tc.got < tc.want*0.93 || tc.got > tc.want*1.07 {
			t.Errorf("%s = %g ms, want %g ± 7%%", tc.name, tc.got, tc.want)
		}
	}
}

// TestLinTimeoutIsUnknown: a search cut short is unknown, never a pass.
func TestLinTimeoutIsUnknown(t *testing.T) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 5000, Partitions: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	v := CheckOps(m.Ops, Options{Linearizable: LinOn, LinTimeout: time.Nanosecond})
	if v.Linearizable.Result != "unknown" || v.Valid != Unknown {
		t.Errorf("lin %+v, valid %s; want unknown", v.Linearizable, v.Valid)
	}
}

// TestLinManyUnknownSends: many info sends (half of them written) and many
// processes must neither flag nor blow up the search.
func TestLinManyUnknownSends(t *testing.T) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 60000, Partitions: 1, Producers: 16, Consumers: 1, Seed: 8, InfoRate: 0.4, FailRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	v := CheckOps(m.Ops, Options{Linearizable: LinOn, LinTimeout: 2 * time.Minute})
	if v.Linearizable.Result != "ok" || v.Valid != Valid {
		t.Errorf("lin %+v, valid %s, anomalies %v", v.Linearizable, v.Valid, v.Anomalies)
	}
}

// FuzzCheck: whatever a history file holds, the checker returns a verdict
// or an error, never panics, and never allocates for absurd numbers.
func FuzzCheck(f *testing.F) {
	for _, name := range []string{"clean", "lost-write", "poll-skip", "faults", "torn", "duplicate"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".jsonl"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("{\"isrlab_history\":1}\n{\"process\":1,\"type\":\"ok\",\"f\":\"poll\",\"offsets\":{\"2147483647\":[[268435455,1],[9223372036854775807,-9223372036854775808]]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		v, err := Check(open, "fuzz.jsonl", Options{Linearizable: LinOn, LinTimeout: 200 * time.Millisecond})
		if err != nil {
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("verdict does not encode: %v", err)
		}
		if len(v.Anomalies) > 0 && v.Valid == Valid {
			t.Fatalf("anomalies %v but valid", v.Anomalies)
		}
	})
}

// TestAbsurdNumbersStaySmall: huge values, offsets, partitions and process
// numbers from a corrupt history must not allocate their size.
func TestAbsurdNumbersStaySmall(t *testing.T) {
	send := history.NewOp(1<<30, history.OK, history.FSend)
	send.Value, send.HasValue, send.Partition, send.Offset = 1<<26+5, true, 1<<30, 1<<27+3
	poll := history.NewOp(1<<30, history.OK, history.FPoll)
	poll.Reads = []history.PartitionRecords{{Partition: 1<<31 - 1, Records: []history.Record{{Offset: 1<<28 - 1, Value: 1<<27 - 1}, {Offset: 1 << 62, Value: -5}}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := CheckOps([]history.Op{send, poll}, Options{Linearizable: LinOn})
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("checking two ops allocated %d MB", grew>>20)
	}
	if v.Anomalies[Unexpected] != 2 || v.Anomalies[Unseen] != 1 {
		t.Errorf("anomalies %v", v.Anomalies)
	}
}

func TestClusterSummary(t *testing.T) {
	state := func(part, leader, epoch int32, hw int64, isr ...int32) history.Op {
		op := history.NewOp(history.Cluster, history.Info, history.FState)
		op.Partition, op.Leader, op.Epoch, op.HW, op.ISR = part, leader, epoch, hw, isr
		return op
	}
	ops := []history.Op{
		state(0, 1, 0, 0, 1, 2, 3),
		state(0, 1, 0, 5, 1, 2),    // shrink
		state(0, 2, 1, 5, 2),       // leader change, shrink
		state(0, 2, 1, 9, 2, 1, 3), // expand
		state(1, 3, 0, 1, 3, 1),
		state(1, 3, 0, 2, 1, 3), // same ISR, reordered
	}
	got := CheckOps(ops, Options{}).Cluster
	want := ClusterSummary{Events: 6, LeaderChanges: 1, ISRShrinks: 2, ISRExpands: 1, Partitions: map[string]PartitionFlux{
		"0": {LeaderChanges: 1, ISRShrinks: 2, ISRExpands: 1, MaxEpoch: 1, MaxHW: 9},
		"1": {MaxEpoch: 0, MaxHW: 2},
	}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestTimelineAndFaultWindows(t *testing.T) {
	fault := func(f string, typ history.Type, at int64) history.Op {
		op := history.NewOp(history.Nemesis, typ, f)
		op.Time = at
		return op
	}
	send := func(at int64, typ history.Type) []history.Op {
		inv := history.NewOp(0, history.Invoke, history.FSend)
		inv.Time, inv.Value, inv.HasValue = at, at, true
		done := inv
		done.Type, done.Time = typ, at+1
		return []history.Op{inv, done}
	}
	var ops []history.Op
	ops = append(ops, fault("start-partition", history.Invoke, 2e9), fault("start-kill", history.Invoke, 3e9))
	ops = append(ops, send(2.5e9, history.Info)...)
	ops = append(ops, fault("heal", history.Info, 4e9))
	ops = append(ops, fault("start-pause", history.Invoke, 5e9))
	// Three hours of one send per second: 10800 buckets merge into 6 s ones.
	for s := int64(0); s < 3*3600; s++ {
		ops = append(ops, send(s*1e9+5e8, history.OK)...)
	}
	v := CheckOps(ops, Options{Linearizable: LinOff})
	tl := v.Timeline
	if tl.BucketSeconds != 6 || len(tl.Buckets) != 1800 {
		t.Fatalf("bucket %v s, %d buckets", tl.BucketSeconds, len(tl.Buckets))
	}
	var ok, info int64
	for _, b := range tl.Buckets {
		ok += b.SendOK
		info += b.SendInfo
	}
	if ok != 3*3600 || info != 1 || tl.Buckets[1].T != 6 {
		t.Errorf("ok %d info %d, second bucket at %v", ok, info, tl.Buckets[1].T)
	}
	want := []FaultWindow{{"kill", 3, 4}, {"partition", 2, 4}, {"pause", 5, -1}}
	if fmt.Sprint(tl.Faults) != fmt.Sprint(want) {
		t.Errorf("faults %v, want %v", tl.Faults, want)
	}
}

// TestNewKindsHiddenInConcurrentHistory hides each minimal history of a
// new kind inside a large concurrent one (8 producers, 3 consumers, faults,
// fail and info outcomes), on a partition of its own, with its operations
// spread among the others: exactly the hidden anomaly must come out, with
// its value, and linearizability must blame only the hidden partition.
func TestNewKindsHiddenInConcurrentHistory(t *testing.T) {
	const hidden = 4
	var bg history.Memory
	if _, err := history.Synthesize(&bg, history.SynthOptions{Ops: 30000, Partitions: hidden, Producers: 8, Consumers: 3,
		Seed: 77, InfoRate: 0.05, FailRate: 0.02, Faults: true}); err != nil {
		t.Fatal(err)
	}
	if v := CheckOps(bg.Ops, Options{Linearizable: LinOn}); v.Valid != Valid {
		t.Fatalf("background history: valid %s, anomalies %v, lin %+v", v.Valid, v.Anomalies, v.Linearizable)
	}
	tests := []struct {
		name    string
		kind    string
		n       int64
		value   int64 // in the golden history; -1: a text value
		illegal bool
	}{
		{"future-read", FutureRead, 1, 1, true},
		{"send-below-read", SendBelowRead, 1, 2, true},
		{"nonmonotonic-send-realtime", NonmonotonicSendRealtime, 1, 2, true},
		{"lost-info-read", LostWrite, 1, 2, false},
		{"unexpected-text", Unexpected, 2, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.name+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			_, pattern, err := history.ReadAll(f, tc.name)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			const valueBase = 1 << 40
			var ops []history.Op
			next := 0
			for i, op := range bg.Ops {
				op = op.Clone()
				op.Time *= 1000 // room between neighbours
				ops = append(ops, op)
				// Spread the pattern over the middle of the history.
				for next < len(pattern) && i == 5000+next*(20000/len(pattern)) {
					p := pattern[next].Clone()
					p.Time = op.Time + 1 + int64(next)
					p.Process += 1000
					if p.Partition == 0 {
						p.Partition = hidden
					}
					if p.HasValue && p.F == history.FSend {
						p.Value += valueBase
					}
					for j := range p.Reads {
						p.Reads[j].Partition = hidden
						for k := range p.Reads[j].Records {
							if r := &p.Reads[j].Records[k]; r.Value != history.BadValue {
								r.Value += valueBase
							}
						}
					}
					if p.Partitions != nil {
						p.Partitions = []int32{hidden}
					}
					ops = append(ops, p)
					next++
				}
			}
			if next != len(pattern) {
				t.Fatalf("hid %d of %d operations", next, len(pattern))
			}
			for i := range ops {
				ops[i].Index = int64(i)
			}
			v := CheckOps(ops, Options{Linearizable: LinOn})
			if fmt.Sprint(v.Anomalies) != fmt.Sprint(map[string]int64{tc.kind: tc.n}) {
				t.Fatalf("anomalies %v, want %s=%d; examples %v", v.Anomalies, tc.kind, tc.n, v.Examples)
			}
			ex := v.Examples[tc.kind][0]
			if ex.Partition != hidden || tc.value >= 0 && (ex.Value == nil || *ex.Value != valueBase+tc.value) || tc.value < 0 && ex.Raw == "" {
				t.Errorf("example %+v", ex)
			}
			l := v.Linearizable
			switch {
			case tc.illegal && (l.Result != "illegal" || fmt.Sprint(l.IllegalPartitions) != fmt.Sprint([]int32{hidden})):
				t.Errorf("lin %s, illegal partitions %v; want only %d", l.Result, l.IllegalPartitions, hidden)
			case !tc.illegal && l.Result != "ok":
				t.Errorf("lin %+v", l)
			}
		})
	}
}

// TestRealtimeNeedsStrictlyEarlier: the real-time kinds order two
// operations only when one completed strictly before the other was invoked;
// at the same nanosecond they are concurrent.
func TestRealtimeNeedsStrictlyEarlier(t *testing.T) {
	tests := []struct {
		name string
		kind string
		// build returns the history with the ordering operations gap ns
		// apart.
		build func(gap int64) []history.Op
	}{
		{"future-read", FutureRead, func(gap int64) []history.Op {
			poll := history.NewOp(1, history.OK, history.FPoll)
			poll.Time = 100
			poll.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: 0, Value: 1}}}}
			inv := history.NewOp(0, history.Invoke, history.FSend)
			inv.Value, inv.HasValue, inv.Partition, inv.Time = 1, true, 0, 100+gap
			ok := inv
			ok.Type, ok.Offset, ok.Time = history.OK, 0, 200
			return []history.Op{poll, inv, ok}
		}},
		{"send-below-read", SendBelowRead, func(gap int64) []history.Op {
			poll := history.NewOp(1, history.OK, history.FPoll)
			poll.Time = 100
			poll.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: 1, Value: 1}}}}
			inv := history.NewOp(0, history.Invoke, history.FSend)
			inv.Value, inv.HasValue, inv.Partition, inv.Time = 2, true, 0, 100+gap
			ok := inv
			ok.Type, ok.Offset, ok.Time = history.OK, 0, 200
			return []history.Op{poll, inv, ok}
		}},
		{"nonmonotonic-send-realtime", NonmonotonicSendRealtime, func(gap int64) []history.Op {
			a := history.NewOp(0, history.OK, history.FSend)
			a.Value, a.HasValue, a.Partition, a.Offset, a.Time = 1, true, 0, 1, 100
			inv := history.NewOp(3, history.Invoke, history.FSend)
			inv.Value, inv.HasValue, inv.Partition, inv.Time = 2, true, 0, 100+gap
			ok := inv
			ok.Type, ok.Offset, ok.Time = history.OK, 0, 200
			return []history.Op{a, inv, ok}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n := CheckOps(tc.build(0), Options{Linearizable: LinOff}).Anomalies[tc.kind]; n != 0 {
				t.Errorf("at the same nanosecond: %d %s", n, tc.kind)
			}
			if n := CheckOps(tc.build(1), Options{Linearizable: LinOff}).Anomalies[tc.kind]; n != 1 {
				t.Errorf("1 ns apart: %d %s, want 1", n, tc.kind)
			}
		})
	}
}
