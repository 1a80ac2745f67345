package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestAppendReadRoundTrip(t *testing.T) {
	l := openTest(t, DefaultConfig())
	var sent [][]byte
	for i := 0; i < 5; i++ {
		b := makeBatch(t, batchSpec{records: i + 1, valueSize: 20, ts: int64(1000 + i)})
		res, err := l.AppendAsLeader(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, b) // patched in place: what the log stores
		if res.RecordCount != int64(i+1) || res.LastOffset-res.FirstOffset != int64(i) {
			t.Fatalf("append %d: %+v", i, res)
		}
	}
	if got := l.LogEndOffset(); got != 15 {
		t.Fatalf("LEO = %d, want 15", got)
	}
	all := bytes.Join(sent, nil)
	res, err := l.Read(0, 1<<20, l.LogEndOffset(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Records, all) {
		t.Fatalf("read %d bytes, want the %d appended bytes", len(res.Records), len(all))
	}
	bs, err := ParseBatches(res.Records, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 1, 3, 6, 10}
	for i, b := range bs {
		if b.BaseOffset != want[i] || b.LeaderEpoch != 3 {
			t.Errorf("batch %d: base %d epoch %d, want base %d epoch 3", i, b.BaseOffset, b.LeaderEpoch, want[i])
		}
	}
	if e := l.Epochs().Entries(); len(e) != 1 || e[0] != (EpochEntry{3, 0}) {
		t.Errorf("epochs = %v", e)
	}
}

func TestRead(t *testing.T) {
	l := openTest(t, DefaultConfig())
	var sizes []int
	for i := 0; i < 4; i++ {
		b := makeBatch(t, batchSpec{records: 2, valueSize: 100})
		sizes = append(sizes, len(b))
		if _, err := l.AppendAsLeader(b, 0); err != nil {
			t.Fatal(err)
		}
	} // batches at 0,2,4,6; LEO 8
	tests := []struct {
		name      string
		offset    int64
		maxBytes  int
		maxOffset int64
		minOne    bool
		wantBases []int64
		wantErr   error
	}{
		{"all", 0, 1 << 20, 8, false, []int64{0, 2, 4, 6}, nil},
		{"middle of a batch", 3, 1 << 20, 8, false, []int64{2, 4, 6}, nil},
		{"bounded by high watermark", 0, 1 << 20, 5, false, []int64{0, 2}, nil},
		{"batch straddling the high watermark", 2, 1 << 20, 3, false, nil, nil},
		{"at high watermark", 4, 1 << 20, 4, false, nil, nil},
		{"max bytes", 0, sizes[0] + sizes[1] + 1, 8, false, []int64{0, 2}, nil},
		{"first batch larger than max", 0, 10, 8, false, nil, nil},
		{"min one batch", 0, 10, 8, true, []int64{0}, nil},
		{"at LEO", 8, 1 << 20, 8, false, nil, nil},
		{"above LEO", 9, 1 << 20, 9, false, nil, ErrOffsetOutOfRange},
		{"negative", -1, 1 << 20, 8, false, nil, ErrOffsetOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := l.Read(tt.offset, tt.maxBytes, tt.maxOffset, tt.minOne)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if res.Records == nil {
				t.Fatal("Records is nil; fetch responses need an empty slice")
			}
			var bases []int64
			if len(res.Records) > 0 {
				bs, err := ParseBatches(res.Records, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range bs {
					bases = append(bases, b.BaseOffset)
				}
			}
			if !equalInt64s(bases, tt.wantBases) {
				t.Fatalf("bases = %v, want %v", bases, tt.wantBases)
			}
		})
	}
}

func equalInt64s(a, b []int64) bool {
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

func TestReadAcrossSegments(t *testing.T) {
	cfg := smallConfig()
	l := openTest(t, cfg)
	appendN(t, l, 60, 3, 100, 1, 1000) // ~420-byte batches, ~9 per segment
	if n := l.NumSegments(); n < 5 {
		t.Fatalf("%d segments, want several rolls", n)
	}
	// Every offset, from old sealed segments too, reads the batch holding it.
	for off := int64(0); off < l.LogEndOffset(); off++ {
		res, err := l.Read(off, 1, l.LogEndOffset(), true)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := ParseBatches(res.Records, 0)
		if err != nil || len(bs) != 1 {
			t.Fatalf("offset %d: %d batches, %v", off, len(bs), err)
		}
		if b := bs[0]; off < b.BaseOffset || off > b.LastOffset || b.BaseOffset != off/3*3 {
			t.Fatalf("offset %d read batch [%d, %d]", off, b.BaseOffset, b.LastOffset)
		}
	}
	if got := readAll(t, l, 0); len(got) != 60 {
		t.Fatalf("read %d batches, want 60", len(got))
	}
	// A high watermark cuts reads at the last whole batch below it.
	for _, s := range l.segments() {
		for hw := s.base + 1; hw <= s.base+12 && hw <= l.LogEndOffset(); hw++ {
			res, err := l.Read(s.base, 1<<20, hw, false)
			if err != nil {
				t.Fatal(err)
			}
			var last int64 = -1
			if len(res.Records) > 0 {
				bs, err := ParseBatches(res.Records, 0)
				if err != nil {
					t.Fatal(err)
				}
				last = bs[len(bs)-1].LastOffset
			}
			if want := (hw/3)*3 - 1; last != want && !(last == -1 && want < s.base) {
				t.Fatalf("read from %d below hw %d ends at %d, want %d", s.base, hw, last, want)
			}
		}
	}
	// Segment files are named by base offset and the sealed indexes trimmed.
	entries, _ := os.ReadDir(l.Dir())
	logs := 0
	for _, e := range entries {
		if filepath.Ext(e.Name()) == LogFileSuffix {
			logs++
		}
	}
	if logs != l.NumSegments() {
		t.Fatalf("%d .log files for %d segments", logs, l.NumSegments())
	}
	first := l.segments()[0]
	fi, err := os.Stat(first.path(IndexFileSuffix))
	if err != nil || fi.Size() == int64(cfg.SegmentIndexBytes) || fi.Size()%indexEntrySize != 0 {
		t.Fatalf("sealed index not trimmed: %v %v", fi.Size(), err)
	}
}

func TestLogAppendTime(t *testing.T) {
	for _, appendTime := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.LogAppendTime = appendTime
		clk := newFakeClock()
		l := openTest(t, cfg, WithClock(clk.Now))
		res, err := l.AppendAsLeader(append(makeBatch(t, batchSpec{records: 2, ts: 5}), makeBatch(t, batchSpec{records: 1, ts: 7})...), 0)
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.Read(0, 1<<20, l.LogEndOffset(), false)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := ParseBatches(r.Records, 0) // CRCs still valid
		if err != nil || len(bs) != 2 {
			t.Fatalf("LogAppendTime=%v: stored batches %v %v", appendTime, bs, err)
		}
		now := clk.Now().UnixMilli()
		for _, b := range bs {
			if appendTime && (b.MaxTimestamp != now || !b.LogAppendTime()) || !appendTime && (b.MaxTimestamp > 7 || b.LogAppendTime()) {
				t.Fatalf("LogAppendTime=%v: batch %+v", appendTime, b)
			}
		}
		if want := map[bool]int64{true: now, false: -1}[appendTime]; res.LogAppendTime != want {
			t.Fatalf("LogAppendTime=%v: result %d, want %d", appendTime, res.LogAppendTime, want)
		}
	}
}

func TestAppendParsedAsLeader(t *testing.T) {
	l := openTest(t, DefaultConfig())
	data := append(makeBatch(t, batchSpec{records: 2}), makeBatch(t, batchSpec{records: 3})...)
	bs, err := ParseBatches(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendParsedAsLeader(data, bs[:1], 0); !errors.Is(err, ErrCorruptMessage) {
		t.Fatalf("mismatched batches: %v", err)
	}
	if _, err := l.AppendParsedAsLeader(data, nil, 0); !errors.Is(err, ErrCorruptMessage) {
		t.Fatalf("no batches: %v", err)
	}
	res, err := l.AppendParsedAsLeader(data, bs, 4)
	if err != nil || res.FirstOffset != 0 || res.LastOffset != 4 || bs[1].BaseOffset != 2 {
		t.Fatalf("append: %+v %v", res, err)
	}
	if got := readAll(t, l, 0); len(got) != 2 || got[1].BaseOffset != 2 || got[1].LeaderEpoch != 4 {
		t.Fatalf("stored %+v", got)
	}
}

func TestBatches(t *testing.T) {
	l := openTest(t, smallConfig())
	appendN(t, l, 30, 3, 100, 2, 1000) // offsets 0..89 over several segments
	tests := []struct {
		from      int64
		stopAfter int
		want      []int64 // base offsets seen
	}{
		{0, 3, []int64{0, 3, 6}},
		{4, 2, []int64{3, 6}},
		{85, 100, []int64{84, 87}},
		{90, 100, nil},
	}
	for _, tt := range tests {
		var got []int64
		err := l.Batches(tt.from, func(b BatchInfo) bool {
			got = append(got, b.BaseOffset)
			if b.LeaderEpoch != 2 || b.RecordCount != 3 {
				t.Errorf("batch %+v", b)
			}
			return len(got) < tt.stopAfter
		})
		if err != nil || !equalInt64s(got, tt.want) {
			t.Errorf("Batches(%d) = %v %v, want %v", tt.from, got, err, tt.want)
		}
	}
	n := 0
	if err := l.Batches(0, func(BatchInfo) bool { n++; return true }); err != nil || n != 30 {
		t.Fatalf("walked %d batches: %v", n, err)
	}
}
