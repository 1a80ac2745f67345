package log

import (
	"testing"
)

// benchBatch is 16 records of 1 KiB: a 16 KiB batch, as a producer with
// linger sends them.
func benchBatch(b *testing.B) []byte {
	return makeBatch(b, batchSpec{records: 16, valueSize: 1024, ts: 1_700_000_000_000})
}

func benchConfig() Config {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 64 << 20 // roll now and then during the run
	return cfg
}

// BenchmarkAppend measures leader appends of 16 KiB batches (page cache, no
// fsync: the default flush policy).
func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.AppendAsLeader(batch, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead measures consumer fetches of up to 1 MiB
// (max.partition.fetch.bytes) walking a 64 MiB log from the start.
func BenchmarkRead(b *testing.B) {
	l, err := Open(b.TempDir(), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b)
	for l.Size() < 64<<20 {
		if _, err := l.AppendAsLeader(batch, 1); err != nil {
			b.Fatal(err)
		}
	}
	leo := l.LogEndOffset()
	b.ReportAllocs()
	b.ResetTimer()
	var total int64
	off := int64(0)
	for i := 0; i < b.N; i++ {
		res, err := l.Read(off, 1<<20, leo, true)
		if err != nil {
			b.Fatal(err)
		}
		total += int64(len(res.Records))
		off += int64(len(res.Records)/len(batch)) * 16
		if off >= leo {
			off = 0
		}
	}
	b.SetBytes(total / int64(b.N))
}

// BenchmarkReadTail measures a follower or tailing consumer: small reads at
// the end of a log that keeps growing, interleaved with appends.
func BenchmarkReadTail(b *testing.B) {
	l, err := Open(b.TempDir(), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := l.AppendAsLeader(batch, 1)
		if err != nil {
			b.Fatal(err)
		}
		r, err := l.Read(res.FirstOffset, 1<<20, l.LogEndOffset(), true)
		if err != nil || len(r.Records) != len(batch) {
			b.Fatalf("read %d bytes: %v", len(r.Records), err)
		}
	}
}

// BenchmarkRecovery measures the unclean-shutdown recovery scan (CRC check
// of every batch, index rebuild, fsync) of a 64 MiB log.
func BenchmarkRecovery(b *testing.B) {
	dir := b.TempDir()
	cfg := benchConfig()
	cfg.SegmentBytes = 16 << 20
	l, err := Open(dir, cfg)
	if err != nil {
		b.Fatal(err)
	}
	batch := benchBatch(b)
	for l.Size() < 64<<20 {
		if _, err := l.AppendAsLeader(batch, 1); err != nil {
			b.Fatal(err)
		}
	}
	size := l.Size()
	l.abandon()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := Open(dir, cfg) // no clean shutdown: recover everything
		if err != nil {
			b.Fatal(err)
		}
		if l.recoveredBytes != size {
			b.Fatalf("recovered %d of %d bytes", l.recoveredBytes, size)
		}
		l.abandon()
	}
}
