package faultfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMixedOpens opens one file for appending and for overwriting at the
// same time. The kernel wants all opens of an inode to agree on passthrough,
// so the first open decides; a crash is exact unless overwrites went
// through passthrough, which it then reports as inexact.
func TestMixedOpens(t *testing.T) {
	for _, tc := range []struct {
		name        string
		appendFirst bool
		pt, hooked  uint64
		lost        int64
		inexact     int
		after       string
	}{
		{name: "append-first", appendFirst: true, pt: 2, lost: 4, inexact: 1, after: "012AB56789"},
		{name: "overwrite-first", hooked: 2, lost: 6, after: "0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, mnt := mountT(t, true)
			p := filepath.Join(mnt, "seg")
			open := []func() (*os.File, error){
				func() (*os.File, error) { return os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644) },
				func() (*os.File, error) { return os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644) },
			}
			if !tc.appendFirst {
				open[0], open[1] = open[1], open[0]
			}
			var fhs []*os.File
			for _, o := range open {
				fh, err := o()
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				defer fh.Close()
				fhs = append(fhs, fh)
			}
			app, rw := fhs[0], fhs[1]
			if !tc.appendFirst {
				app, rw = rw, app
			}
			mustWrite(t, app, "0123456789")
			if err := rw.Sync(); err != nil {
				t.Fatal(err)
			}
			if _, err := rw.WriteAt([]byte("AB"), 3); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, app, "tail")
			if st := f.Status(); st.PassthroughOpens != tc.pt || st.HookedOpens != tc.hooked || st.PassthroughOpenNow != int64(tc.pt) {
				t.Errorf("opens: %d passthrough (%d open now), %d hooked; want %d, %d", st.PassthroughOpens, st.PassthroughOpenNow, st.HookedOpens, tc.pt, tc.hooked)
			}
			got, err := os.ReadFile(p)
			if err != nil || string(got) != "012AB56789tail" {
				t.Fatalf("before crash: %q, %v", got, err)
			}
			rep := f.Crash()
			if rep.BytesLost != tc.lost || rep.Inexact != tc.inexact {
				t.Errorf("crash report %+v, want %d bytes lost, %d inexact", rep, tc.lost, tc.inexact)
			}
			buf := make([]byte, 32)
			n, _ := rw.ReadAt(buf, 0)
			if string(buf[:n]) != tc.after {
				t.Errorf("after crash: %q, want %q", buf[:n], tc.after)
			}
		})
	}
}

// TestFaultForcesHookedOpen checks that an open during a fault goes through
// faultfs and that later opens of the same file follow it after the heal.
func TestFaultForcesHookedOpen(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	if err := f.Inject(Fault{Kind: KindLatency, Op: OpRead, Latency: Duration(1)}); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f.Heal()
	a, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mustWrite(t, a, "+more")
	if st := f.Status(); st.HookedOpens != 2 || st.PassthroughOpens != 0 || st.Counters[OpWrite].Ops != 1 {
		t.Errorf("status %+v: want 2 hooked opens and the write seen by faultfs", st)
	}
}

// TestPassthroughModes checks which opens each mode passes through, that
// passed-through writes bypass faultfs, and what a crash then undoes.
func TestPassthroughModes(t *testing.T) {
	for _, tc := range []struct {
		mode    PassthroughMode
		flags   int
		pt      bool
		after   string
		inexact int
	}{
		{PassthroughOff, os.O_WRONLY | os.O_APPEND, false, "0123456789", 0},
		{PassthroughOff, os.O_RDWR, false, "0123456789", 0},
		{PassthroughAppend, os.O_WRONLY | os.O_APPEND, true, "0123456789", 0},
		{PassthroughAppend, os.O_RDWR, false, "0123456789", 0},
		{PassthroughAll, os.O_WRONLY | os.O_APPEND, true, "0123456789", 0},
		{PassthroughAll, os.O_RDWR, true, "012AB56789", 1}, // overwrite kept, tail dropped
	} {
		name := map[bool]string{true: "o_append", false: "o_rdwr"}[tc.flags&os.O_APPEND != 0]
		t.Run(fmt.Sprintf("%s/%s", tc.mode, name), func(t *testing.T) {
			f, backing, mnt := mountMode(t, tc.mode)
			if err := os.WriteFile(filepath.Join(backing, "f"), []byte("0123456789"), 0o644); err != nil {
				t.Fatal(err)
			}
			fh, err := os.OpenFile(filepath.Join(mnt, "f"), tc.flags, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			if tc.flags&os.O_APPEND == 0 {
				if _, err := fh.WriteAt([]byte("AB"), 3); err != nil {
					t.Fatal(err)
				}
				if _, err := fh.WriteAt([]byte("tail"), 10); err != nil {
					t.Fatal(err)
				}
			} else {
				mustWrite(t, fh, "tail")
			}
			st := f.Status()
			if tc.pt && st.Counters[OpWrite].Ops > 0 {
				t.Skip("this kernel does not serve FUSE passthrough (Linux 6.9+ as root needed)")
			}
			if got := st.PassthroughOpens == 1; got != tc.pt {
				t.Errorf("passthrough open: %v, want %v (status %+v)", got, tc.pt, st)
			}
			if !tc.pt && st.Counters[OpWrite].Ops == 0 {
				t.Errorf("hooked writes not seen by faultfs")
			}
			rep := f.Crash()
			if rep.Inexact != tc.inexact {
				t.Errorf("crash report %+v, want %d inexact", rep, tc.inexact)
			}
			got, err := os.ReadFile(filepath.Join(mnt, "f"))
			if err != nil || string(got) != tc.after {
				t.Errorf("after crash: %q, %v; want %q", got, err, tc.after)
			}
		})
	}
}

// TestMmapHooked maps a file opened through faultfs: mapped writes reach
// faultfs as writes when written back, so a crash undoes them, and msync
// (MS_SYNC) makes them durable like fsync. The mapping is done by a child
// process: a page fault on a FUSE mapping served by the faulting process
// itself can deadlock with the Go garbage collector.
func TestMmapHooked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		msync bool
		after string
	}{
		{"written-back", false, "\x00\x00\x00\x00\x00\x00"},
		{"msynced", true, "mapped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, backing, mnt := mountT(t, true)
			if err := os.WriteFile(filepath.Join(backing, "idx"), make([]byte, 8192), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "FAULTFS_TEST_MMAP="+filepath.Join(mnt, "idx"), fmt.Sprintf("FAULTFS_TEST_MSYNC=%v", tc.msync))
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("mapping child: %v: %s", err, out)
			}
			got, err := os.ReadFile(filepath.Join(backing, "idx"))
			if err != nil || string(got[100:106]) != "mapped" {
				t.Fatalf("backing after the child closed the file: %q, %v", got[100:106], err)
			}
			f.Crash()
			got, err = os.ReadFile(filepath.Join(mnt, "idx"))
			if err != nil || string(got[100:106]) != tc.after {
				t.Errorf("after crash: %q, %v; want %q", got[100:106], err, tc.after)
			}
		})
	}
}

// mapper writes "mapped" at offset 100 of p through a shared mapping, msyncs
// if asked, and closes the file (which writes dirty pages back).
func mapper(p string, msync bool) error {
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fh.Close()
	m, err := unix.Mmap(int(fh.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap of a hooked file: %w", err)
	}
	copy(m[100:], "mapped")
	if msync {
		if err := unix.Msync(m, unix.MS_SYNC); err != nil {
			return err
		}
	}
	return unix.Munmap(m)
}
