package clients

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestSaramaTxnEnd: how sarama ended a transaction maps to Jepsen's
// outcomes as docs/clients-under-faults.md says.
func TestSaramaTxnEnd(t *testing.T) {
	ready, fatal := sarama.ProducerTxnFlagReady, sarama.ProducerTxnFlagInError|sarama.ProducerTxnFlagFatalError
	abortable := sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	committing := sarama.ProducerTxnFlagEndTransaction | sarama.ProducerTxnFlagCommittingTransaction
	for _, tc := range []struct {
		name    string
		commit  bool
		err     error
		written bool
		status  sarama.ProducerTxnStatusFlag
		want    history.Type
		done    bool
		errName string
	}{
		{"committed", true, nil, true, ready, history.OK, false, ""},
		{"aborted", false, nil, true, ready, history.Fail, false, ""},
		{"aborted, nothing in the transaction", false, nil, false, ready, history.Fail, false, ""},
		// A send failed: sarama refuses to commit with the send's error.
		{"commit refused in error", true, sarama.ErrNotEnoughReplicas, false, abortable, history.Fail, false, "commit refused before any EndTxn request was written: NOT_ENOUGH_REPLICAS"},
		{"no coordinator", true, sarama.ErrOutOfBrokers, false, committing, history.Fail, false, ""},
		// endTxn's attempts were written and unanswered.
		{"EndTxn timed out", true, &netTimeout{}, true, committing, history.Info, true, ""},
		{"EndTxn retried, then refused", true, sarama.ErrInvalidTxnState, true, fatal, history.Info, true, "INVALID_TXN_STATE"},
		{"fenced at commit", true, sarama.ErrProducerFenced, true, fatal, history.Info, true, ""},
		{"commit refused, fatal", true, sarama.ErrProducerFenced, false, fatal, history.Fail, true, ""},
		{"abort timed out", false, io.EOF, true, ready, history.Info, true, ""},
		{"abort refused, fatal", false, sarama.ErrProducerFenced, false, fatal, history.Info, true, ""},
		// EndTxn answered, then the epoch bump's InitProducerId failed.
		{"committed, bump failed", true, sarama.ErrConcurrentTransactions, true, sarama.ProducerTxnFlagInitializing, history.OK, true, ""},
		{"aborted, bump failed", false, sarama.ErrConcurrentTransactions, true, sarama.ProducerTxnFlagInitializing, history.Fail, true, ""},
		{"nothing to abort, bump failed", false, sarama.ErrConcurrentTransactions, false, sarama.ProducerTxnFlagInitializing, history.Fail, true, ""},
	} {
		e := saramaTxnEnd(tc.commit, tc.err, tc.written, tc.status)
		if e.Type != tc.want || e.Done != tc.done || (tc.errName != "" && e.Error != tc.errName) {
			t.Errorf("%s: %+v, want %s done %v %q", tc.name, e, tc.want, tc.done, tc.errName)
		}
	}
}

// runner is a workload as a test runs it.
type runner interface {
	Run(context.Context) error
	Drain(context.Context) error
}

// countingSink keeps a run's ops and counts the completed ones by
// "f/type", closing reached once enough says so.
type countingSink struct {
	mu      sync.Mutex
	mem     history.Memory
	counts  map[string]int
	enough  func(map[string]int) bool
	reached chan struct{}
	done    bool
}

func (s *countingSink) Write(op *history.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.mem.Write(op); err != nil {
		return err
	}
	if op.Type != history.Invoke {
		s.counts[op.F+"/"+op.Type.String()]++
	}
	if !s.done && s.enough != nil && s.enough(s.counts) {
		s.done = true
		close(s.reached)
	}
	return nil
}

// runCheckedUntil runs the workload open makes, recording to a fresh
// history, to its end or for runFor (when not 0), stopping it as soon as
// enough(counts) holds (when enough is not nil), counts being the
// completed ops so far by "f/type" (e.g. "crash/info", "commit/ok"): the
// run lasts until it has done what the test asserts. It then drains the
// workload and checks the history, which must be valid, or invalid only
// by anomalies of the kinds tolerated names (a client's own, known,
// which the caller then reports).
func runCheckedUntil(t *testing.T, runFor time.Duration, enough func(counts map[string]int) bool, open func(*history.Recorder) (runner, error), tolerated ...string) ([]history.Op, *checker.Verdict) {
	t.Helper()
	sink := &countingSink{counts: map[string]int{}, enough: enough, reached: make(chan struct{})}
	start := time.Now()
	rec := history.NewRecorder(sink, func() time.Duration { return time.Since(start) })
	w, err := open(rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rctx := ctx
	if runFor > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeout(ctx, runFor)
		defer stop()
	}
	rctx, stopEarly := context.WithCancel(rctx)
	defer stopEarly()
	go func() {
		select {
		case <-sink.reached:
			stopEarly()
		case <-rctx.Done():
		}
	}()
	if err := w.Run(rctx); err != nil && (runFor == 0 || !errors.Is(err, context.DeadlineExceeded)) && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	mem := &sink.mem
	if err := w.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	v := checker.CheckOps(mem.Ops, checker.Options{})
	if v.Valid != checker.Valid && !invalidOnlyBy(v, tolerated) {
		t.Fatalf("verdict %s: %v %v", v.Valid, v.Anomalies, v.Examples)
	}
	return mem.Ops, v
}

// invalidOnlyBy reports whether v is invalid by anomalies of the kinds
// tolerated and nothing else (no other invalidating anomaly, and no
// cycle of write-read dependencies alone, which the checker reports in
// a note).
func invalidOnlyBy(v *checker.Verdict, tolerated []string) bool {
	if v.Valid != checker.Invalid || len(tolerated) == 0 {
		return false
	}
	for kind, n := range v.Anomalies {
		if n > 0 && checker.Invalidating(kind) && !slices.Contains(tolerated, kind) {
			return false
		}
	}
	return !slices.ContainsFunc(v.Notes, func(n string) bool { return strings.Contains(n, "a cycle of wr dependencies alone") })
}

type netTimeout struct{}

func (*netTimeout) Error() string   { return "read tcp: i/o timeout" }
func (*netTimeout) Timeout() bool   { return true }
func (*netTimeout) Temporary() bool { return true }

// readCommitted reads partition 0 of topic read_committed with franz-go
// until it has read want or ctx ends, and returns every value read.
func readCommitted(ctx context.Context, t *testing.T, seeds []string, topic string, want int64) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []int64
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			var v int64
			for _, c := range r.Value {
				v = v*10 + int64(c-'0')
			}
			got = append(got, v)
			done = done || v == want
		})
		if done {
			return got
		}
	}
	t.Fatalf("value %d never read read_committed (read %v)", want, got)
	return nil
}

// TestSaramaTxnOutcomes: through sarama's transactor against a broker, a
// commit whose EndTxn the coordinator holds (a broker test hook) until
// sarama gives up is info, and once released it commits; a commit sarama
// refuses after a failed send is fail, and what it had sent is never
// read read_committed.
func TestSaramaTxnOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, TestHooks: true,
		Overrides: []string{"transaction.state.log.num.partitions=1", "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(topic string, own map[string]string) workloads.Transactor {
		t.Helper()
		c.CreateTopic(topic, 1, 1, nil)
		cfg := workloads.Config{Topic: topic, Partitions: 1, RequestTimeout: 2 * time.Second}
		cl, err := New(workloads.ClientSpec{Client: Sarama, Config: own}, cfg, Env{Seeds: c.Bootstrap()})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := cl.(workloads.TxnClient).Transactor(ctx, 0, workloads.TxnProducer{ID: "isrlab-" + topic, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	produce := func(tr workloads.Transactor, recs ...workloads.Record) ([]int64, error) {
		t.Helper()
		if err := tr.Begin(); err != nil {
			t.Fatal(err)
		}
		return tr.Produce(ctx, recs)
	}

	t.Run("held-EndTxn", func(t *testing.T) {
		// One EndTxn attempt, given up after request.timeout.
		tr := open("held-endtxn", map[string]string{"Producer.Transaction.Retry.Max": "0"})
		if offs, err := produce(tr, workloads.Record{Partition: 0, Value: 1}); err != nil || offs[0] < 0 {
			t.Fatalf("send: %v %v", offs, err)
		}
		heldCommit(ctx, t, c, tr)
		// Released, the coordinator commits: fail would have been wrong.
		readCommitted(ctx, t, c.Bootstrap(), "held-endtxn", 1)
	})

	t.Run("refused-commit", func(t *testing.T) {
		tr := open("refused-commit", nil)
		// Value 1 is written to partition 0; then value 2, to a
		// partition the topic does not have, fails in sarama and puts
		// the producer in error. (Sent together, the failure could come
		// first and fail value 1 too.)
		if offs, err := produce(tr, workloads.Record{Partition: 0, Value: 1}); err != nil || offs[0] < 0 {
			t.Fatalf("send: %v %v", offs, err)
		}
		if offs, err := tr.Produce(ctx, []workloads.Record{{Partition: 7, Value: 2}}); err == nil || offs[0] >= 0 {
			t.Fatalf("send to partition 7 of 1: %v %v; want it failed", offs, err)
		}
		e := tr.End(ctx, true)
		if e.Type != history.Fail || !strings.Contains(e.Error, "commit refused before any EndTxn") || !strings.HasSuffix(e.Error, "; aborted") {
			t.Fatalf("the refused commit ended %+v, want fail, aborted", e)
		}
		t.Logf("refused commit: %s (%s)", e.Type, e.Error)
		// The producer goes on: value 3 commits, and value 1 was never
		// committed.
		if _, err := produce(tr, workloads.Record{Partition: 0, Value: 3}); err != nil {
			t.Fatal(err)
		}
		if e := tr.End(ctx, true); e.Type != history.OK {
			t.Fatalf("the next commit ended %+v", e)
		}
		for _, v := range readCommitted(ctx, t, c.Bootstrap(), "refused-commit", 3) {
			if v == 1 {
				t.Fatal("value 1 of the refused commit was read read_committed")
			}
		}
	})
}

// TestSaramaTxnWorkload runs the txn workload through sarama against a
// three-broker cluster: transactional producers (some transactions read
// first, some abort on purpose) and read_committed consumers on sarama,
// the lab's markers and drain on franz-go. The history is valid, with
// commits, aborts and read-process-write transactions.
func TestSaramaTxnWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	txnWorkloadThrough(t, workloads.ClientSpec{Client: Sarama})
}

// TestSaramaTxnCheck: the txn workload runs on sarama, not in a consumer
// group, and with sarama's own refusals named.
func TestSaramaTxnCheck(t *testing.T) {
	cfg := workloads.Config{TxnConfig: workloads.TxnConfig{TransactionTimeout: 15 * time.Second}}
	if err := Check(workloads.ClientSpec{Client: Sarama}, "txn", cfg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec workloads.ClientSpec
		cfg  workloads.Config
		want string
	}{
		{workloads.ClientSpec{Client: Sarama}, workloads.Config{TxnConfig: workloads.TxnConfig{TxnGroup: "etl"}}, "txn.group.id (reading in a consumer group"},
		{workloads.ClientSpec{Client: Sarama}, workloads.Config{Retries: -1}, "Idempotent producer requires Producer.Retry.Max >= 1"},
		{workloads.ClientSpec{Client: Sarama, Config: map[string]string{"Version": "0.10.2.0"}}, cfg, "Idempotent producer requires Version >= V0_11_0_0"},
		{workloads.ClientSpec{Client: Sarama, Config: map[string]string{"Producer.Transaction.ID": "x"}}, cfg, "set by the driver"},
		{workloads.ClientSpec{Client: KafkaGo}, cfg, "the txn workload runs on franz-go and sarama only"},
	} {
		err := Check(tc.spec, "txn", tc.cfg)
		var ce *workloads.CapabilityError
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %+v: %v, want %q", tc.spec, tc.cfg.TxnConfig, err, tc.want)
		} else if tc.want != "set by the driver" && !errors.As(err, &ce) {
			t.Errorf("%+v: %T, want a CapabilityError", tc.spec, err)
		}
	}
}
