package lab

import (
	"errors"
	"strings"
	"testing"
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
	} {
		_, err := Parse("x.yaml", "x", []byte(tc.body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
}
