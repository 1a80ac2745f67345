package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// crashLog writes batches of 3 records (epochs 1 then 2) into a log in dir and
// abandons it without Close, as a crash would. It returns the bytes of every
// batch as stored.
func crashLog(t testing.TB, dir string, cfg Config, batches int) [][]byte {
	t.Helper()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	for i := 0; i < batches; i++ {
		b := makeBatch(t, batchSpec{records: 3, valueSize: 100, ts: int64(1000 + i)})
		epoch := int32(1)
		if i >= batches/2 {
			epoch = 2
		}
		if _, err := l.AppendAsLeader(b, epoch); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, b)
	}
	l.abandon()
	return stored
}

func segmentFiles(t testing.TB, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func appendToFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

func TestRecovery(t *testing.T) {
	const n = 30
	half := makeBatch(t, batchSpec{records: 2, valueSize: 50})
	tests := []struct {
		name string
		// damage breaks the files of a crashed log; it returns how many of
		// the n batches must survive.
		damage func(t *testing.T, dir string, stored [][]byte) int
		opts   []Option
	}{
		{"no damage", func(t *testing.T, dir string, stored [][]byte) int { return n }, nil},
		{"garbage tail", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			appendToFile(t, logs[len(logs)-1], bytes.Repeat([]byte{0xde, 0xad}, 100))
			return n
		}, nil},
		{"zero tail (preallocated blocks)", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			appendToFile(t, logs[len(logs)-1], make([]byte, 4096))
			return n
		}, nil},
		{"half a batch", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			b := append([]byte{}, half...)
			patchBatch(b, int64(3*n), 2)
			appendToFile(t, logs[len(logs)-1], b[:len(b)/2])
			return n
		}, nil},
		{"torn last batch", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			last := logs[len(logs)-1]
			fi, _ := os.Stat(last)
			os.Truncate(last, fi.Size()-10)
			return n - 1
		}, nil},
		{"flipped bit in an old segment drops everything after", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			f, _ := os.OpenFile(logs[1], os.O_RDWR, 0)
			defer f.Close()
			// The second segment starts with batch k; corrupt its third batch.
			var base int64
			fmtSscan(filepath.Base(logs[1]), &base)
			k := int(base / 3)
			pos := int64(len(stored[k]) + len(stored[k+1]) + 100)
			var b [1]byte
			f.ReadAt(b[:], pos)
			b[0] ^= 0x10
			f.WriteAt(b[:], pos)
			return k + 2
		}, nil},
		{"corrupt index", func(t *testing.T, dir string, stored [][]byte) int {
			for _, idx := range segmentFiles(t, dir, IndexFileSuffix) {
				os.WriteFile(idx, bytes.Repeat([]byte{0x7f}, 64), 0o644)
			}
			for _, idx := range segmentFiles(t, dir, TimeIndexFileSuffix) {
				os.WriteFile(idx, []byte{1, 2, 3}, 0o644)
			}
			return n
		}, nil},
		{"missing indexes", func(t *testing.T, dir string, stored [][]byte) int {
			for _, idx := range append(segmentFiles(t, dir, IndexFileSuffix), segmentFiles(t, dir, TimeIndexFileSuffix)...) {
				os.Remove(idx)
			}
			return n
		}, nil},
		{"missing epoch checkpoint", func(t *testing.T, dir string, stored [][]byte) int {
			os.Remove(filepath.Join(dir, EpochCheckpointFile))
			return n
		}, nil},
		{"garbage tail, recovery point at the active segment", func(t *testing.T, dir string, stored [][]byte) int {
			logs := segmentFiles(t, dir, LogFileSuffix)
			appendToFile(t, logs[len(logs)-1], []byte("not a batch at all, but long enough to look like a header........"))
			return n
		}, []Option{WithRecoveryPoint(3 * n)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := smallConfig()
			stored := crashLog(t, dir, cfg, n)
			keep := tt.damage(t, dir, stored)
			l, err := Open(dir, cfg, tt.opts...)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			t.Cleanup(func() { l.Close() })
			if l.LogEndOffset() != int64(3*keep) {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), 3*keep)
			}
			got := readAll(t, l, 0)
			if len(got) != keep {
				t.Fatalf("%d batches readable, want %d", len(got), keep)
			}
			// Intact batches are byte-for-byte what was appended, every offset
			// is found through the rebuilt indexes.
			var want []byte
			for i := 0; i < keep; i++ {
				want = append(want, stored[i]...)
			}
			var all []byte
			for off := int64(0); off < l.LogEndOffset(); {
				r, err := l.Read(off, 1<<30, l.LogEndOffset(), true)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, r.Records...)
				bs, _ := ParseBatches(r.Records, 0)
				off = bs[len(bs)-1].NextOffset()
			}
			if !bytes.Equal(all, want) {
				t.Fatalf("recovered bytes differ from the appended ones (%d vs %d bytes)", len(all), len(want))
			}
			checkIndexed(t, l, 0, l.LogEndOffset(), 7)
			// The epoch cache matches the surviving batches.
			wantEpochs := []EpochEntry{{1, 0}}
			if keep > n/2 {
				wantEpochs = append(wantEpochs, EpochEntry{2, 3 * n / 2})
			}
			if got := l.Epochs().Entries(); !equalEpochs(got, wantEpochs) {
				t.Fatalf("epochs %v, want %v", got, wantEpochs)
			}
			// The log takes appends at the recovered end, then reopens cleanly.
			if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 1}), 3); err != nil {
				t.Fatal(err)
			}
			leo := l.LogEndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2, err := Open(dir, cfg, WithCleanShutdown(true))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if l2.LogEndOffset() != leo || l2.recoveredBytes != 0 {
				t.Fatalf("clean reopen: LEO %d want %d, recovery scanned %d bytes", l2.LogEndOffset(), leo, l2.recoveredBytes)
			}
			if got := readAll(t, l2, 0); len(got) != keep+1 {
				t.Fatalf("clean reopen reads %d batches, want %d", len(got), keep+1)
			}
		})
	}
}

// checkIndexed reads every step-th offset of [from, to) with a one-byte
// limit and fails unless the batch read is the one holding it (batches of
// 3 records from offset 0): the offset index finds each.
func checkIndexed(t *testing.T, l *Log, from, to, step int64) {
	t.Helper()
	for off := from; off < to; off += step {
		r, err := l.Read(off, 1, l.LogEndOffset(), true)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := ParseBatches(r.Records, 0)
		if err != nil || bs[0].BaseOffset != off/3*3 {
			t.Fatalf("read %d: %v %v", off, bs, err)
		}
	}
}

func equalEpochs(a, b []EpochEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func fmtSscan(name string, v *int64) {
	var n int64
	for _, c := range name {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	*v = n
}

func TestCleanReopenDoesNotScan(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 40, 3, 100, 5, 1000)
	leo, segs := l.LogEndOffset(), l.NumSegments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, idx := range segmentFiles(t, dir, IndexFileSuffix) {
		if fi, _ := os.Stat(idx); fi.Size() == int64(cfg.SegmentIndexBytes) {
			t.Fatalf("%s not trimmed at close", idx)
		}
	}
	l, err = Open(dir, cfg, WithCleanShutdown(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.recoveredBytes != 0 {
		t.Fatalf("clean open scanned %d bytes", l.recoveredBytes)
	}
	if l.LogEndOffset() != leo || l.NumSegments() != segs || l.RecoveryPoint() != leo {
		t.Fatalf("LEO %d/%d segments %d/%d recovery point %d", l.LogEndOffset(), leo, l.NumSegments(), segs, l.RecoveryPoint())
	}
	if got := readAll(t, l, 0); len(got) != 40 {
		t.Fatalf("read %d batches", len(got))
	}
	if off, _, ok := l.OffsetForTimestamp(1000 + 39*100); !ok || off != 39*3 {
		t.Fatalf("OffsetForTimestamp after reopen: %d %v", off, ok)
	}
	// An unclean open from a recovery point scans only from its segment on.
	l.Close()
	l, err = Open(dir, cfg, WithRecoveryPoint(leo))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if last := l.segments()[l.NumSegments()-1]; l.recoveredBytes != last.size.Load() {
		t.Fatalf("recovery from the recovery point scanned %d bytes, the active segment has %d", l.recoveredBytes, last.size.Load())
	}
}

func FuzzRecovery(f *testing.F) {
	f.Add([]byte("garbage"))
	f.Add(makeBatch(f, batchSpec{records: 2, base: 30}))
	f.Add(makeBatch(f, batchSpec{records: 2, base: 3}))
	f.Add(append(makeBatch(f, batchSpec{records: 1, base: 30}), 1, 2, 3))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		cfg := smallConfig()
		stored := crashLog(t, dir, cfg, 10) // offsets 0..29
		logs := segmentFiles(t, dir, LogFileSuffix)
		appendToFile(t, logs[len(logs)-1], tail)
		l, err := Open(dir, cfg)
		if err != nil {
			t.Fatalf("recovery failed: %v", err)
		}
		defer l.Close()
		if l.LogEndOffset() < 30 {
			t.Fatalf("recovery lost intact batches: LEO %d", l.LogEndOffset())
		}
		got := readAll(t, l, 0)
		for i, b := range stored {
			r, err := l.Read(got[i].BaseOffset, len(b), l.LogEndOffset(), true)
			if err != nil || !bytes.Equal(r.Records[:len(b)], b) {
				t.Fatalf("batch %d changed by recovery", i)
			}
		}
		if last := got[len(got)-1]; last.NextOffset() != l.LogEndOffset() {
			t.Fatalf("LEO %d, last batch ends at %d", l.LogEndOffset(), last.NextOffset())
		}
	})
}

// A malformed leader epoch checkpoint takes the log directory offline, as
// Kafka's checkpoint read does (an IOException through
// LogDirFailureChannel): the log does not open, whatever the shutdown,
// and nothing is rewritten. A missing one is rebuilt from the log.
func TestCorruptEpochCheckpointCleanOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 5, 3, 100, 2, 0)
	appendN(t, l, 5, 3, 100, 7, 0)
	want := l.Epochs().Entries()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	bad := []byte("0\n3\n2 0\n1 5\n")
	path := filepath.Join(dir, EpochCheckpointFile)
	os.WriteFile(path, bad, 0o644)
	for _, clean := range []bool{true, false} {
		if l, err := Open(dir, cfg, WithCleanShutdown(clean)); !errors.Is(err, ErrLogDirOffline) || !strings.Contains(err.Error(), EpochCheckpointFile) {
			if err == nil {
				l.Close()
			}
			t.Fatalf("clean %v: open with a malformed epoch checkpoint: %v, want the log directory offline naming the file", clean, err)
		}
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
		t.Fatalf("the malformed checkpoint was rewritten: %q", got)
	}
	os.Remove(path)
	l, err = Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Epochs().Entries(); !equalEpochs(got, want) || len(want) != 2 {
		t.Fatalf("rebuilt epochs %v, want %v", got, want)
	}
}

// FuzzRecoveryCorruption flips bits of one byte in any file of a crashed
// log (segment, index, time index, epoch checkpoint) and recovers it: Open
// fails only on a malformed epoch checkpoint (the log directory offline),
// and recovery only cuts, never alters, what was written.
func FuzzRecoveryCorruption(f *testing.F) {
	f.Add(uint16(100), byte(0x10), uint8(0))
	f.Add(uint16(3), byte(0xff), uint8(1)) // a base offset, outside the CRC
	f.Add(uint16(7), byte(0x10), uint8(1)) // ... moved forward: a gap
	f.Add(uint16(7), byte(0x10), uint8(0))
	f.Add(uint16(9), byte(0x01), uint8(2)) // a batch length
	f.Add(uint16(0), byte(0x7f), uint8(5))
	f.Fuzz(func(t *testing.T, pos uint16, xor byte, which uint8) {
		dir := t.TempDir()
		cfg := smallConfig()
		stored := crashLog(t, dir, cfg, 12)
		files := append(segmentFiles(t, dir, LogFileSuffix), segmentFiles(t, dir, IndexFileSuffix)...)
		files = append(files, segmentFiles(t, dir, TimeIndexFileSuffix)...)
		files = append(files, filepath.Join(dir, EpochCheckpointFile))
		target := files[int(which)%len(files)]
		data, err := os.ReadFile(target)
		if err != nil || len(data) == 0 {
			return
		}
		data[int(pos)%len(data)] ^= xor
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, cfg)
		if errors.Is(err, ErrLogDirOffline) && target == filepath.Join(dir, EpochCheckpointFile) {
			return // a malformed checkpoint: the directory is offline, as in Kafka
		}
		if err != nil {
			t.Fatalf("recovery failed: %v", err)
		}
		defer l.Close()
		got := readAll(t, l, 0)
		if len(got) > len(stored) {
			t.Fatalf("recovered %d batches of %d", len(got), len(stored))
		}
		next := int64(0)
		for i, b := range got {
			if b.BaseOffset != next {
				t.Fatalf("batch %d at %d, want %d", i, b.BaseOffset, next)
			}
			next = b.NextOffset()
			r, err := l.Read(b.BaseOffset, 1, l.LogEndOffset(), true)
			if err != nil {
				t.Fatal(err)
			}
			// Bytes outside the CRC that recovery cannot check: the leader
			// epoch. Everything else is what was appended.
			want, have := append([]byte{}, stored[i]...), append([]byte{}, r.Records...)
			copy(want[offLeaderEpoch:offLeaderEpoch+4], make([]byte, 4))
			copy(have[offLeaderEpoch:offLeaderEpoch+4], make([]byte, 4))
			if !bytes.Equal(want, have) {
				t.Fatalf("batch %d altered by recovery", i)
			}
		}
		if l.LogEndOffset() != next {
			t.Fatalf("LEO %d, batches end at %d", l.LogEndOffset(), next)
		}
	})
}

// TestCleanOpenListsAndChecksSegments covers the steps of a clean open
// before recovery: what a crash left behind (an interrupted deletion, a
// temporary checkpoint, index files of no segment) is removed, a file
// whose name is no offset is left alone, and a sealed segment whose index
// fails the sanity check gets it rebuilt without a recovery scan.
func TestCleanOpenListsAndChecksSegments(t *testing.T) {
	cfg := smallConfig()
	l := openTest(t, cfg)
	dir := l.Dir()
	appendN(t, l, 40, 3, 100, 5, 1000)
	leo := l.LogEndOffset()
	if l.NumSegments() < 3 {
		t.Fatalf("%d segments, want a few", l.NumSegments())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := segmentName(1 << 40)
	leftovers := []string{segmentName(0) + LogFileSuffix + DeletedFileSuffix, "replication-offset-checkpoint.tmp",
		orphan + IndexFileSuffix, orphan + TimeIndexFileSuffix, orphan + TxnIndexFileSuffix}
	for _, name := range append(leftovers, "notanoffset"+LogFileSuffix) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left over"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The first segment's offset index is torn mid-entry.
	first := filepath.Join(dir, segmentName(0)+IndexFileSuffix)
	if err := os.WriteFile(first, []byte{0, 0, 0, 1, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}

	l, err := Open(dir, cfg, WithCleanShutdown(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s still there after open (%v)", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "notanoffset"+LogFileSuffix)); err != nil {
		t.Errorf("a file whose name is no offset was touched: %v", err)
	}
	if l.recoveredBytes != 0 || l.LogEndOffset() != leo {
		t.Fatalf("clean open scanned %d bytes, LEO %d want %d", l.recoveredBytes, l.LogEndOffset(), leo)
	}
	if fi, err := os.Stat(first); err != nil || fi.Size() == 0 || fi.Size()%indexEntrySize != 0 {
		t.Fatalf("first segment's index not rebuilt: %v %v", fi, err)
	}
	// Every offset of the first segment is found through the rebuilt index.
	checkIndexed(t, l, 0, l.segments()[1].base, 1)
	if got := readAll(t, l, 0); len(got) != 40 {
		t.Fatalf("read %d batches, want 40", len(got))
	}
}
