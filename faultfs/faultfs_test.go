package faultfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isrlab/isrlab/internal/mountinfo"
)

// requireFUSE skips t unless it can mount FUSE filesystems.
func requireFUSE(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("faultfs tests need root to mount FUSE (CI runs them as root)")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("faultfs tests need /dev/fuse: %v", err)
	}
	f.Close()
}

// mountT mounts a faultfs over a fresh backing dir for the test, with
// PassthroughAppend or PassthroughOff.
func mountT(t testing.TB, passthrough bool) (*FS, string, string) {
	t.Helper()
	mode := PassthroughOff
	if passthrough {
		mode = PassthroughAppend
	}
	return mountMode(t, mode)
}

func mountMode(t testing.TB, mode PassthroughMode) (*FS, string, string) {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Mount(Options{Backing: backing, Mount: mnt, RunID: ManualRunID(os.Getpid()) + "-test", Seed: 1, Passthrough: mode})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return f, backing, mnt
}

// TestCrashScripts runs the scenarios in testdata/crash: each line is an
// operation on the mount, "crash", or an expectation checked on both the
// mount and the backing dir.
func TestCrashScripts(t *testing.T) {
	requireFUSE(t)
	files, err := filepath.Glob("testdata/crash/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no crash scripts: %v", err)
	}
	for _, file := range files {
		for _, pt := range []bool{false, true} {
			name := strings.TrimSuffix(filepath.Base(file), ".txt") + map[bool]string{false: "/hooked", true: "/passthrough"}[pt]
			t.Run(name, func(t *testing.T) {
				f, backing, mnt := mountT(t, pt)
				runScript(t, f, file, backing, mnt)
			})
		}
	}
}

func runScript(t *testing.T, f *FS, file, backing, mnt string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		args, err := splitArgs(text)
		if err != nil {
			t.Fatalf("%s:%d: %v", file, line, err)
		}
		if err := step(f, args, backing, mnt); err != nil {
			t.Fatalf("%s:%d: %s: %v", file, line, text, err)
		}
	}
}

// splitArgs splits a script line on spaces; double-quoted Go strings may
// hold spaces.
func splitArgs(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, err
			}
			v, _ := strconv.Unquote(q)
			out = append(out, v)
			s = s[len(q):]
			continue
		}
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out, nil
}

func step(f *FS, a []string, backing, mnt string) error {
	p := func(i int) string { return filepath.Join(mnt, a[i]) }
	want := func(n int) error {
		if len(a) != n {
			return fmt.Errorf("want %d arguments, got %d", n-1, len(a)-1)
		}
		return nil
	}
	switch a[0] {
	case "append", "append-dsync":
		if err := want(3); err != nil {
			return err
		}
		flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE
		if a[0] == "append-dsync" {
			flags |= syscall.O_DSYNC
		}
		fh, err := os.OpenFile(p(1), flags, 0o644)
		if err != nil {
			return err
		}
		_, err = fh.WriteString(a[2])
		return errors.Join(err, fh.Close())
	case "write":
		if err := want(4); err != nil {
			return err
		}
		off, err := strconv.ParseInt(a[2], 10, 64)
		if err != nil {
			return err
		}
		fh, err := os.OpenFile(p(1), os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = fh.WriteAt([]byte(a[3]), off)
		return errors.Join(err, fh.Close())
	case "create":
		fh, err := os.OpenFile(p(1), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		return fh.Close()
	case "fsync":
		fh, err := os.Open(p(1))
		if err != nil {
			return err
		}
		return errors.Join(fh.Sync(), fh.Close())
	case "truncate":
		n, err := strconv.ParseInt(a[2], 10, 64)
		if err != nil {
			return err
		}
		return os.Truncate(p(1), n)
	case "mkdir":
		return os.Mkdir(p(1), 0o755)
	case "rmdir":
		return syscall.Rmdir(p(1))
	case "rmdir-fails":
		if err := syscall.Rmdir(p(1)); err == nil {
			return errors.New("rmdir succeeded")
		}
		return nil
	case "rename":
		return os.Rename(p(1), p(2))
	case "unlink":
		return syscall.Unlink(p(1))
	case "exchange":
		return unix.Renameat2(unix.AT_FDCWD, p(1), unix.AT_FDCWD, p(2), unix.RENAME_EXCHANGE)
	case "crash":
		rep := f.Crash()
		if len(rep.Errors) > 0 {
			return fmt.Errorf("crash errors: %v", rep.Errors)
		}
		return nil
	case "expect":
		if err := want(3); err != nil {
			return err
		}
		for _, root := range []string{mnt, backing} {
			got, err := os.ReadFile(filepath.Join(root, a[1]))
			if err != nil {
				return err
			}
			if string(got) != a[2] {
				return fmt.Errorf("%s: got %q, want %q", root, got, a[2])
			}
		}
		return nil
	case "expect-dir":
		for _, root := range []string{mnt, backing} {
			fi, err := os.Stat(filepath.Join(root, a[1]))
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return fmt.Errorf("%s: not a directory", root)
			}
		}
		return nil
	case "missing":
		for _, root := range []string{mnt, backing} {
			if _, err := os.Lstat(filepath.Join(root, a[1])); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s: want ENOENT, got %v", root, err)
			}
		}
		return nil
	case "ls":
		ents, err := os.ReadDir(p(1))
		if err != nil {
			return err
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, a[2:]) {
			return fmt.Errorf("got %q, want %q", names, a[2:])
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", a[0])
}

// TestCrashWhileOpen crashes while a writer still holds its descriptors:
// the next writes land after the synced content.
func TestCrashWhileOpen(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(map[bool]string{false: "hooked", true: "passthrough"}[pt], func(t *testing.T) {
			f, _, mnt := mountT(t, pt)
			fh, err := os.OpenFile(filepath.Join(mnt, "seg"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			mustWrite(t, fh, "a")
			if err := fh.Sync(); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fh, "bbbb")
			rep := f.Crash()
			if rep.BytesLost != 4 || rep.Files != 1 {
				t.Errorf("crash report %+v, want 4 bytes lost in 1 file", rep)
			}
			mustWrite(t, fh, "c")
			got, err := os.ReadFile(filepath.Join(mnt, "seg"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "ac" {
				t.Errorf("after crash and append: %q, want %q", got, "ac")
			}
		})
	}
}

func mustWrite(t *testing.T, fh *os.File, s string) {
	t.Helper()
	if _, err := fh.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// actions trigger one operation of each kind on the file rel of the mount.
var actions = map[Op]func(mnt, rel string) error{
	OpWrite: func(mnt, rel string) error {
		fh, err := os.OpenFile(filepath.Join(mnt, rel), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fh.WriteAt([]byte("x"), 0)
		return errors.Join(err, fh.Close())
	},
	OpRead: func(mnt, rel string) error {
		fh, err := os.Open(filepath.Join(mnt, rel))
		if err != nil {
			return err
		}
		_, err = fh.ReadAt(make([]byte, 1), 0)
		return errors.Join(err, fh.Close())
	},
	OpFsync: func(mnt, rel string) error {
		fh, err := os.Open(filepath.Join(mnt, rel))
		if err != nil {
			return err
		}
		return errors.Join(fh.Sync(), fh.Close())
	},
	OpMeta: func(mnt, rel string) error {
		return os.Chmod(filepath.Join(mnt, rel), 0o640)
	},
}

// prepare creates dir/file with content through the backing dir, outside
// any fault.
func prepare(t *testing.T, backing, rel string) {
	t.Helper()
	p := filepath.Join(backing, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLatency(t *testing.T) {
	const latency = 30 * time.Millisecond
	for _, op := range ops {
		t.Run(string(op), func(t *testing.T) {
			f, backing, mnt := mountT(t, true)
			prepare(t, backing, "slow/f")
			prepare(t, backing, "fast/f")
			if err := f.Inject(Fault{Kind: KindLatency, Op: op, Prefix: "slow/", Latency: Duration(latency), Jitter: Duration(5 * time.Millisecond)}); err != nil {
				t.Fatal(err)
			}
			before := f.Status().Counters[op].Delayed
			start := time.Now()
			if err := actions[op](mnt, "slow/f"); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < latency {
				t.Errorf("%s on slow/f took %v, want at least %v", op, el, latency)
			}
			mid := f.Status().Counters[op].Delayed
			if mid <= before {
				t.Errorf("delayed %s counter did not move: %d -> %d", op, before, mid)
			}
			if err := actions[op](mnt, "fast/f"); err != nil {
				t.Fatal(err)
			}
			if after := f.Status().Counters[op].Delayed; after != mid {
				t.Errorf("%s outside the prefix was delayed: counter %d -> %d", op, mid, after)
			}
		})
	}
}

func TestEIO(t *testing.T) {
	for _, op := range ops {
		t.Run(string(op), func(t *testing.T) {
			f, backing, mnt := mountT(t, true)
			prepare(t, backing, "f")
			if err := f.Inject(Fault{Kind: KindEIO, Op: op, Probability: 1}); err != nil {
				t.Fatal(err)
			}
			if err := actions[op](mnt, "f"); !errors.Is(err, syscall.EIO) {
				t.Errorf("%s with eio p=1: got %v, want EIO", op, err)
			}
			if got := f.Status().Counters[op].Failed; got == 0 {
				t.Errorf("failed %s counter is 0", op)
			}
			f.Heal()
			if err := actions[op](mnt, "f"); err != nil {
				t.Errorf("%s after heal: %v", op, err)
			}
		})
	}
}

func TestHang(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	if err := f.Inject(Fault{Kind: KindHang, Op: OpFsync}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- actions[OpFsync](mnt, "f") }()
	proctest.EventuallyTrue(t, 10*time.Second, "fsync to hang", func() bool { return f.Status().Counters[OpFsync].Hanging == 1 })
	select {
	case err := <-done:
		t.Fatalf("fsync returned while hung: %v", err)
	default:
	}
	// Other kinds still run.
	if err := actions[OpRead](mnt, "f"); err != nil {
		t.Fatalf("read during fsync hang: %v", err)
	}
	f.Unhang()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fsync after unhang: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fsync still blocked 10s after unhang")
	}
	if n := f.Status().Counters[OpFsync].Hanging; n != 0 {
		t.Errorf("hanging = %d after unhang", n)
	}
}

// TestCrashDuringHang crashes while a write is hung: the crash must not
// wait for it, and the write lands after the crash once released.
func TestCrashDuringHang(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	if err := f.Inject(Fault{Kind: KindHang, Op: OpWrite}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- actions[OpWrite](mnt, "f") }()
	proctest.EventuallyTrue(t, 10*time.Second, "write to hang", func() bool { return f.Status().Counters[OpWrite].Hanging == 1 })
	crashed := make(chan CrashReport, 1)
	go func() { crashed <- f.Crash() }()
	select {
	case <-crashed:
	case <-time.After(10 * time.Second):
		t.Fatal("crash blocked by a hung write")
	}
	f.Unhang()
	if err := <-done; err != nil {
		t.Fatalf("write after unhang: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || string(got) != "xayload" {
		t.Errorf("after crash and released write: %q, %v", got, err)
	}
}

// TestEIOProbability draws with a fixed seed: about half of 400 writes
// fail, and none once healed.
func TestEIOProbability(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	fh, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := f.Inject(Fault{Kind: KindEIO, Op: OpWrite, Probability: 0.5}); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 400 {
		if _, err := fh.WriteAt([]byte("x"), 0); errors.Is(err, syscall.EIO) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// Binomial(400, 0.5) lies in [140, 260] with probability 1 - 1e-9.
	if failed < 140 || failed > 260 {
		t.Errorf("%d of 400 writes failed with p=0.5", failed)
	}
	f.Heal()
	for range 50 {
		if _, err := fh.WriteAt([]byte("x"), 0); err != nil {
			t.Fatalf("write after heal: %v", err)
		}
	}
}

func TestHealIdempotent(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	for _, flt := range []Fault{
		{Kind: KindLatency, Op: OpWrite, Latency: Duration(time.Millisecond)},
		{Kind: KindEIO, Op: OpRead, Probability: 1},
		{Kind: KindHang, Op: OpMeta, Prefix: "nowhere/"},
	} {
		if err := f.Inject(flt); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.Status().Faults); n != 3 {
		t.Fatalf("%d active faults, want 3", n)
	}
	for range 2 {
		f.Heal()
		if st := f.Status(); len(st.Faults) != 0 {
			t.Fatalf("faults after heal: %+v", st.Faults)
		}
	}
	before := f.Status().Counters
	for _, op := range ops {
		if err := actions[op](mnt, "f"); err != nil {
			t.Fatalf("%s after heal: %v", op, err)
		}
	}
	after := f.Status().Counters
	for _, op := range ops {
		if after[op].Delayed != before[op].Delayed || after[op].Failed != before[op].Failed {
			t.Errorf("%s still faulted after heal: %+v -> %+v", op, before[op], after[op])
		}
	}
}

func TestFaultValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fault
		ok   bool
	}{
		{"latency", Fault{Kind: KindLatency, Latency: Duration(time.Millisecond)}, true},
		{"zero latency", Fault{Kind: KindLatency}, false},
		{"negative jitter", Fault{Kind: KindLatency, Latency: 1, Jitter: -1}, false},
		{"eio", Fault{Kind: KindEIO, Op: OpFsync, Probability: 0.5}, true},
		{"eio p=0", Fault{Kind: KindEIO, Probability: 0}, false},
		{"eio p>1", Fault{Kind: KindEIO, Probability: 1.5}, false},
		{"hang", Fault{Kind: KindHang, Op: OpMeta}, true},
		{"bad op", Fault{Kind: KindHang, Op: "chmod"}, false},
		{"bad kind", Fault{Kind: "slow"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.normalize()
			if (err == nil) != tc.ok {
				t.Errorf("normalize(%+v) = %v, want ok=%v", tc.f, err, tc.ok)
			}
		})
	}
}

func TestControlSocket(t *testing.T) {
	f, backing, mnt := mountT(t, true)
	prepare(t, backing, "f")
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c := NewClient(sock)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if err := c.Latency(cctx, OpWrite, "", 2*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.EIO(cctx, OpFsync, "x/", 0.25); err != nil {
		t.Fatal(err)
	}
	if err := c.Hang(cctx, OpMeta, "never/"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Faults) != 3 || st.RunID == "" {
		t.Errorf("status %+v: want 3 faults and a run id", st)
	}
	var re *RemoteError
	if err := c.EIO(cctx, OpRead, "", 2); !errors.As(err, &re) {
		t.Errorf("eio p=2: got %v, want a RemoteError", err)
	}
	if _, err := c.Do(cctx, Request{Cmd: "explode"}); !errors.As(err, &re) {
		t.Errorf("unknown command: got %v, want a RemoteError", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Crash(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Undone != 1 {
		t.Errorf("crash report %+v: want 1 change undone", rep)
	}
	if err := c.Unhang(cctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Heal(cctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err = c.Status(cctx); err != nil || len(st.Faults) != 0 || st.Crashes != 1 {
		t.Errorf("status after heal: %+v, %v", st, err)
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `36 35 98:0 /mnt1 /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
100 36 0:52 / /tmp/run\040one/mnt rw,nosuid,nodev,relatime shared:60 - fuse.faultfs faultfs-r1 rw,user_id=0,group_id=0
101 36 0:53 / /tmp/other rw - fuse.other faultfs-r2 rw
102 36 0:54 / /tmp/r3 rw - fuse.faultfs faultfs-r3 rw
`
	ms, err := mountinfo.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := faultfsMounts(ms)
	want := []MountInfo{{RunID: "r1", MountPoint: "/tmp/run one/mnt"}, {RunID: "r3", MountPoint: "/tmp/r3"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestMountRejects(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"mount inside backing", Options{Backing: dir, Mount: sub, RunID: "r"}},
		{"backing inside mount", Options{Backing: sub, Mount: dir, RunID: "r"}},
		{"same dir", Options{Backing: dir, Mount: dir, RunID: "r"}},
		{"bad run id", Options{Backing: dir, Mount: sub, RunID: "a b"}},
		{"bad passthrough", Options{Backing: sub, Mount: t.TempDir(), RunID: "r", Passthrough: "some"}},
		{"missing backing", Options{Backing: filepath.Join(dir, "nope"), Mount: t.TempDir(), RunID: "r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, err := Mount(tc.opts); err == nil {
				f.Close()
				t.Errorf("Mount(%+v) succeeded", tc.opts)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	got := Args(Options{Backing: "/b", Mount: "/m", RunID: "r1", Seed: 7, Passthrough: PassthroughAll}, "/s.sock")
	want := []string{"faultfs", "--backing", "/b", "--mount", "/m", "--control", "/s.sock", "--run-id", "r1", "--seed", "7", "--passthrough", "all"}
	if !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
}

func TestManualRunAlive(t *testing.T) {
	for id, alive := range map[string]bool{
		ManualRunID(os.Getpid()):         true,
		ManualRunID(os.Getpid()) + "-b1": true,
		ManualRunID(1 << 30):             false, // above pid_max
		ManualRunID(1<<30) + "-b1":       false,
		"manual-x":                       false,
		"manual--1":                      false,
		"run-1":                          false,
	} {
		if got := manualAlive(id); got != alive {
			t.Errorf("manualAlive(%q) = %v, want %v", id, got, alive)
		}
	}
}

func TestRunIDValidation(t *testing.T) {
	for id, ok := range map[string]bool{"run-1": true, "2026.11.29_a": true, "": false, "a b": false, "a,b": false, "-x": false, strings.Repeat("a", 65): false} {
		if ValidRunID(id) != ok {
			t.Errorf("ValidRunID(%q) = %v, want %v", id, !ok, ok)
		}
	}
}
