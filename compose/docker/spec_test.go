package docker

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/scripttest"
)

func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	scripttest.Golden(t, filepath.Join("testdata", name), string(got)+"\n")
}

func TestSpecsGolden(t *testing.T) {
	top, err := compose.Build(compose.Options{RunID: "0123abcd", RunDir: "/run-dir", Binary: "/usr/local/bin/isrlab",
		BrokerConfig: []compose.KV{{Key: "min.insync.replicas", Value: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISRLAB_STATE_DIR", "/state") // the secured cluster's secrets dir
	secured, err := compose.Build(compose.Options{RunID: "5ec0000d", RunDir: "/run-dir", Binary: "/usr/local/bin/isrlab",
		Coordinators: 1, Brokers: 2, Secured: true})
	if err != nil {
		t.Fatal(err)
	}
	idle := []string{BinaryPath, "cluster", "idle"}
	tests := []struct {
		name  string
		specs []ContainerSpec
	}{
		{"isrlab-3c3b.json", IsrlabSpecs(top, "isrlab-lab:feed", idle, nil)},
		// The brokers' containers get the TLS and secrets dirs read-only.
		{"isrlab-secured-1c2b.json", IsrlabSpecs(secured, "isrlab-lab:feed", idle, nil)},
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

func TestRootfsFiles(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	files, err := rootfsFiles(bin)
	if err != nil {
		t.Fatal(err)
	}
	if files[BinaryPath] != bin {
		t.Fatalf("binary at %s = %q, want %s", BinaryPath, files[BinaryPath], bin)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, lib := range libs {
		found := false
		for p := range files {
			if filepath.Base(p) == lib {
				found = true
			}
		}
		if !found {
			t.Errorf("library %s missing from the image files %v", lib, files)
		}
	}
	var buf bytes.Buffer
	sum1, err := rootfsTar(&buf, files)
	if err != nil {
		t.Fatal(err)
	}
	sum2, err := rootfsTar(io.Discard, files)
	if err != nil || sum1 != sum2 {
		t.Errorf("rootfs tar is not reproducible: %s vs %s (%v)", sum1, sum2, err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	if !names["isrlab"] || !names["tmp/"] {
		t.Errorf("tar lacks isrlab or tmp/: %v", names)
	}
}

func TestRootfsFilesNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := rootfsFiles(p); err == nil {
		t.Fatal("rootfsFiles accepted a shell script")
	}
}
