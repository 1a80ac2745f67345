package ssh

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// TestQuote runs quoted argument lists through sh and checks that the
// program gets exactly its arguments back.
func TestQuote(t *testing.T) {
	argv := []string{"printf", "%s\\n", "plain", "two words", "it's", "$HOME", "`id`", "*", "a\nb", "", "--", "x;y|z&"}
	out, err := exec.Command("sh", "-c", Quote(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(argv[2:], "\n") + "\n"
	if string(out) != want {
		t.Fatalf("sh got\n%q\nwant\n%q", out, want)
	}
	if got := Quote([]string{"nft", "-f", "-"}); got != "nft -f -" {
		t.Errorf("safe words quoted: %s", got)
	}
}

func kraft() Config {
	return Config{User: "kafka", Key: "~/.ssh/lab", KnownHosts: "/etc/isrlab/known_hosts", Nodes: []Node{
		{Host: "10.1.0.11", Role: RoleBroker, Systemd: "kafka.service", LogDir: "/var/log/kafka"},
		{Host: "10.1.0.12", Role: RoleBroker, ID: 2, Start: []string{"/opt/kafka/bin/kafka-server-start.sh", "/etc/kafka/server.properties"},
			PIDFile: "/run/kafka.pid", LogFile: "/var/log/kafka/out.log"},
		{Host: "10.1.0.13", Role: RoleBroker, KafkaPort: 9094, Clock: true},
		{Host: "10.1.0.21", Role: RoleController, Probe: "tcp", ProbePort: 9093},
		{Host: "10.1.0.31", Role: RoleClient},
		{Host: "10.1.0.14", Role: RoleBroker, Start: []string{"/opt/kafka/bin/kafka-server-start.sh", "-daemon", "/etc/kafka/server.properties"},
			Daemon: true, Status: []string{"pgrep", "-o", "-f", "[k]afka.Kafka"}},
	}}
}

func TestConfigValidate(t *testing.T) {
	good := kraft()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(good.Names(), ","); got != "b1,b2,b3,c1,client1,b4" {
		t.Errorf("names %s", got)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Nodes = nil }, "nodes: no nodes"},
		{func(c *Config) { c.Nodes[0].Role = "kafka" }, `nodes[0].role: "kafka"`},
		{func(c *Config) { c.Nodes[0].Host = "" }, "nodes[0].host: missing"},
		{func(c *Config) { c.Nodes[1].PIDFile = "" }, "nodes[1].pid_file: a start command needs a pid file or a status command"},
		{func(c *Config) { c.Nodes[0].Status = []string{"pgrep", "kafka"} }, "nodes[0].systemd: a systemd unit needs no"},
		{func(c *Config) { c.Nodes[2].Status = []string{"pgrep", "kafka"} }, "nodes[2].start: pid_file, status"},
		{func(c *Config) { c.Nodes[1].LogFile = "" }, "nodes[1].log_file"},
		{func(c *Config) { c.Nodes[0].PIDFile = "/x" }, "nodes[0].systemd: a systemd unit needs no"},
		{func(c *Config) { c.Nodes[2].PIDFile = "/x" }, "nodes[2].start: pid_file, status, stop and daemon go with a start command"},
		{func(c *Config) { c.Nodes[1].PIDFile = "run/kafka.pid" }, "not an absolute path"},
		{func(c *Config) { c.Nodes[3].ProbePort = 0 }, "probe tcp needs a port"},
		{func(c *Config) { c.Nodes[3].Probe = "kafka" }, "only brokers answer the kafka probe"},
		{func(c *Config) { c.Nodes[3].ID = 4 }, "only brokers have ids"},
		{func(c *Config) { c.Nodes[4].Systemd = "x" }, "a client host runs no process"},
		{func(c *Config) { c.Nodes[0].Addr = "kafka1" }, "is not an IP address"},
		{func(c *Config) { c.Agent = true }, "give key or agent"},
		{func(c *Config) { c.Firewall = "pf" }, `firewall: "pf"`},
		{func(c *Config) { c.Bootstrap = []string{"kafka1"} }, "is not host:port"},
		{func(c *Config) { c.Nodes = c.Nodes[3:5] }, "no broker"},
		{func(c *Config) { c.Setup = []Step{{On: "b9", Run: []string{"true"}}} }, `on "b9" names no node`},
		{func(c *Config) { c.Teardown = []Step{{On: "all"}} }, "runs no command"},
		{func(c *Config) { c.Client = &kafkaconfig.ClientSecurity{Protocol: "SASL_SSL", Mechanism: "GSSAPI"} }, "client: invalid value \"GSSAPI\" for configuration sasl.mechanism"},
		{func(c *Config) {
			c.Client = &kafkaconfig.ClientSecurity{Protocol: "SASL_SSL", Mechanism: "PLAIN", Username: "u"}
		}, "client: invalid value \"[hidden]\" for configuration sasl.password: set exactly one of sasl.password and sasl.password.file"},
		{func(c *Config) { c.Nodes[3].Faultfs = &Faultfs{Control: "/run/ffs.sock"} }, "nodes[3].faultfs: only a broker's data dir"},
		{func(c *Config) { c.Nodes[2].Faultfs = &Faultfs{Control: "/run/ffs.sock"} }, "nodes[2].data_dir: faultfs mounts the broker's data dir"},
		{func(c *Config) {
			c.Nodes[0].DataDir, c.Nodes[0].Faultfs = "/var/lib/kafka", &Faultfs{Control: "ffs.sock"}
		}, `nodes[0].faultfs.control: "ffs.sock" is not an absolute path`},
		{func(c *Config) {
			c.Nodes[0].DataDir, c.Nodes[0].Faultfs = "/var/lib/kafka", &Faultfs{Control: "/run/ffs.sock", Command: []string{""}}
		}, "nodes[0].faultfs.command: an empty word"},
	} {
		c := kraft()
		c.Nodes = append([]Node(nil), c.Nodes...)
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v", tc.want, err)
		}
	}
}

func TestTopology(t *testing.T) {
	c := kraft()
	c.Nodes = append(c.Nodes, Node{Host: "10.1.0.11", Role: RoleZooKeeper, Probe: "none"})
	if _, err := c.Topology("k", "r1", "/tmp/x"); err == nil || !strings.Contains(err.Error(), "same address") {
		t.Fatalf("two nodes on one address: %v", err)
	}
	c = kraft()
	topo, err := c.Topology("k", "r1", "/tmp/x")
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := topo.Node("b1")
	b3, _ := topo.Node("b3")
	c1, _ := topo.Node("c1")
	if b1.ID != 0 || b1.Probe != compose.ProbeKafka || b1.LogFile != "/var/log/kafka/server.log" || b1.Dir != "/tmp/x/b1" {
		t.Errorf("b1: %+v", b1)
	}
	if b3.KafkaAddr() != "10.1.0.13:9094" || c1.Role != compose.RoleCoordinator || c1.Probe != compose.ProbeTCP || c1.Port != 9093 {
		t.Errorf("b3 %s, c1 %+v", b3.KafkaAddr(), c1)
	}
	if got := strings.Join(topo.Bootstrap(), ","); got != "10.1.0.11:9092,10.1.0.12:9092,10.1.0.13:9094,10.1.0.14:9092" {
		t.Errorf("bootstrap %s", got)
	}
	if len(topo.Disks()) != 0 {
		t.Errorf("disks without faultfs: %v", topo.Disks())
	}
	c.Nodes[0].DataDir, c.Nodes[0].Faultfs = "/var/lib/kafka", &Faultfs{Control: "/run/isrlab/b1-ffs.sock"}
	topo, _ = c.Topology("k", "r1", "/tmp/x")
	if b1, _ := topo.Node("b1"); topo.Disks()["b1"] != "/run/isrlab/b1-ffs.sock" || len(topo.Disks()) != 1 || b1.Disk.Mount != c.Nodes[0].DataDir {
		t.Errorf("disks %v, b1's %+v", topo.Disks(), b1.Disk)
	}
	c.Bootstrap = []string{"kafka.example:9092"}
	topo, _ = c.Topology("k", "r1", "/tmp/x")
	if got := strings.Join(topo.Bootstrap(), ","); got != "kafka.example:9092" {
		t.Errorf("given bootstrap %s", got)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hosts.yaml")
	os.WriteFile(p, []byte("user: kafka\nnodes:\n  - host: 10.0.0.1\n    role: broker\n    systemd: kafka\n    pidfile: /x\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "line 6") || !strings.Contains(err.Error(), "pidfile") {
		t.Fatalf("unknown key: %v", err)
	}
	os.WriteFile(p, []byte("user: kafka\nnodes:\n  - host: 10.0.0.1\n    role: broker\n    systemd: kafka\n"), 0o644)
	c, err := Load(p)
	if err != nil || c.Nodes[0].Systemd != "kafka" {
		t.Fatalf("%+v, %v", c, err)
	}

	// The client config, in Kafka's names; a typo is an error naming its line.
	client := "client:\n  security.protocol: SASL_SSL\n  sasl.mechanism: SCRAM-SHA-512\n  sasl.username: lab\n  sasl.password: s3cret\n  ssl.ca.location: ~/ca.pem\n"
	os.WriteFile(p, []byte("user: kafka\n"+client+"nodes:\n  - host: 10.0.0.1\n    role: broker\n    systemd: kafka\n"), 0o644)
	if c, err = Load(p); err != nil || c.Client == nil || c.Client.Username != "lab" || c.Client.Password.Reveal() != "s3cret" {
		t.Fatalf("client config: %+v, %v", c, err)
	}
	home, _ := os.UserHomeDir()
	topo, err := c.Topology("k", "r1", dir)
	if err != nil || topo.Client == nil || topo.Client.CALocation != filepath.Join(home, "ca.pem") || c.Client.CALocation != "~/ca.pem" {
		t.Fatalf("the topology's client config: %+v, %v", topo.Client, err)
	}
	// What the run records hides the password, and a client config
	// read back from it says why it cannot connect.
	js, _ := json.Marshal(topo)
	if strings.Contains(string(js), "s3cret") || !strings.Contains(string(js), `"sasl.password":"[hidden]"`) {
		t.Fatalf("the recorded topology: %s", js)
	}
	var back compose.Topology
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if _, err := back.KafkaOpts(nil); err == nil || !strings.Contains(err.Error(), "sasl.password.file") {
		t.Fatalf("a recorded inline password: %v", err)
	}
	os.WriteFile(p, []byte("user: kafka\n"+strings.Replace(client, "sasl.username", "sasl.user", 1)+"nodes:\n  - host: 10.0.0.1\n    role: broker\n    systemd: kafka\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "sasl.user") {
		t.Fatalf("an unknown client key: %v", err)
	}
}

// TestPlan checks that the plan names every host, how the lab gets in,
// what it may do to each process and where its fault rules go, and says
// loudly when host keys are not checked.
func TestPlan(t *testing.T) {
	c := kraft()
	c.Setup = []Step{{On: "brokers", Run: []string{"systemctl", "stop", "chronyd"}}}
	c.Nodes[0].DataDir = "/var/lib/kafka"
	c.Nodes[0].Faultfs = &Faultfs{Control: "/run/isrlab/b1 ffs.sock", Command: []string{"/usr/local/bin/isrlab"}}
	topo, err := c.Topology("k", "r1", "/tmp/x")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := c.Plan(&b, topo); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{
		"host keys checked against /etc/isrlab/known_hosts",
		"from client1 (tunnelled through its SSH connection)",
		"b1  broker (id from metadata) at 10.1.0.11: ssh kafka@10.1.0.11:22",
		"systemd unit kafka.service",
		"b2  broker id 2",
		"starts with: /opt/kafka/bin/kafka-server-start.sh /etc/kafka/server.properties (in the background, output appended to /var/log/kafka/out.log, pid written to /run/kafka.pid)",
		"b3  broker (id from metadata)",
		"process: not controlled by the lab",
		"SETS THE SYSTEM CLOCK",
		"process: the pid pgrep -o -f '[k]afka.Kafka' prints",
		"(it backgrounds itself)",
		"nftables table inet isrlab-r1-<fault>",
		"on brokers: systemctl stop chronyd",
		"disk faults (slow-disk, disk-error, disk-hang, power-loss): the faultfs daemon behind /var/lib/kafka, sent one request each on standard input to: /usr/local/bin/isrlab faultfs ctl --control '/run/isrlab/b1 ffs.sock' -",
		"healed on heal, at the end and by isrlab clean --backend ssh",
		"disk faults: none (no faultfs under its data dir); power-loss is a kill",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("plan has no %q:\n%s", w, out)
		}
	}
	if !strings.Contains(out, "clients connect with PLAINTEXT (no client config)") {
		t.Errorf("plan without a client config:\n%s", out)
	}
	c.Client = &kafkaconfig.ClientSecurity{Protocol: "SSL", CALocation: "/etc/kafka/ca.pem", EndpointIdentification: "none",
		CertLocation: "/etc/lab.pem", KeyLocation: "/etc/lab-key.pem"}
	b.Reset()
	c.Plan(&b, topo)
	if want := "clients connect with SSL, trusting the CAs in /etc/kafka/ca.pem, broker host names NOT checked, client certificate /etc/lab.pem (the file's client: config)"; !strings.Contains(b.String(), want) {
		t.Errorf("plan has no %q:\n%s", want, b.String())
	}
	c.Client = nil
	c.InsecureIgnoreHostKey = true
	b.Reset()
	c.Plan(&b, topo)
	if !strings.Contains(b.String(), "HOST KEYS ARE NOT CHECKED") {
		t.Errorf("insecure plan:\n%s", b.String())
	}
}
