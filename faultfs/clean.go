package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/isrlab/isrlab/internal/mountinfo"
)

// MountInfo is a faultfs mount listed in /proc/self/mountinfo.
type MountInfo struct {
	RunID      string
	MountPoint string
}

// Mounts lists the faultfs mounts of this mount namespace: fstype FSType,
// source FSNamePrefix+run id.
func Mounts() ([]MountInfo, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	return faultfsMounts(ms), nil
}

func faultfsMounts(ms []mountinfo.Mount) []MountInfo {
	var out []MountInfo
	for _, m := range ms {
		if m.FSType != FSType || !strings.HasPrefix(m.Source, FSNamePrefix) {
			continue
		}
		out = append(out, MountInfo{RunID: strings.TrimPrefix(m.Source, FSNamePrefix), MountPoint: m.MountPoint})
	}
	return out
}

// ManualRunID is the run id of a daemon started by hand without one: it
// names the daemon's pid, and CleanStale counts it alive while that pid is.
// A process that owns several mounts (a test's) may name each
// ManualRunID(pid)+"-"+name: alive while pid runs, too.
func ManualRunID(pid int) string { return "manual-" + strconv.Itoa(pid) }

// manualAlive reports whether id is a ManualRunID, or one with a name
// after it, whose process runs.
func manualAlive(id string) bool {
	s, ok := strings.CutPrefix(id, "manual-")
	if !ok {
		return false
	}
	s, _, _ = strings.Cut(s, "-")
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// CleanStale lazily unmounts every faultfs mount whose run is not alive,
// typically left by a daemon that was killed: runIDAlive decides, except
// that a ManualRunID is alive while its process runs. Unmounting a live
// run's mount would let its broker write to the directory underneath, so
// when in doubt runIDAlive should say alive. A mount this process may not
// unmount (EPERM: another user's run, seen from a rootless clean's user
// namespace, where that user's state is not either) is that user's to
// clean and is left alone. Mount points deeper in the tree go first. It is
// safe to call twice.
func CleanStale(runIDAlive func(string) bool) error {
	ms, err := Mounts()
	if err != nil {
		return err
	}
	var errs []error
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if manualAlive(m.RunID) || runIDAlive(m.RunID) {
			continue
		}
		err := syscall.Unmount(m.MountPoint, syscall.MNT_DETACH)
		// EPERM and EACCES: a mount this user may not unmount (another
		// user's run, which an unprivileged clean cannot tell alive from
		// dead) is not this clean's to remove.
		if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
			errs = append(errs, fmt.Errorf("unmount stale faultfs %s (run %s): %w", m.MountPoint, m.RunID, err))
		}
	}
	return errors.Join(errs...)
}

// detachStale unmounts the dead faultfs mounted at mnt, and nothing else.
func detachStale(mnt string) error {
	ms, err := Mounts()
	if err != nil {
		return err
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].MountPoint != mnt {
			continue
		}
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount stale faultfs %s (run %s): %w", mnt, ms[i].RunID, err)
		}
		return nil
	}
	return fmt.Errorf("mount point %s: not connected, and not a faultfs mount", mnt)
}

// parseDaemon reads a faultfs daemon's mount point and run id from its
// argv (NUL-separated, as /proc/PID/cmdline); ok is false for any other
// process.
func parseDaemon(cmdline string) (mount, runID string, ok bool) {
	args := strings.Split(strings.TrimRight(cmdline, "\x00"), "\x00")
	if len(args) < 2 || args[1] != "faultfs" {
		return "", "", false
	}
	for i := 2; i+1 < len(args); i++ {
		switch args[i] {
		case "--mount":
			mount = args[i+1]
		case "--run-id":
			runID = args[i+1]
		}
	}
	return mount, runID, mount != "" && runID != ""
}

// KillUnmounted kills the faultfs daemons of runs that are not alive
// (runIDAlive, as CleanStale) whose mount is gone: a lazily detached mount
// leaves its daemon serving nothing, and a process killed before its
// teardown (a test binary on SIGINT) leaves it behind for good. A daemon
// whose mount is still there is CleanStale's to detach first; one this
// process may not signal belongs to another user and is left alone. It
// returns the pids it killed.
func KillUnmounted(runIDAlive func(string) bool) ([]int, error) {
	ms, err := Mounts()
	if err != nil {
		return nil, err
	}
	mounted := map[string]bool{}
	for _, m := range ms {
		mounted[m.MountPoint] = true
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var killed []int
	var errs []error
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		mount, run, ok := parseDaemon(string(b))
		if !ok || mounted[mount] || manualAlive(run) || runIDAlive(run) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			if !errors.Is(err, syscall.ESRCH) && !errors.Is(err, syscall.EPERM) {
				errs = append(errs, fmt.Errorf("kill faultfs daemon %d (run %s): %w", pid, run, err))
			}
			continue
		}
		killed = append(killed, pid)
	}
	return killed, errors.Join(errs...)
}
