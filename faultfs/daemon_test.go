package faultfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the faultfs daemon for the tests that kill it: with
// FAULTFS_TEST_DAEMON set, the test binary runs Run until SIGTERM.
func TestMain(m *testing.M) {
	if p := os.Getenv("FAULTFS_TEST_WRITER"); p != "" {
		writer(p)
	}
	if p := os.Getenv("FAULTFS_TEST_MMAP"); p != "" {
		if err := mapper(p, os.Getenv("FAULTFS_TEST_MSYNC") == "true"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("FAULTFS_TEST_DAEMON") == "" {
		os.Exit(m.Run())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := Run(ctx, Options{
		Backing: os.Getenv("FAULTFS_BACKING"), Mount: os.Getenv("FAULTFS_MOUNT"),
		RunID: os.Getenv("FAULTFS_RUN"), Passthrough: PassthroughAppend,
	}, os.Getenv("FAULTFS_CONTROL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

type daemon struct {
	cmd                    *exec.Cmd
	run, mnt, ctl, backing string
	exited                 chan error
}

// startDaemon runs the faultfs daemon in a child process that dies with the
// test, and waits until it serves its mount and socket.
func startDaemon(t *testing.T, run string) *daemon {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	d := &daemon{run: run, backing: filepath.Join(dir, "b"), mnt: filepath.Join(dir, "m"), ctl: filepath.Join(dir, "ctl.sock"), exited: make(chan error, 1)}
	for _, p := range []string{d.backing, d.mnt} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd = exec.Command(os.Args[0], "-test.run=^$")
	d.cmd.Env = append(os.Environ(), "FAULTFS_TEST_DAEMON=1", "FAULTFS_BACKING="+d.backing,
		"FAULTFS_MOUNT="+d.mnt, "FAULTFS_RUN="+run, "FAULTFS_CONTROL="+d.ctl)
	d.cmd.Stderr = os.Stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
		CleanStale(func(id string) bool { return id != run })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := NewClient(d.ctl).WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, run) {
		t.Fatal("daemon answers but its mount is not listed")
	}
	return d
}

func mounted(t *testing.T, run string) bool {
	t.Helper()
	ms, err := Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.RunID == run {
			return true
		}
	}
	return false
}

func (d *daemon) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.exited:
		d.exited <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not exit within 20s")
		return nil
	}
}

func TestDaemonStopsOnSIGTERM(t *testing.T) {
	run := ManualRunID(os.Getpid()) + "-term"
	d := startDaemon(t, run)
	if err := os.WriteFile(filepath.Join(d.mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hung operation must not keep the daemon from stopping.
	c := NewClient(d.ctl)
	if err := c.Hang(context.Background(), OpFsync, ""); err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 1)
	go func() { synced <- actions[OpFsync](d.mnt, "f") }()
	proctest.EventuallyTrue(t, 10*time.Second, "fsync to hang", func() bool {
		st, err := c.Status(context.Background())
		return err == nil && st.Counters[OpFsync].Hanging == 1
	})
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.wait(t); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	if mounted(t, run) {
		t.Error("mount still listed after SIGTERM")
	}
	select {
	case err := <-synced:
		t.Logf("hung fsync returned %v", err)
	case <-time.After(20 * time.Second):
		t.Error("hung fsync still blocked after the daemon stopped")
	}
	if _, err := os.Stat(d.ctl); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left behind: %v", err)
	}
	ents, err := os.ReadDir(d.backing)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "f" {
		t.Errorf("backing dir holds %v, want just f (no trash)", ents)
	}
}

func TestKilledDaemonCleaned(t *testing.T) {
	// Not a ManualRunID: CleanStale is to find this one dead (another
	// package's `isrlab clean` at this moment would only do it first).
	run := fmt.Sprintf("kill-%d", os.Getpid())
	d := startDaemon(t, run)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(t)
	if _, err := os.Stat(filepath.Join(d.mnt, "f")); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat in the mount of a killed daemon: %v, want ENOTCONN", err)
	}
	if !mounted(t, run) {
		t.Fatal("stale mount not listed")
	}
	alive := func(id string) bool { return id != run }
	for range 2 { // idempotent
		if err := CleanStale(alive); err != nil {
			t.Fatalf("clean: %v", err)
		}
	}
	if mounted(t, run) {
		t.Error("stale mount still listed after CleanStale")
	}
	if _, err := os.ReadDir(d.mnt); err != nil {
		t.Errorf("mount point unusable after clean: %v", err)
	}
}

// writer is a stand-in broker: it appends and fsyncs "synced|", appends
// "unsynced|" without fsync, says ready and waits to be killed.
func writer(p string) {
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = fh.WriteString("synced|")
	}
	if err == nil {
		err = fh.Sync()
	}
	if err == nil {
		_, err = fh.WriteString("unsynced|")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	os.Stdin.Read(make([]byte, 1)) // until killed (or the test ends)
	os.Exit(0)
}

func TestPowerLoss(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-nodes", nodes), func(t *testing.T) {
			var pids []int
			var clients []*Client
			var files []string
			for i := range nodes {
				f, _, mnt := mountT(t, true)
				sock := filepath.Join(t.TempDir(), "ctl.sock")
				ln, err := Listen(sock)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				served := make(chan error, 1)
				go func() { served <- f.Serve(ctx, ln) }()
				t.Cleanup(func() { cancel(); <-served })
				clients = append(clients, NewClient(sock))

				files = append(files, filepath.Join(mnt, fmt.Sprintf("seg-%d", i)))
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "FAULTFS_TEST_WRITER="+files[i])
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
				line, err := bufio.NewReader(out).ReadString('\n')
				if err != nil || line != "ready\n" {
					t.Fatalf("writer: %q, %v", line, err)
				}
				pids = append(pids, cmd.Process.Pid)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			reps, err := PowerLoss(ctx, pids, clients)
			if err != nil {
				t.Fatal(err)
			}
			for i, rep := range reps {
				if rep.BytesLost != int64(len("unsynced|")) {
					t.Errorf("node %d: crash report %+v, want %d bytes lost", i, rep, len("unsynced|"))
				}
				got, err := os.ReadFile(files[i])
				if err != nil || string(got) != "synced|" {
					t.Errorf("node %d after power loss: %q, %v; want %q", i, got, err, "synced|")
				}
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); err == nil {
					var st syscall.WaitStatus
					// Still listed until reaped: it must be a zombie.
					if wpid, _ := syscall.Wait4(pid, &st, syscall.WNOHANG, nil); wpid != pid || !st.Signaled() {
						t.Errorf("process %d still running after power loss", pid)
					}
				}
			}
		})
	}
}

// TestRemountOverStale mounts again where a killed daemon left its mount.
func TestRemountOverStale(t *testing.T) {
	run := ManualRunID(os.Getpid()) + "-stale"
	d := startDaemon(t, run)
	if err := os.WriteFile(filepath.Join(d.mnt, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.wait(t)
	f, err := Mount(Options{Backing: d.backing, Mount: d.mnt, RunID: run + "-b"})
	if err != nil {
		t.Fatalf("mount over a stale mount: %v", err)
	}
	defer f.Close()
	if mounted(t, run) {
		t.Error("stale mount still listed")
	}
	got, err := os.ReadFile(filepath.Join(d.mnt, "kept"))
	if err != nil || string(got) != "x" {
		t.Errorf("file through the new mount: %q, %v", got, err)
	}
	ents, err := os.ReadDir(d.mnt)
	if err != nil || len(ents) != 1 {
		t.Errorf("listing %v, %v: want just kept (old trash removed, new one hidden)", ents, err)
	}
}
