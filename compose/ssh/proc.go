package ssh

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/isrlab/isrlab/compose"
)

// Remote process scripts. Each is fixed text; its inputs are positional
// parameters. A process is identified, as on this machine, by its pid and
// its start time (field 22 of /proc/PID/stat), so that a reused pid is
// never signalled.

// identScript prints "PID START" of the node's process, or nothing if it
// does not run. $1 is pidfile, systemd or command; then the pid file, the
// unit, or the status command (whose first output line is the pid).
const identScript = `mode=$1
shift
case $mode in
pidfile) pid=$(cat -- "$1" 2>/dev/null) ;;
systemd) pid=$(systemctl show -p MainPID --value -- "$1" 2>/dev/null) ;;
command) pid=$("$@" 2>/dev/null | head -n 1) ;;
esac
pid=$(echo $pid)
case $pid in ''|0|*[!0-9]*) exit 0 ;; esac
s=$(cat /proc/"$pid"/stat 2>/dev/null) || exit 0
s=${s##*\)}
set -- $s
[ "$1" != Z ] || exit 0
shift 19
echo "$pid $1"`

// signalScript sends $1 to pid $2 if its start time is still $3; exit 3
// means the process is gone.
const signalScript = `sig=$1 pid=$2 start=$3
s=$(cat /proc/"$pid"/stat 2>/dev/null) || exit 3
s=${s##*\)}
set -- $s
[ "$1" != Z ] || exit 3
shift 19
[ "$1" = "$start" ] || exit 3
kill -s "$sig" "$pid"`

// startScript runs the command ($4...) in the background, detached from
// the SSH session (its own session, no terminal, output appended to $2),
// in directory $3 (if not empty), and writes its pid to $1 (if not
// empty). setsid and nohup exec the program, so $! is its pid.
const startScript = `pidfile=$1 log=$2 dir=$3
shift 3
if [ -n "$dir" ]; then cd -- "$dir" || exit 1; fi
nohup setsid "$@" >>"$log" 2>&1 </dev/null &
if [ -n "$pidfile" ]; then echo $! >"$pidfile"; fi`

// inDirScript runs $2... in directory $1 (if not empty).
const inDirScript = `dir=$1
shift
if [ -n "$dir" ]; then cd -- "$dir" || exit 1; fi
exec "$@"`

// opTimeout bounds the operations of the Process interface that take no
// context (Kill, Pause, Resume, Running).
const opTimeout = 30 * time.Second

// proc controls a node's process on its host, through a systemd unit or a
// start command and a pid file.
type proc struct {
	h     *Host
	n     Node
	grace time.Duration
	// saved records a new pid in the run's state.
	saved func(pid int, start uint64)

	mu    sync.Mutex
	pid   int
	start uint64
}

var _ compose.Process = (*proc)(nil)

// source is how the node's process is found: identScript's arguments.
func (p *proc) source() []string {
	switch {
	case p.n.Systemd != "":
		return []string{"systemd", p.n.Systemd}
	case len(p.n.Status) > 0:
		return append([]string{"command"}, p.n.Status...)
	}
	return []string{"pidfile", p.n.PIDFile}
}

// ident reads the process the node's pid file, status command or unit
// names now; pid 0 means none runs.
func (p *proc) ident(ctx context.Context) (pid int, start uint64, err error) {
	out, err := p.h.Command(ctx, script(identScript, p.source()...), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("status of %s: %w", p.h.Node, err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return 0, 0, nil
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("status of %s: unexpected %q", p.h.Node, out)
	}
	return pid, start, nil
}

// refresh reads the process and records it if it is a new one.
func (p *proc) refresh(ctx context.Context) (pid int, start uint64, err error) {
	pid, start, err = p.ident(ctx)
	if err != nil || pid == 0 {
		return pid, start, err
	}
	p.mu.Lock()
	changed := p.pid != pid || p.start != start
	p.pid, p.start = pid, start
	p.mu.Unlock()
	if changed && p.saved != nil {
		p.saved(pid, start)
	}
	return pid, start, nil
}

func (p *proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *proc) Running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pid, _, err := p.refresh(ctx)
	return err == nil && pid != 0
}

// Start starts the node: systemctl start, the start command in the
// background, or the self-daemonizing start command; it returns once the
// pid file or unit names a live process.
func (p *proc) Start(ctx context.Context) error {
	pid, _, err := p.refresh(ctx)
	if err != nil {
		return err
	}
	if pid != 0 {
		return fmt.Errorf("already running as pid %d", pid)
	}
	var argv []string
	switch {
	case p.n.Systemd != "":
		argv = []string{"systemctl", "start", "--", p.n.Systemd}
	case p.n.Daemon:
		argv = script(inDirScript, append([]string{p.n.WorkDir}, p.n.Start...)...)
	default:
		argv = script(startScript, append([]string{p.n.PIDFile, p.n.logFile(), p.n.WorkDir}, p.n.Start...)...)
	}
	if _, err := p.h.Command(ctx, argv, nil); err != nil {
		return err
	}
	return p.waitFor(ctx, "to start", func(pid int) bool { return pid != 0 })
}

// waitFor polls the process until cond holds for the pid read (0: none).
func (p *proc) waitFor(ctx context.Context, what string, cond func(pid int) bool) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		pid, _, err := p.refresh(ctx)
		if err == nil && cond(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s %s: %w (last: %v)", p.h.Node, what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// signal sends sig to the process (pid, start); ErrNoProcess if it is gone.
func (p *proc) signal(ctx context.Context, sig string, pid int, start uint64) error {
	_, err := p.h.Command(ctx, script(signalScript, sig, strconv.Itoa(pid), strconv.FormatUint(start, 10)), nil)
	var ee *compose.ExitError
	if errors.As(err, &ee) && ee.Status == 3 {
		return compose.ErrNoProcess
	}
	return err
}

// gone waits until the process (pid, start) has exited.
func (p *proc) gone(ctx context.Context, pid int, start uint64) error {
	return p.waitFor(ctx, "to exit", func(now int) bool {
		if now != pid {
			return true
		}
		p.mu.Lock()
		same := p.start == start
		p.mu.Unlock()
		return !same
	})
}

// Stop shuts the node down gracefully: systemctl stop, the stop command,
// or SIGTERM (with SIGCONT, in case it is paused); SIGKILL if it has not
// exited after the grace period.
func (p *proc) Stop(ctx context.Context) error {
	pid, start, err := p.refresh(ctx)
	if err != nil || pid == 0 {
		return err
	}
	switch {
	case p.n.Systemd != "":
		_ = p.signal(ctx, "CONT", pid, start)
		// systemd applies the unit's own stop timeout; the grace below
		// only bounds the wait for it.
		if _, err := p.h.Command(ctx, []string{"systemctl", "stop", "--no-block", "--", p.n.Systemd}, nil); err != nil {
			return err
		}
	case len(p.n.Stop) > 0:
		_ = p.signal(ctx, "CONT", pid, start)
		if _, err := p.h.Command(ctx, script(inDirScript, append([]string{p.n.WorkDir}, p.n.Stop...)...), nil); err != nil {
			return err
		}
	default:
		if err := p.signal(ctx, "TERM", pid, start); err != nil {
			if errors.Is(err, compose.ErrNoProcess) {
				return nil
			}
			return err
		}
		_ = p.signal(ctx, "CONT", pid, start)
	}
	gctx, cancel := context.WithTimeout(ctx, p.grace)
	err = p.gone(gctx, pid, start)
	cancel()
	if err == nil {
		return nil
	}
	if err := p.signal(ctx, "KILL", pid, start); err != nil && !errors.Is(err, compose.ErrNoProcess) {
		return err
	}
	return p.gone(ctx, pid, start)
}

// Kill sends SIGKILL to the process and waits until it is gone. Under
// systemd a unit with Restart= set comes back by itself after RestartSec.
func (p *proc) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pid, start, err := p.refresh(ctx)
	if err != nil || pid == 0 {
		return err
	}
	if err := p.signal(ctx, "KILL", pid, start); err != nil {
		if errors.Is(err, compose.ErrNoProcess) {
			return nil
		}
		return err
	}
	return p.gone(ctx, pid, start)
}

// Pause sends SIGSTOP.
func (p *proc) Pause() error { return p.send("STOP") }

// Resume sends SIGCONT.
func (p *proc) Resume() error { return p.send("CONT") }

func (p *proc) send(sig string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pid, start, err := p.refresh(ctx)
	if err != nil {
		return err
	}
	if pid == 0 {
		return compose.ErrNoProcess
	}
	return p.signal(ctx, sig, pid, start)
}
