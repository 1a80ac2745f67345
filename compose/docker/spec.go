// Package docker is the Docker compose backend: an image imported from the
// running isrlab binary (no registry), a labelled network with its own
// subnet, and per node a sandbox container that owns the node's network
// namespace plus a process container that joins it. Restarting a node's
// process keeps its namespace, so faults applied through /proc/PID/ns/net of
// the sandbox reach the same node before and after, exactly as with the
// netns backend.
//
// System "kafka" runs apache/kafka (KRaft) images instead, generated from the
// same topology and broker config.
package docker

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// Labels every object of a run carries.
const (
	LabelRun     = "isrlab.run"
	LabelCluster = "isrlab.cluster"
	LabelNode    = "isrlab.node"
	LabelKind    = "isrlab.kind" // sandbox or process
	LabelManaged = "isrlab.managed"
)

// Systems a Docker cluster can run.
const (
	SystemIsrlab = "isrlab"
	SystemKafka  = "kafka"
)

// DefaultKafkaImage is the apache/kafka image the kafka system uses.
const DefaultKafkaImage = "apache/kafka:3.9.1"

// BinaryPath is where the isrlab binary lives inside the lab image.
const BinaryPath = "/isrlab"

// Container kinds.
const (
	KindSandbox = "sandbox"
	KindProcess = "process"
)

// ContainerSpec is one container to create: pure data, golden-tested.
type ContainerSpec struct {
	Name     string            `json:"name"`
	Node     string            `json:"node"`
	Kind     string            `json:"kind"`
	Image    string            `json:"image"`
	Cmd      []string          `json:"cmd,omitempty"`
	Env      []string          `json:"env,omitempty"`
	Binds    []string          `json:"binds,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	IP       netip.Addr        `json:"ip,omitzero"`    // sandboxes only
	JoinOf   string            `json:"join,omitempty"` // process: the sandbox whose network it joins
	Labels   map[string]string `json:"labels"`
}

// NetworkName is the Docker network of a run.
func NetworkName(run string) string { return "isrlab-" + run }

// ContainerName names a node's container of kind.
func ContainerName(run, node, kind string) string {
	if kind == KindSandbox {
		return "isrlab-" + run + "-" + node
	}
	return "isrlab-" + run + "-" + node + "-proc"
}

// Gateway is the address Docker gives its bridge: the subnet's last host
// address, which Build never hands out to a node in the clusters we run.
func Gateway(subnet netip.Prefix) netip.Addr {
	a := subnet.Masked().Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-subnet.Bits()) - 1 // broadcast
	n--
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

func labels(t compose.Topology, node, kind string) map[string]string {
	return map[string]string{
		LabelRun: t.RunID, LabelCluster: t.Name, LabelNode: node, LabelKind: kind, LabelManaged: "true",
	}
}

// sandbox is the container that holds a node's address and namespace; it
// runs idle, an argv for the lab image that blocks until SIGTERM.
func sandbox(t compose.Topology, n compose.NodeSpec, image string, idle []string, idleEnv []string) ContainerSpec {
	return ContainerSpec{
		Name: ContainerName(t.RunID, n.Name, KindSandbox), Node: n.Name, Kind: KindSandbox,
		Image: image, Cmd: idle, Env: idleEnv, Hostname: n.Name, IP: n.Addr,
		Labels: labels(t, n.Name, KindSandbox),
	}
}

// IsrlabSpecs lays out the isrlab system: a sandbox per node and, for nodes
// with a process, a process container running the node's argv with the
// host binary replaced by BinaryPath. Node directories are bind-mounted at
// the same path, so config files, data dirs and log files keep their names.
// On a secured cluster a broker's container also gets the run's TLS and
// secrets directories, read-only at the same paths: its config names its
// keystore, the CA and its password file there, and the certificates the
// lab issues during the run (cert faults) replace files in them.
func IsrlabSpecs(t compose.Topology, image string, idle, idleEnv []string) []ContainerSpec {
	var out []ContainerSpec
	for _, n := range t.Nodes {
		out = append(out, sandbox(t, n, image, idle, idleEnv))
		if len(n.Argv) == 0 {
			continue
		}
		cmd := append([]string{BinaryPath}, n.Argv[1:]...)
		binds := []string{n.Dir + ":" + n.Dir}
		if s := t.Security; s != nil && n.Role == compose.RoleBroker {
			binds = append(binds, s.TLSDir+":"+s.TLSDir+":ro", s.SecretsDir+":"+s.SecretsDir+":ro")
		}
		out = append(out, ContainerSpec{
			Name: ContainerName(t.RunID, n.Name, KindProcess), Node: n.Name, Kind: KindProcess,
			Image: image, Cmd: cmd, Env: n.Env, Binds: binds,
			JoinOf: ContainerName(t.RunID, n.Name, KindSandbox),
			Labels: labels(t, n.Name, KindProcess),
		})
	}
	return out
}

// KafkaClusterID derives a KRaft cluster id (22 characters of URL-safe
// base64, as kafka-storage random-uuid prints) from the run id.
func KafkaClusterID(run string) string {
	sum := sha256.Sum256([]byte("isrlab-kafka-" + run))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// KafkaEnvName is the apache/kafka image's environment name of a config
// key: KAFKA_ + upper case, '.' -> '_', '_' -> '__', '-' -> '___'.
func KafkaEnvName(key string) string {
	var b strings.Builder
	b.WriteString("KAFKA_")
	for _, r := range key {
		switch r {
		case '.':
			b.WriteByte('_')
		case '_':
			b.WriteString("__")
		case '-':
			b.WriteString("___")
		default:
			b.WriteString(strings.ToUpper(string(r)))
		}
	}
	return b.String()
}

// KafkaSpecs lays out apache/kafka in KRaft combined mode: every broker node
// is also a controller voter (coordinator nodes get no container: KRaft
// replaces them), client hosts get a sandbox. idle is the sandbox argv in
// the lab image (labImage), which the kafka image does not contain.
func KafkaSpecs(t compose.Topology, kafkaImage, labImage string, idle, idleEnv []string, user []compose.KV) []ContainerSpec {
	brokers := t.Role(compose.RoleBroker)
	var voters []string
	for _, b := range brokers {
		voters = append(voters, strconv.Itoa(b.ID)+"@"+netip.AddrPortFrom(b.Addr, 9093).String())
	}
	rf := strconv.Itoa(min(3, len(brokers)))
	minISR := strconv.Itoa(max(1, min(2, len(brokers)-1)))
	var out []ContainerSpec
	for _, n := range t.Nodes {
		if n.Role == compose.RoleCoordinator {
			continue
		}
		out = append(out, sandbox(t, n, labImage, idle, idleEnv))
		if n.Role != compose.RoleBroker {
			continue
		}
		plain := "PLAINTEXT://" + netip.AddrPortFrom(n.Addr, compose.BrokerPort).String()
		env := map[string]string{
			"CLUSTER_ID":                                     KafkaClusterID(t.RunID),
			"KAFKA_NODE_ID":                                  strconv.Itoa(n.ID),
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                plain + ",CONTROLLER://" + netip.AddrPortFrom(n.Addr, 9093).String(),
			"KAFKA_ADVERTISED_LISTENERS":                     plain,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_INTER_BROKER_LISTENER_NAME":               "PLAINTEXT",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 strings.Join(voters, ","),
			"KAFKA_LOG_DIRS":                                 "/var/lib/kafka/data",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         rf,
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": rf,
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            minISR,
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
		}
		for _, kv := range user {
			env[KafkaEnvName(kv.Key)] = kv.Value
		}
		var envs []string
		for k, v := range env {
			envs = append(envs, k+"="+v)
		}
		sort.Strings(envs)
		out = append(out, ContainerSpec{
			Name: ContainerName(t.RunID, n.Name, KindProcess), Node: n.Name, Kind: KindProcess,
			Image: kafkaImage, Env: envs,
			Binds:  []string{n.DataDir + ":/var/lib/kafka/data"},
			JoinOf: ContainerName(t.RunID, n.Name, KindSandbox),
			Labels: labels(t, n.Name, KindProcess),
		})
	}
	return out
}

// logName is where a process container's output is collected.
func logName(n compose.NodeSpec) string {
	if n.LogFile != "" {
		return n.LogFile
	}
	return filepath.Join(n.Dir, n.Name+".log")
}
