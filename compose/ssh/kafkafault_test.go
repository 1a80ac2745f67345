package ssh_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/sshtest"
)

// kafkaScenario answers a share of the produce requests with
// NOT_LEADER_OR_FOLLOWER for a few seconds: the producer retries, nothing
// is lost or duplicated (idempotence).
const kafkaScenario = `name: ssh/kafka-errors
preset: safe
topic:
  partitions: 1
  replication.factor: 1
workload:
  producers: 1
  consumers: 1
  send.interval: 5ms
  delivery.timeout: 30s
duration: 14s
faults:
  - kind: kafka
    api: Produce
    action: error
    error: NOT_LEADER_OR_FOLLOWER
    probability: 0.3
    at: 3s
    heal.after: 6s
`

// TestCLIKafkaFault: kind: kafka faults reach a cluster of the user's own
// hosts, which the lab cannot put a proxy in front of, through proxies in
// the isrlab process that its clients dial through; the run says so, the
// fault acts on the clients' produce requests, and the verdict holds.
func TestCLIKafkaFault(t *testing.T) {
	h := sshtest.New(t, "10.226.0.0/24", "c1", "b1", "client1")
	hosts, scen, stateDir, results, env := cliFiles(t, h.Cluster(t), kafkaScenario)
	onlySSH(t, h.LabNS)
	_, run := labCLI(t, h, env)

	out, code := run("run", scen, "--hosts", hosts, "--results", results, "--seed", "5")
	if code != 0 {
		t.Fatalf("run: exit %d:\n%s", code, out)
	}
	outputHas(t, out, "kind: kafka faults act on the lab's own client connections", "expectation (valid): MET")
	if strings.Contains(out, "did not reach the connections") {
		t.Errorf("connections bypassed the proxies:\n%s", out)
	}
	ops := readHistory(t, filepath.Join(latest(t, results), "history.jsonl"))
	var acted int64
	for _, op := range ops {
		if op.Process == history.Nemesis && op.Type == history.OK && op.F == "stop-kafka" {
			f, err := history.ParseFault(op.RawValue)
			if err != nil {
				t.Fatal(err)
			}
			acted += f.Acted["b1"]
		}
	}
	if acted == 0 {
		t.Fatalf("the kafka fault acted on no produce request of b1's")
	}
	t.Logf("the fault answered %d produce requests with NOT_LEADER_OR_FOLLOWER", acted)
	if ents, _ := filepath.Glob(filepath.Join(stateDir, "kproxy-*.sock")); len(ents) > 0 {
		t.Errorf("control sockets left: %v", ents)
	}
}
