package log

import (
	"bytes"
	"testing"
)

// TestTxnPowerLoss cuts the power during a transactional workload (every
// write not fsynced forgotten, or torn) and checks that the recovered
// producer state, LSO and aborted-transaction index are exactly what a
// replica rebuilding them from the recovered log alone gets, and that the
// flushed abort survived. (One segment: everything after the flush is
// in one unsynced file; with rolls, rolled segments and their snapshots
// are fsynced.)
func TestTxnPowerLoss(t *testing.T) {
	needFaultFS(t)
	for _, tc := range powerLossCases {
		t.Run(tc.name, func(t *testing.T) {
			env := startPowerLoss(t, "txnlogtest", 11, tc.segmentBytes)
			l := env.l
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
			synced := env.flush(t)
			// Page cache only: 8 committed, 9 aborted, 10 open.
			mustAppend(t, l, ControlBatch(8, 0, Marker{Commit: true, CoordinatorEpoch: 1}, 0))
			mustAppend(t, l, producerBatch(t, 9, 0, 0, 1, true))
			filler(15)
			mustAppend(t, l, ControlBatch(9, 0, Marker{CoordinatorEpoch: 1}, 0))
			mustAppend(t, l, producerBatch(t, 10, 0, 0, 1, true))
			filler(15)
			rep := env.crashAndReopen(t, tc.opts...)
			l = env.l
			leo := l.LogEndOffset()
			if leo < synced {
				t.Fatalf("LEO %d below the flushed %d", leo, synced)
			}
			// The reference: a fresh log fed the recovered batches.
			ref := openTest(t, env.cfg)
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
