package nemesis

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

// mountFaultfs mounts a faultfs over a temporary directory and serves its
// control socket; it returns the mount point and the socket.
func mountFaultfs(t testing.TB) (mnt, sock string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse for faultfs; CI has it")
	}
	d := t.TempDir()
	backing, mnt := filepath.Join(d, "backing"), filepath.Join(d, "mnt")
	for _, p := range []string{backing, mnt} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := faultfs.Mount(faultfs.Options{Backing: backing, Mount: mnt, RunID: faultfs.ManualRunID(os.Getpid())})
	if err != nil {
		t.Skipf("cannot mount faultfs here: %v", err)
	}
	sock = filepath.Join(d, "ctl.sock")
	ln, err := faultfs.Listen(sock)
	if err != nil {
		fs.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fs.Serve(ctx, ln) //nolint:errcheck
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		fs.Close()
	})
	return mnt, sock
}

// TestDiskFaults drives faultfs through the nemesis: a slow fsync, EIO on
// writes, and a power loss of a node that forgets exactly the unsynced
// bytes of its disk.
func TestDiskFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	mnt, sock := mountFaultfs(t)
	ctx := context.Background()
	n := l.nemesis(t)
	n.Env.Disks = map[string]string{"b1": sock}
	path := filepath.Join(mnt, "log")

	t.Run("slow fsync", func(t *testing.T) {
		const lat = 30 * time.Millisecond
		f := &SlowDisk{Latency: units.Duration(lat)}
		f.Nodes, f.Op = []string{"b1"}, faultfs.OpFsync
		a, err := n.Inject(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if took := writeSync(t, path, []byte("x")); took < lat {
			t.Fatalf("fsync took %v under a %v latency fault", took, lat)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		st, err := faultfs.NewClient(sock).Status(ctx)
		if err != nil || len(st.Faults) != 0 {
			t.Fatalf("faults after the heal: %+v, %v", st.Faults, err)
		}
	})

	t.Run("eio", func(t *testing.T) {
		f := &DiskError{Probability: 1}
		f.Nodes, f.Op = []string{"b1"}, faultfs.OpWrite
		a, err := n.Inject(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, werr := fh.Write([]byte("y"))
		fh.Close()
		if !errors.Is(werr, syscall.EIO) {
			t.Fatalf("write under eio: %v", werr)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("power loss forgets unsynced writes", func(t *testing.T) {
		os.Remove(path)
		synced, unsynced := []byte("durable\n"), []byte("only in the page cache\n")
		writeSync(t, path, synced)
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write(unsynced); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		pid := l.c.Node("b1").PID()
		a, err := n.Inject(ctx, &PowerLoss{procNodes: procNodes{Nodes: []string{"b1", "b2"}}})
		if err != nil {
			t.Fatal(err)
		}
		pl := a.Fault.Run.(*powerLossRun)
		if rep := pl.Reports["b1"]; rep.BytesLost != int64(len(unsynced)) {
			t.Fatalf("b1 lost %d bytes, want %d: %+v", rep.BytesLost, len(unsynced), rep)
		}
		if len(pl.NoDisk) != 1 || pl.NoDisk[0] != "b2" {
			t.Fatalf("nodes without faultfs: %v", pl.NoDisk)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(synced) {
			t.Fatalf("after the power loss the file holds %q (%v), want %q", got, err, synced)
		}
		if err := n.Heal(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		proctest.Eventually(t, 15*time.Second, "b1 back", func() error { return l.echoFrom("client1", "b1", time.Second) })
		if l.c.Node("b1").PID() == pid {
			t.Fatal("b1 was not restarted")
		}
	})

	t.Run("no socket", func(t *testing.T) {
		f := &DiskHang{}
		f.Nodes = []string{"b3"}
		if _, err := n.Inject(ctx, f); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("disk fault on a node without faultfs: %v", err)
		}
	})
}

// writeSync appends b to path, fsyncs and returns how long the fsync took.
func writeSync(t testing.TB, path string, b []byte) time.Duration {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(b); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	return time.Since(begin)
}
