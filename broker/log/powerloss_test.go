package log

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/isrlab/isrlab/nemesis/faultfs"
)

// TestPowerLoss runs a Manager on a faultfs mount, cuts the power (every
// write not fsynced is forgotten, or torn at a page boundary) and checks
// that recovery keeps everything flushed before the crash, ends on a whole
// batch, and leaves a log that reads back cleanly.
func TestPowerLoss(t *testing.T) {
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
		exact        bool // recovery ends exactly at the flushed offset
	}{
		// No roll after the flush: tens of KiB stay unsynced in one file,
		// so a torn crash keeps some pages and cuts a batch.
		{"lose unsynced", 1 << 20, nil, true},
		{"torn", 1 << 20, []faultfs.CrashOpt{faultfs.Torn()}, false},
		// Rolls after the flush: rolled segments are fsynced in the
		// background, the newest files may vanish.
		{"lose unsynced across rolls", 4096, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backing, mnt := t.TempDir(), t.TempDir()
			fs, err := faultfs.Mount(faultfs.Options{Backing: backing, Mount: mnt, RunID: fmt.Sprintf("logtest-%d", os.Getpid()), Seed: 7})
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
			appendN(t, l, 20, 3, 100, 1, 1000)
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := m.CheckpointRecoveryPoints(); err != nil {
				t.Fatal(err)
			}
			synced := l.LogEndOffset()
			var want []byte
			for off := int64(0); off < synced; {
				r, err := l.Read(off, 1<<30, synced, true)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, r.Records...)
				bs, _ := ParseBatches(r.Records, 0)
				off = bs[len(bs)-1].NextOffset()
			}
			appendN(t, l, 70, 3, 100, 2, 2000) // page cache only
			written := l.LogEndOffset()
			m.crash() // the broker dies: no Close, no clean shutdown marker
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
			if tc.exact && leo != synced {
				t.Fatalf("LEO %d after losing every unsynced write, want the flushed %d", leo, synced)
			}
			if leo < synced || leo > written {
				t.Fatalf("LEO %d after power loss, flushed %d, written %d (crash %+v)", leo, synced, written, rep)
			}
			var got []byte
			for off := int64(0); off < leo; {
				r, err := l.Read(off, 1<<30, leo, true)
				if err != nil {
					t.Fatal(err)
				}
				bs, err := ParseBatches(r.Records, 0)
				if err != nil || bs[0].BaseOffset != off {
					t.Fatalf("read %d after recovery: %v", off, err)
				}
				got = append(got, r.Records...)
				off = bs[len(bs)-1].NextOffset()
			}
			if !bytes.HasPrefix(got, want) {
				t.Fatal("flushed batches changed by the power loss")
			}
			t.Logf("flushed %d, written %d, recovered %d (crash %+v)", synced, written, leo, rep)
		})
	}
}
