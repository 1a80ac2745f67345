package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/faultfs"
)

// diskReadyTimeout bounds the wait for a faultfs daemon to mount, and for
// any daemon beside a node to answer.
const diskReadyTimeout = 20 * time.Second

// CheckFUSE reports why this process cannot run faultfs disks: it must be
// able to open /dev/fuse. The error wraps errors.ErrUnsupported. Backends
// call it before creating anything for a topology with disks.
func CheckFUSE() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("faultfs disks need FUSE: %w: %v", errors.ErrUnsupported, err)
	}
	f.Close()
	return nil
}

// StartDisk starts the faultfs daemon of node n (n.Disk) in its own session,
// in this process's mount namespace, with its output appended to its log
// file, and returns once the mount is live: the daemon answers on its
// control socket only after mounting. A daemon that exits or does not answer
// in time is killed and the error carries the end of its log.
func StartDisk(ctx context.Context, n NodeSpec) (pid int, start uint64, err error) {
	d := n.Disk
	if d == nil || len(d.Argv) == 0 {
		return 0, 0, fmt.Errorf("node %s has no faultfs disk", n.Name)
	}
	for _, dir := range []string{d.Backing, filepath.Dir(d.Control)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, 0, fmt.Errorf("faultfs of %s: %w", n.Name, err)
		}
	}
	// A dead daemon's mount answers ENOTCONN; the new daemon replaces it.
	if err := os.MkdirAll(d.Mount, 0o755); err != nil && !errors.Is(err, syscall.ENOTCONN) {
		return 0, 0, fmt.Errorf("faultfs of %s: mount point: %w", n.Name, err)
	}
	cl := faultfs.NewClient(d.Control)
	return startDaemon(ctx, daemon{
		what:    "faultfs of " + n.Name,
		argv:    d.Argv,
		dir:     n.Dir,
		logFile: d.LogFile,
		ready: func(ctx context.Context) error {
			_, err := cl.Status(ctx)
			return err
		},
		notReady: "exited before mounting " + d.Mount,
	})
}

// daemon is a helper process a backend runs beside a node (a faultfs
// disk, a Kafka proxy): its own session, output appended to its log file,
// ready once its control socket answers.
type daemon struct {
	what    string // "faultfs of b1": error messages start with it
	argv    []string
	dir     string
	logFile string
	// start starts cmd (cmd.Start by default; a node's namespace wraps it).
	start func(cmd *exec.Cmd) error
	// ready is polled until it returns nil.
	ready    func(ctx context.Context) error
	notReady string // what an exit before ready means
}

// startDaemon starts d and returns once it is ready. A daemon that exits or
// is not ready within diskReadyTimeout is killed, and the error carries the
// end of its log.
func startDaemon(ctx context.Context, d daemon) (pid int, start uint64, err error) {
	if err := os.MkdirAll(filepath.Dir(d.logFile), 0o755); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", d.what, err)
	}
	logf, err := os.OpenFile(d.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: log file: %w", d.what, err)
	}
	defer logf.Close()
	cmd := &exec.Cmd{
		Path:        d.argv[0],
		Args:        d.argv,
		Env:         os.Environ(),
		Dir:         d.dir,
		Stdout:      logf,
		Stderr:      logf,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if filepath.Base(cmd.Path) == cmd.Path {
		lp, err := exec.LookPath(cmd.Path)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: find %s: %w", d.what, cmd.Path, err)
		}
		cmd.Path = lp
	}
	startCmd := d.start
	if startCmd == nil {
		startCmd = (*exec.Cmd).Start
	}
	if err := startCmd(cmd); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", d.what, err)
	}
	pid = cmd.Process.Pid
	start = Identify(pid)
	// The reaper ends with the daemon; a daemon that outlives this process
	// (a detached run) is reparented.
	exited := make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // the log file says why
		close(exited)
	}()

	rctx, cancel := context.WithTimeout(ctx, diskReadyTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		sctx, scancel := context.WithTimeout(rctx, time.Second)
		serr := d.ready(sctx)
		scancel()
		if serr == nil {
			return pid, start, nil
		}
		select {
		case <-exited:
			return 0, 0, fmt.Errorf("%s %s; end of %s:\n%s", d.what, d.notReady, d.logFile, LogTail(d.logFile, 8))
		case <-rctx.Done():
			cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-exited
			return 0, 0, fmt.Errorf("%s: not ready: %w (last: %v); end of %s:\n%s",
				d.what, rctx.Err(), serr, d.logFile, LogTail(d.logFile, 8))
		case <-tick.C:
		}
	}
}

// StopDisks stops the run's faultfs daemons recorded in st: SIGTERM (a
// daemon heals, unmounts cleanly and removes its socket), SIGKILL after
// grace. Then it detaches every faultfs mount of the run left in this mount
// namespace (a daemon killed earlier leaves one) and removes leftover
// control sockets. Backing directories stay. Stop the nodes first; daemons
// already gone are fine, and it is safe to call twice.
func StopDisks(ctx context.Context, st *State, grace time.Duration) error {
	disks := st.Topology.Disks()
	if len(disks) == 0 {
		return nil
	}
	var g errgroup.Group
	for _, ns := range st.Nodes {
		if ns.DiskPID == 0 {
			continue
		}
		g.Go(func() error {
			if err := Terminate(ctx, ns.DiskPID, ns.DiskPIDStart, grace); err != nil {
				return fmt.Errorf("stop faultfs of %s: %w", ns.Name, err)
			}
			return nil
		})
	}
	errs := []error{g.Wait()}
	errs = append(errs, faultfs.CleanStale(func(run string) bool { return run != st.RunID }))
	for node, sock := range disks {
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove faultfs socket of %s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}
