package lab_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/docker"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// TestSecuredPreset: --preset secured composes with a library scenario
// and keeps its own presets; a secured cluster loads on docker too (on
// ssh it is refused: lab.TestSSHScenario).
func TestSecuredPreset(t *testing.T) {
	sc, err := lab.Resolve("leader-kill")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := sc.WithPresets("secured")
	if err != nil {
		t.Fatal(err)
	}
	if !sec.Cluster.Secured || sec.Topic.Config["min.insync.replicas"] != "2" || strings.Join(sec.Presets, ",") != "safe,secured" {
		t.Fatalf("with secured: secured=%v presets=%v topic config %v", sec.Cluster.Secured, sec.Presets, sec.Topic.Config)
	}
	if _, err := sc.WithPresets("no-such-preset"); err == nil {
		t.Fatal("an unknown preset was accepted")
	}
	sec.Cluster.Backend = "docker"
	if err := sec.Validate(); err != nil {
		t.Fatalf("secured on docker: %v", err)
	}
}

// TestSecuredClientsChecked: a secured scenario naming a client in
// another process loads when its driver names the security feature and
// takes the cluster's mechanism (librdkafka, kafka-python, kafkajs, an
// exec driver of the user's, asked when its run starts).
func TestSecuredClientsChecked(t *testing.T) {
	sc, err := lab.Resolve("leader-kill")
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = sc.WithPresets("secured", "retries-no-idempotence"); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []workloads.ClientSpec{{Client: "exec", Exec: []string{"./driver"}}, {Client: clients.KafkaPython}, {Client: clients.Librdkafka}} {
		t.Run(spec.Client, func(t *testing.T) {
			if spec.Client != "exec" {
				if _, missing := clients.PythonVersion(spec.Client); missing != "" {
					t.Skipf("client %s needs %s", spec.Client, missing)
				}
			}
			s := sc
			s.Workload.ClientSpec = spec
			if err := s.Validate(); err != nil {
				t.Fatalf("%s, secured: %v", spec.Client, err)
			}
		})
	}
}

// TestRunSecured runs leader-kill with the secured preset on the netns
// backend end to end, with the clients' SCRAM password changed for 3 s
// first (scram-password), then b1's certificate rotated to an untrusted
// CA (ca-rotation) and b3's expired (cert-expiry) for 1.5 s: the
// history is valid, the expectation met, the faults
// went in and were healed, the brokers served SASL_SSL
// only, and no password the run made appears in any file of the run
// directory; the passwords are gone after the run.
func TestRunSecured(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	sc := leaderKillWith(t, "secured")
	sc.Duration, sc.Seed = 15*time.Second, 11
	sc.Faults = append(sc.Faults, lab.Fault{At: 2 * time.Second, HealAfter: 3 * time.Second, Spec: nemesis.Spec{Fault: &nemesis.ScramPassword{}}})
	// Both certificate faults end before leader-kill's kill at 8 s, which
	// may hit any broker. b3's certificate expires (and is renewed by the
	// heal): connections already open go on.
	expiry := &nemesis.CertExpiry{}
	expiry.Nodes = []string{"b3"}
	sc.Faults = append(sc.Faults, lab.Fault{At: 5400 * time.Millisecond, HealAfter: 1500 * time.Millisecond, Spec: nemesis.Spec{Fault: expiry}})
	// b1's certificate is rotated to a CA nobody trusts, and back.
	rotation := &nemesis.CARotation{}
	rotation.Nodes = []string{"b1"}
	sc.Faults = append(sc.Faults, lab.Fault{At: 5200 * time.Millisecond, HealAfter: 1500 * time.Millisecond, Spec: nemesis.Spec{Fault: rotation}})
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	runID := compose.NewRunID()
	secretsDir := filepath.Join(compose.StateDir(), "secrets-"+runID)

	// The passwords exist only while the cluster runs: collect them as
	// they appear.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	passwords := watchSecrets(ctx, runID)
	var out strings.Builder
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out, RunID: runID})
	secrets := passwords()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if res.Verdict.Valid != checker.Valid || res.Judgement.Outcome != lab.Met {
		t.Fatalf("verdict %v, anomalies %v, outcome %v", res.Verdict.Valid, res.Verdict.Anomalies, res.Judgement)
	}
	if len(secrets) != 2 || secrets["admin"] == "" || secrets["client"] == "" {
		t.Fatalf("did not see the run's passwords: %v", slicesOf(secrets))
	}
	hist, err := os.ReadFile(filepath.Join(res.Dir, results.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"start-scram-password", "stop-scram-password", "start-cert-expiry", "stop-cert-expiry", "start-ca-rotation", "stop-ca-rotation"} {
		if !strings.Contains(string(hist), `"type":"ok","f":"`+op+`"`) {
			t.Errorf("the history has no ok %s op", op)
		}
	}
	props, err := os.ReadFile(filepath.Join(res.Dir, "nodes", "b1", "server.properties"))
	if err != nil || !strings.Contains(string(props), "listeners=SASL_SSL://") || strings.Contains(string(props), "PLAINTEXT://") {
		t.Fatalf("b1's config does not serve SASL_SSL only: %s %v", props, err)
	}
	if _, err := os.Stat(filepath.Join(res.Dir, "nodes", "tls", "ca.pem")); err != nil {
		t.Errorf("the run's CA is not in its directory: %v", err)
	}
	checkNoSecrets(t, res.Dir, secrets)
	if _, err := os.Stat(secretsDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the secrets outlived the run: %s (%v)", secretsDir, err)
	}
	if l := leftovers(t, res.RunID); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestRunSecuredDocker runs a short log workload on a secured cluster
// on the docker backend: the history is valid and the brokers served
// SASL_SSL only, no file of the results holds a password the run made,
// and the secrets and containers are gone after the run.
func TestRunSecuredDocker(t *testing.T) {
	needRoot(t)
	cli, err := docker.Connect(context.Background())
	if err != nil {
		t.Skipf("no Docker daemon (install docker.io and start dockerd; make deps does): %v", err)
	}
	defer cli.Close()
	bin := proctest.Binary(t)
	sc := leaderKillWith(t, "secured")
	sc.Cluster.Backend = compose.Docker
	sc.Cluster.Coordinators, sc.Cluster.Brokers = 1, 3
	sc.Duration, sc.Seed, sc.Faults = 5*time.Second, 13, nil
	res, hist, passwords := runSecuredValid(t, sc, bin)
	if sends := strings.Count(string(hist), `"type":"ok","f":"send"`); sends == 0 {
		t.Fatal("no send acknowledged on SASL_SSL")
	}
	props, err := os.ReadFile(filepath.Join(res.Dir, "nodes", "b1", "server.properties"))
	if err != nil || !strings.Contains(string(props), "listeners=SASL_SSL://") || strings.Contains(string(props), "PLAINTEXT://") {
		t.Fatalf("b1's config does not serve SASL_SSL only: %s %v", props, err)
	}
	if passwords["admin"] == "" || passwords["client"] == "" {
		t.Fatalf("did not see the run's passwords: %v", slicesOf(passwords))
	}
	checkNoSecrets(t, res.Dir, passwords)
	if _, err := os.Stat(filepath.Join(compose.StateDir(), "secrets-"+res.RunID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the secrets outlived the run: %v", err)
	}
	ctrs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelRun+"="+res.RunID))})
	if err != nil || len(ctrs) > 0 {
		t.Errorf("containers left behind: %d %v", len(ctrs), err)
	}
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestRunSecuredClients: the clients other than franz-go reach a secured
// cluster and run the log workload through it: writes acknowledged and
// read back, the history valid. sarama and kafka-go (which has no
// idempotent producer) in the lab's process, TLS in its dialer and
// SCRAM-SHA-512 in the driver; librdkafka, kafka-python (no idempotent
// producer either), kafkajs and the reference exec driver (franz-go in a
// process of its own) in other processes, doing TLS and SASL themselves
// with the security settings of their hello (docs/client-protocol.md):
// no file of their runs' directories holds the client password the hello
// gave them. librdkafka before 2.6.1 (Debian's is 2.0.2) sends its own
// SCRAM nonce once more in front, which the broker accepts as Kafka
// does. The Python and JavaScript drivers skip where their library is
// missing.
func TestRunSecuredClients(t *testing.T) {
	needRoot(t)
	bin := proctest.Binary(t)
	for _, tc := range []struct {
		spec    workloads.ClientSpec
		presets []string
	}{
		{workloads.ClientSpec{Client: "sarama"}, []string{"secured"}},
		{workloads.ClientSpec{Client: "kafka-go"}, []string{"secured", "retries-no-idempotence"}},
		{workloads.ClientSpec{Client: clients.Librdkafka}, []string{"secured"}},
		{workloads.ClientSpec{Client: clients.KafkaPython}, []string{"secured", "retries-no-idempotence"}},
		{workloads.ClientSpec{Client: clients.Kafkajs}, []string{"secured"}},
		{workloads.ClientSpec{Client: "exec", Exec: []string{proctest.Build(t, "./examples/exec-driver")}}, []string{"secured"}},
	} {
		client := tc.spec.Client
		t.Run(client, func(t *testing.T) {
			switch client {
			case clients.Kafkajs:
				mods, _ := filepath.Abs("../compat/js/node_modules")
				if _, err := os.Stat(filepath.Join(mods, "kafkajs")); err != nil {
					t.Skipf("kafkajs is not in %s (no Debian package; npm ci in compat/js by hand to run this part)", mods)
				}
				t.Setenv("NODE_PATH", mods)
				fallthrough
			case clients.Librdkafka, clients.KafkaPython:
				if _, missing := clients.PythonVersion(client); missing != "" {
					t.Skipf("client %s needs %s", client, missing)
				}
			}
			sc := leaderKillWith(t, tc.presets...)
			sc.Duration, sc.Seed, sc.Faults = 8*time.Second, 12, nil
			sc.Workload.ClientSpec = tc.spec
			res, hist, passwords := runSecuredValid(t, sc, bin)
			sends, polls := strings.Count(string(hist), `"type":"ok","f":"send"`), strings.Count(string(hist), `"type":"ok","f":"poll"`)
			if sends < 100 || polls == 0 {
				t.Fatalf("%d sends and %d polls acknowledged through %s on SASL_SSL", sends, polls, client)
			}
			t.Logf("%s: %d sends and %d polls acknowledged on SASL_SSL", client, sends, polls)
			if passwords["client"] == "" {
				t.Fatal("did not see the run's client password")
			}
			checkNoSecrets(t, res.Dir, passwords)
		})
	}
}

// leaderKillWith is the library's leader-kill with presets.
func leaderKillWith(t *testing.T, presets ...string) lab.Scenario {
	t.Helper()
	sc, err := lab.Resolve("leader-kill")
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = sc.WithPresets(presets...); err != nil {
		t.Fatal(err)
	}
	return sc
}

// runSecuredValid runs sc, a secured scenario, expecting a valid
// history, and returns its result, its history and the passwords the
// run made (watchSecrets).
func runSecuredValid(t *testing.T, sc lab.Scenario, bin string) (lab.Result, []byte, map[string]string) {
	t.Helper()
	sc.Expect = lab.Expect{Valid: "true"}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runID := compose.NewRunID()
	secrets := watchSecrets(ctx, runID)
	var out strings.Builder
	res, err := lab.Run(ctx, sc, lab.Options{ResultsDir: t.TempDir(), Binary: bin, Out: &out, RunID: runID})
	passwords := secrets()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if res.Verdict.Valid != checker.Valid || res.Judgement.Outcome != lab.Met {
		t.Fatalf("verdict %v, anomalies %v, outcome %v\n%s", res.Verdict.Valid, res.Verdict.Anomalies, res.Judgement, out.String())
	}
	hist, err := os.ReadFile(filepath.Join(res.Dir, results.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	return res, hist, passwords
}

// watchSecrets collects the passwords of run runID's secured cluster
// while they exist (its secrets directory goes with the cluster): by
// user, admin and client. The function it returns stops watching and
// returns them.
func watchSecrets(ctx context.Context, runID string) func() map[string]string {
	secretsDir := filepath.Join(compose.StateDir(), "secrets-"+runID)
	secrets := map[string]string{}
	var mu sync.Mutex
	watch, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watch.Err() == nil {
			if b, err := os.ReadFile(filepath.Join(secretsDir, "broker.properties")); err == nil {
				mu.Lock()
				secrets["admin"] = strings.TrimSpace(strings.TrimPrefix(string(b), "admin.password="))
				mu.Unlock()
			}
			if b, err := os.ReadFile(filepath.Join(secretsDir, "client.password")); err == nil {
				mu.Lock()
				secrets["client"] = strings.TrimSpace(string(b))
				mu.Unlock()
			}
			select {
			case <-watch.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() map[string]string {
		stop()
		wg.Wait()
		return secrets
	}
}

// checkNoSecrets fails t if a file under dir holds one of the passwords.
func checkNoSecrets(t *testing.T, dir string, passwords map[string]string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for user, pw := range passwords {
			if pw != "" && strings.Contains(string(b), pw) {
				t.Errorf("%s holds the password of %s", p, user)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
