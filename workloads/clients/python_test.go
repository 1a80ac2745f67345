package clients

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/workloads"
)

// needPython skips t when the system python3 cannot run name's driver
// (scripts/deps.sh installs what it needs) and returns the client the
// driver names.
func needPython(t *testing.T, name string) string {
	t.Helper()
	v, missing := PythonVersion(name)
	if missing != "" {
		t.Skipf("client %s needs %s", name, missing)
	}
	return v
}

// TestPythonOutcome runs the Python drivers' own table tests
// (python/test_outcomes.py): each client's errors map to ok, fail and info
// as docs/clients-under-faults.md says, and each driver refuses in its
// hello what its client cannot do.
func TestPythonOutcome(t *testing.T) {
	if _, err := os.Stat(SystemPython); err != nil {
		t.Skipf("needs %s (Debian python3)", SystemPython)
	}
	cmd := exec.Command(SystemPython, append(slices.Clone(pythonFlags), "-m", "unittest", "-v", "test_outcomes")...)
	cmd.Dir = "python"
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python3 -m unittest test_outcomes: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Skip("a client's module is missing (see the log): install python3-confluent-kafka and python3-kafka (scripts/deps.sh)")
	}
}

// TestPythonCheck: a scenario naming a Python client is checked when it
// loads, by the driver itself: what the client refuses, and a missing
// interpreter or module, are errors naming the client and the Debian
// package; kafka-python's lack of an idempotent producer is known without
// running it.
func TestPythonCheck(t *testing.T) {
	base := workloads.Config{Topic: "t", Partitions: 1}
	err := Check(workloads.ClientSpec{Client: KafkaPython}, "", workloads.Config{Idempotent: true})
	var ce *workloads.CapabilityError
	if !errors.As(err, &ce) || err.Error() != "client kafka-python: kafka-python has no idempotent producer (enable.idempotence)" {
		t.Errorf("kafka-python, idempotent: %v", err)
	}

	// No interpreter: the error says what to install.
	old := SystemPython
	SystemPython = "/nonexistent/python3"
	err = Check(workloads.ClientSpec{Client: Librdkafka}, "", base)
	SystemPython = old
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "client librdkafka: /nonexistent/python3: no such file or directory: install Debian packages python3 and python3-confluent-kafka") {
		t.Errorf("no python3: %v", err)
	}

	needPython(t, Librdkafka)
	needPython(t, KafkaPython)
	for _, tc := range []struct {
		spec workloads.ClientSpec
		cfg  workloads.Config
		want string
		kind string
	}{
		{workloads.ClientSpec{Client: Librdkafka}, base, "", "queue"},
		{workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"auto.commit.interval.ms": "100"}}, base, "client librdkafka: client.config.auto.commit.interval.ms: set by the driver", "queue"},
		{workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"session.timeout.ms": "soon"}}, base, "client librdkafka: librdkafka refuses the configuration", "queue"},
		{workloads.ClientSpec{Client: Librdkafka}, base, "", ""},
		{workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"compression.type": "zstd", "message.send.max.retries": "3"}}, base, "", ""},
		{workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"linger.msx": "5"}}, base, `client librdkafka: librdkafka refuses the configuration: No such configuration property: "linger.msx"`, ""},
		{workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"group.id": "g"}}, base, "client librdkafka: client.config.group.id: set by the driver", ""},
		{workloads.ClientSpec{Client: KafkaPython}, base, "", ""},
		{workloads.ClientSpec{Client: KafkaPython}, base, "", "queue"},
		{workloads.ClientSpec{Client: KafkaPython, Config: map[string]string{"session_timeout_ms": "6000"}}, base, "", "queue"},
		{workloads.ClientSpec{Client: KafkaPython, Config: map[string]string{"auto_commit_interval_ms": "100"}}, base, "client kafka-python: client.config.auto_commit_interval_ms: set by the driver", "queue"},
		{workloads.ClientSpec{Client: KafkaPython, Config: map[string]string{"linger_ms": "5", "api_version": "2.1.0"}}, base, "", ""},
		{workloads.ClientSpec{Client: KafkaPython, Config: map[string]string{"linger.ms": "5"}}, base, "client kafka-python: client.config.linger.ms: neither KafkaProducer nor KafkaConsumer has linger.ms", ""},
	} {
		err := Check(tc.spec, tc.kind, tc.cfg)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %v: %v, want %q", tc.spec.Client, tc.spec.Config, err, tc.want)
		}
	}

	// A module the interpreter cannot import: the driver's refusal names
	// the package. An interpreter without Debian's dist-packages stands in.
	dir := t.TempDir()
	fake := dir + "/python3"
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec "+old+" -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	SystemPython = fake
	defer func() { SystemPython = old }()
	err = Check(workloads.ClientSpec{Client: KafkaPython}, "", base)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "client kafka-python: kafka-python is not installed for") || !strings.Contains(err.Error(), "(Debian package python3-kafka): No module named 'kafka'") {
		t.Errorf("no kafka module: %v", err)
	}
}

// A run that died left its drivers' directory: isrlab clean removes it
// unless the run is still alive, and leaves other files alone.
func TestCleanStaleDrivers(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead, err := writePythonDrivers("deadbeef")
	if err != nil {
		t.Fatal(err)
	}
	live, err := writePythonDrivers("cafe0001")
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "isrlab-other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanStaleDrivers(func(run string) bool { return run == "cafe0001" })
	if err != nil || len(removed) != 1 || removed[0] != dead {
		t.Fatalf("removed %v, %v; want %s only", removed, err, dead)
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead run's drivers are still there: %v", err)
	}
}

// TestKafkajsCheck: the kafkajs driver is checked when a scenario loads,
// by the driver itself under Debian's node: without kafkajs where
// NODE_PATH points it refuses, naming what to install and where; with
// it, it names its client, refuses a linger it does not have, and
// takes the queue and txn workloads (its hello names the "queue" and
// "txn" features).
func TestKafkajsCheck(t *testing.T) {
	if _, err := os.Stat(SystemNode); err != nil {
		t.Skipf("needs %s (Debian nodejs)", SystemNode)
	}
	base := workloads.Config{Topic: "t", Partitions: 1}
	t.Setenv("NODE_PATH", t.TempDir())
	err := Check(workloads.ClientSpec{Client: Kafkajs}, "", base)
	var ce *workloads.CapabilityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not a Debian package; point NODE_PATH at a node_modules holding it") {
		t.Fatalf("no kafkajs: %v", err)
	}
	mods, _ := filepath.Abs("../../compat/js/node_modules")
	if _, err := os.Stat(filepath.Join(mods, "kafkajs")); err != nil {
		t.Skipf("kafkajs is not in %s (no Debian package; npm ci in compat/js by hand to run this part)", mods)
	}
	t.Setenv("NODE_PATH", mods)
	if err := Check(workloads.ClientSpec{Client: Kafkajs}, "", base); err != nil {
		t.Fatalf("kafkajs present: %v", err)
	}
	if v, missing := PythonVersion(Kafkajs); missing != "" || !strings.HasPrefix(v, "kafkajs 2.") {
		t.Errorf("kafkajs names itself %q (missing %q)", v, missing)
	}
	lingered := base
	lingered.Linger = 5 * time.Millisecond
	if err := Check(workloads.ClientSpec{Client: Kafkajs}, "", lingered); !errors.As(err, &ce) || !strings.Contains(err.Error(), "kafkajs has no linger") {
		t.Errorf("kafkajs with linger: %v", err)
	}
	if err := Check(workloads.ClientSpec{Client: Kafkajs}, "queue", base); err != nil {
		t.Errorf("kafkajs, queue: %v", err)
	}
	txn := base
	txn.TransactionTimeout = 15 * time.Second
	if err := Check(workloads.ClientSpec{Client: Kafkajs}, "txn", txn); err != nil {
		t.Errorf("kafkajs, txn: %v", err)
	}
}
