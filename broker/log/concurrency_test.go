package log

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sync/errgroup"
)

// TestConcurrentReadsDuringAppends checks that readers racing with appends
// and segment rolls only ever see whole, valid, contiguous batches.
func TestConcurrentReadsDuringAppends(t *testing.T) {
	l := openTest(t, smallConfig())
	const batches = 300
	var g errgroup.Group
	g.Go(func() error {
		for i := 0; i < batches; i++ {
			if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 2, valueSize: 50 + i%100}), int32(i/100)); err != nil {
				return err
			}
		}
		return nil
	})
	for r := 0; r < 3; r++ {
		g.Go(func() error {
			off := int64(0)
			for off < 2*batches {
				leo := l.LogEndOffset()
				res, err := l.Read(off, 700, leo, true)
				if err != nil {
					return err
				}
				if len(res.Records) == 0 {
					if off < leo {
						t.Errorf("empty read at %d below LEO %d", off, leo)
					}
					continue
				}
				bs, err := ParseBatches(res.Records, 0)
				if err != nil {
					t.Errorf("read at %d returned a bad batch: %v", off, err)
					return nil
				}
				for _, b := range bs {
					if b.BaseOffset != off {
						t.Errorf("batch at %d, expected %d", b.BaseOffset, off)
						return nil
					}
					off = b.NextOffset()
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if l.NumSegments() < 3 {
		t.Fatalf("only %d segments: the test did not race with rolls", l.NumSegments())
	}
}

// TestHeapFlatAsLogGrows checks that the log keeps no log data in memory:
// writing 48 MiB through several segments grows the live heap by far less.
func TestHeapFlatAsLogGrows(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 4 << 20
	l := openTest(t, cfg)
	batch := makeBatch(t, batchSpec{records: 16, valueSize: 1024})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	appendN := func(bytes int64) {
		for target := l.Size() + bytes; l.Size() < target; {
			if _, err := l.AppendAsLeader(batch, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(4 << 20) // warm up: first segment, buffers
	before := heap()
	appendN(48 << 20)
	after := heap()
	if l.NumSegments() < 10 {
		t.Fatalf("%d segments", l.NumSegments())
	}
	if growth := int64(after) - int64(before); growth > 2<<20 {
		t.Fatalf("heap grew by %d bytes while writing 48 MiB", growth)
	}
}

// TestManagerRunConcurrently exercises the background loop against appends,
// reads, partition creation and deletion (run it with -race).
func TestManagerRunConcurrently(t *testing.T) {
	cfg := smallConfig()
	cfg.RetentionBytes = 6000
	cfg.RetentionCheckIntervalMs = 1
	cfg.FlushSchedulerIntervalMs = 1
	cfg.FlushOffsetCheckpointIntervalMs = 1
	cfg.FlushIntervalMs = 1
	m, err := OpenManager([]string{t.TempDir(), t.TempDir()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return m.Run(ctx, nil) })
	var work errgroup.Group
	for p := int32(0); p < 3; p++ {
		work.Go(func() error {
			for round := 0; round < 3; round++ {
				l, err := m.GetOrCreate("c", p, cfg)
				if err != nil {
					return err
				}
				for i := 0; i < 40; i++ {
					if _, err := l.AppendAsLeader(makeBatch(t, batchSpec{records: 2, valueSize: 150}), int32(round)); err != nil {
						return err
					}
					if _, err := l.Read(l.LogStartOffset(), 1000, l.LogEndOffset(), true); err != nil && !errors.Is(err, ErrOffsetOutOfRange) {
						return err
					}
				}
				if p == 0 {
					if err := m.Delete("c", p); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := work.Wait(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("c", 0); ok {
		t.Fatal("deleted partition still listed")
	}
	for p := int32(1); p < 3; p++ {
		l, ok := m.Get("c", p)
		if !ok || l.LogEndOffset() != 240 {
			t.Fatalf("partition %d: %v", p, ok)
		}
	}
}
