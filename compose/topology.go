// Package compose brings a cluster of coordinators, brokers and client hosts
// up on a Backend and hands out Node handles: addresses, network namespaces,
// process control, data directories and log files.
//
// A Topology is pure data: Build turns Options into node specs whose argv and
// config files are produced by one function per role, so everything a node
// runs can be checked without root. Backends (compose/netns, compose/docker)
// place the nodes, start them and wait until they answer their protocol.
// Brokers named in Options.FaultFS keep their data on a faultfs disk
// (DiskSpec), a daemon the backend runs next to the broker.
package compose

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Role is what a node runs.
type Role string

const (
	RoleCoordinator Role = "coordinator"
	RoleBroker      Role = "broker"
	RoleClient      Role = "client"
)

// Ports the roles listen on, on their own address.
const (
	CoordinatorClientPort = 2379
	CoordinatorPeerPort   = 2380
	BrokerPort            = 9092
	MetricsPort           = 9404
	// ControllerPort is a KRaft controller's listener on its coordinator
	// node (Kafka's usual 9093).
	ControllerPort = 9093
)

// ControllerNodeID is the KRaft controller node id of coordinator i (its
// NodeSpec.ID): 3000+i, apart from every broker.id.
func ControllerNodeID(coordinator int) int32 { return int32(3000 + coordinator) }

// kraftMode reports whether the user's broker config asks for KRaft mode:
// process.roles=broker, or a kafka.profile whose default it is.
func kraftMode(user []KV) bool {
	roles, profile := "", ""
	rolesSet := false
	for _, kv := range user {
		switch kv.Key {
		case "process.roles":
			roles, rolesSet = kv.Value, true
		case "kafka.profile":
			profile = kv.Value
		}
	}
	if !rolesSet {
		roles = kafkaconfig.Profiles[profile].Defaults["process.roles"]
	}
	return roles == "broker"
}

// DefaultSubnet is the lab network when Options.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.213.0.0/24")

// ErrBadTopology reports options that cannot describe a cluster.
var ErrBadTopology = errors.New("bad topology")

// Probe names how a backend decides that a node is ready.
type Probe string

const (
	ProbeNone Probe = ""     // ready once started
	ProbeEtcd Probe = "etcd" // etcd Status answers on the client port
	// ProbeKafka: ApiVersions answers and Metadata lists every broker.
	ProbeKafka Probe = "kafka"
	// ProbeTCP: a TCP connection to NodeSpec.Port succeeds.
	ProbeTCP Probe = "tcp"
)

// KV is one key=value config entry; order is kept so that files are stable.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ParseKV parses "key=value".
func ParseKV(s string) (KV, error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return KV{}, fmt.Errorf("%w: config %q is not key=value", ErrBadTopology, s)
	}
	return KV{Key: k, Value: strings.TrimSpace(v)}, nil
}

// Options describe a cluster to build.
type Options struct {
	Name         string       // cluster name; default "isrlab"
	RunID        string       // run id; default random
	Coordinators int          // default 3 (0 is allowed only with NoDefaults)
	Brokers      int          // default 3
	Clients      int          // client hosts; default 1
	Subnet       netip.Prefix // default DefaultSubnet
	BrokerConfig []KV         // user broker config, applied after the defaults
	Binary       string       // the isrlab binary nodes run
	RunDir       string       // node data and logs live under RunDir/<node>/
	// NoDefaults keeps zero counts as zero (tests build clients-only nets).
	NoDefaults bool
	// FaultFS names the brokers ("b1", "b3") whose log.dirs live on a
	// faultfs mount, for disk faults and power loss; the single name "all"
	// means every broker. See DiskSpec.
	FaultFS []string
	// Secured brings the cluster up with TLS and SASL (see Security).
	Secured bool
	// KafkaProxy puts a Kafka-protocol proxy in front of every broker
	// (ProxySpec), for faults on Kafka requests and responses.
	KafkaProxy bool
}

// NodeSpec is a node before it runs: everything a backend needs to place and
// start it. Argv[0] is the program; Files are written before the start,
// relative to Dir.
type NodeSpec struct {
	Name    string            `json:"name"`
	Role    Role              `json:"role"`
	ID      int               `json:"id"` // 1-based within the role; broker.id for brokers
	Addr    netip.Addr        `json:"addr"`
	Dir     string            `json:"dir"`
	DataDir string            `json:"data_dir"`
	LogFile string            `json:"log_file"`
	Argv    []string          `json:"argv,omitempty"`
	Env     []string          `json:"env,omitempty"`
	Files   map[string]string `json:"files,omitempty"`
	Probe   Probe             `json:"probe,omitempty"`
	// Port is the port ProbeTCP dials and, on a broker, its Kafka listener
	// (0: BrokerPort).
	Port int `json:"port,omitempty"`
	// Disk, if set, is the faultfs daemon DataDir is mounted from.
	Disk *DiskSpec `json:"disk,omitempty"`
	// Proxy, if set, is the Kafka proxy clients and brokers reach this
	// broker through.
	Proxy *ProxySpec `json:"proxy,omitempty"`
}

// DiskSpec is a broker's faultfs disk: a daemon (Argv, `isrlab faultfs`)
// that mounts at Mount, the broker's log.dirs, a FUSE view of Backing and
// takes fault commands on Control. The backend starts it before the broker
// and stops it after; it is its own process, so it outlives the broker's
// kills and restarts (a power loss kills the broker, then crashes the
// disk). Backing keeps the data once the mount is gone.
type DiskSpec struct {
	Backing string   `json:"backing"` // <node dir>/disk-backing
	Mount   string   `json:"mount"`   // NodeSpec.DataDir
	Control string   `json:"control"` // control socket
	LogFile string   `json:"log_file"`
	Argv    []string `json:"argv"`
}

// Topology is a built cluster description.
type Topology struct {
	Name   string       `json:"name"`
	RunID  string       `json:"run_id"`
	Subnet netip.Prefix `json:"subnet"`
	RunDir string       `json:"run_dir"`
	// Security is set for a secured cluster (Options.Secured).
	Security *Security  `json:"security,omitempty"`
	Nodes    []NodeSpec `json:"nodes"`
	// Servers, if set, are the bootstrap servers clients use instead of
	// every broker's address (a cluster the lab did not lay out).
	Servers []string `json:"bootstrap,omitempty"`
	// Client, if set, is how the lab's clients connect to a cluster it
	// did not lay out (the ssh backend's client config): TLS and SASL
	// with Kafka's client config names. A secured cluster the lab laid
	// out has Security instead. Its password is kept in memory only: the
	// state file holds "[hidden]" (sasl.password.file survives).
	Client *kafkaconfig.ClientSecurity `json:"client,omitempty"`
	// KRaft is set for a cluster in KRaft mode (kafka.profile 4.0): each
	// coordinator also runs a controller on ControllerPort, and
	// ControllerConfig holds the broker settings those controllers read.
	KRaft            bool `json:"kraft,omitempty"`
	ControllerConfig []KV `json:"controller_config,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,23}$`)

// ValidName reports whether s can name a cluster (it becomes part of paths).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NewRunID returns a fresh run id: 8 lower-case hex digits.
func NewRunID() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// Build lays out the nodes: addresses in order c1..cN, b1..bN, client1..clientN
// from the first host address of the subnet, and each node's argv and files.
func Build(o Options) (Topology, error) {
	if o.Name == "" {
		o.Name = "isrlab"
	}
	if !ValidName(o.Name) {
		return Topology{}, fmt.Errorf("%w: cluster name %q: use 1-24 of a-z 0-9 -", ErrBadTopology, o.Name)
	}
	if o.RunID == "" {
		o.RunID = NewRunID()
	}
	if !o.NoDefaults {
		if o.Coordinators == 0 {
			o.Coordinators = 3
		}
		if o.Brokers == 0 {
			o.Brokers = 3
		}
		if o.Clients == 0 {
			o.Clients = 1
		}
	}
	if o.Coordinators < 0 || o.Brokers < 0 || o.Clients < 0 {
		return Topology{}, fmt.Errorf("%w: negative node count", ErrBadTopology)
	}
	if o.Brokers > 0 && o.Coordinators == 0 {
		return Topology{}, fmt.Errorf("%w: brokers need at least one coordinator", ErrBadTopology)
	}
	if !o.Subnet.IsValid() {
		o.Subnet = DefaultSubnet
	}
	o.Subnet = o.Subnet.Masked()
	if !o.Subnet.Addr().Is4() {
		return Topology{}, fmt.Errorf("%w: subnet %s is not IPv4", ErrBadTopology, o.Subnet)
	}
	if o.Binary == "" {
		o.Binary = "isrlab"
	}
	if o.RunDir == "" {
		return Topology{}, fmt.Errorf("%w: no run directory", ErrBadTopology)
	}
	for _, kv := range o.BrokerConfig {
		if reserved(kv.Key) {
			return Topology{}, fmt.Errorf("%w: broker config %q is set by the topology", ErrBadTopology, kv.Key)
		}
	}
	disks, err := faultFSBrokers(o.FaultFS, o.Brokers)
	if err != nil {
		return Topology{}, err
	}
	if len(disks) > 0 && !faultfs.ValidRunID(o.RunID) {
		return Topology{}, fmt.Errorf("%w: run id %q cannot tag a faultfs mount", ErrBadTopology, o.RunID)
	}
	if o.KafkaProxy && o.Secured {
		return Topology{}, fmt.Errorf("%w: the Kafka proxy speaks plaintext only; a secured cluster cannot have one", ErrBadTopology)
	}
	total := o.Coordinators + o.Brokers + o.Clients
	hosts := 1<<(32-o.Subnet.Bits()) - 2 // minus network and broadcast
	if total > hosts {
		return Topology{}, fmt.Errorf("%w: %d nodes do not fit in %s", ErrBadTopology, total, o.Subnet)
	}

	t := Topology{Name: o.Name, RunID: o.RunID, Subnet: o.Subnet, RunDir: o.RunDir}
	if kraftMode(o.BrokerConfig) {
		if o.Secured {
			return Topology{}, fmt.Errorf("%w: KRaft mode (kafka.profile 4.0) with a secured cluster: the controllers speak plaintext to the brokers", ErrBadTopology)
		}
		t.KRaft, t.ControllerConfig = true, slices.Clone(o.BrokerConfig)
	}
	if o.Secured {
		t.Security = newSecurity(o.RunDir, o.RunID)
	}
	addr := o.Subnet.Addr()
	add := func(role Role, prefix string, n int) {
		for i := 1; i <= n; i++ {
			addr = addr.Next()
			name := prefix + strconv.Itoa(i)
			dir := filepath.Join(o.RunDir, name)
			t.Nodes = append(t.Nodes, NodeSpec{
				Name: name, Role: role, ID: i, Addr: addr, Dir: dir,
				DataDir: filepath.Join(dir, "data"),
				LogFile: filepath.Join(dir, name+".log"),
			})
		}
	}
	add(RoleCoordinator, "c", o.Coordinators)
	add(RoleBroker, "b", o.Brokers)
	add(RoleClient, "client", o.Clients)

	for i := range t.Nodes {
		n := &t.Nodes[i]
		switch n.Role {
		case RoleCoordinator:
			n.Argv = CoordinatorArgv(o.Binary, t, *n)
			n.Probe = ProbeEtcd
		case RoleBroker:
			if o.KafkaProxy {
				p, err := BrokerProxy(o.Binary, t, *n)
				if err != nil {
					return Topology{}, err
				}
				n.Proxy = &p
			}
			path := filepath.Join(n.Dir, "server.properties")
			n.Files = map[string]string{"server.properties": BrokerProperties(t, *n, o.BrokerConfig)}
			n.Argv = []string{o.Binary, "broker", "--config", path}
			n.Probe = ProbeKafka
			if disks[n.Name] {
				d, err := BrokerDisk(o.Binary, t, *n)
				if err != nil {
					return Topology{}, err
				}
				n.Disk = &d
			}
		}
	}
	return t, nil
}

// faultFSBrokers resolves Options.FaultFS to a set of broker names.
func faultFSBrokers(names []string, brokers int) (map[string]bool, error) {
	out := map[string]bool{}
	for _, name := range names {
		if name == "all" {
			if len(names) > 1 {
				return nil, fmt.Errorf("%w: faultfs %q: \"all\" stands alone", ErrBadTopology, strings.Join(names, ","))
			}
			for i := 1; i <= brokers; i++ {
				out["b"+strconv.Itoa(i)] = true
			}
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(name, "b"))
		if !strings.HasPrefix(name, "b") || err != nil || i < 1 || i > brokers || name != "b"+strconv.Itoa(i) {
			return nil, fmt.Errorf("%w: faultfs %q is not a broker of this cluster (b1..b%d or all)", ErrBadTopology, name, brokers)
		}
		out[name] = true
	}
	return out, nil
}

// BrokerDisk lays out the faultfs disk of broker n: the backing directory
// and daemon log in the node's directory, the control socket there too if
// its path fits a Unix socket address, else in the state directory, named
// after the run. The daemon's seed derives from the run id and node name.
func BrokerDisk(bin string, t Topology, n NodeSpec) (DiskSpec, error) {
	ctl := filepath.Join(n.Dir, "faultfs.sock")
	if len(ctl) > faultfs.MaxSocketPath {
		ctl = filepath.Join(StateDir(), "faultfs-"+t.RunID+"-"+n.Name+".sock")
	}
	if len(ctl) > faultfs.MaxSocketPath {
		return DiskSpec{}, fmt.Errorf("%w: faultfs control socket of %s: %s and %s are longer than %d bytes; use a shorter run or state directory",
			ErrBadTopology, n.Name, filepath.Join(n.Dir, "faultfs.sock"), ctl, faultfs.MaxSocketPath)
	}
	d := DiskSpec{
		Backing: filepath.Join(n.Dir, "disk-backing"),
		Mount:   n.DataDir,
		Control: ctl,
		LogFile: filepath.Join(n.Dir, "faultfs.log"),
	}
	h := fnv.New64a()
	h.Write([]byte(t.RunID + "/" + n.Name))
	opts := faultfs.Options{Backing: d.Backing, Mount: d.Mount, RunID: t.RunID, Seed: int64(h.Sum64() >> 1)}
	// --verbose: mounts, faults and crashes go to the daemon's log.
	d.Argv = append(append([]string{bin}, faultfs.Args(opts, ctl)...), "--verbose")
	return d, nil
}

// Disks maps each broker that runs on faultfs to its control socket, the
// form nemesis.Env.Disks takes; nil if none does.
func (t Topology) Disks() map[string]string {
	var out map[string]string
	for _, n := range t.Nodes {
		if n.Disk == nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[n.Name] = n.Disk.Control
	}
	return out
}

// reserved reports whether key is a per-node broker key the topology owns.
func reserved(key string) bool {
	switch key {
	case "broker.id", "listeners", "advertised.listeners", "log.dirs", "coordinator.connect", "metrics.listen", "controller.quorum.voters":
		return true
	}
	return false
}

// Role returns the nodes of one role, in order.
func (t Topology) Role(r Role) []NodeSpec {
	var out []NodeSpec
	for _, n := range t.Nodes {
		if n.Role == r {
			out = append(out, n)
		}
	}
	return out
}

// Bootstrap returns the brokers' host:port list (Servers if set).
func (t Topology) Bootstrap() []string {
	if len(t.Servers) > 0 {
		return slices.Clone(t.Servers)
	}
	var out []string
	for _, n := range t.Role(RoleBroker) {
		out = append(out, n.KafkaAddr())
	}
	return out
}

// KafkaAddr is a broker's Kafka listener, host:port.
func (n NodeSpec) KafkaAddr() string {
	port := BrokerPort
	if n.Port > 0 {
		port = n.Port
	}
	return netip.AddrPortFrom(n.Addr, uint16(port)).String()
}

// CoordinatorEndpoints returns the coordinators' client URLs.
func (t Topology) CoordinatorEndpoints() []string {
	var out []string
	for _, n := range t.Role(RoleCoordinator) {
		out = append(out, "http://"+netip.AddrPortFrom(n.Addr, CoordinatorClientPort).String())
	}
	return out
}

// CoordinatorArgv is the command line of one embedded-etcd member.
func CoordinatorArgv(bin string, t Topology, n NodeSpec) []string {
	var initial []string
	for _, c := range t.Role(RoleCoordinator) {
		initial = append(initial, c.Name+"=http://"+netip.AddrPortFrom(c.Addr, CoordinatorPeerPort).String())
	}
	client := "http://" + netip.AddrPortFrom(n.Addr, CoordinatorClientPort).String()
	peer := "http://" + netip.AddrPortFrom(n.Addr, CoordinatorPeerPort).String()
	argv := []string{bin, "coordinator",
		"--name", n.Name,
		"--data-dir", n.DataDir,
		"--listen-client-urls", client,
		"--listen-peer-urls", peer,
		"--advertise-client-urls", client,
		"--advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--log-file", n.LogFile,
	}
	if t.KRaft {
		argv = append(argv, "--controller-id", strconv.Itoa(int(ControllerNodeID(n.ID))),
			"--controller-listener", netip.AddrPortFrom(n.Addr, ControllerPort).String())
		for _, kv := range t.ControllerConfig {
			argv = append(argv, "--controller-override", kv.Key+"="+kv.Value)
		}
	}
	return argv
}

// ControllerVoters is controller.quorum.voters of a KRaft cluster: every
// coordinator's controller as id@host:port.
func (t Topology) ControllerVoters() string {
	var out []string
	for _, c := range t.Role(RoleCoordinator) {
		out = append(out, fmt.Sprintf("%d@%s", ControllerNodeID(c.ID), netip.AddrPortFrom(c.Addr, ControllerPort)))
	}
	return strings.Join(out, ",")
}

// BrokerProperties is a broker's config file in server.properties syntax:
// the topology's per-node keys, then the user's keys in the order given.
func BrokerProperties(t Topology, n NodeSpec, user []KV) string {
	listener := "PLAINTEXT://" + netip.AddrPortFrom(n.Addr, BrokerPort).String()
	advertised := listener
	if t.Security != nil {
		listener = securedListener(n.Addr)
		advertised = listener
	}
	if n.Proxy != nil {
		// The proxy holds the advertised address; the broker listens
		// behind it on the node's loopback.
		listener = "PLAINTEXT://" + n.Proxy.Upstream
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# isrlab cluster %s run %s node %s\n", t.Name, t.RunID, n.Name)
	kvs := []KV{
		{"broker.id", strconv.Itoa(n.ID)},
		{"listeners", listener},
		{"advertised.listeners", advertised},
		{"log.dirs", n.DataDir},
		{"coordinator.connect", strings.Join(t.CoordinatorEndpoints(), ",")},
		{"metrics.listen", netip.AddrPortFrom(n.Addr, MetricsPort).String()},
	}
	if t.Security != nil {
		kvs = append(kvs, t.Security.brokerProperties(n)...)
	}
	if t.KRaft {
		kvs = append(kvs, KV{"controller.quorum.voters", t.ControllerVoters()})
	}
	kvs = append(kvs, user...)
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s\n", kv.Key, escapeProperty(kv.Value))
	}
	return b.String()
}

// escapeProperty escapes what java.util.Properties would misread.
func escapeProperty(v string) string {
	r := strings.NewReplacer("\\", "\\\\", "\n", "\\n", "\r", "\\r")
	return r.Replace(v)
}

// NodeNames returns the names of the nodes, in order.
func (t Topology) NodeNames() []string {
	out := make([]string, 0, len(t.Nodes))
	for _, n := range t.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// Node returns the spec named name.
func (t Topology) Node(name string) (NodeSpec, bool) {
	i := slices.IndexFunc(t.Nodes, func(n NodeSpec) bool { return n.Name == name })
	if i < 0 {
		return NodeSpec{}, false
	}
	return t.Nodes[i], true
}
