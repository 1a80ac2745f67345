package lab

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/scripttest"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/workloads/clients"
)

// TestLibrary loads every library scenario: each has its name as its path,
// a description and an expectation, and every fault target exists.
func TestLibrary(t *testing.T) {
	ents, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) < 20 {
		t.Errorf("the library has %d scenarios, want the seed scenarios (>= 20)", len(ents))
	}
	for _, e := range ents {
		if e.Scenario.Name != e.Name {
			t.Errorf("%s: name %q does not match its path", e.Name, e.Scenario.Name)
		}
		if e.Description == "" {
			t.Errorf("%s: no description", e.Name)
		}
		if _, err := e.Scenario.ScheduleEvents(); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
	}
	// The files on disk are the embedded ones, and load by path too.
	files, _ := filepath.Glob("../scenarios/*/*.yaml")
	more, _ := filepath.Glob("../scenarios/*.yaml")
	for _, f := range append(files, more...) {
		if strings.Contains(f, "/presets/") || strings.Contains(f, "/matrices/") {
			continue
		}
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	def := Default()
	if def.Name != DefaultName || len(def.Faults) != 1 || def.Topic.Config["min.insync.replicas"] != "2" || def.Workload.Acks != "all" {
		t.Errorf("default scenario: %+v", def)
	}
}

// TestPresets applies every preset to a scenario and checks what it sets.
func TestPresets(t *testing.T) {
	ps := Presets()
	for _, want := range []string{"acks0", "acks1", "acks-all", "acks-all-unclean", "safe", "paranoid",
		"flush-every-message", "kafka-0.10", "kafka-2.4", "kafka-2.6", "kafka-3.7", "kafka-4.0"} {
		sc, err := Parse("x.yaml", "x", []byte("preset: "+want+"\n"))
		if err != nil {
			t.Errorf("preset %s: %v", want, err)
			continue
		}
		switch want {
		case "safe":
			if sc.Workload.Acks != "all" || sc.Topic.Config["min.insync.replicas"] != "2" || sc.Expect.valid() != "true" {
				t.Errorf("safe: %+v", sc)
			}
		case "paranoid":
			if sc.Cluster.Brokers != 5 || sc.Topic.ReplicationFactor != 5 || sc.Topic.Config["min.insync.replicas"] != "3" {
				t.Errorf("paranoid: %+v", sc)
			}
		case "acks1":
			if sc.Workload.Acks != "1" || sc.Workload.Idempotent || sc.Expect.valid() != "any" {
				t.Errorf("acks1: %+v", sc)
			}
		case "kafka-0.10":
			if sc.Cluster.Config["kafka.profile"] != "0.10" {
				t.Errorf("kafka-0.10: %+v", sc.Cluster.Config)
			}
		}
	}
	if len(ps) < 11 {
		t.Errorf("presets: %v", ps)
	}
	// The scenario's keys win over the preset's, maps merge, and the
	// expectation is replaced whole.
	sc, err := Parse("x.yaml", "x", []byte(`preset: [safe, kafka-2.4]
topic:
  config:
    min.insync.replicas: "1"
workload:
  acks: "1"
  enable.idempotence: false
expect:
  anomalies:
    lost-write: ">0"
`))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Topic.Config["min.insync.replicas"] != "1" || sc.Topic.Config["unclean.leader.election.enable"] != "false" ||
		sc.Cluster.Config["kafka.profile"] != "2.4" || sc.Workload.Acks != "1" || sc.Expect.Valid != "" || len(sc.Expect.Anomalies) != 1 {
		t.Errorf("merged: topic %v cluster %v acks %s expect %+v", sc.Topic.Config, sc.Cluster.Config, sc.Workload.Acks, sc.Expect)
	}
}

// TestBadScenarios: every broken file gets an error naming the file, the
// line and the field.
func TestBadScenarios(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown-key", "name: x\nbogus: 1\n", "x.yaml:2: field bogus not found"},
		{"config-typo", "cluster:\n  config:\n    min.insync.replica: \"2\"\n", "x.yaml:3: cluster.config.min.insync.replica: unknown broker config key (did you mean min.insync.replicas?)"},
		{"topic-typo", "topic:\n  config:\n    unclean.leader.election: \"true\"\n", "x.yaml:3: topic.config.unclean.leader.election: unknown topic config key (did you mean unclean.leader.election.enable?)"},
		{"config-value", "cluster:\n  config:\n    kafka.profile: \"9.9\"\n", "x.yaml:3: cluster.config.kafka.profile"},
		{"bad-kind", "faults:\n  - kind: explode\n    nodes: [b1]\n", "x.yaml:2: fault: bad fault: unknown kind \"explode\""},
		{"no-kind", "faults:\n  - nodes: [b1]\n", "x.yaml:2: fault: bad fault: a fault needs a kind"},
		{"unknown-field", "faults:\n  - kind: kill\n    nodes: [b1]\n    target: b2\n", "x.yaml:2: fault: bad fault: kill: unknown field \"target\""},
		{"runtime-field", "faults:\n  - kind: kill\n    nodes: [b1]\n    resolved: [b2]\n", "field \"resolved\" is set by the fault when it fires"},
		{"no-such-broker", "cluster:\n  brokers: 3\nfaults:\n  - kind: kill\n    nodes: [b9]\n", "x.yaml:4: faults.0: kill: target b9: the cluster has c1..c3, b1..b3 and client1"},
		{"no-such-partition", "topic:\n  partitions: 3\nfaults:\n  - kind: pause\n    nodes: [leader:isrlab/7]\n", "x.yaml:4: faults.0: pause: target leader:isrlab/7: topic isrlab has partitions 0..2"},
		{"other-topic", "faults:\n  - kind: pause\n    nodes: [leader:other/0]\n", "the scenario's topic is isrlab"},
		{"seed-partition", "faults:\n  - kind: partition\n    topology: leader-coordinators\n    partition: isrlab/5\n", "topic isrlab has partitions 0..2"},
		{"bad-target", "faults:\n  - kind: kill\n    nodes: [leader:isrlab]\n", "x.yaml:2: fault: kill: bad fault: \"isrlab\" is not topic/partition"},
		{"negative-at", "faults:\n  - kind: kill\n    nodes: [b1]\n    at: -5s\n", "x.yaml:4: faults.0.at: -5s is outside the 30s run"},
		{"late-fault", "duration: 5s\nfaults:\n  - kind: kill\n    nodes: [b1]\n    at: 10s\n", "x.yaml:5: faults.0.at: 10s is outside the 5s run"},
		{"negative-heal", "faults:\n  - kind: kill\n    nodes: [b1]\n    heal.after: -1s\n", "faults.0.heal.after: -1s is negative"},
		{"number-at", "faults:\n  - kind: kill\n    nodes: [b1]\n    at: 5\n", "x.yaml:2: fault: at: 5 is not a duration like 8s"},
		{"negative-duration", "duration: -1s\n", "x.yaml:1: duration: -1s is negative"},
		{"rf", "cluster:\n  brokers: 1\ntopic:\n  replication.factor: 3\n", "x.yaml:4: topic.replication.factor: 3 with 1 brokers"},
		{"replicas missing a partition", "topic:\n  partitions: 2\n  replicas: {0: [1, 2, 3]}\n", "topic.replicas: partition 1 has no replicas"},
		{"replicas short", "topic:\n  partitions: 1\n  replicas: {0: [1, 2]}\n", "topic.replicas: partition 0: 2 replicas, replication.factor is 3"},
		{"replicas unknown broker", "topic:\n  partitions: 1\n  replicas: {0: [1, 2, 4]}\n", "topic.replicas: partition 0: broker 4: the brokers are 1..3"},
		{"replicas twice", "topic:\n  partitions: 1\n  replicas: {0: [1, 2, 1]}\n", "topic.replicas: partition 0: broker 1 twice"},
		{"replicas beyond", "topic:\n  partitions: 1\n  replicas: {0: [1, 2, 3], 1: [1, 2, 3]}\n", "topic.replicas: partition 1: the topic has partitions 0..0"},
		{"leader unknown", "topic:\n  leader: controller\n", `topic.leader: "controller": the one placement is transaction-coordinator`},
		{"leader and replicas", "topic:\n  partitions: 1\n  replicas: {0: [1, 2, 3]}\n  leader: transaction-coordinator\n", "topic.leader: transaction-coordinator and topic.replicas: give one placement"},
		{"leader without txn", "topic:\n  leader: transaction-coordinator\n", "topic.leader: transaction-coordinator needs workload type txn"},
		{"kafka-fault-docker-exec", "cluster:\n  backend: docker\nworkload:\n  client: kafka-python\nfaults:\n  - kind: kafka\n    api: Produce\n    action: drop\n", "workload.client: kafka-python: kind: kafka faults on backend docker act on the clients in isrlab's own process"},
		{"kafka-fault-secured", "cluster:\n  secured: true\nfaults:\n  - kind: kafka\n    api: Produce\n    action: drop\n", "kind: kafka faults need a plaintext cluster"},
		{"kafka-fault-bad-api", "faults:\n  - kind: kafka\n    api: Produse\n    action: drop\n", "x.yaml:2: fault: kafka: bad fault: api: unknown Kafka API \"Produse\""},
		{"kafka-fault-no-delay", "faults:\n  - kind: kafka\n    api: Fetch\n    action: delay\n", "x.yaml:2: fault: kafka: bad fault: delay: required (> 0) for action delay"},
		{"leader many coordinators", "topic:\n  leader: transaction-coordinator\nworkload:\n  type: txn\n", `topic.leader: transaction-coordinator needs cluster.config transaction.state.log.num.partitions: "1"`},
		{"bad-preset", "preset: safest\n", "x.yaml:1: preset: no preset \"safest\""},
		{"bad-anomaly", "expect:\n  anomalies:\n    lost-writes: 0\n", "unknown anomaly \"lost-writes\""},
		{"bad-cond", "expect:\n  anomalies:\n    lost-write: lots\n", "x.yaml:3: \"lots\": want a number or duration"},
		{"bad-valid", "expect:\n  valid: maybe\n", "x.yaml:2: expect.valid: \"maybe\": use true, false or any"},
		{"bad-disk", "cluster:\n  disk: [b7]\n", "x.yaml:2: cluster.disk: entry 1: \"b7\""},
		{"bad-schedule", "schedule:\n  type: every\n  interval: 5s\n  hold: 9s\n  mix:\n    - weight: 1\n      fault: {kind: kill, nodes: [random-broker]}\n", "x.yaml:1: schedule: bad fault: hold 9s must be in (0, interval 5s]"},
		{"schedule-field", "schedule:\n  type: every\n  intervl: 5s\n", "x.yaml:2: schedule: unknown field \"intervl\""},
		{"schedule-target", "schedule:\n  type: once\n  at: 1s\n  fault: {kind: kill, nodes: [b4]}\n", "schedule: kill: target b4"},
		{"bad-workload", "workload:\n  type: stream\n", "x.yaml:2: workload.type: \"stream\": use log, queue, rate or txn"},
		{"when-unknown-key", "faults:\n  - kind: kill\n    nodes: [b1]\n    when: {partition: isrlab/0, isr-sise: 1}\n", "x.yaml:2: fault: when: unknown field \"isr-sise\""},
		{"when-no-partition", "faults:\n  - kind: kill\n    nodes: [b1]\n    when: {isr-size: 1}\n", "x.yaml:4: faults.0.when: bad fault: when: isr-size, in-isr, not-in-isr and leader-changed need a partition"},
		{"when-bad-partition", "faults:\n  - kind: kill\n    nodes: [b1]\n    when: {partition: isrlab/9, isr-size: 1}\n", "faults.0.when: target leader:isrlab/9: topic isrlab has partitions 0..2"},
		{"when-unknown-name", "faults:\n  - kind: kill\n    nodes: [b1]\n    when: {after: cut}\n", "no fault is named \"cut\" (give the fault a name:)"},
		{"when-bad-target", "faults:\n  - kind: kill\n    nodes: [b1]\n    when: {partition: isrlab/0, not-in-isr: b7}\n", "faults.0.when: target b7: the cluster has"},
		{"when-within", "duration: 20s\nfaults:\n  - kind: kill\n    nodes: [b1]\n    at: 10s\n    when: {after: x, within: 15s}\n  - {name: x, kind: pause, nodes: [b2]}\n", "faults.0.when.within: at 10s + within 15s ends after the 20s run"},
		{"two-names", "faults:\n  - {name: x, kind: pause, nodes: [b2]}\n  - {name: x, kind: kill, nodes: [b1]}\n", "faults.1.name: \"x\" names two faults"},
		{"bad-name", "faults:\n  - {name: a b, kind: pause, nodes: [b2]}\n", "x.yaml:2: fault: name a b: a word without spaces"},
		{"bad-client", "workload:\n  client: kafka-js\n", "x.yaml:2: workload.client: client \"kafka-js\": use franz-go, sarama, kafka-go, librdkafka, kafka-python, kafkajs or exec"},
		{"kafka-go-idempotent", "workload:\n  client: kafka-go\n  enable.idempotence: true\n", "x.yaml:2: workload.client: client kafka-go: kafka-go has no idempotent producer (enable.idempotence)"},
		{"client-txn-kafka-go", "workload:\n  type: txn\n  client: kafka-go\n", "x.yaml:3: workload.client: client kafka-go: the txn workload runs on franz-go and sarama only, and out of process on librdkafka, kafkajs and exec drivers"},
		{"exec-queue-no-command", "workload:\n  type: queue\n  client: exec\n", "x.yaml:3: workload.client: client exec: exec: give the driver's command"},
		{"sarama-queue-old", "workload:\n  type: queue\n  client: sarama\n  client.config: {Version: 0.10.1.0}\n", "client sarama: consumer groups (the queue workload) need Version 0.10.2 or later"},
		{"sarama-queue-auto-commit-setting", "workload:\n  type: queue\n  client: sarama\n  client.config: {Consumer.Offsets.AutoCommit.Enable: false}\n", "client.config.Consumer.Offsets.AutoCommit.Enable: set by the driver (Consumer.Offsets.AutoCommit)"},
		{"client-txn", "workload:\n  type: txn\n  client: kafka-python\n", "x.yaml:3: workload.client: client kafka-python: kafka-python has no transactional producer (KafkaProducer takes no transactional_id); it runs the log workload"},
		{"exec-txn-group", "workload:\n  type: txn\n  client: exec\n  exec: [drv]\n  txn.group.id: etl\n", "client exec: txn.group.id (reading in a consumer group, its offsets committed in the transaction) runs on franz-go only"},
		{"client-subscribe", "workload:\n  client: exec\n  exec: [drv]\n  subscribe: true\n", "client exec: subscribe (consumer groups) runs on franz-go only"},
		{"exec-no-command", "workload:\n  client: exec\n", "x.yaml:2: workload.client: client exec: exec: give the driver's command"},
		{"exec-other-client", "workload:\n  client: sarama\n  exec: [drv]\n", "client sarama: exec is the command of client exec"},
		{"sarama-old-idempotent", "workload:\n  client: sarama\n  enable.idempotence: true\n  client.config: {Version: 0.10.2.0}\n", "client sarama: Idempotent producer requires Version >= V0_11_0_0"},
		{"sarama-idempotent-in-flight", "workload:\n  client: sarama\n  enable.idempotence: true\n  max.in.flight.requests.per.connection: 5\n", "client sarama: Idempotent producer requires Net.MaxOpenRequests to be 1"},
		{"sarama-unknown-setting", "workload:\n  client: sarama\n  client.config: {Net.MaxOpenRequest: 1}\n", "client sarama: client.config.Net.MaxOpenRequest: sarama.Config has no Net.MaxOpenRequest (did you mean MaxOpenRequests?)"},
		{"sarama-bad-value", "workload:\n  client: sarama\n  client.config: {Producer.Retry.Backoff: 100}\n", "client.config.Producer.Retry.Backoff: \"100\" is not a duration like 100ms"},
		{"kafka-python-idempotent", "workload:\n  client: kafka-python\n  enable.idempotence: true\n", "x.yaml:2: workload.client: client kafka-python: kafka-python has no idempotent producer (enable.idempotence)"},
		{"librdkafka-subscribe", "workload:\n  client: librdkafka\n  subscribe: true\n", "x.yaml:2: workload.client: client librdkafka: subscribe (consumer groups) runs on franz-go only"},
		{"python-exec", "workload:\n  client: kafka-python\n  exec: [drv]\n", "client kafka-python: exec is the command of client exec"},
		{"sarama-driver-setting", "workload:\n  client: sarama\n  client.config: {Producer.Return.Successes: false}\n", "client.config.Producer.Return.Successes: set by the driver"},
		{"franz-go-client-config", "workload:\n  client.config: {ProducerLinger: 5ms}\n", "client franz-go: client.config.ProducerLinger: franz-go takes the workload's Kafka-named keys"},
		{"group-protocol-on-log", "workload:\n  client.config: {group.protocol: consumer}\n", "client franz-go: client.config.group.protocol: franz-go takes"},
		{"group-protocol-unknown", "workload:\n  type: queue\n  client.config: {group.protocol: eager}\n", `client franz-go: client.config: group.protocol "eager": use classic or consumer`},
		{"remote-assignor-classic", "workload:\n  type: queue\n  client.config: {group.remote.assignor: range}\n", "client franz-go: client.config: group.remote.assignor range needs group.protocol consumer"},
		{"not-yaml", "name: [\n", "x.yaml:"},
		{"not-a-map", "- 1\n", "x.yaml:1: a scenario is a mapping"},
	} {
		_, err := Parse("x.yaml", "x", []byte(tc.body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Resolve("no/such/scenario"); !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), "isrlab scenarios lists them") {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Resolve("presets/safe"); !errors.Is(err, ErrScenario) {
		t.Errorf("a preset is not a scenario: %v", err)
	}
}

// pythonMissing says what the Python clients' drivers need and this
// machine lacks ("" when both can run): scenarios naming them are refused
// when they load without it.
func pythonMissing() string {
	for _, name := range []string{clients.Librdkafka, clients.KafkaPython} {
		if _, missing := clients.PythonVersion(name); missing != "" {
			return "client " + name + " needs " + missing + " (scripts/deps.sh clients installs it)"
		}
	}
	return ""
}

// TestPythonClientScenarios: a scenario naming a Python client is checked
// by its driver when it loads (the client's own configuration check), with
// the error on the client's line; one the client can run loads.
func TestPythonClientScenarios(t *testing.T) {
	if missing := pythonMissing(); missing != "" {
		t.Skip(missing)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"librdkafka-typo", "workload:\n  client: librdkafka\n  client.config: {linger.msx: \"5\"}\n", `x.yaml:2: workload.client: client librdkafka: librdkafka refuses the configuration: No such configuration property: "linger.msx"`},
		{"librdkafka-driver-key", "workload:\n  client: librdkafka\n  client.config: {bootstrap.servers: \"x:9092\"}\n", "x.yaml:2: workload.client: client librdkafka: client.config.bootstrap.servers: set by the driver"},
		{"kafka-python-java-name", "workload:\n  client: kafka-python\n  client.config: {linger.ms: \"5\"}\n", "x.yaml:2: workload.client: client kafka-python: client.config.linger.ms: neither KafkaProducer nor KafkaConsumer has linger.ms"},
		{"kafka-python-value", "workload:\n  client: kafka-python\n  client.config: {linger_ms: soon}\n", "client.config.linger_ms: 'soon' is not an integer"},
	} {
		_, err := Parse("x.yaml", "x", []byte(tc.body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
	for _, body := range []string{
		"preset: safe\nworkload:\n  client: librdkafka\n  client.config: {compression.type: zstd}\n",
		"preset: acks1\nworkload:\n  client: kafka-python\n  client.config: {linger_ms: \"5\"}\n",
	} {
		if _, err := Parse("x.yaml", "x", []byte(body)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// TestConditionalFaults: a fault's name and condition reach its schedule
// event, and a resolved scenario written back parses to the same events.
func TestConditionalFaults(t *testing.T) {
	body := `duration: 30s
faults:
  - name: cut
    kind: partition
    topology: leader-followers
    partition: isrlab/0
    at: 4s
    heal.after: 12s
  - kind: kill
    nodes: [leader:isrlab/0]
    at: 6s
    heal.after: 12s
    when: {partition: isrlab/0, isr-size: 1, within: 20s}
  - kind: pause
    nodes: [b3]
    when: {after-heal: cut, delay: 2s}
`
	sc, err := Parse("x.yaml", "x", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := sc.ScheduleEvents()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ev {
		line := e.At.String() + " " + string(e.Action)
		if e.Name != "" {
			line += " name=" + e.Name
		}
		if e.When != nil {
			line += " when=" + e.When.String()
		}
		got = append(got, line)
	}
	want := []string{"4s start name=cut", "6s start when=the ISR of isrlab/0 has 1 member", "0s start when=fault cut is healed, then 2s", "16s stop", "18s stop", "30s heal-all"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	out, err := yaml.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("resolved.yaml", "x", out)
	if err != nil {
		t.Fatalf("resolved scenario does not parse: %v\n%s", err, out)
	}
	ev2, _ := back.ScheduleEvents()
	a, _ := json.Marshal(ev)
	b, _ := json.Marshal(ev2)
	if string(a) != string(b) {
		t.Errorf("round trip changed the events:\n%s\n%s", b, a)
	}
}

// TestScheduleReplay: the same seed gives the same timeline (golden), a
// different seed a different one.
func TestScheduleReplay(t *testing.T) {
	body := `name: mixed
seed: 42
duration: 60s
faults:
  - kind: partition
    topology: leader-coordinators
    partition: isrlab/0
    at: 5s
    heal.after: 10s
schedule:
  type: every
  interval: 8s
  hold: 4s
  mix:
    - weight: 2
      fault: {kind: kill, nodes: [random-broker]}
    - weight: 1
      fault: {kind: partition, topology: random-halves}
    - weight: 1
      fault: {kind: pause, nodes: [leader:isrlab/1, follower:isrlab/2]}
`
	sc, err := Parse("mixed.yaml", "mixed", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := sc.ScheduleEvents()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(ev, "", " ")
	scripttest.Golden(t, filepath.Join("testdata", "schedule-mixed.json"), string(got)+"\n")
	again, _ := sc.ScheduleEvents()
	if b, _ := json.Marshal(again); string(b) != string(mustJSON(t, ev)) {
		t.Error("the same scenario gave two schedules")
	}
	// A run validates once and plays the timeline validation computed.
	planned, err := sc.Plan()
	if err != nil || string(mustJSON(t, planned)) != string(mustJSON(t, ev)) {
		t.Errorf("Plan: %v, its timeline differs from the schedule's", err)
	}
	sc.Seed = 43
	other, _ := sc.ScheduleEvents()
	if string(mustJSON(t, other)) == string(mustJSON(t, ev)) {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	if last := ev[len(ev)-1]; last.Action != nemesis.ActHealAll || last.At != sc.Duration {
		t.Errorf("the timeline ends with %+v, want a heal-all at %v", last, sc.Duration)
	}
	fixed, _ := Parse("x.yaml", "x", []byte("duration: 20s\nfaults:\n  - {kind: pause, nodes: [b1], at: 2s}\n"))
	if fe, _ := fixed.ScheduleEvents(); len(fe) != 2 || fe[1].Action != nemesis.ActHealAll || fe[1].At != 20*time.Second {
		t.Errorf("a fault without heal.after must last to the end: %+v", fe)
	}
	if fe, err := fixed.Plan(); err != nil || len(fe) != 2 {
		t.Errorf("Plan of fixed faults: %+v, %v", fe, err)
	}
	starts := 0
	for _, e := range ev {
		if e.Action == nemesis.ActStart {
			starts++
		}
	}
	if starts != 1+7 {
		t.Errorf("%d starts, want the fixed fault and 7 generated ones (every 8s from 8s to 56s)", starts)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJudge: the expectation machinery both ways.
func TestJudge(t *testing.T) {
	lossy := &checker.Verdict{Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 123},
		Availability: checker.Availability{Overall: checker.Ratio{Total: 100, OK: 90, Fraction: 0.9}}}
	clean := &checker.Verdict{Valid: checker.Valid, Anomalies: map[string]int64{},
		Availability: checker.Availability{Overall: checker.Ratio{Total: 100, OK: 100, Fraction: 1}}}
	unknown := &checker.Verdict{Valid: checker.Unknown, Anomalies: map[string]int64{}}
	expect := func(s string) Expect {
		sc, err := Parse("x.yaml", "x", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return sc.Expect
	}
	for _, tc := range []struct {
		name       string
		e          Expect
		v          *checker.Verdict
		incomplete bool
		want       Outcome
	}{
		{"default-valid", Expect{}, clean, false, Met},
		{"default-finds-loss", Expect{}, lossy, false, NotMet},
		{"expects-loss-finds-none", expect("expect: {anomalies: {lost-write: \">0\"}}"), clean, false, NotMet},
		{"expects-loss-finds-it", expect("expect: {anomalies: {lost-write: \">0\"}}"), lossy, false, Met},
		{"expects-none-finds-some", expect("expect: {anomalies: {lost-write: 0}}"), lossy, false, NotMet},
		{"expects-invalid", expect("expect: {valid: false}"), lossy, false, Met},
		{"expects-invalid-finds-valid", expect("expect: {valid: false}"), clean, false, NotMet},
		{"any", expect("expect: {valid: any}"), lossy, false, Met},
		{"availability", expect("expect: {availability: \">=0.95\"}"), lossy, false, NotMet},
		{"availability-ok", expect("expect: {availability: \">=0.85\"}"), lossy, false, Met},
		{"unknown", Expect{}, unknown, false, Undecided},
		{"unknown-but-counts-fail", expect("expect: {valid: true, anomalies: {lost-write: \">0\"}}"), unknown, false, NotMet},
		{"incomplete-valid", Expect{}, clean, true, Undecided},
		{"incomplete-invalid", Expect{}, lossy, true, NotMet},
	} {
		if j := tc.e.Judge(tc.v).settle(tc.e.String(), runEnd{incomplete: tc.incomplete}); j.Outcome != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, j.Outcome, j.Reasons, tc.want)
		}
	}
	checkConds(t, "holds for", Cond.Holds,
		map[string]bool{">0:1": true, ">0:0": false, "0:0": true, "<20s:19.5": true, "<20s:20": false, ">=0.9:0.9": true, "!=3:3": false})
}

// checkConds checks f (a predicate on a condition and a value) on cases
// "COND:VALUE" and what f should say of each.
func checkConds(t *testing.T, what string, f func(Cond, float64) bool, cases map[string]bool) {
	t.Helper()
	for s, want := range cases {
		c, v, _ := strings.Cut(s, ":")
		cond, err := ParseCond(c)
		if err != nil {
			t.Fatal(err)
		}
		var x float64
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			t.Fatal(err)
		}
		if f(cond, x) != want {
			t.Errorf("%s %s %v: %v, want %v", c, what, x, !want, want)
		}
	}
}

// TestSettle: a run that did not run its course (its client hung or
// died, or it was cut short) stays not met only on an anomaly found;
// what it missed otherwise was not put to the test.
func TestSettle(t *testing.T) {
	lossy := &checker.Verdict{Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 123}}
	clean := &checker.Verdict{Valid: checker.Valid, Anomalies: map[string]int64{"redelivered": 0},
		Availability: checker.Availability{Overall: checker.Ratio{Total: 100, OK: 80, Fraction: 0.8}}}
	expect := func(s string) Expect {
		sc, err := Parse("x.yaml", "x", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return sc.Expect
	}
	hung := runEnd{workloadErr: errors.New("exec driver failed: hangs")}
	for _, tc := range []struct {
		name   string
		e      Expect
		v      *checker.Verdict
		end    runEnd
		want   Outcome
		reason string
	}{
		{"hung, met", Expect{}, clean, hung, Undecided, "the workload stopped before the end: exec driver failed: hangs"},
		{"hung, an anomaly the run was to show", expect("expect: {anomalies: {redelivered: \">0\"}}"), clean, hung, Undecided, "the workload stopped"},
		{"hung, an availability bound", expect("expect: {availability: \">=0.95\"}"), clean, hung, Undecided, "the workload stopped"},
		{"hung, invalid where valid was expected", Expect{}, lossy, hung, NotMet, "the workload stopped"},
		{"hung, an anomaly past its bound", expect("expect: {valid: any, anomalies: {lost-write: \"<100\"}}"), lossy, hung, NotMet, "the workload stopped"},
		{"hung, an anomaly under its bound", expect("expect: {valid: any, anomalies: {lost-write: \">200\"}}"), lossy, hung, Undecided, "the workload stopped"},
		{"hung, valid where invalid was expected", expect("expect: {valid: false}"), clean, hung, Undecided, "the workload stopped"},
		{"cut short, an anomaly the run was to show", expect("expect: {anomalies: {redelivered: \">0\"}}"), clean, runEnd{incomplete: true}, Undecided, "the run was cut short"},
		{"cut short, an anomaly found", Expect{}, lossy, runEnd{incomplete: true}, NotMet, "expected valid=true"},
		{"a fault not injected, an anomaly found", Expect{}, lossy, runEnd{failedFaults: []string{"kill: no such node"}}, NotMet, "expected valid=true"},
		{"a fault not injected, the loss it was to cause", expect("expect: {valid: false, anomalies: {lost-write: \">0\"}}"), clean, runEnd{failedFaults: []string{"kill: no such node"}}, NotSetUp, "kill: no such node"},
		{"not set up", Expect{}, lossy, runEnd{notSetUp: "could not set up: ISR never reached 1 member"}, NotSetUp, "could not set up"},
		{"ran its course", expect("expect: {anomalies: {redelivered: \">0\"}}"), clean, runEnd{}, NotMet, "expected redelivered >0, got 0"},
	} {
		j := tc.e.Judge(tc.v).settle(tc.e.String(), tc.end)
		if j.Outcome != tc.want || !slices.ContainsFunc(j.Reasons, func(r string) bool { return strings.Contains(r, tc.reason) }) {
			t.Errorf("%s: %v %q, want %v with a reason containing %q", tc.name, j.Outcome, j.Reasons, tc.want, tc.reason)
		}
	}
	checkConds(t, "exceeded by", Cond.exceeded,
		map[string]bool{"0:1": true, "0:0": false, "<3:3": true, "<=3:3": false, "<=3:4": true, "=3:2": false, "=3:4": true, ">0:0": false, "!=3:3": false})
}
