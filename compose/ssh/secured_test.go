package ssh_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/internal/sshtest"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// securedScenario is scenario with its kill alone, which lasts longer
// than the brokers' coordinator session: leadership moves.
var securedScenario = strings.Replace(scenario, "  - kind: partition\n    topology: follower-leader\n    partition: isrlab/0\n    at: 3s\n    heal.after: 6s\n", "", 1)

// TestCLISecured runs the lab against a secured cluster of the user's
// own (every broker's one listener SASL_SSL with SCRAM-SHA-512, its
// certificates from its own CA), with the client config of the cluster
// file: --plan says how the clients connect, without the password; the
// run's clients (the workload, the observer, the admin client, the
// readiness probe) all get through, the run is valid, and no file of its
// results holds the password, though the cluster file gives it inline;
// the same run without the client config fails at once, saying why; and
// a kind: kafka fault is refused on it.
func TestCLISecured(t *testing.T) {
	if strings.Contains(securedScenario, "kind: partition") {
		t.Fatalf("the scenario still has its partition:\n%s", securedScenario)
	}
	h := sshtest.New(t, "10.227.0.0/24", "c1", "b1", "b2", "b3", "client1")
	cfg, cs, pw := h.SecuredCluster(t)
	// b2's id is left to the metadata, read over SASL_SSL.
	cfg.Nodes[2].ID = 0
	plain := *cfg
	fileCfg := *cfg
	fileCfg.Client = &cs
	inline := cs
	inline.PasswordFile, inline.Password = "", kafkaconfig.Secret(pw)
	cfg.Client = &inline
	hosts, scen, _, results, env := cliFiles(t, cfg, securedScenario)
	fileHosts, _, _, _, _ := cliFiles(t, &fileCfg, "")
	plainHosts, _, _, _, _ := cliFiles(t, &plain, "")
	// The config's YAML hides the password: the file gets it as a user
	// would write it.
	b, _ := os.ReadFile(hosts)
	withPW := strings.Replace(string(b), "sasl.password: '[hidden]'", `sasl.password: "`+pw+`"`, 1)
	if !strings.Contains(withPW, pw) {
		t.Fatalf("the cluster file gives no inline password:\n%s", b)
	}
	if err := os.WriteFile(hosts, []byte(withPW), 0o600); err != nil {
		t.Fatal(err)
	}
	onlySSH(t, h.LabNS)
	_, run := labCLI(t, h, env)

	out, code := run("run", scen, "--hosts", fileHosts, "--plan")
	if code != 0 {
		t.Fatalf("--plan: exit %d:\n%s", code, out)
	}
	outputHas(t, out, "clients connect with SASL_SSL, SCRAM-SHA-512 as user client (password from sasl.password.file "+cs.PasswordFile+")",
		"trusting the CAs in "+cs.CALocation)
	out, code = run("run", scen, "--hosts", hosts, "--plan")
	if code != 0 {
		t.Fatalf("--plan: exit %d:\n%s", code, out)
	}
	outputHas(t, out, "SCRAM-SHA-512 as user client (password inline, [hidden])")
	if strings.Contains(out, pw) {
		t.Errorf("--plan printed the password:\n%s", out)
	}

	out, code = run("run", scen, "--hosts", hosts, "--results", results, "--seed", "3")
	if code != 0 {
		t.Fatalf("run: exit %d:\n%s", code, out)
	}
	outputHas(t, out, "clients connect with SASL_SSL", "expectation (valid): MET")
	leadersMoved(t, latest(t, results), "kill")
	hidden := false
	filepath.WalkDir(results, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			return nil
		}
		if strings.Contains(string(b), pw) {
			t.Errorf("%s holds the password", p)
		}
		hidden = hidden || strings.Contains(string(b), "[hidden]")
		return nil
	})
	if !hidden {
		t.Errorf("no file of the run shows its client config's password as [hidden]")
	}
	if strings.Contains(out, pw) {
		t.Errorf("the run printed the password")
	}

	out, code = run("run", scen, "--hosts", plainHosts, "--results", results, "--seed", "3")
	if code != 254 {
		t.Fatalf("a run without the client config: exit %d, want 254 (its configuration):\n%s", code, out)
	}
	outputHas(t, out, "invalid scenario: cluster lab-", "speaks TLS, and the lab's clients connect without it", "client:")
	t.Logf("without the client config:\n%s", out)

	kafkaFault := filepath.Join(filepath.Dir(scen), "kafka.yaml")
	os.WriteFile(kafkaFault, []byte(strings.Replace(securedScenario, "  - kind: kill\n    nodes: [leader:isrlab/0]\n",
		"  - kind: kafka\n    api: Produce\n    action: drop\n", 1)), 0o644)
	if b, _ := os.ReadFile(kafkaFault); !strings.Contains(string(b), "kind: kafka") {
		t.Fatalf("no kafka fault in:\n%s", b)
	}
	out, code = run("run", kafkaFault, "--hosts", hosts, "--plan")
	if code == 0 {
		t.Fatalf("a kind: kafka fault on a TLS cluster was not refused:\n%s", out)
	}
	outputHas(t, out, "kind: kafka faults need a cluster reached without TLS: the Kafka proxy does not speak TLS (security.protocol SASL_SSL)")
}
