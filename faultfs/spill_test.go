package faultfs

import (
	"bytes"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLargeUndoSpills overwrites and truncates megabytes of synced data:
// the saved bytes go to a spill file, not memory, and a crash restores them.
func TestLargeUndoSpills(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(map[bool]string{false: "hooked", true: "passthrough"}[pt], func(t *testing.T) {
			f, _, mnt := mountT(t, pt)
			p := filepath.Join(mnt, "big")
			orig := make([]byte, 4<<20+123)
			rand.New(rand.NewSource(7)).Read(orig)
			if err := os.WriteFile(p, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			fh, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			if err := fh.Sync(); err != nil {
				t.Fatal(err)
			}
			if _, err := fh.WriteAt(make([]byte, 2<<20), 4096); err != nil { // spilled
				t.Fatal(err)
			}
			if _, err := fh.WriteAt([]byte("small"), 10); err != nil { // in memory
				t.Fatal(err)
			}
			if err := fh.Truncate(100); err != nil { // the rest of the tail, spilled
				t.Fatal(err)
			}
			var spilled, kept int64
			f.trk.mu.Lock()
			for _, s := range f.trk.files {
				s.mu.Lock()
				for _, e := range s.undo {
					if e.data == nil {
						spilled += e.n
					} else {
						kept += e.n
					}
				}
				s.mu.Unlock()
			}
			f.trk.mu.Unlock()
			if want := int64(len(orig) - 100 + 5); spilled+kept != want || kept > memBudget {
				t.Errorf("saved %d bytes in the spill file and %d in memory; want %d in all, at most %d in memory", spilled, kept, want, memBudget)
			}
			rep := f.Crash()
			if want := int64(len(orig) - 100 + 5); rep.BytesLost != want {
				t.Errorf("crash report %+v, want %d bytes restored", rep, want)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, orig) {
				t.Errorf("after crash: %d bytes, equal to the synced content: false", len(got))
			}
		})
	}
}

// TestClosedDirtyFilesHoldNoDescriptors writes many files and closes them
// unsynced: faultfs parks their crash state on file handles, not open
// descriptors, and a crash still rolls every one back.
func TestClosedDirtyFilesHoldNoDescriptors(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(map[bool]string{false: "hooked", true: "passthrough"}[pt], func(t *testing.T) {
			f, backing, mnt := mountT(t, pt)
			const files = 64
			for i := range files {
				if err := os.WriteFile(filepath.Join(backing, fmt.Sprint(i)), []byte("synced"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			base := openFds(t)
			for i := range files {
				fh, err := os.OpenFile(filepath.Join(mnt, fmt.Sprint(i)), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, fh, "+unsynced")
				fh.Close()
			}
			proctest.EventuallyTrue(t, 10*time.Second, "descriptors to be released", func() bool { return openFds(t) <= base+4 })
			if st := f.Status(); st.UnsyncedFiles != files {
				t.Errorf("%d unsynced files, want %d", st.UnsyncedFiles, files)
			}
			rep := f.Crash()
			if rep.Files != files || len(rep.Errors) > 0 {
				t.Errorf("crash report %+v, want %d files", rep, files)
			}
			for i := range files {
				got, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint(i)))
				if err != nil || string(got) != "synced" {
					t.Fatalf("file %d after crash: %q, %v", i, got, err)
				}
			}
		})
	}
}

func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestSparseUndo trims a synced, mostly sparse file (a preallocated index):
// faultfs saves only its data, and a crash brings back data and holes.
func TestSparseUndo(t *testing.T) {
	f, _, mnt := mountT(t, false)
	p := filepath.Join(mnt, "00.index")
	fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(64 << 20); err != nil { // preallocate, sparse
		t.Fatal(err)
	}
	for _, off := range []int64{0, 8 << 20, 40 << 20} {
		if _, err := fh.WriteAt([]byte("entry"), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(5); err != nil { // trim, as when a segment is sealed
		t.Fatal(err)
	}
	var kept, spilled, zero int64
	f.trk.mu.Lock()
	for _, s := range f.trk.files {
		s.mu.Lock()
		for _, e := range s.undo {
			switch {
			case e.zero:
				zero += e.n
			case e.data != nil:
				kept += e.n
			default:
				spilled += e.n
			}
		}
		s.mu.Unlock()
	}
	f.trk.mu.Unlock()
	if spilled != 0 || kept > 1<<20 || zero < 60<<20 {
		t.Errorf("saved %d bytes in memory, %d spilled, %d as holes; want holes not copied", kept, spilled, zero)
	}
	rep := f.Crash()
	if rep.BytesLost > 1<<20 {
		t.Errorf("crash report %+v counts holes as lost bytes", rep)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fh.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 64<<20 || st.Blocks*512 > 4<<20 {
		t.Errorf("after crash: size %d, %d bytes allocated; want 64 MiB, still sparse", st.Size, st.Blocks*512)
	}
	for _, off := range []int64{0, 8 << 20, 40 << 20} {
		buf := make([]byte, 5)
		if _, err := fh.ReadAt(buf, off); err != nil || string(buf) != "entry" {
			t.Errorf("at %d after crash: %q, %v", off, buf, err)
		}
	}
}

// TestTornCrash keeps a random page-aligned part of unsynced appends: every
// file ends up with its synced bytes plus a prefix of what followed.
func TestTornCrash(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(map[bool]string{false: "hooked", true: "passthrough"}[pt], func(t *testing.T) {
			f, _, mnt := mountT(t, pt)
			const files, synced, total = 16, 1000, 21000
			data := make([]byte, total)
			rand.New(rand.NewSource(3)).Read(data)
			for i := range files {
				fh, err := os.OpenFile(filepath.Join(mnt, fmt.Sprint(i)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fh.Write(data[:synced]); err != nil {
					t.Fatal(err)
				}
				if err := fh.Sync(); err != nil {
					t.Fatal(err)
				}
				for off := synced; off < total; off += 1500 { // batches across pages
					if _, err := fh.Write(data[off:min(off+1500, total)]); err != nil {
						t.Fatal(err)
					}
				}
				fh.Close()
			}
			rep := f.Crash(Torn())
			var kept int64
			some, torn := false, false
			for i := range files {
				got, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				n := len(got)
				if n < synced || n > total || !bytes.Equal(got, data[:n]) {
					t.Fatalf("file %d: %d bytes, not the synced bytes plus a prefix of the rest", i, n)
				}
				if n != synced && n != total && n%4096 != 0 {
					t.Errorf("file %d cut at %d, not at a page boundary", i, n)
				}
				some = some || n > synced
				torn = torn || n < total
				kept += int64(n - synced)
			}
			if !some || !torn {
				t.Errorf("with seed 1, want some files to keep part of their tail and some to lose part of it")
			}
			if rep.Kept != kept || rep.BytesLost != files*(total-synced)-kept {
				t.Errorf("crash report %+v: want %d kept, %d lost", rep, kept, files*(total-synced)-int(kept))
			}
		})
	}
}
