package lab

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/compose"
)

const sshHosts = `cluster:
  backend: ssh
  ssh:
    user: kafka
    key: /etc/isrlab/key
    nodes:
      - {host: 10.0.0.11, role: broker, systemd: kafka.service}
      - {host: 10.0.0.12, role: broker, systemd: kafka.service}
      - {host: 10.0.0.21, role: zookeeper, probe: tcp, probe_port: 2181}
`

// TestSSHScenario: a scenario on backend ssh takes its node counts from
// the host list (so defaults and targets follow the real cluster), and
// bad host lists are errors naming the line and the field.
func TestSSHScenario(t *testing.T) {
	s, err := Parse("x.yaml", "x", []byte(sshHosts))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster.Brokers != 2 || s.Cluster.Coordinators != 1 || s.Topic.ReplicationFactor != 2 {
		t.Errorf("brokers %d, coordinators %d, RF %d: want 2, 1, 2", s.Cluster.Brokers, s.Cluster.Coordinators, s.Topic.ReplicationFactor)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"no-hosts", "cluster:\n  backend: ssh\n", "x.yaml:2: cluster.backend: ssh needs its hosts"},
		{"hosts-elsewhere", "cluster:\n  ssh:\n    nodes: [{host: a, role: broker}]\n", "x.yaml:2: cluster.ssh: hosts are for backend ssh"},
		{"bad-node", strings.Replace(sshHosts, "role: zookeeper", "role: zk", 1), `x.yaml:3: cluster.ssh: bad ssh cluster: nodes[2].role: "zk"`},
		{"unknown-key", strings.Replace(sshHosts, "systemd: kafka.service}\n      - {host: 10.0.0.12", "unit: kafka.service}\n      - {host: 10.0.0.12", 1), "field unit not found"},
		{"no-such-broker", sshHosts + "faults:\n  - kind: kill\n    nodes: [b3]\n", "target b3: the cluster has c1..c1, b1..b2"},
		{"disk", sshHosts + "  disk: faultfs\n", "cluster.disk: faultfs disks need a cluster the lab lays out"},
		{"secured", sshHosts + "  secured: true\n", "cluster.secured: the lab lays out no cluster on backend ssh: to reach a secured cluster of your own, give its cluster file a client: config"},
	} {
		_, err := Parse("x.yaml", "x", []byte(tc.body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
}

// TestSSHClientSecurity: a cluster file's client config reaches the
// clients of a run on it (clientAuthOf, which the workload's and the
// exec drivers' clients get, and the cluster's KafkaOpts, which every
// other client of the run uses), the scenario's YAML hides its
// password, and kind: kafka faults are refused with TLS, not SASL alone.
func TestSSHClientSecurity(t *testing.T) {
	client := "    client:\n      security.protocol: SASL_SSL\n      sasl.mechanism: SCRAM-SHA-256\n      sasl.username: lab\n      sasl.password: s3cret\n"
	body := strings.Replace(sshHosts, "    nodes:\n", client+"    nodes:\n", 1)
	s, err := Parse("x.yaml", "x", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	topo, err := s.Cluster.SSH.Topology("lab-r1", "r1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &compose.Cluster{Topology: topo}
	auth, err := clientAuthOf(c)
	if err != nil || auth == nil || auth.Security == nil || auth.Security.Protocol != "SASL_SSL" ||
		auth.SASL == nil || auth.SASL.Mechanism != "SCRAM-SHA-256" || auth.SASL.User != "lab" || auth.SASL.Password != "s3cret" {
		t.Fatalf("the clients' auth: %+v, %v", auth, err)
	}
	if opts, err := c.KafkaOpts(); err != nil || len(opts) < 2 {
		t.Fatalf("the cluster's Kafka options: %d, %v (want the dialer and SASL)", len(opts), err)
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), "sasl.password: '[hidden]'") {
		t.Errorf("the scenario's YAML:\n%s", b)
	}
	kafkaFault := "faults:\n  - kind: kafka\n    api: Produce\n    action: drop\n"
	if _, err := Parse("x.yaml", "x", []byte(body+kafkaFault)); !errors.Is(err, ErrScenario) ||
		!strings.Contains(err.Error(), "cluster.ssh.client: kind: kafka faults need a cluster reached without TLS: the Kafka proxy does not speak TLS (security.protocol SASL_SSL)") {
		t.Errorf("a kafka fault with TLS: %v", err)
	}
	saslOnly := strings.Replace(body, "SASL_SSL", "SASL_PLAINTEXT", 1)
	if _, err := Parse("x.yaml", "x", []byte(saslOnly+kafkaFault)); err != nil {
		t.Errorf("a kafka fault with SASL_PLAINTEXT: %v", err)
	}
}
