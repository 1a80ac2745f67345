package faultfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// PowerLoss cuts the power of one or more nodes at the same instant: it
// SIGKILLs every process in pids, waits until all of them are gone (so that
// none writes after the cut), then crashes every faultfs behind clients
// concurrently, losing their unsynced writes (opts as for FS.Crash).
// Reports come back in the order of clients. Processes already gone are
// fine.
func PowerLoss(ctx context.Context, pids []int, clients []*Client, opts ...CrashOpt) ([]CrashReport, error) {
	if err := KillAndWait(ctx, pids); err != nil {
		return nil, fmt.Errorf("power loss: %w", err)
	}
	reps := make([]CrashReport, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = c.Crash(ctx, opts...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return reps, fmt.Errorf("power loss: %w", err)
	}
	return reps, nil
}

// KillAndWait sends SIGKILL to every process in pids at once and waits
// until each has exited (a zombie counts as exited). It uses pidfds, so a
// reused pid is never signalled after the process is gone.
func KillAndWait(ctx context.Context, pids []int) error {
	fds := make([]int, 0, len(pids))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var errs []error
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // already gone
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pidfd of %d: %w", pid, err))
			continue
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill: %w", err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// A pidfd polls readable once its process has exited.
	pending := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pending[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for %d killed processes: %w", len(pending), err)
		}
		wait := 100 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		if _, err := unix.Poll(pending, int(wait/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for killed processes: %w", err)
		}
		left := pending[:0]
		for _, p := range pending {
			if p.Revents == 0 {
				p.Revents = 0
				left = append(left, p)
			}
		}
		pending = left
	}
	return nil
}
