package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoProcess is returned by process control on a node that runs nothing
// (a client host) or whose process has exited.
var ErrNoProcess = errors.New("no process")

// ProcStart returns the start time of pid in clock ticks since boot (field 22
// of /proc/PID/stat), which with the pid identifies a process across pid
// reuse. ok is false if pid does not exist or is a zombie.
func ProcStart(pid int) (start uint64, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return start, true
}

// Gone is the start time recorded for a process that exited before it could
// be identified: it matches no process, so a reused pid is never signalled.
const Gone = ^uint64(0)

// Identify returns pid's start time, or Gone if pid has already exited.
func Identify(pid int) uint64 {
	start, ok := ProcStart(pid)
	if !ok {
		return Gone
	}
	return start
}

// Alive reports whether the process (pid, start) still runs. A zero start
// matches any process with that pid: use it only for pids just read from
// /proc.
func Alive(pid int, start uint64) bool {
	s, ok := ProcStart(pid)
	return ok && (start == 0 || s == start)
}

// Signal sends sig to the process (pid, start) if it is still that process.
func Signal(pid int, start uint64, sig syscall.Signal) error {
	if !Alive(pid, start) {
		return ErrNoProcess
	}
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return ErrNoProcess
		}
		return fmt.Errorf("signal %d %s: %w", pid, sig, err)
	}
	return nil
}

// WaitGone polls until the process (pid, start) has exited or ctx ends.
func WaitGone(ctx context.Context, pid int, start uint64) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for Alive(pid, start) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for pid %d to exit: %w", pid, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Terminate stops the process (pid, start): SIGTERM (and SIGCONT, in case it
// is paused), then SIGKILL if it has not exited within grace. It returns once
// the process is gone or ctx ends.
func Terminate(ctx context.Context, pid int, start uint64, grace time.Duration) error {
	if err := Signal(pid, start, syscall.SIGTERM); err != nil {
		if errors.Is(err, ErrNoProcess) {
			return nil
		}
		return err
	}
	_ = Signal(pid, start, syscall.SIGCONT)
	gctx, cancel := context.WithTimeout(ctx, grace)
	err := WaitGone(gctx, pid, start)
	cancel()
	if err == nil {
		return nil
	}
	if err := Signal(pid, start, syscall.SIGKILL); err != nil && !errors.Is(err, ErrNoProcess) {
		return err
	}
	return WaitGone(ctx, pid, start)
}

// HelperComm is the name (/proc/PID/comm) the nemesis's helper processes
// in a node's network namespace (packet delayers) give themselves, so that
// taking a node down can stop them without reading command lines.
const HelperComm = "isrlab-delayer"

// ProcessesIn returns the pids of the processes living in the network
// namespace at path (every thread of each in it: a process with only a
// thread visiting, to open a socket there, is not one). It compares
// namespace inodes and reads nothing of the processes (a cmdline read can
// hang on a process stuck in a FUSE call).
func ProcessesIn(path string) []int {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if allThreadsIn("/proc/"+e.Name()+"/task", want) {
			out = append(out, pid)
		}
	}
	return out
}

// allThreadsIn reports whether every thread under a /proc/PID/task
// directory is in the namespace want.
func allThreadsIn(taskDir string, want unix.Stat_t) bool {
	tids, err := os.ReadDir(taskDir)
	if err != nil || len(tids) == 0 {
		return false
	}
	for _, tid := range tids {
		var st unix.Stat_t
		if err := unix.Stat(taskDir+"/"+tid.Name()+"/ns/net", &st); err != nil {
			return false
		}
		if st.Ino != want.Ino || st.Dev != want.Dev {
			return false
		}
	}
	return true
}

// HelpersIn returns the nemesis's helper processes living in the network
// namespace at path (named HelperComm).
func HelpersIn(path string) []int {
	var out []int
	for _, pid := range ProcessesIn(path) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == HelperComm {
			out = append(out, pid)
		}
	}
	return out
}

// KillHelpersIn SIGKILLs the nemesis's helper processes in the network
// namespace at path, as a node goes down under them.
func KillHelpersIn(path string) {
	for _, pid := range HelpersIn(path) {
		syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
	}
}
