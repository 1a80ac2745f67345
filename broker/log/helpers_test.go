package log

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchSpec describes a v2 batch for makeBatch.
type batchSpec struct {
	records   int
	valueSize int
	ts        int64 // first timestamp; record i has ts+i
	base      int64
	epoch     int32
}

// makeBatch encodes an uncompressed v2 record batch with kmsg, filling the
// length and CRC-32C the way a producer does.
func makeBatch(tb testing.TB, s batchSpec) []byte {
	tb.Helper()
	if s.records == 0 {
		s.records = 1
	}
	var recs []byte
	for i := 0; i < s.records; i++ {
		r := kmsg.Record{
			OffsetDelta:      int32(i),
			TimestampDelta64: int64(i),
			Key:              []byte{byte(i)},
			Value:            bytes.Repeat([]byte{byte('a' + i%26)}, s.valueSize),
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // a zero length is one varint byte
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{
		FirstOffset:          s.base,
		PartitionLeaderEpoch: s.epoch,
		Magic:                2,
		LastOffsetDelta:      int32(s.records - 1),
		FirstTimestamp:       s.ts,
		MaxTimestamp:         s.ts + int64(s.records-1),
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(s.records),
		Records:              recs,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[offBatchLength:], uint32(len(raw)-logOverhead))
	binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
	return raw
}

// fakeClock is a settable clock for rolling and retention tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openTest opens a log in a fresh temporary directory.
func openTest(t *testing.T, cfg Config, opts ...Option) *Log {
	t.Helper()
	l, err := Open(t.TempDir(), cfg, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// smallConfig rolls segments every few batches.
func smallConfig() Config {
	c := DefaultConfig()
	c.SegmentBytes = 4096
	c.IndexIntervalBytes = 256
	c.SegmentIndexBytes = 1024
	c.FileDeleteDelayMs = 0
	return c
}

// appendN appends n leader batches of recs records each, returning the
// offsets of the first record of each batch.
func appendN(t *testing.T, l *Log, n, recs, valueSize int, epoch int32, ts int64) []int64 {
	t.Helper()
	var firsts []int64
	for i := 0; i < n; i++ {
		res, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: recs, valueSize: valueSize, ts: ts + int64(i)*100}), epoch)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		firsts = append(firsts, res.FirstOffset)
	}
	return firsts
}

// readAll reads every batch from offset to the LEO, following the log the
// way a follower does, and returns the parsed batches.
func readAll(t *testing.T, l *Log, from int64) []BatchInfo {
	t.Helper()
	var out []BatchInfo
	for off := from; off < l.LogEndOffset(); {
		res, err := l.Read(off, 1<<20, l.LogEndOffset(), true)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		bs, err := ParseBatches(res.Records, 0)
		if err != nil {
			t.Fatalf("read %d returned bad batches: %v", off, err)
		}
		out = append(out, bs...)
		off = bs[len(bs)-1].NextOffset()
	}
	return out
}

// crash stops the manager the way a killed broker stops: logs abandoned
// without flushing or sealing, no clean shutdown marker, dir locks released.
func (m *Manager) crash() {
	for _, l := range m.Logs() {
		l.abandon()
	}
	m.unlock()
}
