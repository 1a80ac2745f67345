// Package proctest runs isrlab processes (brokers, coordinators) on
// loopback for multi-process tests: it builds the binary once per test
// binary, picks free ports, starts processes with their output captured to
// files, and stops whatever is still running when the test ends.
package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	builds   = map[string]*build{}
	buildDir string
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Cleanup removes the binaries Binary and Build built, if any. Call it
// from TestMain after m.Run.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Binary builds ./cmd/isrlab once and returns its path. ISRLAB_BIN
// overrides it with a prebuilt binary.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ISRLAB_BIN"); p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	return Build(t, "./cmd/isrlab")
}

// Build builds the main package pkg (a path from the module's root, such
// as ./examples/exec-driver) once per test binary and returns the
// executable's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "isrlab-bin-")
		if err != nil {
			buildMu.Unlock()
			t.Fatal(err)
		}
		buildDir = dir
	}
	dir := buildDir
	buildMu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(dir, filepath.Base(pkg))
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// Proc is one running isrlab process.
type Proc struct {
	Name    string
	Args    []string
	LogPath string

	t    testing.TB
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs `isrlab args...` with output in dir/name.log. The process is
// killed when the test ends if it is still running.
func Start(t testing.TB, dir, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Args: args, LogPath: filepath.Join(dir, name+".log"), t: t}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	return p
}

func (p *Proc) start() error {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(Binary(p.t), p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Restart starts the process again with the same arguments after it exited.
func (p *Proc) Restart() {
	p.t.Helper()
	if p.Running() {
		p.t.Fatalf("%s: restart while running", p.Name)
	}
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid returns the process id.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL (resuming a paused process first) and waits.
func (p *Proc) Kill() {
	if !p.Running() {
		return
	}
	p.signal(syscall.SIGKILL)
	p.signal(syscall.SIGCONT)
	p.Wait(10 * time.Second)
}

// Stop sends SIGTERM and waits up to timeout, then kills.
func (p *Proc) Stop(timeout time.Duration) error {
	if !p.Running() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	if err := p.Wait(timeout); err != nil {
		p.Kill()
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (p *Proc) Pause()  { p.signal(syscall.SIGSTOP) }
func (p *Proc) Resume() { p.signal(syscall.SIGCONT) }

// Wait waits for the process to exit.
func (p *Proc) Wait(timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.Name, timeout)
	}
}

// Log returns the process's output so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Until polls cond every 50 ms until it returns nil (Until then returns
// nil) or ctx ends (Until returns cond's last error). It is the one wait
// loop of the tests; Eventually is it with a deadline and a test failure.
func Until(ctx context.Context, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Eventually polls cond every 50 ms until it returns nil or within passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := Until(ctx, cond); err != nil {
		t.Fatalf("%s: not within %v: %v", what, within, err)
	}
}

// EventuallyTrue is Eventually for a condition that only holds or not.
func EventuallyTrue(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, within, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("does not hold")

// WaitTCP waits until addr accepts connections.
func WaitTCP(ctx context.Context, addr string) error {
	err := Until(ctx, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s not accepting: %w", addr, err)
	}
	return nil
}

// Tail returns the last n lines of s, for failure messages.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
