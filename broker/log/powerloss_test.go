package log

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/isrlab/isrlab/faultfs"
)

// TestPowerLoss runs a Manager on a faultfs mount, cuts the power (every
// write not fsynced is forgotten, or torn at a page boundary) and checks
// that recovery keeps everything flushed before the crash, ends on a whole
// batch, and leaves a log that reads back cleanly.
func TestPowerLoss(t *testing.T) {
	needFaultFS(t)
	for _, tc := range powerLossCases {
		t.Run(tc.name, func(t *testing.T) {
			env := startPowerLoss(t, "logtest", 7, tc.segmentBytes)
			l := env.l
			appendN(t, l, 20, 3, 100, 1, 1000)
			synced := env.flush(t)
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
			rep := env.crashAndReopen(t, tc.opts...)
			l = env.l
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

// powerLossCases are the crashes the power-loss tests run.
var powerLossCases = []struct {
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
}

// needFaultFS skips a test where faultfs cannot be mounted.
func needFaultFS(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount faultfs (FUSE); CI runs as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse to mount faultfs")
	}
}

// powerLossEnv is partition t-0 of a Manager on a faultfs mount.
type powerLossEnv struct {
	fs   *faultfs.FS
	dirs []string
	cfg  Config
	m    *Manager
	l    *Log
}

func startPowerLoss(t *testing.T, runID string, seed, segmentBytes int64) *powerLossEnv {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := faultfs.Mount(faultfs.Options{Backing: backing, Mount: mnt, RunID: fmt.Sprintf("%s-%d", runID, os.Getpid()), Seed: seed})
	if err != nil {
		t.Skipf("cannot mount faultfs here: %v", err)
	}
	t.Cleanup(func() { fs.Close() })
	e := &powerLossEnv{fs: fs, dirs: []string{mnt + "/data"}, cfg: smallConfig()}
	e.cfg.SegmentBytes = segmentBytes
	if e.m, err = OpenManager(e.dirs, e.cfg); err != nil {
		t.Fatal(err)
	}
	if e.l, err = e.m.GetOrCreate("t", 0, e.cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// flush fsyncs the log and checkpoints the recovery points; it returns
// the flushed LEO.
func (e *powerLossEnv) flush(t *testing.T) int64 {
	t.Helper()
	if err := e.l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.m.CheckpointRecoveryPoints(); err != nil {
		t.Fatal(err)
	}
	return e.l.LogEndOffset()
}

// crashAndReopen kills the broker (no Close, no clean shutdown marker),
// cuts the power, and opens the Manager and the log again.
func (e *powerLossEnv) crashAndReopen(t *testing.T, opts ...faultfs.CrashOpt) faultfs.CrashReport {
	t.Helper()
	e.m.crash()
	rep := e.fs.Crash(opts...)
	if rep.BytesLost == 0 {
		t.Fatalf("the crash lost nothing (%+v): the test did not exercise recovery", rep)
	}
	var err error
	if e.m, err = OpenManager(e.dirs, e.cfg); err != nil {
		t.Fatalf("reopen after power loss: %v", err)
	}
	m := e.m
	t.Cleanup(func() { m.Close() })
	l, ok := e.m.Get("t", 0)
	if !ok {
		t.Fatal("partition lost")
	}
	e.l = l
	return rep
}
