package log

import (
	"errors"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRoll(t *testing.T) {
	batchLen := len(makeBatch(t, batchSpec{records: 1, valueSize: 100}))
	tests := []struct {
		name string
		cfg  func(*Config)
		step func(t *testing.T, l *Log, clk *fakeClock, i int)
		// segments expected after 10 appends of one ~180-byte batch each
		want int
	}{
		{"no roll", func(*Config) {}, nil, 1},
		{"by size", func(c *Config) { c.SegmentBytes = 3*int64(batchLen) + 1 }, nil, 4}, // 3 batches per segment
		{"by time", func(c *Config) { c.SegmentMs = 1000 }, func(t *testing.T, l *Log, clk *fakeClock, i int) {
			if i%2 == 1 {
				clk.Advance(time.Second)
			}
		}, 5},
		// 4 offset index entries: batches 2-5 of a segment are indexed.
		{"by full offset index", func(c *Config) { c.IndexIntervalBytes = 1; c.SegmentIndexBytes = 36 }, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			clk := newFakeClock()
			l := openTest(t, cfg, WithClock(clk.Now))
			for i := 0; i < 10; i++ {
				if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 1, valueSize: 100}), 0); err != nil {
					t.Fatal(err)
				}
				if tt.step != nil {
					tt.step(t, l, clk, i)
				}
			}
			if got := l.NumSegments(); got != tt.want {
				t.Fatalf("%d segments, want %d", got, tt.want)
			}
			if got := readAll(t, l, 0); len(got) != 10 {
				t.Fatalf("read back %d batches", len(got))
			}
			// Rolled segments get fsynced in the background; the recovery
			// point reaches the active segment's base.
			if tt.want > 1 {
				segs := l.segments()
				proctest.EventuallyTrue(t, 10*time.Second, "the recovery point to reach the last segment", func() bool { return l.RecoveryPoint() >= segs[len(segs)-1].base })
			}
		})
	}
}

func TestAppendErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 1000
	cfg.MaxMessageBytes = 600
	l := openTest(t, cfg)
	if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 1, valueSize: 700}), 0); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized batch: %v", err)
	}
	two := append(makeBatch(t, batchSpec{records: 1, valueSize: 500}), makeBatch(t, batchSpec{records: 1, valueSize: 500})...)
	if _, err := l.AppendAsLeader(two, 0); !errors.Is(err, ErrRecordListTooLarge) {
		t.Fatalf("append larger than a segment: %v", err)
	}
	bad := makeBatch(t, batchSpec{records: 1})
	bad[len(bad)-1] ^= 1
	if _, err := l.AppendAsLeader(bad, 0); !errors.Is(err, ErrCorruptMessage) {
		t.Fatalf("corrupt batch: %v", err)
	}
	if l.LogEndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("failed appends changed the log: LEO %d size %d", l.LogEndOffset(), l.Size())
	}
}

func TestAppendAsFollower(t *testing.T) {
	l := openTest(t, DefaultConfig())
	b := func(base int64, n int, epoch int32) []byte {
		return makeBatch(t, batchSpec{records: n, base: base, epoch: epoch})
	}
	steps := []struct {
		data    []byte
		wantErr error
		wantLEO int64
	}{
		{b(0, 2, 1), nil, 2},
		{append(b(2, 1, 1), b(3, 2, 4)...), nil, 5},
		{b(4, 1, 4), ErrOffsetMismatch, 5},
		{b(6, 1, 4), ErrOffsetMismatch, 5},
		{append(b(5, 2, 4), b(6, 1, 4)...), ErrOffsetMismatch, 5},
		{append(b(5, 1, 4), b(7, 1, 4)...), ErrOffsetMismatch, 5},
		{b(5, 1, 5), nil, 6},
	}
	for i, s := range steps {
		_, err := l.AppendAsFollower(s.data)
		if !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d: err %v, want %v", i, err, s.wantErr)
		}
		if l.LogEndOffset() != s.wantLEO {
			t.Fatalf("step %d: LEO %d, want %d", i, l.LogEndOffset(), s.wantLEO)
		}
	}
	want := []EpochEntry{{1, 0}, {4, 3}, {5, 5}}
	if got := l.Epochs().Entries(); !slices.Equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
	for _, bi := range readAll(t, l, 0) {
		if bi.LeaderEpoch < 1 {
			t.Fatalf("follower batch lost its epoch: %+v", bi)
		}
	}
}

func TestTruncateTo(t *testing.T) {
	for _, target := range []int64{0, 1, 3, 4, 17, 29, 30, 45, 58, 59, 60, 100} {
		t.Run("", func(t *testing.T) {
			l := openTest(t, smallConfig())
			// 20 batches of 3 records; epochs 1 (0-29), 2 (30-44), 3 (45-59)
			appendN(t, l, 10, 3, 100, 1, 1000)
			appendN(t, l, 5, 3, 100, 2, 2000)
			appendN(t, l, 5, 3, 100, 3, 3000)
			if err := l.TruncateTo(target); err != nil {
				t.Fatal(err)
			}
			wantLEO := min(target/3*3, 60) // whole batches only
			if l.LogEndOffset() != wantLEO {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), wantLEO)
			}
			got := readAll(t, l, 0)
			if len(got) != int(wantLEO/3) {
				t.Fatalf("%d batches left, want %d", len(got), wantLEO/3)
			}
			for _, e := range l.Epochs().Entries() {
				if e.StartOffset >= wantLEO {
					t.Fatalf("epoch entry %v survives truncation to %d", e, wantLEO)
				}
			}
			if l.RecoveryPoint() > wantLEO {
				t.Fatalf("recovery point %d above LEO %d", l.RecoveryPoint(), wantLEO)
			}
			// The log keeps working at the new end.
			res, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 2, ts: 5000}), 4)
			if err != nil || res.FirstOffset != wantLEO {
				t.Fatalf("append after truncation: %+v %v", res, err)
			}
			if got := readAll(t, l, 0); len(got) != int(wantLEO/3)+1 {
				t.Fatalf("after append: %d batches", len(got))
			}
			if off, _, ok := l.OffsetForTimestamp(5000); !ok || off != wantLEO {
				t.Fatalf("OffsetForTimestamp after truncation = %d %v", off, ok)
			}
		})
	}
}

func TestTruncateFullyAndStartAt(t *testing.T) {
	l := openTest(t, smallConfig())
	appendN(t, l, 20, 3, 100, 1, 1000)
	if err := l.TruncateFullyAndStartAt(500); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != 500 || l.LogEndOffset() != 500 || l.NumSegments() != 1 || len(l.Epochs().Entries()) != 0 {
		t.Fatalf("start %d end %d segments %d epochs %v", l.LogStartOffset(), l.LogEndOffset(), l.NumSegments(), l.Epochs().Entries())
	}
	if _, err := l.Read(0, 100, 1000, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	res, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 1}), 2)
	if err != nil || res.FirstOffset != 500 {
		t.Fatalf("append: %+v %v", res, err)
	}
	if got := readAll(t, l, 500); len(got) != 1 {
		t.Fatalf("read %d batches", len(got))
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	l := openTest(t, smallConfig())
	// Batch i (3 records, offsets 3i..3i+2) has timestamps 1000+100i .. +2.
	appendN(t, l, 40, 3, 100, 0, 1000)
	// An out-of-order batch: offset 120, max timestamp 1500.
	appendN(t, l, 1, 1, 10, 0, 1500)
	tests := []struct {
		ts      int64
		off     int64
		maxTs   int64
		wantHit bool
	}{
		{0, 0, 1000, true},
		{1000, 0, 1000, true},
		{1001, 1, 1001, true}, // record-level inside an uncompressed batch
		{1002, 2, 1002, true},
		{1003, 3, 1100, true},
		{1450, 15, 1500, true},
		{1550, 18, 1600, true}, // 1600..1602 is batch 6
		{4902, 119, 4902, true},
		{4903, 0, 0, false},
	}
	for _, tt := range tests {
		off, ts, ok := l.OffsetForTimestamp(tt.ts)
		if ok != tt.wantHit || ok && (off != tt.off || ts != tt.maxTs) {
			t.Errorf("OffsetForTimestamp(%d) = (%d, %d, %v), want (%d, %d, %v)", tt.ts, off, ts, ok, tt.off, tt.maxTs, tt.wantHit)
		}
	}
	// Never below the log start, even inside a batch.
	if err := l.IncrementLogStartOffset(16); err != nil {
		t.Fatal(err)
	}
	if off, ts, ok := l.OffsetForTimestamp(1500); !ok || off != 16 || ts != 1501 {
		t.Errorf("after log start 16: OffsetForTimestamp(1500) = (%d, %d, %v), want (16, 1501, true)", off, ts, ok)
	}
}

func TestOffsetForTimestampWholeBatch(t *testing.T) {
	// LogAppendTime and compressed batches answer with the batch's base
	// offset and MaxTimestamp: records are not decompressed.
	cfg := DefaultConfig()
	cfg.LogAppendTime = true
	clk := newFakeClock()
	l := openTest(t, cfg, WithClock(clk.Now))
	appendN(t, l, 2, 3, 10, 0, 5)
	now := clk.Now().UnixMilli()
	if off, ts, ok := l.OffsetForTimestamp(now); !ok || off != 0 || ts != now {
		t.Errorf("LogAppendTime: (%d, %d, %v), want (0, %d, true)", off, ts, ok, now)
	}
	l2 := openTest(t, DefaultConfig())
	if _, err := l2.AppendAsLeader(compressedBatch(t), 0); err != nil {
		t.Fatal(err)
	}
	if off, ts, ok := l2.OffsetForTimestamp(3); !ok || off != 0 || ts != 7 {
		t.Errorf("compressed: (%d, %d, %v), want (0, 7, true)", off, ts, ok)
	}
}

func TestRetention(t *testing.T) {
	const hour = int64(3600 * 1000)
	tests := []struct {
		name      string
		cfg       func(*Config)
		advance   time.Duration
		hw        int64 // -1: LEO
		startOff  int64 // IncrementLogStartOffset first, if > 0
		wantLeft  func(segs int) int
		wantStart func(l *Log) bool
	}{
		{"nothing expired", func(c *Config) {}, 0, -1, 0, func(n int) int { return n }, nil},
		{"time: all but active", func(c *Config) { c.RetentionMs = hour }, 2 * time.Hour, -1, 0, func(int) int { return 1 }, nil},
		{"time: not below high watermark", func(c *Config) { c.RetentionMs = hour }, 2 * time.Hour, 0, 0, func(n int) int { return n }, nil},
		{"time: only below high watermark", func(c *Config) { c.RetentionMs = hour }, 2 * time.Hour, 30, 0, func(n int) int { return -1 }, nil},
		{"forever", func(c *Config) { c.RetentionMs = -1 }, 1000 * time.Hour, -1, 0, func(n int) int { return n }, nil},
		{"size", func(c *Config) { c.RetentionMs = -1; c.RetentionBytes = 8000 }, 0, -1, 0, func(n int) int { return -2 }, nil},
		{"log start offset", func(c *Config) { c.RetentionMs = -1 }, 0, -1, 40, func(n int) int { return -3 }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := smallConfig()
			tt.cfg(&cfg)
			clk := newFakeClock()
			l := openTest(t, cfg, WithClock(clk.Now))
			// Timestamps are the clock's: retention compares them with now.
			now := clk.Now().UnixMilli()
			appendN(t, l, 60, 3, 100, 0, now)
			segs := l.segments()
			n := len(segs)
			hw := tt.hw
			if hw < 0 {
				hw = l.LogEndOffset()
			}
			if tt.startOff > 0 {
				if err := l.IncrementLogStartOffset(tt.startOff); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(tt.advance)
			deleted, err := l.DeleteOldSegments(clk.Now().Add(time.Duration(100*60)*time.Millisecond), hw)
			if err != nil {
				t.Fatal(err)
			}
			left := l.NumSegments()
			if deleted != n-left {
				t.Fatalf("reported %d deleted, %d -> %d segments", deleted, n, left)
			}
			switch want := tt.wantLeft(n); want {
			case -1: // segments ending at or below hw deleted
				for _, s := range l.segments()[:1] {
					if s.base > hw {
						t.Fatalf("deleted a segment not below the high watermark: first left %d, hw %d", s.base, hw)
					}
				}
				if deleted == 0 {
					t.Fatal("nothing deleted")
				}
			case -2: // size
				if l.Size() < cfg.RetentionBytes || l.Size()-l.segments()[0].size.Load() >= cfg.RetentionBytes {
					t.Fatalf("size %d after retention.bytes %d", l.Size(), cfg.RetentionBytes)
				}
			case -3: // log start: segments wholly below 40 gone
				if f := l.segments(); f[0].base > 40 || len(f) > 1 && f[1].base <= 40 {
					t.Fatalf("first segments %d, %d around log start 40", f[0].base, f[1].base)
				}
				if l.LogStartOffset() != 40 {
					t.Fatalf("log start %d", l.LogStartOffset())
				}
			default:
				if left != want {
					t.Fatalf("%d segments left, want %d", left, want)
				}
			}
			if l.LogStartOffset() < l.segments()[0].base {
				t.Fatalf("log start %d below first segment %d", l.LogStartOffset(), l.segments()[0].base)
			}
			if e := l.Epochs().Entries(); len(e) > 0 && e[0].StartOffset < l.LogStartOffset() {
				t.Fatalf("epoch cache %v starts below log start %d", e, l.LogStartOffset())
			}
			if got := readAll(t, l, l.LogStartOffset()); len(got) == 0 && deleted < n {
				t.Fatal("nothing readable after retention")
			}
			// file.delete.delay.ms is 0: no .deleted files remain after the call.
			entries, _ := os.ReadDir(l.Dir())
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), DeletedFileSuffix) {
					t.Fatalf("%s left behind", e.Name())
				}
			}
		})
	}
}

func TestDeleteDelay(t *testing.T) {
	cfg := smallConfig()
	cfg.FileDeleteDelayMs = 60000
	cfg.RetentionMs = 1
	clk := newFakeClock()
	l := openTest(t, cfg, WithClock(clk.Now))
	appendN(t, l, 30, 3, 100, 0, 0)
	first := l.segments()[0]
	if n, err := l.DeleteOldSegments(clk.Now(), l.LogEndOffset()); err != nil || n == 0 {
		t.Fatalf("deleted %d: %v", n, err)
	}
	if _, err := os.Stat(first.path(LogFileSuffix) + DeletedFileSuffix); err != nil {
		t.Fatalf("no .deleted file: %v", err)
	}
	clk.Advance(59 * time.Second)
	l.RemoveDeletedFiles(clk.Now())
	if _, err := os.Stat(first.path(LogFileSuffix) + DeletedFileSuffix); err != nil {
		t.Fatalf(".deleted removed before the delay: %v", err)
	}
	clk.Advance(time.Second)
	l.RemoveDeletedFiles(clk.Now())
	if _, err := os.Stat(first.path(LogFileSuffix) + DeletedFileSuffix); !os.IsNotExist(err) {
		t.Fatalf(".deleted still there after the delay: %v", err)
	}
}

func TestFlushPolicy(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		// recovery point after each of four 3-record appends; the clock
		// moves 600 ms before each append.
		want []int64
	}{
		{"default never flushes", func(*Config) {}, []int64{0, 0, 0, 0}},
		{"every message", func(c *Config) { c.FlushIntervalMessages = 1 }, []int64{3, 6, 9, 12}},
		{"every 5 messages", func(c *Config) { c.FlushIntervalMessages = 5 }, []int64{0, 6, 6, 12}},
		{"every second", func(c *Config) { c.FlushIntervalMs = 1000 }, []int64{0, 6, 6, 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			clk := newFakeClock()
			l := openTest(t, cfg, WithClock(clk.Now))
			for i, want := range tt.want {
				clk.Advance(600 * time.Millisecond)
				if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 3}), 0); err != nil {
					t.Fatal(err)
				}
				if got := l.RecoveryPoint(); got != want {
					t.Fatalf("after append %d: recovery point %d, want %d", i, got, want)
				}
			}
		})
	}
}
