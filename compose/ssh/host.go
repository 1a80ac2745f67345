package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/isrlab/isrlab/compose"
)

// dialTimeout bounds the TCP connect and SSH handshake to one host.
const dialTimeout = 15 * time.Second

// Host is the SSH connection to one node's host. It dials on first use and
// again after the connection breaks; it is safe for concurrent use (SSH
// multiplexes sessions and tunnels over one connection). It implements
// compose.Commander.
type Host struct {
	Node string // the lab's node name, for errors
	Addr string // host:port of its SSH server
	User string
	// Sudo prefixes every command with sudo -n.
	Sudo bool
	// Allowed facts the faults read (see nemesis): the SSH port faults
	// must not cut, whether the system clock may be set, the firewall.
	Port     int
	Clock    bool
	Firewall string
	// Faultfs is the node's faultfs daemon, if its data dir is on one.
	Faultfs *Faultfs
	// Isrlab is the isrlab binary on the host (nil: isrlab on the PATH).
	Isrlab []string

	auth *auth
	keys []string // key files, unless the agent is used
	dial compose.DialFunc

	mu     sync.Mutex
	client *xssh.Client
	// algos are the host key algorithms known_hosts has for this host,
	// learned from a first handshake that offered another kind.
	algos []string
}

var _ compose.Commander = (*Host)(nil)

// ControlPort is the port the lab's SSH connection comes in on: network
// faults leave it alone so that they can always be healed.
func (h *Host) ControlPort() int { return h.Port }

// SystemClock reports whether clock-skew may set this host's clock.
func (h *Host) SystemClock() bool { return h.Clock }

// FirewallTool is "nft", "iptables" or "" (nft where the host has it).
func (h *Host) FirewallTool() string { return h.Firewall }

// IsrlabCommand is the argument list that runs the isrlab binary on the
// host (the node's isrlab, else isrlab on the login's PATH).
func (h *Host) IsrlabCommand() []string {
	if len(h.Isrlab) > 0 {
		return slices.Clone(h.Isrlab)
	}
	return []string{"isrlab"}
}

// FaultfsCtl is the argument list that sends one request, on its standard
// input, to the faultfs daemon behind the node's data dir (nil: none).
func (h *Host) FaultfsCtl() []string {
	if h.Faultfs == nil {
		return nil
	}
	return h.Faultfs.ctl()
}

// conn returns the live client, dialling if there is none.
func (h *Host) conn(ctx context.Context) (*xssh.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		return h.client, nil
	}
	c, err := h.connect(ctx)
	if err != nil {
		return nil, err
	}
	h.client = c
	return c, nil
}

// drop forgets a broken client so that the next call dials again.
func (h *Host) drop(c *xssh.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client == c {
		h.client.Close()
		h.client = nil
	}
}

// Close closes the connection; the Host dials again if used after.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client == nil {
		return nil
	}
	err := h.client.Close()
	h.client = nil
	return err
}

func (h *Host) connect(ctx context.Context) (*xssh.Client, error) {
	cfg, err := h.auth.clientConfig(h.User, h.keys)
	if err != nil {
		return nil, fmt.Errorf("ssh %s (%s): %w", h.Node, h.Addr, err)
	}
	cfg.HostKeyAlgorithms = h.algos
	c, err := h.handshake(ctx, cfg)
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) && len(ke.Want) > 0 && len(h.algos) == 0 {
		// known_hosts has this host under another key type than the one
		// the server offered first: ask for the ones it has.
		for _, k := range ke.Want {
			h.algos = append(h.algos, k.Key.Type())
		}
		cfg.HostKeyAlgorithms = h.algos
		c, err = h.handshake(ctx, cfg)
	}
	if err != nil {
		if errors.As(err, &ke) {
			if len(ke.Want) == 0 {
				err = fmt.Errorf("%w (host %s is not in %s: add its key, e.g. ssh-keyscan, or set insecure_ignore_host_key)", err, h.Addr, h.auth.knownHosts)
			} else {
				err = fmt.Errorf("%w: HOST KEY MISMATCH for %s (known_hosts %s)", err, h.Addr, h.auth.knownHosts)
			}
		}
		return nil, fmt.Errorf("ssh %s@%s (%s): %w", h.User, h.Addr, h.Node, err)
	}
	return c, nil
}

func (h *Host) handshake(ctx context.Context, cfg *xssh.ClientConfig) (*xssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	dial := h.dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	raw, err := dial(ctx, "tcp", h.Addr)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	raw.SetDeadline(deadline) //nolint:errcheck // a conn without deadlines just has no handshake timeout
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	cc, chans, reqs, err := xssh.NewClientConn(raw, h.Addr, cfg)
	stop()
	if err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{}) //nolint:errcheck
	return xssh.NewClient(cc, chans, reqs), nil
}

// Command runs argv on the host (under sudo -n with Sudo) and returns its
// standard output. A command that exits non-zero returns
// *compose.ExitError with its standard error. When ctx ends the remote
// command is sent SIGKILL and its session closed.
func (h *Host) Command(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("ssh: empty command")
	}
	if h.Sudo {
		argv = append([]string{"sudo", "-n", "--"}, argv...)
	}
	out, err := h.run(ctx, argv, stdin)
	var nr *notRun
	if errors.As(err, &nr) && ctx.Err() == nil {
		// The connection was broken before the command started: dial
		// once more. A command that may have run is never sent twice.
		out, err = h.run(ctx, argv, stdin)
	}
	if errors.As(err, &nr) {
		err = nr.err
	}
	return out, err
}

// notRun marks a failure before the remote command started.
type notRun struct{ err error }

func (e *notRun) Error() string { return e.err.Error() }
func (e *notRun) Unwrap() error { return e.err }

func (h *Host) run(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	c, err := h.conn(ctx)
	if err != nil {
		return nil, &notRun{err}
	}
	s, err := c.NewSession()
	if err != nil {
		h.drop(c)
		return nil, &notRun{fmt.Errorf("ssh %s: session: %w", h.Node, err)}
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	if err := s.Start(Quote(argv)); err != nil {
		return nil, fmt.Errorf("ssh %s: start %s: %w", h.Node, argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(xssh.SIGKILL) //nolint:errcheck // the session closes below either way
		s.Close()
		<-done
		return stdout.Bytes(), fmt.Errorf("ssh %s: %s: %w", h.Node, argv[0], ctx.Err())
	}
	var xe *xssh.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), nil
	case errors.As(err, &xe):
		return stdout.Bytes(), &compose.ExitError{Argv: argv, Status: xe.ExitStatus(), Stderr: stderr.String()}
	}
	var missing *xssh.ExitMissingError
	if errors.As(err, &missing) {
		h.drop(c)
	}
	return stdout.Bytes(), fmt.Errorf("ssh %s: %s: %w", h.Node, argv[0], err)
}

// DialContext opens a TCP connection from the host to addr through the SSH
// connection (direct-tcpip), the way the lab's clients reach a cluster
// through a client host. The connection supports deadlines (Kafka clients
// time requests out with them), which SSH channels by themselves do not.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := h.conn(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := c.DialContext(ctx, network, addr)
	if err != nil {
		var oe *xssh.OpenChannelError
		if !errors.As(err, &oe) && ctx.Err() == nil {
			h.drop(c) // the connection itself failed, not the remote dial
		}
		return nil, fmt.Errorf("dial %s through %s: %w", addr, h.Node, err)
	}
	return newTunnelConn(ch), nil
}

// tunnelConn is an SSH channel behind a net.Pipe: the pipe end gives the
// caller deadlines, two goroutines copy between it and the channel, and
// Close waits for both.
type tunnelConn struct {
	net.Conn // the caller's end of the pipe
	ch       net.Conn
	wg       sync.WaitGroup
	once     sync.Once
}

func newTunnelConn(ch net.Conn) *tunnelConn {
	mine, theirs := net.Pipe()
	t := &tunnelConn{Conn: mine, ch: ch}
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		io.Copy(ch, theirs) //nolint:errcheck // ends when either side closes
		ch.Close()
	}()
	go func() {
		defer t.wg.Done()
		io.Copy(theirs, ch) //nolint:errcheck
		theirs.Close()
	}()
	return t
}

func (t *tunnelConn) LocalAddr() net.Addr  { return t.ch.LocalAddr() }
func (t *tunnelConn) RemoteAddr() net.Addr { return t.ch.RemoteAddr() }

func (t *tunnelConn) Close() error {
	var err error
	t.once.Do(func() {
		err = t.Conn.Close()
		t.ch.Close()
		t.wg.Wait()
	})
	return err
}

// auth is how the lab authenticates, shared by every host of a cluster:
// one agent connection, keys parsed once.
type auth struct {
	useAgent   bool
	knownHosts string
	insecure   bool

	mu      sync.Mutex
	signers map[string]xssh.Signer
	agentC  net.Conn
	agent   agent.ExtendedAgent
	hostCB  xssh.HostKeyCallback
}

// newAuth builds the shared authentication of c: the agent when asked (or
// when SSH_AUTH_SOCK is set and no key is given), else key files.
func newAuth(c *Config) *auth {
	a := &auth{knownHosts: expand(c.KnownHosts), insecure: c.InsecureIgnoreHostKey, signers: map[string]xssh.Signer{}}
	if a.knownHosts == "" {
		a.knownHosts = expand("~/.ssh/known_hosts")
	}
	anyKey := c.Key != ""
	for _, n := range c.Nodes {
		anyKey = anyKey || n.Key != ""
	}
	a.useAgent = c.Agent || (!anyKey && os.Getenv("SSH_AUTH_SOCK") != "")
	return a
}

// defaultKeys are tried when no key and no agent are given, as ssh does.
var defaultKeys = []string{"~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"}

func (a *auth) signer(path string) (xssh.Signer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.signers[path]; ok {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	s, err := xssh.ParsePrivateKey(b)
	var pp *xssh.PassphraseMissingError
	if errors.As(err, &pp) {
		return nil, fmt.Errorf("key %s is encrypted: load it into an agent (ssh-add) and use agent: true", path)
	}
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	a.signers[path] = s
	return s, nil
}

func (a *auth) agentSigners() ([]xssh.Signer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agent == nil {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, errors.New("agent: SSH_AUTH_SOCK is not set")
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.agentC, a.agent = c, agent.NewClient(c)
	}
	return a.agent.Signers()
}

func (a *auth) hostKeys() (xssh.HostKeyCallback, error) {
	if a.insecure {
		return xssh.InsecureIgnoreHostKey(), nil //nolint:gosec // said explicitly in the config, and by Plan
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hostCB == nil {
		cb, err := knownhosts.New(a.knownHosts)
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %w (add the hosts' keys, or set insecure_ignore_host_key: true)", err)
		}
		a.hostCB = cb
	}
	return a.hostCB, nil
}

// clientConfig is the SSH client config for one host, offering keys
// unless the agent is used.
func (a *auth) clientConfig(userName string, keys []string) (*xssh.ClientConfig, error) {
	cb, err := a.hostKeys()
	if err != nil {
		return nil, err
	}
	cfg := &xssh.ClientConfig{User: userName, HostKeyCallback: cb, Timeout: dialTimeout}
	if a.useAgent {
		cfg.Auth = append(cfg.Auth, xssh.PublicKeysCallback(a.agentSigners))
		return cfg, nil
	}
	var signers []xssh.Signer
	for _, k := range keys {
		s, err := a.signer(k)
		if err != nil {
			return nil, err
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		return nil, errors.New("no key: give key, or agent: true with an agent running")
	}
	cfg.Auth = append(cfg.Auth, xssh.PublicKeys(signers...))
	return cfg, nil
}

func (a *auth) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agentC != nil {
		a.agentC.Close()
		a.agentC, a.agent = nil, nil
	}
}

// hostsOf makes one Host per node of c, sharing auth. dial reaches the SSH
// servers (nil: from this machine).
func hostsOf(c *Config, names []string, dial compose.DialFunc) ([]*Host, *auth) {
	a := newAuth(c)
	var out []*Host
	for i, n := range c.Nodes {
		port := n.Port
		if port == 0 {
			port = c.Port
		}
		if port == 0 {
			port = 22
		}
		u := n.User
		if u == "" {
			u = c.User
		}
		if u == "" {
			if me, err := user.Current(); err == nil {
				u = me.Username
			}
		}
		out = append(out, &Host{Node: names[i], Addr: net.JoinHostPort(n.Host, strconv.Itoa(port)), User: u,
			Sudo: c.Sudo, Port: port, Clock: n.Clock, Firewall: c.Firewall, Faultfs: n.Faultfs, Isrlab: n.Isrlab, auth: a, keys: keyFiles(c, n), dial: dial})
	}
	return out, a
}

// keyFiles lists the key files a node authenticates with: its own key, the
// cluster's, or the default ones that exist.
func keyFiles(c *Config, n Node) []string {
	switch {
	case n.Key != "":
		return []string{expand(n.Key)}
	case c.Key != "":
		return []string{expand(c.Key)}
	}
	var out []string
	for _, k := range defaultKeys {
		p := expand(k)
		if _, err := os.Stat(p); err == nil {
			out = append(out, filepath.Clean(p))
		}
	}
	return out
}
