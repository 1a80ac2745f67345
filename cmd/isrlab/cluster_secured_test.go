package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestClusterUpSecured: cluster up --secured brings a SASL_SSL cluster up
// and writes a client config naming the password file, never the
// password; the admin commands connect with it and fail without it.
func TestClusterUpSecured(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
	bin := proctest.Binary(t)
	name := "sectest-" + strconv.Itoa(os.Getpid()%100000)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	out, err := run("cluster", "up", "--secured", "--name", name, "--coordinators", "1", "--brokers", "1", "--subnet", "10.96.7.0/24")
	t.Cleanup(func() { run("cluster", "down", "--name", name) })
	if err != nil {
		t.Fatalf("cluster up --secured: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`client config:\s+(\S+) \(SASL_SSL, SCRAM-SHA-512 as client; the password stays in (\S+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no client config line in:\n%s", out)
	}
	props, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	pw, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(props), "sasl.password.file="+m[2]) || strings.Contains(string(props), strings.TrimSpace(string(pw))) ||
		strings.Contains(out, strings.TrimSpace(string(pw))) {
		t.Fatalf("the client config must name the password file, and nothing print the password:\n%s", props)
	}
	bootstrap := regexp.MustCompile(`bootstrap servers: (\S+)`).FindStringSubmatch(out)
	if bootstrap == nil {
		t.Fatalf("no bootstrap servers in:\n%s", out)
	}
	if out, err := run("cluster", "exec", "--name", name, "--", bin, "topics", "create", "--bootstrap-server", bootstrap[1],
		"--command-config", m[1], "--topic", "t", "--partitions", "1", "--replication-factor", "1"); err != nil || !strings.Contains(out, "Created topic t.") {
		t.Fatalf("topics create with the client config: %v\n%s", err, out)
	}
	if out, err := run("cluster", "exec", "--name", name, "--", bin, "topics", "describe", "--bootstrap-server", bootstrap[1], "--timeout", "5s"); err == nil || !strings.Contains(out, "TLS") {
		t.Fatalf("a plaintext client was not refused: %v\n%s", err, out)
	}
}
