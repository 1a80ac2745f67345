// Package sshtest stands in for the remote hosts of the ssh backend: a
// network namespace per host on a private bridge (a netns cluster of
// client hosts), each running its own sshd (Debian's openssh-server,
// installed by scripts/deps.sh) with a throwaway host key, plus one
// namespace that plays the lab's machine. Tests reach the hosts only by
// dialling their SSH port from that namespace; everything a node runs
// (isrlab coordinators and brokers) is started over SSH.
package sshtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Sshd is the OpenSSH server the hosts run.
const Sshd = "/usr/sbin/sshd"

// Require skips the test unless it can run: root (namespaces) and sshd.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create the hosts' network namespaces; CI runs as root")
	}
	if _, err := os.Stat(Sshd); err != nil {
		t.Skipf("needs %s (Debian openssh-server; scripts/deps.sh installs it): %v", Sshd, err)
	}
	if testing.Short() {
		t.Skip("starts sshd in network namespaces and builds isrlab; skipped with -short")
	}
}

// Host is one stand-in host.
type Host struct {
	Name string // the lab's name of the node it will hold (c1, b1, ..., client1)
	Addr netip.Addr
	NS   string // its network namespace
	sshd *exec.Cmd
}

// Hosts is a set of hosts and the lab's namespace.
type Hosts struct {
	Dir        string // keys, known_hosts, configs, pid and log files
	Key        string // the client's private key
	KnownHosts string
	LabNS      string // the namespace the lab's side runs in
	Bin        string // the isrlab binary the nodes run
	Hosts      []*Host
	cluster    *compose.Cluster
}

// Dial dials from the lab's namespace.
func (h *Hosts) Dial() compose.DialFunc { return compose.NetNSDialer(h.LabNS) }

// Host returns the host named name.
func (h *Hosts) Host(name string) *Host {
	for _, x := range h.Hosts {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// New starts hosts named names (the lab's node names) on subnet, each with
// sshd listening on port 22. Everything goes when the test ends.
func New(t testing.TB, subnet string, names ...string) *Hosts {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	h := &Hosts{Dir: dir, Key: filepath.Join(dir, "id_ed25519"), KnownHosts: filepath.Join(dir, "known_hosts"),
		Bin: proctest.Binary(t)}
	topo, err := compose.Build(compose.Options{Name: "sshtest", NoDefaults: true, Clients: len(names) + 1,
		Subnet: netip.MustParsePrefix(subnet), RunDir: filepath.Join(dir, "net")})
	if err != nil {
		t.Fatal(err)
	}
	b := &netns.Backend{StateDir: filepath.Join(dir, "state"), NSDir: filepath.Join(dir, "netns"), ReadyTimeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := b.Up(ctx, topo)
	if err != nil {
		t.Fatalf("host network: %v", err)
	}
	h.cluster = c
	t.Cleanup(func() {
		for _, x := range h.Hosts {
			if x.sshd != nil && x.sshd.Process != nil {
				x.sshd.Process.Kill()
				x.sshd.Wait()
			}
		}
		// Whatever still runs in the namespaces dies with them.
		c.Down(context.Background())
	})
	h.LabNS = c.Nodes[0].NetNS

	hostKey := filepath.Join(dir, "host_ed25519")
	hostPub := writeKey(t, hostKey)
	clientPub := writeKey(t, h.Key)
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, xssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		t.Fatal(err)
	}
	var known strings.Builder
	for i, name := range names {
		n := c.Nodes[i+1]
		known.WriteString(n.Addr.String() + " " + string(xssh.MarshalAuthorizedKey(hostPub)))
		h.Hosts = append(h.Hosts, &Host{Name: name, Addr: n.Addr, NS: n.NetNS})
	}
	if err := os.WriteFile(h.KnownHosts, []byte(known.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	// An empty config file of its own: every setting is on the command
	// line (a /dev/null that something replaced with a file once fed
	// sshd garbage).
	config := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, x := range h.Hosts {
		// The hosts' commands run through root's login shell, and bash
		// sources ~/.bashrc when sshd starts it unless SHLVL says it is
		// nested: the test hosts must not run the machine's own root
		// profile (one whose pyenv init waited 60 s on a stale lock made
		// every command take a minute and the SSH tests time out).
		x.sshd = exec.Command(Sshd, "-D", "-e", "-f", config, "-h", hostKey,
			"-E", filepath.Join(dir, "sshd-"+x.Name+".log"),
			"-o", "ListenAddress="+x.Addr.String(), "-o", "Port=22",
			"-o", "AuthorizedKeysFile="+authorized, "-o", "StrictModes=no", "-o", "UsePAM=no",
			"-o", "PermitRootLogin=prohibit-password", "-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no", "-o", "AllowTcpForwarding=yes",
			"-o", "PidFile=none", "-o", "MaxSessions=64", "-o", "MaxStartups=64",
			"-o", "SetEnv=SHLVL=1")
		x.sshd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := compose.InNetNS(x.NS, x.sshd.Start); err != nil {
			t.Fatalf("sshd in %s: %v", x.Name, err)
		}
	}
	for _, x := range h.Hosts {
		// A failure names what sshd said: its log and whether it exited.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := proctest.Until(ctx, func() error {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			conn, err := h.Dial()(dctx, "tcp", net.JoinHostPort(x.Addr.String(), "22"))
			if err != nil {
				return err
			}
			return conn.Close()
		})
		cancel()
		if err != nil {
			state := "still running"
			if syscall.Kill(x.sshd.Process.Pid, 0) != nil {
				state = "gone"
			}
			logText, _ := os.ReadFile(filepath.Join(dir, "sshd-"+x.Name+".log"))
			t.Fatalf("sshd on %s (%s) not listening within 10s: %v\nits log:\n%s", x.Name, state, err, logText)
		}
	}
	return h
}

// writeKey writes a fresh ed25519 private key in OpenSSH format to path
// and returns its public key.
func writeKey(t testing.TB, path string) xssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := xssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := xssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// KafkaConfig is what the lab's brokers get in these tests: quick
// failure detection, as the library's scenarios use.
var KafkaConfig = []compose.KV{
	{Key: "coordinator.session.timeout.ms", Value: "6000"},
	{Key: "replica.lag.time.max.ms", Value: "4000"},
}

// Cluster returns an ssh cluster config for the hosts, as a user would
// write one for hosts they installed isrlab on: every host named c<N>
// runs an isrlab coordinator and every b<N> an isrlab broker (configs
// written by this function, as the hosts' own installation would be),
// each started by a command and found by its pid file, except b3, found
// by a status command (pgrep); client<N> hosts run nothing.
func (h *Hosts) Cluster(t testing.TB) *ssh.Config {
	t.Helper()
	return h.config(t, nil)
}

// SecuredCluster is Cluster for a secured cluster of the hosts' own, as
// a user would run one: every broker's one listener is SASL_SSL with
// SCRAM-SHA-512 (compose.Security's layout, the netns backend's secured
// preset), with a CA and certificates made here and the SCRAM users
// written into the coordinators before any broker starts. The
// coordinators are therefore started here, as services of the hosts'
// own that the lab does not control. It returns the client config of
// the clients' user, naming its password file, and the password.
func (h *Hosts) SecuredCluster(t testing.TB) (*ssh.Config, kafkaconfig.ClientSecurity, string) {
	t.Helper()
	sec := &compose.Security{TLSDir: filepath.Join(h.Dir, "tls"), SecretsDir: filepath.Join(h.Dir, "secrets"),
		Mechanism: compose.SecuredMechanism, AdminUser: "admin", ClientUser: "client"}
	cfg := h.config(t, sec)
	pw, err := sec.Password(sec.ClientUser)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, sec.Client(), pw
}

// config is Cluster, secured as sec lays it out when sec is set.
func (h *Hosts) config(t testing.TB, sec *compose.Security) *ssh.Config {
	t.Helper()
	topo := compose.Topology{Name: "sshtest", RunID: "hosts", Security: sec}
	for _, x := range h.Hosts {
		role, id := compose.RoleClient, 0
		switch {
		case strings.HasPrefix(x.Name, "client"):
		case strings.HasPrefix(x.Name, "c"):
			role = compose.RoleCoordinator
		case strings.HasPrefix(x.Name, "b"):
			role = compose.RoleBroker
		}
		id, _ = strconv.Atoi(strings.TrimLeft(x.Name, "bcilent"))
		nd := filepath.Join(h.Dir, x.Name)
		topo.Nodes = append(topo.Nodes, compose.NodeSpec{Name: x.Name, Role: role, ID: id, Addr: x.Addr,
			Dir: nd, DataDir: filepath.Join(nd, "data"), LogFile: filepath.Join(nd, x.Name+".log")})
	}
	if sec != nil {
		if err := sec.Prepare(topo, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &ssh.Config{User: "root", Key: h.Key, KnownHosts: h.KnownHosts}
	for _, n := range topo.Nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if sec != nil && n.Role == compose.RoleCoordinator {
			h.startCoordinator(t, topo, n)
			cfg.Nodes = append(cfg.Nodes, ssh.Node{Host: n.Addr.String(), Role: ssh.RoleCoordinator, LogDir: n.Dir, LogFile: n.LogFile,
				Isrlab: []string{h.Bin}})
			continue
		}
		node := ssh.Node{Host: n.Addr.String(), DataDir: n.DataDir, LogDir: n.Dir, PIDFile: filepath.Join(n.Dir, n.Name+".pid"),
			Isrlab: []string{h.Bin}}
		switch n.Role {
		case compose.RoleCoordinator:
			node.Role = ssh.RoleCoordinator
			node.Start = compose.CoordinatorArgv(h.Bin, topo, n)
			node.LogFile = filepath.Join(n.Dir, "stdout.log")
		case compose.RoleBroker:
			node.Role, node.ID = ssh.RoleBroker, n.ID
			props := filepath.Join(n.Dir, "server.properties")
			if err := os.WriteFile(props, []byte(compose.BrokerProperties(topo, n, KafkaConfig)), 0o644); err != nil {
				t.Fatal(err)
			}
			node.Start = []string{h.Bin, "broker", "--config", props}
			node.LogFile = filepath.Join(n.Dir, "server.log")
			if n.Name == "b3" {
				// Found by a status command instead of a pid file, as a
				// Kafka started with -daemon would be.
				node.PIDFile = ""
				node.Status = []string{"pgrep", "-o", "-f", "[b]roker --config " + props}
			}
		default:
			node = ssh.Node{Host: n.Addr.String(), Role: ssh.RoleClient, Isrlab: []string{h.Bin}}
		}
		cfg.Nodes = append(cfg.Nodes, node)
	}
	return cfg
}

// startCoordinator starts coordinator n in its host's namespace (stopped
// when the test ends) and, once every coordinator of topo runs, writes
// the SCRAM users of topo's Security into them from there.
func (h *Hosts) startCoordinator(t testing.TB, topo compose.Topology, n compose.NodeSpec) {
	t.Helper()
	argv := compose.CoordinatorArgv(h.Bin, topo, n)
	cmd := exec.Command(argv[0], argv[1:]...)
	logf, err := os.Create(n.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	ns := h.Host(n.Name).NS
	if err := compose.InNetNS(ns, cmd.Start); err != nil {
		t.Fatalf("start %s: %v", n.Name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if last := topo.Role(compose.RoleCoordinator); last[len(last)-1].Name != n.Name {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := topo.Security.CreateUsers(ctx, topo, h.Bin, ns); err != nil {
		t.Fatal(err)
	}
}

// Leftovers lists what the lab could have left on the hosts: processes
// of the isrlab binary running in their namespaces (sshd aside) and
// nftables tables or iptables chains named isrlab-<run>.
func (h *Hosts) Leftovers(t testing.TB, run string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64]string{}
	for _, x := range h.Hosts {
		var st syscall.Stat_t
		if err := syscall.Stat(x.NS, &st); err == nil {
			inodes[st.Ino] = x.Name
		}
		for _, argv := range [][]string{{"nft", "list", "tables"}, {"iptables", "-w", "-S"}} {
			cmd := exec.Command(argv[0], argv[1:]...)
			var b strings.Builder
			cmd.Stdout = &b
			if err := compose.InNetNS(x.NS, cmd.Run); err != nil {
				t.Fatalf("%v in %s: %v", argv, x.Name, err)
			}
			for _, l := range strings.Split(b.String(), "\n") {
				if strings.Contains(l, "isrlab-"+run) {
					out = append(out, x.Name+": "+strings.TrimSpace(l))
				}
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		exe, err := os.Readlink(p + "/exe")
		if err != nil || exe != h.Bin {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p+"/ns/net", &st); err != nil {
			continue
		}
		if name, ok := inodes[st.Ino]; ok {
			cmdline, _ := os.ReadFile(p + "/cmdline")
			out = append(out, fmt.Sprintf("%s: pid %s: %s", name, filepath.Base(p), strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return out
}

// Faultfs puts the data dir of broker node (cfg's node of that name) on a
// faultfs mount, as a host's own installation would: it starts the
// daemon (stopped, healing and unmounting, when the test ends) and sets
// the node's faultfs to its control socket, with a control command that
// notes each call's network namespace and arguments in the file notes,
// then runs isrlab.
func (h *Hosts) Faultfs(t testing.TB, cfg *ssh.Config, node string) (sock, notes string) {
	t.Helper()
	var n *ssh.Node
	for i, name := range cfg.Names() {
		if name == node {
			n = &cfg.Nodes[i]
		}
	}
	if n == nil || n.Role != ssh.RoleBroker || n.DataDir == "" {
		t.Fatalf("faultfs: %s is not a broker with a data dir in the config", node)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse for %s's faultfs; CI has it: %v", node, err)
	}
	dir := filepath.Dir(n.DataDir)
	backing := filepath.Join(dir, "backing")
	sock, notes = filepath.Join(dir, "ffs.sock"), filepath.Join(dir, "ctl.notes")
	for _, d := range []string{backing, n.DataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	daemon := exec.Command(h.Bin, faultfs.Args(faultfs.Options{Backing: backing, Mount: n.DataDir, RunID: faultfs.ManualRunID(os.Getpid()) + "-sshtest-" + node, Seed: 1}, sock)...)
	daemon.Stderr = os.Stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
	})
	proctest.Eventually(t, 20*time.Second, node+"'s faultfs daemon", func() error {
		_, err := faultfs.NewClient(sock).Status(context.Background())
		return err
	})
	wrapper := filepath.Join(dir, "isrlab-ctl")
	script := "#!/bin/sh\necho \"$(readlink /proc/self/ns/net) $*\" >>" + notes + "\nexec " + h.Bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n.Faultfs = &ssh.Faultfs{Control: sock, Command: []string{wrapper}}
	return sock, notes
}

// NetNSInode is the inode of the host's network namespace, as
// readlink /proc/self/ns/net shows it there ("net:[inode]").
func (x *Host) NetNSInode(t testing.TB) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(x.NS, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}
