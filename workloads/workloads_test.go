package workloads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		retried bool
		want    history.Type
	}{
		{"success", nil, true, history.OK},
		{"not enough replicas, one attempt", kerr.NotEnoughReplicas, false, history.Fail},
		{"not enough replicas after retries", kerr.NotEnoughReplicas, true, history.Info},
		{"invalid required acks", kerr.InvalidRequiredAcks, true, history.Fail},
		{"message too large", fmt.Errorf("%w (uncompressed_bytes=1)", kerr.MessageTooLarge), true, history.Fail},
		{"max buffered: never left the client", kgo.ErrMaxBuffered, true, history.Fail},
		{"request timed out", kerr.RequestTimedOut, false, history.Info},
		{"not enough replicas after append", kerr.NotEnoughReplicasAfterAppend, false, history.Info},
		{"not leader after sending", kerr.NotLeaderForPartition, false, history.Info},
		{"delivery timeout", kgo.ErrRecordTimeout, false, history.Info},
		{"timeout whose last error was a refusal", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotEnoughReplicas), false, history.Info},
		{"retries exhausted", kgo.ErrRecordRetries, false, history.Info},
		{"disconnect", io.ErrUnexpectedEOF, false, history.Info},
		{"context deadline", context.DeadlineExceeded, false, history.Info},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err, tc.retried); got != tc.want {
				t.Errorf("Classify(%v, %v) = %s, want %s", tc.err, tc.retried, got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Acks: "1"}, true},
		{Config{Acks: "2"}, false},
		{Config{Acks: "1", Idempotent: true}, false},
		{Config{Acks: "all", Idempotent: true}, true},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func fakeCluster(t *testing.T, partitions int32, topic string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func recorder() (*history.Memory, *history.Recorder) {
	var m history.Memory
	start := time.Now()
	return &m, history.NewRecorder(&m, func() time.Duration { return time.Since(start) })
}

// runAndCheck runs a workload to completion, drains, and checks the history.
func runAndCheck(t *testing.T, run func(context.Context) error, drain func(context.Context) error, m *history.Memory) *checker.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	return checker.CheckOps(m.Ops, checker.Options{Linearizable: checker.LinOn, LinTimeout: 20 * time.Second})
}

func TestLogWorkloadAgainstKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	for _, sub := range []bool{false, true} {
		t.Run(fmt.Sprintf("subscribe=%v", sub), func(t *testing.T) {
			c := fakeCluster(t, 3, "log")
			m, rec := recorder()
			cfg := Config{Topic: "log", Partitions: 3, Producers: 3, Consumers: 2, Sends: 300, Subscribe: sub, ManualCommit: sub, Linger: time.Millisecond, Seed: 1}
			w, err := NewLog(cfg, rec, c.ListenAddrs())
			if err != nil {
				t.Fatal(err)
			}
			v := runAndCheck(t, w.Run, w.Drain, m)
			if v.Valid != checker.Valid {
				t.Fatalf("verdict %s: anomalies %v examples %v lin %+v", v.Valid, v.Anomalies, v.Examples, v.Linearizable)
			}
			if v.Stats.SendsOK != 300 || v.Stats.ReadValues != 300 {
				t.Errorf("sends ok %d, values read %d; want 300 each", v.Stats.SendsOK, v.Stats.ReadValues)
			}
			if v.Linearizable.Result != "ok" {
				t.Errorf("linearizable = %+v", v.Linearizable)
			}
			var subscribes, assigns, drains int
			for _, op := range m.Ops {
				switch {
				case op.F == history.FSubscribe && op.Type == history.OK:
					subscribes++
				case op.F == history.FAssign && op.Type == history.OK:
					assigns++
				case op.F == history.FDrain && op.Type == history.OK:
					drains++
				}
			}
			if sub && subscribes != 2 || !sub && assigns != 3 || drains == 0 {
				t.Errorf("subscribes %d, assigns %d (incl. drain), drain polls %d", subscribes, assigns, drains)
			}
		})
	}
}

// TestDefiniteFailuresAreFail makes the broker refuse every other produce
// with NOT_ENOUGH_REPLICAS: with one attempt per record those sends end
// fail, and since nothing was appended the history stays valid.
func TestDefiniteFailuresAreFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 1, "refuse")
	var n atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(1)%2 == 1 {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "refuse", Partitions: 1, Producers: 1, Consumers: 1, Sends: 20, Retries: -1}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	v := runAndCheck(t, w.Run, w.Drain, m)
	for _, op := range m.Ops {
		if op.F == history.FSend && op.Type == history.Info {
			t.Logf("info: %s", op.Error)
		}
	}
	if v.Stats.SendsFail == 0 || v.Stats.SendsOK == 0 {
		t.Fatalf("sends ok %d fail %d info %d: want both ok and fail", v.Stats.SendsOK, v.Stats.SendsFail, v.Stats.SendsInfo)
	}
	for _, op := range m.Ops {
		if op.F == history.FSend && op.Type == history.Fail && op.Error != kerr.NotEnoughReplicas.Message {
			t.Errorf("fail with error %q", op.Error)
		}
	}
	if v.Valid != checker.Valid {
		t.Errorf("verdict %s: %v", v.Valid, v.Anomalies)
	}
}

// TestUnreachableBrokerIsFail: sends to a cluster that is gone never reach
// a broker (no Produce request is written), so they definitely failed.
func TestUnreachableBrokerIsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 1, "gone")
	addrs := c.ListenAddrs()
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "gone", Partitions: 1, Producers: 1, Consumers: 1, Sends: 2, DeliveryTimeout: time.Second, RequestTimeout: time.Second}, rec, addrs)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	sends := 0
	for _, op := range m.Ops {
		if op.F == history.FSend && op.Type != history.Invoke {
			sends++
			if op.Type != history.Fail || !strings.HasPrefix(op.Error, "never sent: ") {
				t.Errorf("send to a dead cluster ended %s (%s)", op.Type, op.Error)
			}
		}
	}
	if sends != 2 {
		t.Errorf("%d send completions, want 2", sends)
	}
}

func TestQueueWorkloadWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	for _, manual := range []bool{false, true} {
		t.Run(fmt.Sprintf("manual-commit=%v", manual), func(t *testing.T) {
			c := fakeCluster(t, 2, "queue")
			m, rec := recorder()
			// Processing a poll's records (1 ms each) outlasts the
			// auto-commit interval, so auto-commit covers records still
			// being processed. A member's life (250 ms on average)
			// starts at its first records, after the group's join: the
			// run (1000 sends by two producers, 4 ms apart: 2 s) leaves
			// a loaded machine's join time to spare.
			cfg := Config{Topic: "queue", Partitions: 2, Producers: 2, Consumers: 2, Sends: 1000, SendInterval: 4 * time.Millisecond,
				ManualCommit: manual, CrashEvery: 250 * time.Millisecond, PollTimeout: 100 * time.Millisecond, Seed: 3,
				ProcessingTime: time.Millisecond, AutoCommitInterval: 100 * time.Millisecond}
			w, err := NewQueue(cfg, rec, c.ListenAddrs())
			if err != nil {
				t.Fatal(err)
			}
			v := runAndCheck(t, w.Run, w.Drain, m)
			if v.Valid != checker.Valid {
				t.Fatalf("verdict %s: anomalies %v examples %v lin %+v", v.Valid, v.Anomalies, v.Examples, v.Linearizable)
			}
			var crashes, rebalances int
			for _, op := range m.Ops {
				switch op.F {
				case history.FCrash:
					crashes++
				case history.FRebalance:
					rebalances++
				}
			}
			if crashes == 0 || rebalances == 0 {
				t.Errorf("crashes %d, rebalances %d: the workload did not exercise restarts", crashes, rebalances)
			}
			if v.Stats.ReadValues != cfg.Sends {
				t.Errorf("read %d distinct values, want %d", v.Stats.ReadValues, cfg.Sends)
			}
			if v.Delivery == nil || len(v.Delivery.Groups) != 1 || v.Delivery.Groups[0].Processed == 0 || v.Delivery.Groups[0].Commits == 0 {
				t.Fatalf("delivery %+v: want processed records and commits of one group", v.Delivery)
			}
			g := v.Delivery.Groups[0]
			t.Logf("processed %d (%d records), redelivered %d, skipped %d, %d commits, %d crashes", g.Processed, g.Records, g.Redelivered, g.Skipped, g.Commits, crashes)
			// Committing after processing never skips; a crash with
			// auto-commit redelivers or skips (which, depends on where the
			// crash fell: the consumer-crash scenarios measure both).
			if manual && g.Skipped != 0 {
				t.Errorf("manual commit skipped %d records: %v", g.Skipped, v.Examples[checker.Skipped])
			}
			if !manual && g.Redelivered+g.Skipped == 0 {
				t.Errorf("auto-commit: %d crashes neither redelivered nor skipped a record", crashes)
			}
		})
	}
}

func TestNewLogRejectsBadConfig(t *testing.T) {
	_, rec := recorder()
	if _, err := NewLog(Config{Acks: "7"}, rec, []string{"127.0.0.1:1"}); err == nil {
		t.Error("acks=7 accepted")
	}
	if _, err := NewLog(Config{}, rec, nil); err == nil {
		t.Error("no seeds accepted")
	}
	_ = errors.New
}

// TestLogWorkloadSurvivesLeaderMoves moves partition leadership between
// three fake brokers while the workload runs: clients see NOT_LEADER and
// retry, and the history must still be valid with every send read.
func TestLogWorkloadSurvivesLeaderMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "moves"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "moves", Partitions: 3, Producers: 3, Consumers: 3, Sends: 600, SendInterval: time.Millisecond, Idempotent: true}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	moved := make(chan int)
	runCtx, stopMoving := context.WithCancel(ctx)
	go func() {
		n := 0
		tick := time.NewTicker(15 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				moved <- n
				return
			case <-tick.C:
				if err := c.MoveTopicPartition("moves", int32(n%3), int32((n/3)%3)); err == nil {
					n++
				}
			}
		}
	}()
	err = w.Run(ctx)
	stopMoving()
	moves := <-moved
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := w.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	v := checker.CheckOps(m.Ops, checker.Options{Linearizable: checker.LinOn})
	if moves < 3 {
		t.Fatalf("only %d leader moves happened", moves)
	}
	// kfake answers OffsetForLeaderEpoch for an epoch that wrote no batch
	// with the log start offset, so a consumer may be told its log was
	// truncated to 0 and read it again: a real rewind, which the checker
	// rightly reports as nonmonotonic-poll. Nothing else may show up.
	for kind, n := range v.Anomalies {
		if kind != checker.NonmonotonicPoll {
			t.Errorf("after %d moves: %d %s; examples %s", moves, n, kind, v.Examples[kind][0].Note)
		}
	}
	if v.Linearizable.Result != "ok" {
		t.Errorf("linearizable: %+v", v.Linearizable)
	}
	if n := v.Anomalies[checker.NonmonotonicPoll]; n > 0 {
		t.Logf("%d consumer rewinds after kfake's truncation answers, e.g. %s", n, v.Examples[checker.NonmonotonicPoll][0].Note)
	}
	if v.Stats.SendsOK != 600 || v.Stats.ReadValues != 600 {
		t.Errorf("sends ok %d (info %d), values read %d", v.Stats.SendsOK, v.Stats.SendsInfo, v.Stats.ReadValues)
	}
	t.Logf("%d leader moves, %d ops", moves, len(m.Ops))
}

func TestConfigFromYAML(t *testing.T) {
	var cfg Config
	doc := "topic: t\npartitions: 6\nacks: \"1\"\nenable.idempotence: false\nretries: -1\nlinger: 5ms\ndelivery.timeout: 2s\ngroup.id: g\nmanual.commit: true\ncrash.every: 1s\n"
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{Topic: "t", Partitions: 6, Acks: "1", Retries: -1, Linger: 5 * time.Millisecond, DeliveryTimeout: 2 * time.Second, Group: "g", ManualCommit: true, CrashEvery: time.Second}
	if cfg != want {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}
}

// TestHistoryFileEndToEnd records a run to a history file the way the lab
// does (Writer behind a Recorder), then checks the file.
func TestHistoryFileEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 2, "e2e")
	path := filepath.Join(t.TempDir(), "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := history.NewWriter(f, history.Header{Run: "e2e", Seed: 1, Topic: "e2e", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := history.NewRecorder(hw, func() time.Duration { return time.Since(start) })
	w, err := NewLog(Config{Topic: "e2e", Partitions: 2, Sends: 100}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(path) }, path, checker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid != checker.Valid || v.Stats.Ops != rec.Count() || v.Stats.SendsOK != 100 || v.Linearizable.Result != "ok" {
		t.Errorf("valid %s, %d ops in file, %d recorded, %d sends ok, lin %s", v.Valid, v.Stats.Ops, rec.Count(), v.Stats.SendsOK, v.Linearizable.Result)
	}
}

// TestDisconnectAfterSendingIsInfo: the broker drops the connection after
// reading every Produce request; the record may or may not have been
// written, so the send is info, never fail.
func TestDisconnectAfterSendingIsInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 1, "drop")
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("drop the connection"), true
	})
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "drop", Partitions: 1, Producers: 1, Consumers: 1, Sends: 2, Retries: -1, DeliveryTimeout: time.Second, RequestTimeout: time.Second}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, op := range m.Ops {
		if op.F == history.FSend && op.Type != history.Invoke {
			n++
			if op.Type != history.Info {
				t.Errorf("send over a dropped connection ended %s (%s)", op.Type, op.Error)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d send completions, want 2", n)
	}
}

// TestDrainOfEmptyTopicIsRecorded: a drain that finds nothing still leaves a
// drain poll in the history, so unseen values count against the verdict.
func TestDrainOfEmptyTopicIsRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c := fakeCluster(t, 2, "empty")
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "empty", Partitions: 2, PollTimeout: 100 * time.Millisecond}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	drains := 0
	for _, op := range m.Ops {
		if op.F == history.FDrain && op.Type == history.OK {
			drains++
		}
	}
	if drains != 1 {
		t.Errorf("%d drain polls, want 1", drains)
	}
}

// initProducerIDNodes makes c record which broker answers each
// InitProducerId; answer, when not nil, replaces kfake's answer.
func initProducerIDNodes(c *kfake.Cluster, answer func(node int32) int64) func() []int32 {
	var mu sync.Mutex
	var nodes []int32
	c.ControlKey(kmsg.InitProducerID.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		node := c.CurrentNode()
		mu.Lock()
		nodes = append(nodes, node)
		mu.Unlock()
		if answer == nil {
			return nil, nil, false
		}
		resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = answer(node), 0
		return resp, nil, true
	})
	return func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(nodes)
	}
}

// TestIdempotentProducersTakeIDsFromDifferentBrokers: each producer of the
// log workload is a client of its own that asks a different broker for its
// producer id.
func TestIdempotentProducersTakeIDsFromDifferentBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	nodes := initProducerIDNodes(c, nil)
	m, rec := recorder()
	w, err := NewLog(Config{Topic: "pids", Partitions: 1, Producers: 3, Consumers: 1, Sends: 90, Idempotent: true}, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	v := runAndCheck(t, w.Run, w.Drain, m)
	if v.Valid != checker.Valid {
		t.Fatalf("verdict %s: %v", v.Valid, v.Anomalies)
	}
	got := nodes()
	slices.Sort(got)
	if !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("InitProducerId answered by brokers %v, want one request to each of 0, 1, 2", got)
	}
}

// TestLogWorkloadCatchesProducerIDsSharedAcrossBrokers: brokers that each
// count producer ids from 0 (isrlab before ids were reserved in the
// coordinator) give the workload's producers one id; their batches then
// pass for duplicates of each other and are acknowledged unwritten. The
// default workload must report lost writes.
func TestLogWorkloadCatchesProducerIDsSharedAcrossBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	next := map[int32]int64{}
	initProducerIDNodes(c, func(node int32) int64 {
		mu.Lock()
		defer mu.Unlock()
		id := next[node]
		next[node]++
		return id
	})
	m, rec := recorder()
	// Paced, so that both producers are sending before the values run out.
	cfg := Config{Topic: "shared", Partitions: 1, Sends: 200, SendInterval: time.Millisecond, Idempotent: true}
	w, err := NewLog(cfg, rec, c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	v := runAndCheck(t, w.Run, w.Drain, m)
	if v.Anomalies[checker.LostWrite] == 0 {
		t.Fatalf("verdict %s, anomalies %v: no lost write with one producer id on two producers", v.Valid, v.Anomalies)
	}
	t.Logf("verdict %s: %d lost writes, e.g. %s", v.Valid, v.Anomalies[checker.LostWrite], v.Examples[checker.LostWrite][0].Note)
}
