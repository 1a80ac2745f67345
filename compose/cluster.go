package compose

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Backend brings a Topology up as a running Cluster.
type Backend interface {
	// Up creates the network, starts every node and returns once each node
	// answers its probe. On error everything it created is removed.
	Up(ctx context.Context, t Topology) (*Cluster, error)
}

// Process controls one node's process. Implementations are safe for
// concurrent use; Stop and Kill on an exited process return nil.
type Process interface {
	PID() int
	Running() bool
	Start(ctx context.Context) error // start again after Stop or Kill
	Stop(ctx context.Context) error  // SIGTERM, then SIGKILL after a grace period
	Kill() error                     // SIGKILL, returns once the process is gone
	Pause() error                    // SIGSTOP
	Resume() error                   // SIGCONT
}

// Commander runs a command on the host a node lives on. Backends whose
// nodes are other machines (ssh) set it; where the node's network namespace
// is on this machine it is nil and faults act on the namespace directly.
// argv is one program and its arguments, never a shell string; stdin, if
// not nil, is its standard input. A non-zero exit is an *ExitError.
type Commander interface {
	Command(ctx context.Context, argv []string, stdin []byte) (stdout []byte, err error)
}

// ExitError is a remote command that ran and exited non-zero.
type ExitError struct {
	Argv   []string
	Status int
	Stderr string
}

func (e *ExitError) Error() string {
	argv := slices.Clone(e.Argv)
	// A fixed script reads better as its first line.
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == "sh" && argv[i+1] == "-c" && i+2 < len(argv) {
			if first, _, more := strings.Cut(argv[i+2], "\n"); more {
				argv[i+2] = "'" + first + " ...'"
			}
			break
		}
	}
	msg := fmt.Sprintf("%s: exit status %d", strings.Join(argv, " "), e.Status)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Node is a running node: its spec, where it lives and how to control it.
type Node struct {
	NodeSpec
	// NetNS names the node's network namespace: a path usable with
	// netns.GetFromPath, then netlink.NewHandleAt or nftables.WithNetNSFd.
	NetNS string
	// SwitchPort is the node's port on the lab bridge, an interface in the
	// switch namespace (Cluster.SwitchNS). Partitions match it there.
	SwitchPort string
	// Iface is the node's interface inside its own namespace.
	Iface string
	// Proc is nil for client hosts.
	Proc Process
	// Remote runs commands on the node's host when it is another machine
	// (the ssh backend); nil otherwise.
	Remote Commander
}

// PID returns the node's process id, or 0 if it runs nothing.
func (n *Node) PID() int {
	if n.Proc == nil {
		return 0
	}
	return n.Proc.PID()
}

func (n *Node) proc() (Process, error) {
	if n.Proc == nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, ErrNoProcess)
	}
	return n.Proc, nil
}

// Start starts the node's process again.
func (n *Node) Start(ctx context.Context) error {
	p, err := n.proc()
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	return nil
}

// Stop sends SIGTERM and waits for the process to exit (SIGKILL after a grace).
func (n *Node) Stop(ctx context.Context) error {
	p, err := n.proc()
	if err != nil {
		return err
	}
	if err := p.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", n.Name, err)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to exit.
func (n *Node) Kill() error {
	p, err := n.proc()
	if err != nil {
		return err
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", n.Name, err)
	}
	return nil
}

// Pause freezes the process with SIGSTOP.
func (n *Node) Pause() error {
	p, err := n.proc()
	if err != nil {
		return err
	}
	if err := p.Pause(); err != nil {
		return fmt.Errorf("pause %s: %w", n.Name, err)
	}
	return nil
}

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() error {
	p, err := n.proc()
	if err != nil {
		return err
	}
	if err := p.Resume(); err != nil {
		return fmt.Errorf("resume %s: %w", n.Name, err)
	}
	return nil
}

// Restart stops the process (SIGTERM) and starts it again.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	return n.Start(ctx)
}

// Cluster is a running cluster.
type Cluster struct {
	Topology
	Backend string // "netns", "docker" or "ssh"
	// SwitchNS names the namespace holding the lab bridge (Bridge), whose
	// ports are the nodes' SwitchPort. For Docker the bridge is Docker's, in
	// the host's namespace (/proc/1/ns/net), and SwitchPort is the host end
	// of the node's veth; faults are better applied inside node namespaces,
	// which works the same for both backends.
	SwitchNS string
	Bridge   string
	Nodes    []*Node
	// StateFile is where other processes find this cluster.
	StateFile string
	// Dialer, if set, is what Dial returns: the ssh backend's clients
	// connect through a client host's SSH connection, or from this machine.
	Dialer DialFunc

	downOnce sync.Once
	downErr  error
	down     func(ctx context.Context) error
}

// NewCluster assembles a Cluster; backends call it. down removes everything
// the run created and is called at most once.
func NewCluster(t Topology, backend string, nodes []*Node, down func(ctx context.Context) error) *Cluster {
	return &Cluster{Topology: t, Backend: backend, Nodes: nodes, down: down}
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	i := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.Name == name })
	if i < 0 {
		return nil
	}
	return c.Nodes[i]
}

// Of returns the running nodes of one role, in order.
func (c *Cluster) Of(r Role) []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Role == r {
			out = append(out, n)
		}
	}
	return out
}

// Client returns the first client host, whose namespace Dial uses.
func (c *Cluster) Client() *Node {
	cl := c.Of(RoleClient)
	if len(cl) == 0 {
		return nil
	}
	return cl[0]
}

// Dial returns a DialFunc that connects from the first client host's
// namespace: pass it to kgo.Dialer or http.Transport.DialContext.
func (c *Cluster) Dial() DialFunc {
	if c.Dialer != nil {
		return c.Dialer
	}
	cl := c.Client()
	if cl == nil {
		return func(context.Context, string, string) (net.Conn, error) {
			return nil, fmt.Errorf("cluster %s has no client host: %w", c.Name, ErrNoProcess)
		}
	}
	return NetNSDialer(cl.NetNS)
}

// Addr returns the address of the node named name.
func (c *Cluster) Addr(name string) (netip.Addr, bool) {
	n := c.Node(name)
	if n == nil {
		return netip.Addr{}, false
	}
	return n.Addr, true
}

// Down stops every process and removes everything the run created. It is
// idempotent: later calls return the first call's result.
func (c *Cluster) Down(ctx context.Context) error {
	c.downOnce.Do(func() {
		if c.down != nil {
			c.downErr = c.down(ctx)
		}
	})
	return c.downErr
}
