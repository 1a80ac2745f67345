package clients

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestLibrdkafkaTxnCheck: the txn workload runs on librdkafka (and
// kafkajs, TestKafkajsCheck) and on an exec driver of the user's (asked
// at its hello), not on kafka-python or kafka-go, and not in a consumer
// group; librdkafka's own refusals of the
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
		{workloads.ClientSpec{Client: KafkaGo}, cfg, "client kafka-go: the txn workload runs on franz-go and sarama only, and out of process on librdkafka, kafkajs and exec drivers"},
		{workloads.ClientSpec{Client: Kafkajs}, workloads.Config{TxnConfig: workloads.TxnConfig{TxnGroup: "etl"}}, "client kafkajs: txn.group.id (reading in a consumer group"},
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

// TestLibrdkafkaTxnOutcomes: through librdkafka's transactor against a
// broker, a commit whose EndTxn the coordinator holds (a broker test
// hook) past the transaction's deadline is info, the process done, and
// once released the transaction is committed (fail would have been
// wrong); an abort is fail, and what it had sent is never read
// read_committed.
func TestLibrdkafkaTxnOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, Librdkafka)
	txnOutcomesThrough(t, workloads.ClientSpec{Client: Librdkafka})
}

// TestExecDriverTxnOutcomes: TestLibrdkafkaTxnOutcomes through the
// reference exec driver (kgo's EndTransaction in a process of its own).
func TestExecDriverTxnOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	driver := proctest.Build(t, "./examples/exec-driver")
	txnOutcomesThrough(t, workloads.ClientSpec{Client: Exec, Exec: []string{driver}})
}

// txnOutcomesThrough checks, through spec's transactor against a
// one-broker cluster, that an abort is fail, a commit ok, and a commit
// whose EndTxn the coordinator holds past the caller's deadline info
// with the process done; read_committed reads the committed values and
// never the aborted one.
func txnOutcomesThrough(t *testing.T, spec workloads.ClientSpec) {
	t.Helper()
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, TestHooks: true,
		Overrides: []string{"transaction.state.log.num.partitions=1", "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.CreateTopic("txn", 1, 1, nil)
	cfg := workloads.Config{Topic: "txn", Partitions: 1, RequestTimeout: 2 * time.Second}
	cl, err := New(spec, cfg, Env{Seeds: c.Bootstrap()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.(io.Closer).Close() })
	open := func(proc int) workloads.Transactor {
		t.Helper()
		tr, err := cl.(workloads.TxnClient).Transactor(ctx, proc, workloads.TxnProducer{ID: "isrlab-txn-" + strconv.Itoa(proc), Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	produce := func(tr workloads.Transactor, v int64) {
		t.Helper()
		if err := tr.Begin(); err != nil {
			t.Fatal(err)
		}
		if offs, err := tr.Produce(ctx, []workloads.Record{{Partition: 0, Value: v}}); err != nil || offs[0] < 0 {
			t.Fatalf("send %d: %v %v", v, offs, err)
		}
	}

	// Value 1 is aborted, value 2 committed.
	tr := open(1)
	produce(tr, 1)
	if e := tr.End(ctx, false); e.Type != history.Fail || e.Done {
		t.Fatalf("the abort ended %+v, want fail", e)
	}
	produce(tr, 2)
	if e := tr.End(ctx, true); e.Type != history.OK {
		t.Fatalf("the commit ended %+v, want ok", e)
	}
	tr.Close()

	// Value 3's EndTxn is held past the transaction's deadline.
	tr = open(2)
	produce(tr, 3)
	ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
	heldCommit(ectx, t, c, tr)
	ecancel()
	tr.Close()
	got := readCommitted(ctx, t, c.Bootstrap(), "txn", 3)
	if slices.Contains(got, 1) || !slices.Contains(got, 2) {
		t.Fatalf("read read_committed %v: want 2 and 3, not the aborted 1", got)
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
	if offsets := txnWorkloadThrough(t, workloads.ClientSpec{Client: Librdkafka}); offsets == 0 {
		t.Error("no committed send has the offset librdkafka reported")
	}
}

// TestKafkajsTxnOutcomes: TestLibrdkafkaTxnOutcomes through kafkajs's
// transactional producer (transaction.commit's one EndTxn held past the
// caller's deadline is info, the process done).
func TestKafkajsTxnOutcomes(t *testing.T) {
	needKafkajsCluster(t)
	txnOutcomesThrough(t, workloads.ClientSpec{Client: Kafkajs})
}

// TestKafkajsTxnWorkload: the txn workload through kafkajs (its
// transactional producers and read_committed consumers, over the exec
// protocol), as TestLibrdkafkaTxnWorkload, except that the history may
// be invalid by aborted reads, and by nothing else: kafkajs 2.2.4's
// read_committed consumer hands over records of aborted transactions
// (docs/clients-under-faults.md, "kafkajs's transactions").
func TestKafkajsTxnWorkload(t *testing.T) {
	needKafkajsCluster(t)
	if offsets := txnWorkloadThrough(t, workloads.ClientSpec{Client: Kafkajs}, checker.AbortedRead); offsets == 0 {
		t.Error("no committed send has the offset kafkajs reported")
	}
}

// heldCommit commits tr's transaction while broker 1 (the coordinator)
// holds every EndTxn request, and checks the commit ends info with the
// producer done, then lets the broker go on.
func heldCommit(ctx context.Context, t *testing.T, c *proctest.Cluster, tr workloads.Transactor) {
	t.Helper()
	rule := c.Hook(1, proctest.HookRule{API: "EndTxn"})
	e := tr.End(ctx, true)
	if st, err := c.HookState(1, rule); err == nil && st.Matched == 0 {
		t.Fatal("the hook held no EndTxn request")
	}
	c.Unhook(1, rule)
	if e.Type != history.Info || !e.Done {
		t.Fatalf("the held commit ended %+v, want info, the process done", e)
	}
	t.Logf("held EndTxn: %s (%s)", e.Type, e.Error)
}

// TestExecDriverTxnWorkload: the txn workload through the reference exec
// driver (examples/exec-driver: franz-go in a process of its own, over
// the protocol's "txn" feature), as TestLibrdkafkaTxnWorkload.
func TestExecDriverTxnWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	driver := proctest.Build(t, "./examples/exec-driver")
	if offsets := txnWorkloadThrough(t, workloads.ClientSpec{Client: Exec, Exec: []string{driver}}); offsets == 0 {
		t.Error("no committed send has the offset the driver reported")
	}
}

// txnWorkloadThrough runs the txn workload through spec's client against a
// three-broker cluster, 300 values, a fifth of the transactions aborted
// on purpose, and checks the history is valid with commits, aborts,
// polls and committed read-process-write transactions. It returns how
// many committed sends have the offset the client reported. A history
// invalid only by anomalies of the kinds tolerated passes, reported.
func txnWorkloadThrough(t *testing.T, spec workloads.ClientSpec, tolerated ...string) (offsets int) {
	t.Helper()
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3,
		Overrides: []string{"transaction.state.log.num.partitions=4", "offsets.topic.num.partitions=4"}})
	c.CreateTopic("txn", 3, 3, nil)
	cfg := workloads.Config{Topic: "txn", Partitions: 3, Producers: 2, Consumers: 2, Sends: 300, Seed: 5,
		TxnConfig: workloads.TxnConfig{TxnAbortRatio: 0.2, TransactionTimeout: 15 * time.Second}}
	if err := Check(spec, "txn", cfg); err != nil {
		t.Fatal(err)
	}
	cl, err := New(spec, cfg, Env{Seeds: c.Bootstrap()})
	if err != nil {
		t.Fatal(err)
	}
	ops, v := runCheckedUntil(t, 0, nil, func(rec *history.Recorder) (runner, error) {
		return workloads.NewTxnWith(cl, cfg, rec, c.Bootstrap())
	}, tolerated...)
	for _, kind := range tolerated {
		if n := v.Anomalies[kind]; n > 0 {
			t.Logf("verdict %s by %d %s (tolerated), e.g. %s", v.Valid, n, kind, v.Examples[kind][0].Note)
		}
	}
	st := v.Stats.Txn
	if st == nil || st.OK == 0 || st.Fail == 0 || st.Polls == 0 {
		t.Fatalf("txn stats %+v: want commits, aborts and polls", st)
	}
	rpw, offsets := committedShape(ops)
	if rpw == 0 {
		t.Error("no committed read-process-write transaction read anything")
	}
	t.Logf("txn stats %+v; %d committed read-process-write transactions read something", *st, rpw)
	return offsets
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
