package docker

import (
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/isrlab/isrlab/compose"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from golden file (run with -update to accept):\n--- got\n%s", name, got)
	}
}

func TestSpecsGolden(t *testing.T) {
	top, err := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/run-dir", Binary: "/usr/local/bin/isrlab",
		BrokerConfig: []compose.KV{{Key: "min.insync.replicas", Value: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	idle := []string{BinaryPath, "cluster", "idle"}
	tests := []struct {
		name  string
		specs []ContainerSpec
	}{
		{"isrlab-3c3b.json", IsrlabSpecs(top, "isrlab-lab:feed", idle, nil)},
		{"kafka-3b.json", KafkaSpecs(withoutCoordinators(top), DefaultKafkaImage, "isrlab-lab:feed", idle, nil,
			[]compose.KV{{Key: "min.insync.replicas", Value: "2"}, {Key: "unclean.leader.election.enable", Value: "false"}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { golden(t, tt.name, tt.specs) })
	}
}

func TestKafkaEnvName(t *testing.T) {
	tests := []struct{ key, want string }{
		{"min.insync.replicas", "KAFKA_MIN_INSYNC_REPLICAS"},
		{"log.flush.interval_ms", "KAFKA_LOG_FLUSH_INTERVAL__MS"},
		{"a-b.c", "KAFKA_A___B_C"},
	}
	for _, tt := range tests {
		if got := KafkaEnvName(tt.key); got != tt.want {
			t.Errorf("KafkaEnvName(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestGateway(t *testing.T) {
	tests := []struct{ subnet, want string }{
		{"10.213.0.0/24", "10.213.0.254"},
		{"192.168.77.64/27", "192.168.77.94"},
	}
	for _, tt := range tests {
		if got := Gateway(netip.MustParsePrefix(tt.subnet)).String(); got != tt.want {
			t.Errorf("Gateway(%s) = %s, want %s", tt.subnet, got, tt.want)
		}
	}
}

func TestKafkaClusterID(t *testing.T) {
	id := KafkaClusterID("0123abcd")
	if len(id) != 22 || id != KafkaClusterID("0123abcd") || id == KafkaClusterID("0123abce") {
		t.Errorf("KafkaClusterID = %q: want 22 characters, stable per run, distinct across runs", id)
	}
}
