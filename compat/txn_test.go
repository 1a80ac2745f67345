package compat

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// txnOverrides put every transactional id on one __transaction_state
// partition and every group on one __consumer_offsets partition, so a test
// knows which broker coordinates them.
var txnOverrides = []string{
	"transaction.state.log.num.partitions=1",
	"offsets.topic.num.partitions=1",
	"group.initial.rebalance.delay.ms=0",
}

// committedValues reads topic from the start with read_committed until it
// has n values, then two seconds more for any beyond them, and returns
// them all.
func committedValues(t *testing.T, c *proctest.Cluster, topic string, n int) []string {
	t.Helper()
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var values []string
	for len(values) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed read of %s: %d of %d values: %v", topic, len(values), n, values)
		}
		fs.EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	more, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	for more.Err() == nil {
		cl.PollFetches(more).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	return values
}

// TestTransactionalProducers: sarama's and franz-go's transactional
// producers against a 3-broker cluster. Each commits one transaction over
// every partition, aborts one, and commits another; a read_committed
// consumer sees exactly the committed values, and a second producer with
// the same transactional id fences the first.
//
// Under transaction.version=2 (KIP-890 part 2) franz-go opts in (implicit
// adds, an epoch bump per EndTxn) while sarama, which reads no features,
// keeps 3.7's requests: both must work on the same cluster.
func TestTransactionalProducers(t *testing.T) {
	for _, tv := range transactionVersions {
		t.Run(tv.name, func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: append(tv.overrides, txnOverrides...)})
			for _, tc := range []struct {
				name string
				run  func(t *testing.T, c *proctest.Cluster, topic string) []string
			}{
				{"sarama", saramaTransactions},
				{"franz-go", franzTransactions},
			} {
				t.Run(tc.name, func(t *testing.T) {
					topic := "txn-" + tc.name
					c.CreateTopic(topic, 3, 3, map[string]string{"min.insync.replicas": "2"})
					want := tc.run(t, c, topic)
					got := committedValues(t, c, topic, len(want))
					slices.Sort(got)
					slices.Sort(want)
					if !slices.Equal(got, want) {
						t.Fatalf("read_committed values %v, want the committed %v", got, want)
					}
				})
			}
		})
	}
}

// transactionVersions are the transaction protocols the tests run under:
// Kafka 3.7's and Kafka 4.0's transaction.version=2.
var transactionVersions = []struct {
	name      string
	overrides []string
}{
	{"transaction.version=0", nil},
	{"transaction.version=2", []string{"transaction.version=2"}},
}

// txnValues are the values of transaction n: one per partition.
func txnValues(name string, n int) []string {
	return []string{fmt.Sprintf("%s-%d-a", name, n), fmt.Sprintf("%s-%d-b", name, n), fmt.Sprintf("%s-%d-c", name, n)}
}

func saramaTransactions(t *testing.T, c *proctest.Cluster, topic string) []string {
	newProducer := func() sarama.SyncProducer {
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_6_0_0
		cfg.Producer.Idempotent = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Return.Successes = true
		cfg.Producer.Transaction.ID = "sarama-txn"
		cfg.Producer.Transaction.Retry.Max = 50
		cfg.Producer.Transaction.Retry.Backoff = 200 * time.Millisecond
		cfg.Net.MaxOpenRequests = 1
		cfg.Metadata.Retry.Max = 20
		p, err := sarama.NewSyncProducer(c.Bootstrap(), cfg)
		if err != nil {
			t.Fatalf("sarama transactional producer: %v", err)
		}
		return p
	}
	p := newProducer()
	send := func(p sarama.SyncProducer, values []string) {
		t.Helper()
		for i, v := range values {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i), Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatalf("send %s: %v", v, err)
			}
		}
	}
	var committed []string
	for n, commit := range []bool{true, false, true} {
		if err := p.BeginTxn(); err != nil {
			t.Fatalf("begin %d: %v", n, err)
		}
		vs := txnValues("sarama", n)
		send(p, vs)
		if commit {
			if err := p.CommitTxn(); err != nil {
				t.Fatalf("commit %d: %v", n, err)
			}
			committed = append(committed, vs...)
		} else if err := p.AbortTxn(); err != nil {
			t.Fatalf("abort %d: %v", n, err)
		}
	}
	// A new producer with the same id fences the old one: the old
	// producer's next transaction cannot commit.
	q := newProducer()
	defer q.Close()
	if err := p.BeginTxn(); err == nil {
		if _, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder("zombie")}); err == nil {
			if err := p.CommitTxn(); err == nil {
				t.Fatal("the fenced producer committed a transaction")
			}
		}
	}
	p.Close()
	if err := q.BeginTxn(); err != nil {
		t.Fatalf("begin on the new producer: %v", err)
	}
	vs := txnValues("sarama", 9)
	send(q, vs)
	if err := q.CommitTxn(); err != nil {
		t.Fatalf("commit on the new producer: %v", err)
	}
	return append(committed, vs...)
}

func franzTransactions(t *testing.T, c *proctest.Cluster, topic string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newClient := func() *kgo.Client {
		return c.Client(kgo.TransactionalID("franz-txn"), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
	}
	cl := newClient()
	defer cl.Close()
	txn := func(cl *kgo.Client, values []string, commit bool) error {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		for i, v := range values {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i), Value: []byte(v)}).FirstErr(); err != nil {
				return fmt.Errorf("produce %s: %w", v, err)
			}
		}
		return cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	}
	var committed []string
	for n, commit := range []bool{true, false, true} {
		vs := txnValues("franz", n)
		if err := txn(cl, vs, commit); err != nil {
			t.Fatalf("transaction %d: %v", n, err)
		}
		if commit {
			committed = append(committed, vs...)
		}
	}
	next := newClient()
	defer next.Close()
	vs := txnValues("franz", 9)
	if err := txn(next, vs, true); err != nil {
		t.Fatalf("transaction of the new producer: %v", err)
	}
	if err := txn(cl, []string{"zombie"}, true); err == nil {
		t.Fatal("the fenced producer committed a transaction")
	}
	return append(committed, vs...)
}

// TestExactlyOnceThroughCoordinatorKill: a read-process-write pipeline
// with franz-go's GroupTransactSession copies an input topic to an output
// topic, committing the consumed offsets inside each transaction, while
// the broker that is both the transaction and the group coordinator is
// SIGKILLed and restarted. The output, read with read_committed, must hold
// every input value exactly once.
func TestExactlyOnceThroughCoordinatorKill(t *testing.T) {
	for _, tv := range transactionVersions {
		t.Run(tv.name, func(t *testing.T) { exactlyOnceThroughCoordinatorKill(t, tv.overrides) })
	}
}

func exactlyOnceThroughCoordinatorKill(t *testing.T, overrides []string) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: append(append([]string{
		"coordinator.session.timeout.ms=6000",
	}, overrides...), txnOverrides...)})
	const in, out, n = "eos-in", "eos-out", 600
	c.CreateTopic(in, 3, 3, map[string]string{"min.insync.replicas": "2"})
	c.CreateTopic(out, 3, 3, map[string]string{"min.insync.replicas": "2"})
	src := c.Client(kgo.DefaultProduceTopic(in))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range n {
		src.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	src.Close()

	newSession := func() *kgo.GroupTransactSession {
		sess, err := kgo.NewGroupTransactSession(append(bootstrapOpts(c),
			kgo.TransactionalID("eos-etl"), kgo.ConsumerGroup("eos-etl"), kgo.ConsumeTopics(in),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.DefaultProduceTopic(out), kgo.TransactionTimeout(20*time.Second), kgo.FetchMaxWait(500*time.Millisecond),
			kgo.RequestTimeoutOverhead(5*time.Second), kgo.RetryTimeout(2*time.Minute))...)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	sess := newSession()
	defer func() { sess.Close() }()
	restarts := 0

	coordinator := func() int32 {
		st, err := c.Describe("__transaction_state")
		if err != nil || st[0].Leader < 0 {
			return -1
		}
		return st[0].Leader
	}
	copied, killed := 0, int32(-1)
	for copied < n {
		if ctx.Err() != nil {
			t.Fatalf("copied %d of %d before the deadline", copied, n)
		}
		if killed < 0 && copied >= n/3 {
			if killed = coordinator(); killed < 0 {
				t.Fatal("no transaction coordinator")
			}
			c.Brokers[killed].Kill()
			t.Logf("SIGKILLed b%d, the coordinator, after %d copied", killed, copied)
		}
		if killed >= 0 && !c.Brokers[killed].Running() && copied >= n/2 {
			c.Brokers[killed].Restart()
			t.Logf("restarted b%d", killed)
		}
		fs := sess.PollRecords(ctx, 50)
		if err := sess.Begin(); err != nil {
			// franz-go gives up on its producer ID when a request to the
			// coordinator it cached fails after that broker has left the
			// cluster's metadata ("unknown broker"; Kafka drops a broker
			// from metadata once its session expires, as isrlab does). An
			// application then does what this does: close the session and
			// open a new one with the same transactional id, which fences
			// and aborts whatever the old one left open. Exactly-once must
			// hold across that too.
			if restarts++; restarts > 3 {
				t.Fatalf("begin, after %d new sessions: %v", restarts-1, err)
			}
			t.Logf("begin after %d copied: %v (a new session replaces this one)", copied, err)
			sess.Close()
			sess = newSession()
			continue
		}
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, &kgo.Record{Partition: r.Partition, Value: r.Value}) })
		for _, r := range recs {
			sess.Produce(ctx, r, nil)
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Logf("end after %d copied: %v (the session aborted and goes on)", copied, err)
			continue
		}
		if committed {
			copied += len(recs)
		}
	}
	if killed < 0 {
		t.Fatal("the coordinator was never killed")
	}
	if !c.Brokers[killed].Running() {
		c.Brokers[killed].Restart()
	}
	got := committedValues(t, c, out, n)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	var lost, dup []string
	for i := range n {
		switch k := strconv.Itoa(i); seen[k] {
		case 0:
			lost = append(lost, k)
		case 1:
		default:
			dup = append(dup, k)
		}
	}
	if len(lost) > 0 || len(dup) > 0 || len(got) != n {
		t.Fatalf("output holds %d values for %d inputs: %d lost %v, %d duplicated %v", len(got), n, len(lost), head(lost), len(dup), head(dup))
	}
	t.Logf("%d values copied exactly once through the kill of b%d", n, killed)
}

func bootstrapOpts(c *proctest.Cluster) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}
}

func head(s []string) []string { return s[:min(len(s), 10)] }
