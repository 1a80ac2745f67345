// Package ssh is the compose backend for clusters the user runs on their
// own hosts: real Apache Kafka (ZooKeeper or KRaft) or isrlab brokers,
// reached over SSH. A Config lists the nodes, how to reach each (host,
// user, key or agent, known_hosts), its role, how to start, stop and find
// its process (a systemd unit, or a command and a pid file) and where its
// data and logs are.
//
// The backend never installs or wipes anything on its own: Up runs the
// config's setup commands, starts the managed nodes that are not running,
// and waits until every node answers; Down heals what faults left (through
// Backend.CleanFaults), starts again the nodes it found running, stops the
// ones it started, copies the tail of each node's log into the run
// directory and runs the teardown commands. Plan says all of it before a
// run. Everything else on the hosts is left as it was.
//
// Every remote command is an argument list quoted word by word for the
// remote shell (Quote); the few multi-step operations are fixed sh scripts
// whose inputs are positional parameters, never text spliced into them.
package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Name is the backend's name in state files, scenarios and on the command line.
const Name = compose.SSH

// ErrConfig reports an SSH cluster description that cannot be used.
var ErrConfig = errors.New("bad ssh cluster")

// Node roles as a Config names them. zookeeper, controller (KRaft) and
// coordinator (an isrlab coordinator) are all the cluster's coordinators
// (compose.RoleCoordinator): targets such as "coordinators" and seed 000's
// "-coordinators" partitions act on them.
const (
	RoleBroker      = "broker"
	RoleController  = "controller"
	RoleZooKeeper   = "zookeeper"
	RoleCoordinator = "coordinator"
	RoleClient      = "client"
)

// Config is an SSH cluster: the YAML under a scenario's cluster.ssh, or a
// file given to `isrlab run --cluster`. The connection fields at the top
// are defaults every node may override.
type Config struct {
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	Port int    `yaml:"port,omitempty" json:"port,omitempty"` // default 22
	// Key is a private key file (OpenSSH or PEM, unencrypted); Agent uses
	// the agent at $SSH_AUTH_SOCK. With neither, the agent is used when
	// SSH_AUTH_SOCK is set, else ~/.ssh/id_ed25519, id_ecdsa and id_rsa.
	Key   string `yaml:"key,omitempty" json:"key,omitempty"`
	Agent bool   `yaml:"agent,omitempty" json:"agent,omitempty"`
	// KnownHosts is the known_hosts file host keys are checked against
	// (default ~/.ssh/known_hosts). InsecureIgnoreHostKey turns the check
	// off; it must be said explicitly, and Plan says it loudly.
	KnownHosts            string `yaml:"known_hosts,omitempty" json:"known_hosts,omitempty"`
	InsecureIgnoreHostKey bool   `yaml:"insecure_ignore_host_key,omitempty" json:"insecure_ignore_host_key,omitempty"`
	// Sudo runs every command the lab sends (process control, nft, tc,
	// date) under `sudo -n`, for a login user that is not root.
	Sudo bool `yaml:"sudo,omitempty" json:"sudo,omitempty"`
	// Firewall is what partitions and loss program on the hosts: nft
	// (the default where the host has it) or iptables.
	Firewall string `yaml:"firewall,omitempty" json:"firewall,omitempty"`
	// Bootstrap lists the bootstrap servers (host:port); default every
	// broker's addr:kafka_port.
	Bootstrap []string `yaml:"bootstrap,omitempty" json:"bootstrap,omitempty"`
	// Client is how the lab's Kafka clients connect to the brokers of a
	// secured cluster, in Kafka's client config names (as in a
	// --command-config file): security.protocol, sasl.mechanism,
	// sasl.username, sasl.password.file (or sasl.password),
	// ssl.ca.location, ssl.certificate.location, ssl.key.location,
	// ssl.endpoint.identification.algorithm. Every client of a run uses
	// it: the workload's, the exec drivers', the observer, the admin
	// client, the readiness probe. nil: PLAINTEXT.
	Client *kafkaconfig.ClientSecurity `yaml:"client,omitempty" json:"client,omitempty"`
	// Setup runs before the nodes are started, Teardown after they are
	// stopped: the only way the lab installs or wipes anything.
	Setup    []Step `yaml:"setup,omitempty" json:"setup,omitempty"`
	Teardown []Step `yaml:"teardown,omitempty" json:"teardown,omitempty"`
	Nodes    []Node `yaml:"nodes" json:"nodes"`
}

// Step runs one command on some nodes: a node name (b1), a role group
// (brokers, coordinators, clients) or all.
type Step struct {
	On  string   `yaml:"on" json:"on"`
	Run []string `yaml:"run" json:"run"`
}

// Node is one host of the cluster and the process the lab controls on it.
// The lab names nodes by role and order, as its own clusters: brokers b1,
// b2, ..., coordinators (zookeeper, controller, coordinator) c1, c2, ...,
// clients client1, ...; fault targets and library scenarios use those names.
type Node struct {
	Host string `yaml:"host" json:"host"` // what SSH connects to: a name or address
	// Addr is the address the other nodes and the clients see this node
	// at, which partitions match (default: Host, resolved here).
	Addr string `yaml:"addr,omitempty" json:"addr,omitempty"`
	Port int    `yaml:"port,omitempty" json:"port,omitempty"`
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	Key  string `yaml:"key,omitempty" json:"key,omitempty"`
	Role string `yaml:"role" json:"role"`
	// ID is the broker's broker.id (node.id under KRaft); 0 finds it in
	// the cluster's Metadata by the broker's address.
	ID int `yaml:"id,omitempty" json:"id,omitempty"`
	// KafkaPort is a broker's listener port (default 9092).
	KafkaPort int `yaml:"kafka_port,omitempty" json:"kafka_port,omitempty"`
	// Probe is how the lab decides the node is up: kafka (brokers'
	// default), etcd (an isrlab coordinator's default), tcp (dials
	// probe_port: ZooKeeper 2181, a KRaft controller 9093) or none.
	Probe     string `yaml:"probe,omitempty" json:"probe,omitempty"`
	ProbePort int    `yaml:"probe_port,omitempty" json:"probe_port,omitempty"`

	// The process: a systemd unit, or a start command with a pid file.
	Systemd string   `yaml:"systemd,omitempty" json:"systemd,omitempty"`
	Start   []string `yaml:"start,omitempty" json:"start,omitempty"`
	// Daemon says the start command backgrounds itself and writes
	// PIDFile; otherwise the lab runs it in the background, detached, with
	// its output appended to LogFile, and writes PIDFile itself.
	Daemon  bool   `yaml:"daemon,omitempty" json:"daemon,omitempty"`
	PIDFile string `yaml:"pid_file,omitempty" json:"pid_file,omitempty"`
	// Status, instead of PIDFile, is a command that prints the pid of
	// the node's process (nothing, or a non-zero exit, when none runs),
	// e.g. [pgrep, -o, -f, "[k]afka.Kafka"] (the brackets keep pgrep from
	// matching the remote shell that runs it).
	Status []string `yaml:"status,omitempty" json:"status,omitempty"`
	// Stop replaces SIGTERM as the graceful stop (SIGKILL follows after
	// the grace period either way).
	Stop []string `yaml:"stop,omitempty" json:"stop,omitempty"`
	// WorkDir is where the lab runs Start (default the login directory).
	WorkDir string `yaml:"work_dir,omitempty" json:"work_dir,omitempty"`

	DataDir string `yaml:"data_dir,omitempty" json:"data_dir,omitempty"`
	LogDir  string `yaml:"log_dir,omitempty" json:"log_dir,omitempty"`
	// LogFile is the node's main log; its tail is copied into the run
	// directory at the end (default LogDir/server.log when LogDir is set).
	LogFile string `yaml:"log_file,omitempty" json:"log_file,omitempty"`
	// Iface is the interface slow-net shapes (default: the one holding Addr).
	Iface string `yaml:"iface,omitempty" json:"iface,omitempty"`
	// Clock allows clock-skew to set this host's system clock with date.
	Clock bool `yaml:"clock,omitempty" json:"clock,omitempty"`
	// Isrlab is the isrlab binary on the host (default [isrlab], found on
	// the login's PATH), for the faults that need a helper process there:
	// packet faults, and delays where the host's kernel lacks netem or
	// into the node, run `isrlab fault delayer` on it.
	Isrlab []string `yaml:"isrlab,omitempty" json:"isrlab,omitempty"`
	// Faultfs says the broker's data_dir is a faultfs mount (isrlab
	// faultfs, run by the host's own installation): the disk faults
	// (slow-disk, disk-error, disk-hang, power-loss) reach it there.
	Faultfs *Faultfs `yaml:"faultfs,omitempty" json:"faultfs,omitempty"`
}

// Faultfs is a broker host's faultfs daemon: the lab runs Command
// `faultfs ctl --control Control -` on the host, over its SSH connection,
// for every disk fault and heal.
type Faultfs struct {
	// Control is the daemon's control socket on the host (its --control).
	Control string `yaml:"control" json:"control"`
	// Command is the isrlab binary on the host (default [isrlab], found
	// on the login's PATH); a list, e.g. [/usr/local/bin/isrlab].
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`
}

// ctl is the argument list of one control request to the daemon.
func (f *Faultfs) ctl() []string {
	cmd := f.Command
	if len(cmd) == 0 {
		cmd = []string{"isrlab"}
	}
	return append(slices.Clone(cmd), "faultfs", "ctl", "--control", f.Control, "-")
}

// Managed reports whether the lab controls the node's process.
func (n Node) Managed() bool { return n.Systemd != "" || len(n.Start) > 0 }

// composeRole maps a Config role to the lab's.
func composeRole(r string) (compose.Role, bool) {
	switch r {
	case RoleBroker:
		return compose.RoleBroker, true
	case RoleController, RoleZooKeeper, RoleCoordinator:
		return compose.RoleCoordinator, true
	case RoleClient:
		return compose.RoleClient, true
	}
	return "", false
}

// Counts returns the number of brokers and coordinators.
func (c *Config) Counts() (brokers, coordinators int) {
	for _, n := range c.Nodes {
		switch r, _ := composeRole(n.Role); r {
		case compose.RoleBroker:
			brokers++
		case compose.RoleCoordinator:
			coordinators++
		}
	}
	return brokers, coordinators
}

// Names returns the lab's name of each node, in Config order.
func (c *Config) Names() []string {
	count := map[compose.Role]int{}
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		r, _ := composeRole(n.Role)
		count[r]++
		prefix := map[compose.Role]string{compose.RoleBroker: "b", compose.RoleCoordinator: "c", compose.RoleClient: "client"}[r]
		out[i] = prefix + strconv.Itoa(count[r])
	}
	return out
}

// Validate checks the description without touching the network. Errors
// name the field (nodes[2].pid_file).
func (c *Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...))
	}
	if len(c.Nodes) == 0 {
		return bad("nodes", "no nodes")
	}
	if c.Port < 0 || c.Port > 65535 {
		return bad("port", "%d is not a port", c.Port)
	}
	if c.Key != "" && c.Agent {
		return bad("key", "give key or agent, not both")
	}
	switch c.Firewall {
	case "", "nft", "iptables":
	default:
		return bad("firewall", "%q: use nft or iptables", c.Firewall)
	}
	for i, b := range c.Bootstrap {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return bad("bootstrap["+strconv.Itoa(i)+"]", "%q is not host:port", b)
		}
	}
	if c.Client != nil {
		if err := c.Client.Validate(); err != nil {
			return bad("client", "%v", err)
		}
	}
	brokers := 0
	names := c.Names()
	for i, n := range c.Nodes {
		f := func(k string) string { return fmt.Sprintf("nodes[%d].%s", i, k) }
		if n.Host == "" {
			return bad(f("host"), "missing")
		}
		r, ok := composeRole(n.Role)
		if !ok {
			return bad(f("role"), "%q: use broker, controller, zookeeper, coordinator or client", n.Role)
		}
		if r == compose.RoleBroker {
			brokers++
		}
		if n.Addr != "" {
			if _, err := netip.ParseAddr(n.Addr); err != nil {
				return bad(f("addr"), "%q is not an IP address", n.Addr)
			}
		}
		if n.Port < 0 || n.Port > 65535 || n.KafkaPort < 0 || n.KafkaPort > 65535 || n.ProbePort < 0 || n.ProbePort > 65535 {
			return bad(f("port"), "not a port")
		}
		if n.ID < 0 {
			return bad(f("id"), "%d is negative", n.ID)
		}
		if n.ID != 0 && r != compose.RoleBroker {
			return bad(f("id"), "only brokers have ids")
		}
		switch n.Probe {
		case "", "kafka", "etcd", "none":
		case "tcp":
			if n.ProbePort == 0 {
				return bad(f("probe_port"), "probe tcp needs a port")
			}
		default:
			return bad(f("probe"), "%q: use kafka, etcd, tcp or none", n.Probe)
		}
		if n.Probe == "kafka" && r != compose.RoleBroker {
			return bad(f("probe"), "only brokers answer the kafka probe")
		}
		if r == compose.RoleClient && n.Managed() {
			return bad(f("role"), "a client host runs no process the lab controls")
		}
		if n.Systemd != "" && (len(n.Start) > 0 || n.PIDFile != "" || len(n.Status) > 0 || len(n.Stop) > 0 || n.Daemon) {
			return bad(f("systemd"), "a systemd unit needs no start, stop, status, daemon or pid_file")
		}
		if len(n.Start) > 0 && n.PIDFile == "" && len(n.Status) == 0 {
			return bad(f("pid_file"), "a start command needs a pid file or a status command (the lab signals that process)")
		}
		if (n.PIDFile != "" || len(n.Status) > 0 || len(n.Stop) > 0 || n.Daemon) && len(n.Start) == 0 {
			return bad(f("start"), "pid_file, status, stop and daemon go with a start command")
		}
		if len(n.Start) > 0 && !n.Daemon && n.LogFile == "" && n.LogDir == "" {
			return bad(f("log_file"), "the lab appends the start command's output to log_file (or log_dir/server.log): give one")
		}
		for _, p := range []struct{ k, v string }{{"pid_file", n.PIDFile}, {"data_dir", n.DataDir}, {"log_dir", n.LogDir}, {"log_file", n.LogFile}, {"work_dir", n.WorkDir}} {
			if p.v != "" && !strings.HasPrefix(p.v, "/") {
				return bad(f(p.k), "%q is not an absolute path", p.v)
			}
		}
		if n.Key != "" && c.Agent {
			return bad(f("key"), "the cluster uses the agent")
		}
		if ff := n.Faultfs; ff != nil {
			switch {
			case r != compose.RoleBroker:
				return bad(f("faultfs"), "only a broker's data dir is a faultfs mount")
			case n.DataDir == "":
				return bad(f("data_dir"), "faultfs mounts the broker's data dir: give it")
			case !strings.HasPrefix(ff.Control, "/"):
				return bad(f("faultfs.control"), "%q is not an absolute path", ff.Control)
			case slices.Contains(ff.Command, ""):
				return bad(f("faultfs.command"), "an empty word")
			}
		}
	}
	if brokers == 0 {
		return bad("nodes", "no broker")
	}
	for _, s := range append(slices.Clone(c.Setup), c.Teardown...) {
		if len(s.Run) == 0 {
			return bad("setup", "a step runs no command")
		}
		if _, err := c.stepNodes(s.On, names); err != nil {
			return bad("setup", "%v", err)
		}
	}
	return nil
}

// stepNodes resolves a Step's On to node indexes.
func (c *Config) stepNodes(on string, names []string) ([]int, error) {
	var out []int
	for i, n := range c.Nodes {
		r, _ := composeRole(n.Role)
		switch {
		case on == "all", on == names[i],
			on == "brokers" && r == compose.RoleBroker,
			on == "coordinators" && r == compose.RoleCoordinator,
			on == "clients" && r == compose.RoleClient:
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("on %q names no node (use all, brokers, coordinators, clients or one of %v)", on, names)
	}
	return out, nil
}

// logFile is where a node's main log is.
func (n Node) logFile() string {
	if n.LogFile != "" {
		return n.LogFile
	}
	if n.LogDir != "" {
		return n.LogDir + "/server.log"
	}
	return ""
}

// Topology lays the cluster out as compose does for its own: one NodeSpec
// per node with the lab's name, role, address (resolved here when Addr is
// not given), broker id and probe. Its RunDir (local) gets the copies of
// the nodes' logs. The nodes' argv stays empty: what runs there is the
// host's business.
func (c *Config) Topology(name, runID, runDir string) (compose.Topology, error) {
	if err := c.Validate(); err != nil {
		return compose.Topology{}, err
	}
	if !compose.ValidName(name) {
		return compose.Topology{}, fmt.Errorf("%w: cluster name %q: use 1-24 of a-z 0-9 -", compose.ErrBadTopology, name)
	}
	if runID == "" {
		runID = compose.NewRunID()
	}
	t := compose.Topology{Name: name, RunID: runID, RunDir: runDir, Servers: slices.Clone(c.Bootstrap)}
	if c.Client != nil {
		cs := *c.Client
		for _, p := range []*string{&cs.PasswordFile, &cs.CALocation, &cs.CertLocation, &cs.KeyLocation} {
			*p = expand(*p)
		}
		t.Client = &cs
	}
	names := c.Names()
	ids := map[compose.Role]int{}
	for i, n := range c.Nodes {
		addr, err := n.addr()
		if err != nil {
			return compose.Topology{}, fmt.Errorf("%w: nodes[%d] (%s): %v", ErrConfig, i, names[i], err)
		}
		r, _ := composeRole(n.Role)
		ids[r]++
		spec := compose.NodeSpec{Name: names[i], Role: r, ID: ids[r], Addr: addr,
			Dir: filepath.Join(runDir, names[i]), DataDir: n.DataDir, LogFile: n.logFile()}
		switch {
		case r == compose.RoleBroker:
			spec.ID = n.ID // 0 until Up reads it from the metadata
			spec.Port = n.KafkaPort
			spec.Probe = compose.ProbeKafka
		case r == compose.RoleCoordinator && n.Role == RoleCoordinator:
			spec.Probe = compose.ProbeEtcd
		}
		if n.Faultfs != nil {
			// The host runs the daemon: the lab only sends it faults.
			spec.Disk = &compose.DiskSpec{Mount: n.DataDir, Control: n.Faultfs.Control}
		}
		switch n.Probe {
		case "kafka":
			spec.Probe = compose.ProbeKafka
		case "etcd":
			spec.Probe = compose.ProbeEtcd
		case "tcp":
			spec.Probe, spec.Port = compose.ProbeTCP, n.ProbePort
		case "none":
			spec.Probe = compose.ProbeNone
		}
		t.Nodes = append(t.Nodes, spec)
	}
	seen := map[netip.Addr]string{}
	for _, n := range t.Nodes {
		if other, ok := seen[n.Addr]; ok {
			// Partitions match addresses: two nodes on one address could
			// not be told apart.
			return compose.Topology{}, fmt.Errorf("%w: %s and %s have the same address %s: the lab needs one node per address", ErrConfig, other, n.Name, n.Addr)
		}
		seen[n.Addr] = n.Name
	}
	return t, nil
}

// addr is the node's address: Addr, else Host if it is one, else Host
// resolved on this machine (IPv4 first).
func (n Node) addr() (netip.Addr, error) {
	if n.Addr != "" {
		return netip.ParseAddr(n.Addr)
	}
	if a, err := netip.ParseAddr(n.Host); err == nil {
		return a, nil
	}
	ips, err := net.LookupIP(n.Host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s (give addr to skip): %w", n.Host, err)
	}
	slices.SortStableFunc(ips, func(a, b net.IP) int { return btoi(a.To4() == nil) - btoi(b.To4() == nil) })
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// expand replaces a leading ~/ with the home directory.
func expand(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, rest)
		}
	}
	return p
}

// Load reads a cluster file: a Config in YAML, strictly (an unknown key is
// an error naming its line).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
