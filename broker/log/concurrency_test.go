package log

import (
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
