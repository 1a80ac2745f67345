package compose

import (
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/internal/scripttest"
)

func TestBuildGolden(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"default", Options{RunID: "0123abcd", RunDir: "/run-dir", Binary: "/bin/isrlab"}},
		{"small-custom", Options{
			Name: "lab-2", RunID: "feedf00d", RunDir: "/r", Binary: "isrlab",
			Coordinators: 1, Brokers: 2, Clients: 2,
			Subnet:       netip.MustParsePrefix("192.168.77.64/27"),
			BrokerConfig: []KV{{"min.insync.replicas", "2"}, {"unclean.leader.election.enable", "false"}, {"odd", "a\nb"}},
		}},
		// b2 on faultfs: its daemon's argv, paths and socket.
		{"faultfs", Options{Name: "ffs", RunID: "c0ffee01", RunDir: "/r", Binary: "/bin/isrlab",
			Coordinators: 1, Brokers: 2, FaultFS: []string{"b2"}}},
		// One SASL_SSL listener; the password comes through the file
		// config provider from outside the run directory.
		{"secured", Options{Name: "sec", RunID: "5ec0000d", RunDir: "/r", Binary: "/bin/isrlab",
			Coordinators: 1, Brokers: 2, Secured: true}},
		// Every broker behind a Kafka proxy: the proxy listens on the
		// advertised address, the broker on the node's loopback.
		{"kafka-proxy", Options{Name: "kp", RunID: "0dd0ba11", RunDir: "/r", Binary: "/bin/isrlab",
			Coordinators: 1, Brokers: 2, KafkaProxy: true}},
		// KRaft mode: each coordinator also runs a controller on 9093 with
		// the cluster's broker settings; the brokers list them as voters.
		{"kraft", Options{Name: "kr", RunID: "4a0ff00d", RunDir: "/r", Binary: "/bin/isrlab",
			Coordinators: 3, Brokers: 2, BrokerConfig: []KV{{"kafka.profile", "4.0"}, {"min.insync.replicas", "2"}}}},
	}
	t.Setenv("ISRLAB_STATE_DIR", "/state") // the secured cluster's secrets dir
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := Build(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(top, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			scripttest.Golden(t, filepath.Join("testdata", tt.name+".topology.json"), string(b)+"\n")
			for _, n := range top.Role(RoleBroker) {
				scripttest.Golden(t, filepath.Join("testdata", tt.name+"."+n.Name+".properties"), n.Files["server.properties"])
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no run dir", Options{}, "no run directory"},
		{"bad name", Options{Name: "Has Space", RunDir: "/r"}, "cluster name"},
		{"too many", Options{RunDir: "/r", Brokers: 20, Subnet: netip.MustParsePrefix("10.0.0.0/28")}, "do not fit"},
		{"ipv6", Options{RunDir: "/r", Subnet: netip.MustParsePrefix("fd00::/64")}, "not IPv4"},
		{"reserved key", Options{RunDir: "/r", BrokerConfig: []KV{{"broker.id", "7"}}}, "set by the topology"},
		{"negative", Options{RunDir: "/r", Brokers: -1}, "negative"},
		{"brokers without coordinators", Options{RunDir: "/r", Brokers: 1, NoDefaults: true}, "coordinator"},
		{"voters", Options{RunDir: "/r", BrokerConfig: []KV{{"kafka.profile", "4.0"}, {"controller.quorum.voters", "1@x:1"}}}, "set by the topology"},
		{"kraft secured", Options{RunDir: "/r", Secured: true, BrokerConfig: []KV{{"process.roles", "broker"}}}, "KRaft mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.opts)
			if !errors.Is(err, ErrBadTopology) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build: got %v, want ErrBadTopology containing %q", err, tt.want)
			}
		})
	}
}

func TestParseKV(t *testing.T) {
	tests := []struct {
		in      string
		want    KV
		wantErr bool
	}{
		{"acks=all", KV{"acks", "all"}, false},
		{" a = b=c ", KV{"a", "b=c"}, false},
		{"empty=", KV{"empty", ""}, false},
		{"novalue", KV{}, true},
		{"=v", KV{}, true},
	}
	for _, tt := range tests {
		got, err := ParseKV(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseKV(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestBootstrapAndEndpoints(t *testing.T) {
	top, err := Build(Options{RunID: "x", RunDir: "/r", Coordinators: 2, Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(top.Bootstrap(), ","), "10.213.0.3:9092,10.213.0.4:9092"; got != want {
		t.Errorf("Bootstrap = %s, want %s", got, want)
	}
	if got, want := strings.Join(top.CoordinatorEndpoints(), ","), "http://10.213.0.1:2379,http://10.213.0.2:2379"; got != want {
		t.Errorf("CoordinatorEndpoints = %s, want %s", got, want)
	}
}

func TestBuildKafkaProxy(t *testing.T) {
	t.Setenv("ISRLAB_STATE_DIR", "/state")
	top, err := Build(Options{RunID: "r1", RunDir: "/r", KafkaProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"b1": "/r/b1/kproxy.sock", "b2": "/r/b2/kproxy.sock", "b3": "/r/b3/kproxy.sock"}
	if got := top.Proxies(); !maps.Equal(got, want) {
		t.Errorf("Proxies() = %v, want %v", got, want)
	}
	for _, n := range top.Role(RoleBroker) {
		props := n.Files["server.properties"]
		if !strings.Contains(props, "listeners=PLAINTEXT://127.0.0.1:19092\n") ||
			!strings.Contains(props, "advertised.listeners=PLAINTEXT://"+n.KafkaAddr()+"\n") {
			t.Errorf("%s listens behind its proxy on loopback and advertises the proxy; got:\n%s", n.Name, props)
		}
		if n.Proxy.Listen != n.KafkaAddr() {
			t.Errorf("%s proxy listens on %s, want the advertised %s", n.Name, n.Proxy.Listen, n.KafkaAddr())
		}
	}
	if top, _ := Build(Options{RunID: "r1", RunDir: "/r"}); top.Proxies() != nil {
		t.Errorf("no proxies asked, got %v", top.Proxies())
	}
	_, err = Build(Options{RunID: "r1", RunDir: "/r", KafkaProxy: true, Secured: true})
	if !errors.Is(err, ErrBadTopology) || !strings.Contains(err.Error(), "plaintext") {
		t.Errorf("a secured cluster with a proxy: %v, want a plaintext-only error", err)
	}
}

func TestBuildFaultFS(t *testing.T) {
	t.Setenv("ISRLAB_STATE_DIR", "/state")
	long := "/" + strings.Repeat("d", 95)
	tests := []struct {
		name    string
		opts    Options
		disks   map[string]string // broker -> control socket
		wantErr string
	}{
		{"one broker", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"b2"}},
			map[string]string{"b2": "/r/b2/faultfs.sock"}, ""},
		{"all", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"all"}},
			map[string]string{"b1": "/r/b1/faultfs.sock", "b2": "/r/b2/faultfs.sock", "b3": "/r/b3/faultfs.sock"}, ""},
		{"none", Options{RunID: "r1", RunDir: "/r"}, nil, ""},
		{"long run dir: socket in the state dir", Options{RunID: "r1", RunDir: long, FaultFS: []string{"b1"}},
			map[string]string{"b1": "/state/faultfs-r1-b1.sock"}, ""},
		{"not a broker", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"c1"}}, nil, "not a broker"},
		{"no such broker", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"b4"}}, nil, "b1..b3"},
		{"not canonical", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"b01"}}, nil, "not a broker"},
		{"all with others", Options{RunID: "r1", RunDir: "/r", FaultFS: []string{"all", "b1"}}, nil, "stands alone"},
		{"bad run id", Options{RunID: "r 1", RunDir: "/r", FaultFS: []string{"b1"}}, nil, "run id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := Build(tt.opts)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrBadTopology) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Build: got %v, want ErrBadTopology containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := top.Disks()
			if len(got) != len(tt.disks) {
				t.Fatalf("Disks() = %v, want %v", got, tt.disks)
			}
			for node, sock := range tt.disks {
				if got[node] != sock {
					t.Errorf("Disks()[%s] = %q, want %q", node, got[node], sock)
				}
			}
			for _, n := range top.Nodes {
				if _, ok := tt.disks[n.Name]; !ok {
					if n.Disk != nil {
						t.Errorf("%s has a disk: %+v", n.Name, n.Disk)
					}
					continue
				}
				if n.Disk.Mount != n.DataDir || !strings.Contains(n.Files["server.properties"], "\nlog.dirs="+n.DataDir+"\n") {
					t.Errorf("%s: the mount %s is not the broker's log.dirs %s", n.Name, n.Disk.Mount, n.DataDir)
				}
				if len(n.Disk.Control) > 107 {
					t.Errorf("%s: control socket %s longer than a Unix socket address", n.Name, n.Disk.Control)
				}
			}
		})
	}
	// Both candidate socket paths too long.
	t.Setenv("ISRLAB_STATE_DIR", long)
	if _, err := Build(Options{RunID: "r1", RunDir: long, FaultFS: []string{"b1"}}); !errors.Is(err, ErrBadTopology) || !strings.Contains(err.Error(), "longer than 107") {
		t.Fatalf("Build with long run and state dirs: %v", err)
	}
}
