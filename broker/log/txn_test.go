package log

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// producerBatch is makeBatch with producer id, epoch and base sequence
// set, transactional when txn.
func producerBatch(tb testing.TB, pid int64, epoch int16, seq int32, records int, txn bool) []byte {
	tb.Helper()
	b := makeBatch(tb, batchSpec{records: records, valueSize: 8, ts: 1000})
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(seq))
	if txn {
		binary.BigEndian.PutUint16(b[offAttributes:], binary.BigEndian.Uint16(b[offAttributes:])|AttrTransactional)
	}
	binary.BigEndian.PutUint32(b[offCRC:], crc32c(b[offAttributes:]))
	return b
}

func mustAppend(tb testing.TB, l *Log, data []byte) AppendResult {
	tb.Helper()
	res, err := l.AppendAsLeader(data, 0)
	if err != nil {
		tb.Fatalf("append: %v", err)
	}
	return res
}

// txnSummary is a log's transaction state in one comparable line.
func txnSummary(l *Log, hw int64) string {
	ongoing := l.Producers().OngoingTxns()
	var o []string
	for _, pid := range slices.Sorted(func(yield func(int64) bool) {
		for k := range ongoing {
			if !yield(k) {
				return
			}
		}
	}) {
		o = append(o, fmt.Sprintf("%d@%d", pid, ongoing[pid]))
	}
	return fmt.Sprintf("ongoing=%v aborted=%v lso=%d", o, l.AbortedTxns(0, l.LogEndOffset()), l.LastStableOffset(hw))
}

func TestControlBatchRoundTrip(t *testing.T) {
	for _, m := range []Marker{{Commit: true, CoordinatorEpoch: 7}, {Commit: false, CoordinatorEpoch: 0}, {Commit: true, CoordinatorEpoch: -1}} {
		b := ControlBatch(42, 3, m, 1234)
		bs, err := ParseBatches(b, 0)
		if err != nil {
			t.Fatalf("%+v: the control batch does not parse: %v", m, err)
		}
		if bi := bs[0]; !bi.Control() || !bi.Transactional() || bi.ProducerID != 42 || bi.ProducerEpoch != 3 || bi.RecordCount != 1 || bi.BaseSequence != -1 {
			t.Fatalf("%+v: header %+v", m, bi)
		}
		got, err := ParseMarker(b)
		if err != nil || got != m {
			t.Fatalf("marker %+v came back as %+v, %v", m, got, err)
		}
	}
	// A data batch is not a marker; a control batch of another type neither.
	if _, err := ParseMarker(makeBatch(t, batchSpec{})); err == nil {
		t.Fatal("a data batch parsed as a marker")
	}
	b := ControlBatch(1, 0, Marker{}, 0)
	keyType := bytes.Index(b[BatchHeaderSize:], []byte{8, 0, 0, 0, 0}) // key length 4 (zigzag 8), version 0, type 0
	if keyType < 0 {
		t.Fatal("key not found in the control record")
	}
	b[BatchHeaderSize+keyType+4] = 5
	if _, err := ParseMarker(b); err == nil {
		t.Fatal("control type 5 parsed as a transaction marker")
	}
}

// TestTxnStateAndIndex: markers end transactions, aborts go to the
// .txnindex in Kafka's format, the LSO follows the open transactions.
func TestTxnStateAndIndex(t *testing.T) {
	l := openTest(t, DefaultConfig())
	mustAppend(t, l, producerBatch(t, 7, 0, 0, 2, true)) // 0..1
	mustAppend(t, l, producerBatch(t, 8, 0, 0, 1, true)) // 2
	mustAppend(t, l, makeBatch(t, batchSpec{}))          // 3
	if got := l.LastStableOffset(4); got != 0 {
		t.Fatalf("LSO with 7 open from 0: %d", got)
	}
	res := mustAppend(t, l, ControlBatch(7, 0, Marker{CoordinatorEpoch: 1}, 0)) // 4: abort 7
	if len(res.Completed) != 1 || res.Completed[0] != (CompletedTxn{ProducerID: 7, FirstOffset: 0, LastOffset: 4, Aborted: true}) {
		t.Fatalf("completed: %+v", res.Completed)
	}
	// While the HW is not past the marker the abort is not committed: the
	// aborted transaction still bounds the LSO.
	if got := l.LastStableOffset(4); got != 0 {
		t.Fatalf("LSO with the abort above the HW: %d", got)
	}
	if got := l.LastStableOffset(5); got != 2 {
		t.Fatalf("LSO with 8 open from 2: %d", got)
	}
	mustAppend(t, l, ControlBatch(8, 0, Marker{Commit: true, CoordinatorEpoch: 1}, 0)) // 5
	if got := l.LastStableOffset(6); got != 6 {
		t.Fatalf("LSO with no open transaction: %d", got)
	}
	want := []AbortedTxn{{ProducerID: 7, FirstOffset: 0, LastOffset: 4, LastStableOffset: 2}}
	if got := l.AbortedTxns(0, 6); !slices.Equal(got, want) {
		t.Fatalf("aborted: %+v", got)
	}
	if got := l.AbortedTxns(5, 6); len(got) != 0 {
		t.Fatalf("aborted after the marker: %+v", got)
	}
	data, err := os.ReadFile(filepath.Join(l.Dir(), segmentName(0)+TxnIndexFileSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, AppendAbortedTxn(nil, want[0])) || len(data) != 34 {
		t.Fatalf(".txnindex holds %x", data)
	}
	if e, _ := l.Producers().Entry(8); e.CoordinatorEpoch != 1 || e.TxnFirstOffset != -1 {
		t.Fatalf("producer 8: %+v", e)
	}
}

// TestTxnTruncation: truncating across a marker reopens its transaction
// and drops its index entry; truncating into the transaction forgets it.
func TestTxnTruncation(t *testing.T) {
	l := openTest(t, smallConfig())
	mustAppend(t, l, producerBatch(t, 7, 0, 0, 3, true)) // 0..2
	for i := 0; i < 40; i++ {                            // several segments
		mustAppend(t, l, makeBatch(t, batchSpec{records: 2, valueSize: 100}))
	}
	mark := mustAppend(t, l, ControlBatch(7, 0, Marker{}, 0)).LastOffset
	mustAppend(t, l, producerBatch(t, 9, 0, 0, 1, true))
	if l.NumSegments() < 3 {
		t.Fatalf("want several segments, have %d", l.NumSegments())
	}
	if got := txnSummary(l, l.LogEndOffset()); got != fmt.Sprintf("ongoing=[9@%d] aborted=[{7 0 %d %d}] lso=%d", mark+1, mark, mark+1, mark+1) {
		t.Fatalf("before truncation: %s", got)
	}
	if err := l.TruncateTo(mark); err != nil {
		t.Fatal(err)
	}
	if got := txnSummary(l, l.LogEndOffset()); got != "ongoing=[7@0] aborted=[] lso=0" {
		t.Fatalf("after truncating the marker: %s", got)
	}
	if err := l.TruncateTo(2); err != nil {
		t.Fatal(err)
	}
	if got := txnSummary(l, l.LogEndOffset()); got != "ongoing=[] aborted=[] lso=0" {
		t.Fatalf("after truncating into the transaction: %s", got)
	}
	if _, ok := l.Producers().Entry(7); ok {
		t.Fatal("producer 7 still known after its only batch was cut")
	}
	snaps, _ := listSnapshots(l.Dir())
	for _, s := range snaps {
		if s > l.LogEndOffset() {
			t.Fatalf("snapshot %d above the LEO %d after truncation", s, l.LogEndOffset())
		}
	}
}

// buildTxnLog writes an aborted transaction, a committed one, an open one
// and filler over several segments; it returns the expected summary.
func buildTxnLog(t *testing.T, l *Log) string {
	t.Helper()
	mustAppend(t, l, producerBatch(t, 7, 0, 0, 2, true))
	for i := 0; i < 30; i++ {
		mustAppend(t, l, makeBatch(t, batchSpec{records: 2, valueSize: 100}))
	}
	mustAppend(t, l, producerBatch(t, 8, 0, 0, 1, true))
	mustAppend(t, l, ControlBatch(7, 0, Marker{CoordinatorEpoch: 2}, 0))
	for i := 0; i < 30; i++ {
		mustAppend(t, l, makeBatch(t, batchSpec{records: 2, valueSize: 100}))
	}
	mustAppend(t, l, ControlBatch(8, 0, Marker{Commit: true, CoordinatorEpoch: 2}, 0))
	mustAppend(t, l, producerBatch(t, 9, 0, 0, 1, true)) // open
	mustAppend(t, l, producerBatch(t, 9, 0, 1, 1, true))
	if l.NumSegments() < 3 {
		t.Fatalf("want several segments, have %d", l.NumSegments())
	}
	return txnSummary(l, l.LogEndOffset())
}

func logDirFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	return m
}

// TestTxnStateAfterRestart: a clean shutdown snapshots the state at the
// LEO and the next Open replays nothing; after a crash the state is
// replayed from the last snapshot (taken at a roll), not from the start;
// both give the state as it was, with the aborted index.
func TestTxnStateAfterRestart(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, smallConfig())
			if err != nil {
				t.Fatal(err)
			}
			buildTxnLog(t, l)
			// Flushed up to here (a crash keeps it); then 9 is aborted and
			// 10 opens a transaction.
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			rp := l.RecoveryPoint()
			mustAppend(t, l, ControlBatch(9, 0, Marker{CoordinatorEpoch: 3}, 0))
			mustAppend(t, l, producerBatch(t, 10, 0, 0, 1, true))
			want := txnSummary(l, l.LogEndOffset())
			leo := l.LogEndOffset()
			snaps, _ := listSnapshots(dir)
			if len(snaps) == 0 {
				t.Fatal("no snapshot after rolls")
			}
			lastSnap := snaps[len(snaps)-1]
			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(snapshotPath(dir, leo)); err != nil {
					t.Fatalf("no snapshot at the LEO %d after a clean shutdown: %v", leo, err)
				}
			} else {
				l.abandon()
			}
			l2, err := Open(dir, smallConfig(), WithCleanShutdown(clean), WithRecoveryPoint(rp))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if got := txnSummary(l2, l2.LogEndOffset()); got != want {
				t.Fatalf("after restart:\n got %s\nwant %s", got, want)
			}
			wantReplayed := int64(0)
			if !clean {
				// Recovery rebuilds the segment holding the recovery point,
				// from the snapshot its roll took.
				wantReplayed = int64(len(readAll(t, l2, lastSnap)))
			}
			if l2.replayed != wantReplayed {
				t.Fatalf("replayed %d batches, want %d (from the snapshot at %d)", l2.replayed, wantReplayed, lastSnap)
			}
			// The idempotent state survives too: 9's next sequence is 2.
			if _, err := l2.Producers().CheckData(BatchInfo{ProducerID: 9, BaseSequence: 5}); err == nil {
				t.Fatal("a sequence gap for producer 9 was accepted after restart")
			}
		})
	}
}

// TestTxnIndexRebuild: a missing or corrupt .txnindex is reported and
// rebuilt from the log with the same entries; a corrupt snapshot is
// reported and an older one (or the log) used.
func TestTxnIndexRebuild(t *testing.T) {
	corruptions := map[string]func(t *testing.T, dir string){
		"txnindex missing": func(t *testing.T, dir string) {
			for _, f := range logDirFiles(t, dir, TxnIndexFileSuffix) {
				os.Remove(f)
			}
		},
		"txnindex torn": func(t *testing.T, dir string) {
			for _, f := range logDirFiles(t, dir, TxnIndexFileSuffix) {
				if fi, _ := os.Stat(f); fi.Size() > 0 {
					os.Truncate(f, fi.Size()-3)
				}
			}
		},
		"txnindex garbage": func(t *testing.T, dir string) {
			for _, f := range logDirFiles(t, dir, TxnIndexFileSuffix) {
				os.WriteFile(f, bytes.Repeat([]byte{0xff}, 34), 0o644)
			}
		},
		"snapshots corrupt": func(t *testing.T, dir string) {
			for _, f := range logDirFiles(t, dir, SnapshotFileSuffix) {
				data, _ := os.ReadFile(f)
				data[len(data)-1] ^= 0x55
				os.WriteFile(f, data, 0o644)
			}
		},
		"snapshots truncated": func(t *testing.T, dir string) {
			for _, f := range logDirFiles(t, dir, SnapshotFileSuffix) {
				os.Truncate(f, 9)
			}
		},
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, smallConfig())
			if err != nil {
				t.Fatal(err)
			}
			want := buildTxnLog(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			corrupt(t, dir)
			var logs bytes.Buffer
			l2, err := Open(dir, smallConfig(), WithCleanShutdown(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatalf("open after %s: %v", name, err)
			}
			defer l2.Close()
			if got := txnSummary(l2, l2.LogEndOffset()); got != want {
				t.Fatalf("after %s:\n got %s\nwant %s", name, got, want)
			}
			if !strings.Contains(logs.String(), "rebuilding") && !strings.Contains(logs.String(), "unreadable") {
				t.Fatalf("%s was not reported:\n%s", name, logs.String())
			}
			// The rebuilt files read back the same on the next open.
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			logs.Reset()
			l3, err := Open(dir, smallConfig(), WithCleanShutdown(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer l3.Close()
			if got := txnSummary(l3, l3.LogEndOffset()); got != want || strings.Contains(logs.String(), "rebuilding") {
				t.Fatalf("second open: %s\n%s", got, logs.String())
			}
		})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	l := openTest(t, DefaultConfig())
	buildTxnLogSmall(t, l)
	data := EncodeSnapshot(l.Producers())
	ps, err := DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(EncodeSnapshot(ps), data) {
		t.Fatal("decode then encode changed the snapshot")
	}
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x01
		if _, err := DecodeSnapshot(bad); err == nil {
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		}
	}
}

func buildTxnLogSmall(t *testing.T, l *Log) {
	mustAppend(t, l, producerBatch(t, 7, 0, 0, 2, true))
	mustAppend(t, l, producerBatch(t, 8, 1, 0, 1, false))
	mustAppend(t, l, ControlBatch(7, 0, Marker{CoordinatorEpoch: 2}, 0))
	mustAppend(t, l, producerBatch(t, 9, 0, 0, 1, true))
}

func FuzzParseMarker(f *testing.F) {
	f.Add(ControlBatch(1, 2, Marker{Commit: true, CoordinatorEpoch: 3}, 4))
	f.Add(ControlBatch(1, 2, Marker{}, 4)[:70])
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMarker(data)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to a batch that parses the same.
		if got, err := ParseMarker(ControlBatch(1, 0, m, 0)); err != nil || got != m {
			t.Fatalf("%+v re-encoded as %+v, %v", m, got, err)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	ps := newProducerState(10)
	ps.apply(BatchInfo{BaseOffset: 0, LastOffset: 1, ProducerID: 3, BaseSequence: 0, Attributes: AttrTransactional}, nil)
	ps.apply(BatchInfo{BaseOffset: 2, LastOffset: 2, ProducerID: 3, BaseSequence: -1, Attributes: AttrTransactional | AttrControl}, &Marker{CoordinatorEpoch: 1})
	ps.mapEnd = 10
	f.Add(EncodeSnapshot(ps))
	f.Add(EncodeSnapshot(newProducerState(0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		again, err := DecodeSnapshot(EncodeSnapshot(ps))
		if err != nil {
			t.Fatalf("a decoded snapshot does not decode after encoding: %v", err)
		}
		if !bytes.Equal(EncodeSnapshot(again), EncodeSnapshot(ps)) {
			t.Fatal("snapshot encoding is not stable")
		}
	})
}

func FuzzParseTxnIndex(f *testing.F) {
	f.Add(AppendAbortedTxn(AppendAbortedTxn(nil, AbortedTxn{1, 0, 4, 2}), AbortedTxn{2, 3, 9, 10}), int64(0), int64(20))
	f.Fuzz(func(t *testing.T, data []byte, base, next int64) {
		es, err := ParseTxnIndex(data, base, next)
		if err != nil {
			return
		}
		var enc []byte
		for _, e := range es {
			enc = AppendAbortedTxn(enc, e)
		}
		if !bytes.Equal(enc, data) {
			t.Fatal("entries do not re-encode to the file")
		}
	})
}
