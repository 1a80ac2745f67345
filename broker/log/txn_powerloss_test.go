package log

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/isrlab/isrlab/nemesis/faultfs"
)

// TestTxnPowerLoss cuts the power during a transactional workload (every
// write not fsynced forgotten, or torn) and checks that the recovered
// producer state, LSO and aborted-transaction index are exactly what a
// replica rebuilding them from the recovered log alone gets, and that the
// flushed abort survived.
func TestTxnPowerLoss(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount faultfs (FUSE); CI runs as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse to mount faultfs")
	}
	for _, tc := range []struct {
		name         string
		segmentBytes int64
		opts         []faultfs.CrashOpt
	}{
		// One segment: everything after the flush is in one unsynced file.
		{"lose unsynced", 1 << 20, nil},
		{"torn", 1 << 20, []faultfs.CrashOpt{faultfs.Torn()}},
		// Rolls after the flush fsync the rolled segments and snapshots.
		{"lose unsynced across rolls", 4096, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backing, mnt := t.TempDir(), t.TempDir()
			fs, err := faultfs.Mount(faultfs.Options{Backing: backing, Mount: mnt, RunID: fmt.Sprintf("txnlogtest-%d", os.Getpid()), Seed: 11})
			if err != nil {
				t.Skipf("cannot mount faultfs here: %v", err)
			}
			t.Cleanup(func() { fs.Close() })
			dirs := []string{mnt + "/data"}
			cfg := smallConfig()
			cfg.SegmentBytes = tc.segmentBytes
			m, err := OpenManager(dirs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.GetOrCreate("t", 0, cfg)
			if err != nil {
				t.Fatal(err)
			}
			filler := func(n int) {
				for i := 0; i < n; i++ {
					mustAppend(t, l, makeBatch(t, batchSpec{records: 2, valueSize: 100}))
				}
			}
			// Flushed: 7 aborted, 8 open.
			mustAppend(t, l, producerBatch(t, 7, 0, 0, 2, true))
			filler(15)
			abort7 := mustAppend(t, l, ControlBatch(7, 0, Marker{CoordinatorEpoch: 1}, 0)).LastOffset
			mustAppend(t, l, producerBatch(t, 8, 0, 0, 1, true))
			filler(15)
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := m.CheckpointRecoveryPoints(); err != nil {
				t.Fatal(err)
			}
			synced := l.LogEndOffset()
			// Page cache only: 8 committed, 9 aborted, 10 open.
			mustAppend(t, l, ControlBatch(8, 0, Marker{Commit: true, CoordinatorEpoch: 1}, 0))
			mustAppend(t, l, producerBatch(t, 9, 0, 0, 1, true))
			filler(15)
			mustAppend(t, l, ControlBatch(9, 0, Marker{CoordinatorEpoch: 1}, 0))
			mustAppend(t, l, producerBatch(t, 10, 0, 0, 1, true))
			filler(15)
			m.crash()
			rep := fs.Crash(tc.opts...)
			if rep.BytesLost == 0 {
				t.Fatalf("the crash lost nothing (%+v): the test did not exercise recovery", rep)
			}

			m, err = OpenManager(dirs, cfg)
			if err != nil {
				t.Fatalf("reopen after power loss: %v", err)
			}
			t.Cleanup(func() { m.Close() })
			l, ok := m.Get("t", 0)
			if !ok {
				t.Fatal("partition lost")
			}
			leo := l.LogEndOffset()
			if leo < synced {
				t.Fatalf("LEO %d below the flushed %d", leo, synced)
			}
			// The reference: a fresh log fed the recovered batches.
			ref := openTest(t, cfg)
			for off := int64(0); off < leo; {
				r, err := l.Read(off, 2048, leo, true)
				if err != nil {
					t.Fatal(err)
				}
				bs, err := ParseBatches(r.Records, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ref.AppendAsFollower(r.Records); err != nil {
					t.Fatal(err)
				}
				off = bs[len(bs)-1].NextOffset()
			}
			got, want := txnSummary(l, leo), txnSummary(ref, leo)
			if got != want {
				t.Fatalf("recovered to %d (flushed %d):\n got %s\nwant %s", leo, synced, got, want)
			}
			if !bytes.Equal(EncodeSnapshot(l.Producers()), EncodeSnapshot(ref.Producers())) {
				t.Fatal("recovered producer state differs from the rebuilt one")
			}
			if ab := l.AbortedTxns(0, leo); len(ab) == 0 || ab[0].LastOffset != abort7 {
				t.Fatalf("the flushed abort of 7 at %d is gone: %+v", abort7, ab)
			}
			t.Logf("flushed %d, recovered %d: %s (crash %+v)", synced, leo, got, rep)
		})
	}
}
