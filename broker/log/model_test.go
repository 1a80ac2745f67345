package log

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// modelBatch is one batch as the model expects to find it in the log.
type modelBatch struct {
	data       []byte
	base, last int64
	epoch      int32
}

// TestRandomOperations drives a log with seeded random appends, reads,
// truncations, log start moves, retention and clean and unclean reopens, and
// after every step compares it with a plain slice of batches.
func TestRandomOperations(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			cfg := smallConfig()
			cfg.SegmentBytes = 5000 + rnd.Int63n(3000)
			cfg.IndexIntervalBytes = 64 + rnd.Intn(512)
			cfg.RetentionMs = -1
			cfg.SegmentIndexBytes = 36 + rnd.Intn(300)
			cfg.FileDeleteDelayMs = rnd.Int63n(2) * 1500
			clk := newFakeClock()
			l, err := Open(dir, cfg, WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { l.Close() }()
			var model []modelBatch
			var logStart, end int64
			epoch := int32(0)
			leo := func() int64 { return end }
			var trace []string
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("after %v: %s", trace[max(0, len(trace)-30):], fmt.Sprintf(format, args...))
			}
			for step := 0; step < 400; step++ {
				clk.Advance(time.Duration(rnd.Intn(1000)) * time.Millisecond)
				switch op := rnd.Intn(20); {
				case op < 9: // append as leader
					if rnd.Intn(8) == 0 {
						epoch++
					}
					var data []byte
					n := 1 + rnd.Intn(3)
					for i := 0; i < n; i++ {
						data = append(data, makeBatch(t, batchSpec{records: 1 + rnd.Intn(4), valueSize: 10 + rnd.Intn(300), ts: clk.Now().UnixMilli()})...)
					}
					trace = append(trace, fmt.Sprintf("append(%d batches, epoch %d)", n, epoch))
					if _, err := l.AppendAsLeader(data, epoch); err != nil {
						fail("append: %v", err)
					}
					bs, _ := ParseBatches(data, 0)
					pos := 0
					for _, b := range bs {
						model = append(model, modelBatch{data[pos : pos+b.Size], b.BaseOffset, b.LastOffset, epoch})
						pos += b.Size
						end = b.LastOffset + 1
					}
				case op < 11: // append as follower: offsets and epoch from a leader
					if rnd.Intn(4) == 0 {
						epoch++
					}
					var data []byte
					next := end
					n := 1 + rnd.Intn(3)
					for i := 0; i < n; i++ {
						recs := 1 + rnd.Intn(4)
						data = append(data, makeBatch(t, batchSpec{records: recs, valueSize: 10 + rnd.Intn(300), ts: clk.Now().UnixMilli(), base: next, epoch: epoch})...)
						next += int64(recs)
					}
					trace = append(trace, fmt.Sprintf("follower append(%d batches, epoch %d)", n, epoch))
					if _, err := l.AppendAsFollower(data); err != nil {
						fail("follower append: %v", err)
					}
					bs, _ := ParseBatches(data, 0)
					pos := 0
					for _, b := range bs {
						model = append(model, modelBatch{data[pos : pos+b.Size], b.BaseOffset, b.LastOffset, epoch})
						pos += b.Size
						end = b.LastOffset + 1
					}
				case op < 12: // truncate
					off := logStart + rnd.Int63n(leo()-logStart+1)
					trace = append(trace, fmt.Sprintf("truncate(%d)", off))
					if err := l.TruncateTo(off); err != nil {
						fail("truncate: %v", err)
					}
					// Whole batches go: the LEO becomes the base of the first
					// removed one, and the log start follows it down.
					end = min(end, off)
					for len(model) > 0 && model[len(model)-1].last >= off {
						end = model[len(model)-1].base
						model = model[:len(model)-1]
					}
					logStart = min(logStart, end)
				case op < 13: // DeleteRecords
					off := logStart + rnd.Int63n(leo()-logStart+1)
					trace = append(trace, fmt.Sprintf("logstart(%d)", off))
					if err := l.IncrementLogStartOffset(off); err != nil {
						fail("increment log start: %v", err)
					}
					logStart = max(logStart, off)
				case op < 14: // retention by size, below a random high watermark
					hw := logStart + rnd.Int63n(leo()-logStart+1)
					cfg.RetentionBytes = rnd.Int63n(8000)
					l.SetConfig(cfg)
					trace = append(trace, fmt.Sprintf("retention(hw %d, bytes %d)", hw, cfg.RetentionBytes))
					if _, err := l.DeleteOldSegments(clk.Now(), hw); err != nil {
						fail("retention: %v", err)
					}
					if got := l.LogStartOffset(); got > hw {
						fail("retention moved log start to %d past hw %d", got, hw)
					}
					logStart = max(logStart, l.LogStartOffset())
				case op < 15: // clean reopen
					trace = append(trace, "reopen clean")
					if err := l.Close(); err != nil {
						fail("close: %v", err)
					}
					if l, err = Open(dir, cfg, WithClock(clk.Now), WithCleanShutdown(true), WithLogStartOffset(logStart)); err != nil {
						fail("reopen: %v", err)
					}
				case op < 16: // crash and recover from a random recovery point
					rp := rnd.Int63n(leo() + 1)
					garbage := rnd.Intn(3) == 0
					trace = append(trace, fmt.Sprintf("crash, recover from %d, garbage %v", rp, garbage))
					l.abandon()
					if garbage {
						logs := segmentFiles(t, dir, LogFileSuffix)
						appendToFile(t, logs[len(logs)-1], bytes.Repeat([]byte{byte(rnd.Intn(256))}, rnd.Intn(200)))
					}
					if l, err = Open(dir, cfg, WithClock(clk.Now), WithRecoveryPoint(rp), WithLogStartOffset(logStart)); err != nil {
						fail("recover: %v", err)
					}
				case op < 17: // ListOffsets by timestamp
					target := clk.Now().UnixMilli() - rnd.Int63n(40000)
					wantOff, wantTs, wantOK := int64(0), int64(0), false
				search:
					for _, b := range model {
						bi, _ := ParseBatches(b.data, 0)
						for r := int64(0); r <= bi[0].LastOffset-bi[0].BaseOffset; r++ {
							// makeBatch: record r has timestamp first+r.
							if b.base+r >= logStart && bi[0].FirstTimestamp+r >= target {
								wantOff, wantTs, wantOK = b.base+r, bi[0].FirstTimestamp+r, true
								break search
							}
						}
					}
					trace = append(trace, fmt.Sprintf("offsetForTimestamp(%d)", target))
					off, ts, ok := l.OffsetForTimestamp(target)
					if ok != wantOK || off != wantOff || ts != wantTs {
						fail("OffsetForTimestamp(%d) = (%d, %d, %v), model (%d, %d, %v)", target, off, ts, ok, wantOff, wantTs, wantOK)
					}
				default: // a random read
					if leo() == logStart {
						continue
					}
					off := logStart + rnd.Int63n(leo()-logStart)
					maxBytes := rnd.Intn(2000)
					res, err := l.Read(off, maxBytes, leo(), true)
					if err != nil {
						fail("read(%d): %v", off, err)
					}
					i := 0
					for model[i].last < off {
						i++
					}
					if !bytes.HasPrefix(res.Records, model[i].data) {
						fail("read(%d) does not start with the batch at %d", off, model[i].base)
					}
					// Whole consecutive batches, within maxBytes unless just one.
					rest := res.Records
					n := 0
					for j := i; j < len(model) && len(rest) > 0; j++ {
						if !bytes.HasPrefix(rest, model[j].data) {
							fail("read(%d): batch %d of the result is not the batch at %d", off, n, model[j].base)
						}
						rest = rest[len(model[j].data):]
						n++
					}
					if len(rest) > 0 || n > 1 && len(res.Records) > maxBytes {
						fail("read(%d, %d bytes) returned %d bytes in %d batches", off, maxBytes, len(res.Records), n)
					}
				}
				// The log matches the model.
				if l.LogEndOffset() != leo() || l.LogStartOffset() != logStart {
					fail("LEO %d start %d, model %d %d", l.LogEndOffset(), l.LogStartOffset(), leo(), logStart)
				}
				var want []byte
				for _, b := range model {
					if b.last >= logStart {
						want = append(want, b.data...)
					}
				}
				var got []byte
				for off := logStart; off < leo(); {
					res, err := l.Read(off, 1<<20, leo(), true)
					if err != nil {
						fail("read %d: %v", off, err)
					}
					bs, err := ParseBatches(res.Records, 0)
					if err != nil {
						fail("read %d: %v", off, err)
					}
					got = append(got, res.Records...)
					off = bs[len(bs)-1].NextOffset()
				}
				if !bytes.Equal(got, want) {
					fail("log content differs from the model: %d vs %d bytes", len(got), len(want))
				}
				// The epoch cache has one entry per epoch change still in the log.
				var wantEpochs []EpochEntry
				for _, b := range model {
					if b.last < logStart {
						continue
					}
					if n := len(wantEpochs); n == 0 || wantEpochs[n-1].Epoch != b.epoch {
						wantEpochs = append(wantEpochs, EpochEntry{b.epoch, max(b.base, logStart)})
					}
				}
				gotEpochs := l.Epochs().Entries()
				if n := len(gotEpochs); n > 0 && len(wantEpochs) == n-1 && gotEpochs[n-1].StartOffset == leo() {
					// An epoch that starts at the LEO holds no batch yet: the
					// cache keeps it when the log start reaches the LEO.
					gotEpochs = gotEpochs[:n-1]
				}
				if !equalEpochs(gotEpochs, wantEpochs) {
					fail("epochs %v, model %v", gotEpochs, wantEpochs)
				}
			}
		})
	}
}
