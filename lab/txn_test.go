package lab

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
	"github.com/isrlab/isrlab/workloads"
)

// TestTxnScenarios loads the txn library scenarios: the txn workload with
// its keys, the fault and its target, and the expectation measured.
func TestTxnScenarios(t *testing.T) {
	for _, tc := range []struct {
		name, target, valid string
		faults              int
		abort               float64 // txn.abort.ratio; 0: 0.1
	}{
		{"txn/leader-kill", "leader:isrlab/0", "true", 1, 0},
		{"txn/leader-kill-sarama", "leader:isrlab/0", "true", 1, 0},
		{"txn/leader-kill-librdkafka", "leader:isrlab/0", "true", 1, 0},
		{"txn/coordinator-kill", "leader:__transaction_state/0", "true", 1, 0},
		{"txn/coordinator-kill-consumer-protocol", "leader:__transaction_state/0", "true", 1, 0},
		{"txn/unclean-lost-commits", "leader:isrlab/0", "any", 2, 0},
		{"txn/late-write", "brokers", "true", 1, 0.5},
		{"txn/late-write-v2", "brokers", "true", 1, 0.5},
	} {
		sc, err := Lookup(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w := sc.Workload
		if tc.abort == 0 {
			tc.abort = 0.1
		}
		if w.Type != "txn" || w.TxnAbortRatio != tc.abort || w.TransactionTimeout != 15*time.Second || w.Topic != "isrlab" {
			t.Errorf("%s: workload %+v", tc.name, w)
		}
		want := "franz-go"
		for _, c := range []string{"sarama", "librdkafka"} {
			if strings.HasSuffix(tc.name, "-"+c) {
				want = c
			}
		}
		if w.ClientSpec.Name() != want {
			t.Errorf("%s: client %s, want %s", tc.name, w.ClientSpec.Name(), want)
		}
		if len(sc.Faults) != tc.faults || sc.Expect.valid() != tc.valid {
			t.Errorf("%s: faults %v, expect %q", tc.name, sc.Faults, sc.Expect.String())
		}
		last := sc.Faults[len(sc.Faults)-1]
		if got := nemesis.TargetExprs(last.Spec.Fault); !slices.Contains(got, tc.target) {
			t.Errorf("%s: last fault targets %v, want %s", tc.name, got, tc.target)
		}
	}
	// The late write's story: Produce requests held past the time franz-go
	// waits for an answer (the request timeout and its overhead), so that
	// the transaction ends before they arrive; v2 under transaction.version 2.
	for _, name := range []string{"txn/late-write", "txn/late-write-v2"} {
		sc, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		k, ok := sc.Faults[0].Spec.Fault.(*nemesis.Kafka)
		wait := sc.Workload.RequestTimeout + sc.Workload.RequestTimeoutOverhead
		if !ok || k.API != "Produce" || k.Direction != "request" || k.Action != "delay" || time.Duration(k.Delay) < 2*wait {
			t.Errorf("%s: fault %+v, franz-go waits %v", name, sc.Faults[0].Spec.Fault, wait)
		}
		if tv, v2 := sc.Cluster.Config["transaction.version"], strings.HasSuffix(name, "-v2"); (tv == "2") != v2 {
			t.Errorf("%s: transaction.version %q", name, tv)
		}
	}
	// The consumer protocol's story: its group on the consumer protocol,
	// served by the cluster.
	sc, err := Lookup("txn/coordinator-kill-consumer-protocol")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Workload.ClientSpec.Config["group.protocol"] != "consumer" || sc.Workload.TxnGroup == "" || sc.Cluster.Config["group.coordinator.rebalance.protocols"] != "classic,consumer" {
		t.Errorf("txn/coordinator-kill-consumer-protocol: workload %+v, cluster config %v", sc.Workload, sc.Cluster.Config)
	}
}

// TestInternalTopicTargets: a fault may name a partition of the
// coordinators' topics, within the partition count the cluster sets.
func TestInternalTopicTargets(t *testing.T) {
	ok := "cluster:\n  config:\n    transaction.state.log.num.partitions: \"1\"\nfaults:\n  - kind: kill\n    nodes: [leader:__transaction_state/0]\n"
	if _, err := Parse("x.yaml", "x", []byte(ok)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, want string }{
		{"cluster:\n  config:\n    transaction.state.log.num.partitions: \"1\"\nfaults:\n  - kind: kill\n    nodes: [leader:__transaction_state/1]\n", "topic __transaction_state has partitions 0..0"},
		{"faults:\n  - kind: kill\n    nodes: [leader:__consumer_offsets/50]\n", "topic __consumer_offsets has partitions 0..49"},
	} {
		if _, err := Parse("x.yaml", "x", []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestTxnScenarioValidation(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"workload: {type: txn, txn.abort.ratio: 3}\n", "txn.abort.ratio 3"},
		{"workload: {type: txn, rate: 10}\n", "rate is not a key of the txn workload"},
		{"workload: {type: txn, acks: \"1\"}\n", "transactions need acks=all"},
		{"workload: {txn.poll.ratio: 0.2}\n", "workload.txn.poll.ratio: a key of the txn workload"},
		{"workload: {type: txn, client: kafka-go}\n", "the txn workload runs on franz-go and sarama only"},
		{"workload: {type: txn, client: sarama, txn.group.id: etl}\n", "txn.group.id (reading in a consumer group"},
		{"workload: {type: txn, client: sarama, retries: -1}\n", "Idempotent producer requires Producer.Retry.Max >= 1"},
		{"workload: {type: txn, client.config: {group.protocol: consumer}}\n", "x.yaml:1: workload.client: client franz-go: client.config: group.protocol consumer: the txn workload is in a consumer group only with txn.group.id"},
		{"workload: {type: txn, txn.group.id: etl, client.config: {group.protocol: consumer, group.remote.assignor: sticky}}\n", `group.remote.assignor "sticky": use uniform or range`},
		{"workload: {type: rate, client.config: {group.protocol: consumer}}\n", "client franz-go: client.config.group.protocol: franz-go takes"},
		{"expect: {anomalies: {G2: 0}}\n", "unknown anomaly \"G2\""},
		{"workload: {isolation.level: snapshot}\n", `isolation.level "snapshot": want read_committed or read_uncommitted`},
		{"workload: {client: sarama, isolation.level: read_committed}\n", "isolation.level is set on franz-go's consumers only"},
		{"workload: {type: txn, client: sarama, isolation.level: read_uncommitted}\n", "isolation.level is set on franz-go's consumers only"},
	} {
		if _, err := Parse("x.yaml", "x", []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.body, err, tc.want)
		}
	}
	if _, err := Parse("x.yaml", "x", []byte("workload: {type: txn, txn.group.id: etl, client.config: {group.protocol: consumer, group.remote.assignor: range}}\n")); err != nil {
		t.Errorf("group.protocol consumer with txn.group.id: %v", err)
	}
	sc, err := Parse("x.yaml", "x", []byte("workload: {type: txn}\nexpect: {anomalies: {G0: 0, G1a: 0, G-single: \">=0\", precommitted-read: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := &checker.Verdict{Valid: checker.Valid, Anomalies: map[string]int64{checker.G0: 2, checker.AbortedRead: 1}}
	j := sc.Expect.Judge(v)
	if j.Outcome != NotMet || !strings.Contains(strings.Join(j.Reasons, ";"), "G0 0, got 2") || !strings.Contains(strings.Join(j.Reasons, ";"), "G1a 0, got 1") {
		t.Errorf("judgement %+v", j)
	}
}

// TestTxnWorkloadAsTheLabRunsIt runs a txn scenario's workload as the
// lab's driver does (newWorkload from the scenario, Run, Drain, then the
// checker, the scenario's expectation and the printed verdict), against
// kfake instead of a compose cluster.
func TestTxnWorkloadAsTheLabRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	// txn/read-uncommitted's consumers read what read_committed hides, so
	// its expectation (aborted and precommitted reads) is met only if the
	// isolation level reaches them.
	for _, name := range []string{"txn/leader-kill", "txn/read-uncommitted"} {
		t.Run(name, func(t *testing.T) { txnWorkloadOnKfake(t, name) })
	}
}

func txnWorkloadOnKfake(t *testing.T, name string) {
	sc, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(sc.Topic.Partitions, sc.Topic.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := sc.Workload.Config
	cfg.Sends, cfg.Seed = 300, 7
	var m history.Memory
	start := time.Now()
	rec := history.NewRecorder(&m, func() time.Duration { return time.Since(start) })
	wk := sc.Workload
	wk.Config = cfg
	w, err := newWorkload(wk, clientRun{}, rec, nil, nil, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.(*workloads.Txn); !ok {
		t.Fatalf("workload.type txn runs %T", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	v := checker.CheckOps(m.Ops, checker.Options{})
	if v.Stats.Txn == nil || v.Stats.Txn.OK == 0 || v.Stats.Txn.Fail == 0 {
		t.Fatalf("txn stats %+v", v.Stats.Txn)
	}
	if j := sc.Expect.Judge(v); j.Outcome != Met {
		t.Errorf("expectation %s: %v (%v); anomalies %v", j.Expect, j.Outcome, j.Reasons, v.Anomalies)
	}
	t.Logf("%s: anomalies %v", name, v.Anomalies)
	var out strings.Builder
	results.WriteVerdict(&out, &results.Outcome{Outcome: results.Met, Expect: "valid"}, v)
	if !strings.Contains(out.String(), "transactions: ") {
		t.Errorf("report lacks the transaction line:\n%s", out.String())
	}
}
