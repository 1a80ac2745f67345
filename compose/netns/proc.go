package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/isrlab/isrlab/compose"
)

// killWait bounds how long Kill waits for a SIGKILLed process to disappear.
const killWait = 10 * time.Second

// proc runs one node's process inside the node's namespace. It works both
// for processes this process started (it reaps them) and for processes found
// in a state file (it polls /proc).
type proc struct {
	spec  compose.NodeSpec
	netns string
	grace time.Duration
	// started is told the new (pid, start) after every Start, so the state
	// file follows restarts.
	started func(pid int, start uint64)

	mu    sync.Mutex
	pid   int
	start uint64
}

var _ compose.Process = (*proc)(nil)

func (p *proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *proc) ident() (int, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.start
}

func (p *proc) Running() bool {
	pid, start := p.ident()
	return compose.Alive(pid, start)
}

// Start launches the node's argv inside its namespace, in a new session (so
// it outlives this process and a terminal's Ctrl-C reaches only isrlab), with
// stdout and stderr appended to the node's log file.
func (p *proc) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Running() {
		return fmt.Errorf("already running as pid %d", p.PID())
	}
	s := p.spec
	if len(s.Argv) == 0 {
		return compose.ErrNoProcess
	}
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for name, content := range s.Files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	logf, err := os.OpenFile(s.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	cmd := &exec.Cmd{
		Path:        s.Argv[0],
		Args:        s.Argv,
		Env:         append(os.Environ(), s.Env...),
		Dir:         s.Dir,
		Stdout:      logf,
		Stderr:      logf,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if filepath.Base(cmd.Path) == cmd.Path {
		lp, err := exec.LookPath(cmd.Path)
		if err != nil {
			return fmt.Errorf("find %s: %w", cmd.Path, err)
		}
		cmd.Path = lp
	}
	if err := compose.InNetNS(p.netns, cmd.Start); err != nil {
		return fmt.Errorf("exec %s: %w", s.Argv[0], err)
	}
	pid := cmd.Process.Pid
	start := compose.Identify(pid)
	// Reap the child so that it does not linger as a zombie. Nobody waits on
	// this goroutine: it ends when the process does, and a process that
	// outlives us is reparented.
	go cmd.Wait() //nolint:errcheck
	p.mu.Lock()
	p.pid, p.start = pid, start
	p.mu.Unlock()
	if p.started != nil {
		p.started(pid, start)
	}
	return nil
}

func (p *proc) Stop(ctx context.Context) error {
	pid, start := p.ident()
	return compose.Terminate(ctx, pid, start, p.grace)
}

func (p *proc) Kill() error {
	pid, start := p.ident()
	if err := compose.Signal(pid, start, syscall.SIGKILL); err != nil {
		if errors.Is(err, compose.ErrNoProcess) {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	return compose.WaitGone(ctx, pid, start)
}

func (p *proc) Pause() error {
	pid, start := p.ident()
	return compose.Signal(pid, start, syscall.SIGSTOP)
}

func (p *proc) Resume() error {
	pid, start := p.ident()
	return compose.Signal(pid, start, syscall.SIGCONT)
}
