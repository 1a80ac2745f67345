package clients

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestLibrdkafkaTxnCheck: the txn workload runs on librdkafka and on an
// exec driver of the user's (asked at its hello), not on kafka-python,
// and not in a consumer group; librdkafka's own refusals of the
// transactional producer's configuration are named when the scenario
// loads.
func TestLibrdkafkaTxnCheck(t *testing.T) {
	cfg := workloads.Config{TxnConfig: workloads.TxnConfig{TransactionTimeout: 15 * time.Second}}
	var ce *workloads.CapabilityError
	for _, tc := range []struct {
		spec workloads.ClientSpec
		cfg  workloads.Config
		want string
	}{
		{workloads.ClientSpec{Client: KafkaPython}, cfg, "client kafka-python: kafka-python has no transactional producer"},
		{workloads.ClientSpec{Client: Librdkafka}, workloads.Config{TxnConfig: workloads.TxnConfig{TxnGroup: "etl"}}, "client librdkafka: txn.group.id (reading in a consumer group"},
		{workloads.ClientSpec{Client: Exec, Exec: []string{"driver"}}, workloads.Config{TxnConfig: workloads.TxnConfig{TxnGroup: "etl"}}, "client exec: txn.group.id"},
		{workloads.ClientSpec{Client: Kafkajs}, cfg, "client kafkajs: the txn workload runs on franz-go and sarama only, and out of process on librdkafka and on exec drivers"},
	} {
		if err := Check(tc.spec, "txn", tc.cfg); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a CapabilityError %q", tc.spec.Client, err, tc.want)
		}
	}
	if err := Check(workloads.ClientSpec{Client: Exec, Exec: []string{"driver"}}, "txn", cfg); err != nil {
		t.Errorf("exec: %v", err)
	}
	needPython(t, Librdkafka)
	if err := Check(workloads.ClientSpec{Client: Librdkafka}, "txn", cfg); err != nil {
		t.Fatalf("librdkafka: %v", err)
	}
	// librdkafka's own check: a message timeout past the transaction's.
	err := Check(workloads.ClientSpec{Client: Librdkafka, Config: map[string]string{"message.timeout.ms": "60000"}}, "txn", cfg)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "`message.timeout.ms` must be set <= `transaction.timeout.ms`") {
		t.Errorf("librdkafka, message.timeout.ms 60000: %v", err)
	}
}

// TestLibrdkafkaTxnWorkload runs the txn workload through librdkafka
// (confluent-kafka-python, over the exec protocol) against a three-broker
// cluster: transactional producers (some transactions read first, some
// abort on purpose) and read_committed consumers in the driver, the
// lab's markers and drain on franz-go. The history is valid, with
// commits, aborts and read-process-write transactions.
func TestLibrdkafkaTxnWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, Librdkafka)
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3,
		Overrides: []string{"transaction.state.log.num.partitions=4", "offsets.topic.num.partitions=4"}})
	c.CreateTopic("txn", 3, 3, nil)
	cfg := workloads.Config{Topic: "txn", Partitions: 3, Producers: 2, Consumers: 2, Sends: 300, Seed: 5,
		TxnConfig: workloads.TxnConfig{TxnAbortRatio: 0.2, TransactionTimeout: 15 * time.Second}}
	if err := Check(workloads.ClientSpec{Client: Librdkafka}, "txn", cfg); err != nil {
		t.Fatal(err)
	}
	cl, err := New(workloads.ClientSpec{Client: Librdkafka}, cfg, Env{Seeds: c.Bootstrap()})
	if err != nil {
		t.Fatal(err)
	}
	ops, v := runChecked(t, 0, func(rec *history.Recorder) (runner, error) {
		return workloads.NewTxnWith(cl, cfg, rec, c.Bootstrap())
	})
	st := v.Stats.Txn
	if st == nil || st.OK == 0 || st.Fail == 0 || st.Polls == 0 {
		t.Fatalf("txn stats %+v: want commits, aborts and polls", st)
	}
	rpw, offsets := committedShape(ops)
	if rpw == 0 {
		t.Error("no committed read-process-write transaction read anything")
	}
	if offsets == 0 {
		t.Error("no committed send has the offset librdkafka reported")
	}
	t.Logf("txn stats %+v; %d committed read-process-write transactions read something", *st, rpw)
}

// committedShape counts, over the committed transactions of ops, those
// that read something and sent something (read-process-write), and the
// sends that have the offset the client reported.
func committedShape(ops []history.Op) (rpw, offsets int) {
	for _, op := range ops {
		if op.F != history.FTxn || op.Type != history.OK {
			continue
		}
		sends, read := 0, 0
		for _, m := range op.Txn {
			if m.F == history.MSend {
				sends++
				if m.Offset >= 0 {
					offsets++
				}
			}
			for _, kr := range m.Reads {
				read += len(kr.Records)
			}
		}
		if sends > 0 && read > 0 {
			rpw++
		}
	}
	return rpw, offsets
}
