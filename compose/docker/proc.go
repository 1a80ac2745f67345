package docker

import (
	"context"

	"fmt"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/isrlab/isrlab/compose"
)

// proc controls a node's process container. Start and Stop go through the
// Docker API (so Docker's view stays right); Pause and Resume are SIGSTOP
// and SIGCONT to the container's process, as with the netns backend.
type proc struct {
	r    *run
	node string
	id   string

	mu    sync.Mutex
	pid   int
	start uint64
}

var _ compose.Process = (*proc)(nil)

func (p *proc) ident() (int, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.start
}

func (p *proc) PID() int {
	pid, _ := p.ident()
	return pid
}

func (p *proc) Running() bool {
	pid, start := p.ident()
	return compose.Alive(pid, start)
}

func (p *proc) Start(ctx context.Context) error {
	if p.Running() {
		return fmt.Errorf("already running as pid %d", p.PID())
	}
	if err := p.r.cli.ContainerStart(ctx, p.id, container.StartOptions{}); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	pid, err := p.r.pidOf(ctx, p.id)
	if err != nil {
		return err
	}
	start := compose.Identify(pid)
	p.mu.Lock()
	p.pid, p.start = pid, start
	p.mu.Unlock()
	p.r.mu.Lock()
	if ns := p.r.st.Node(p.node); ns != nil {
		ns.PID, ns.PIDStart = pid, start
	}
	p.r.mu.Unlock()
	return p.r.save()
}

func (p *proc) Stop(ctx context.Context) error {
	pid, start := p.ident()
	_ = compose.Signal(pid, start, syscall.SIGCONT) // a paused process cannot exit
	secs := int(p.r.b.Grace.Seconds())
	if err := p.r.cli.ContainerStop(ctx, p.id, container.StopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("stop container: %w", err)
	}
	return compose.WaitGone(ctx, pid, start)
}

func (p *proc) Kill() error {
	pid, start := p.ident()
	if !compose.Alive(pid, start) {
		return nil
	}
	ctx := context.Background()
	if err := p.r.cli.ContainerKill(ctx, p.id, "SIGKILL"); err != nil {
		if !compose.Alive(pid, start) {
			return nil
		}
		return fmt.Errorf("kill container: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	return compose.WaitGone(wctx, pid, start)
}

func (p *proc) Pause() error {
	pid, start := p.ident()
	return compose.Signal(pid, start, syscall.SIGSTOP)
}

func (p *proc) Resume() error {
	pid, start := p.ident()
	return compose.Signal(pid, start, syscall.SIGCONT)
}

// hostVeth names the host end of the veth whose other end is eth0 in the
// namespace at nsPath ("" if it cannot tell).
func hostVeth(nsPath string) string {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return ""
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return ""
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		return ""
	}
	peer, err := netlink.LinkByIndex(l.Attrs().ParentIndex)
	if err != nil {
		return ""
	}
	return peer.Attrs().Name
}
