package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestTxnWorkloadConsumerProtocol runs a txn scenario's workload in group
// mode (txn.group.id) with client.config group.protocol consumer and
// group.remote.assignor range, as the lab's driver builds it (newWorkload),
// against one isrlab broker process with the consumer group protocol
// enabled. While it runs, ConsumerGroupDescribe must describe the
// workload's group as a consumer-protocol group with members and the range
// assignor (a classic group is GROUP_ID_NOT_FOUND there); the history must
// check valid, with offsets committed in transactions.
func TestTxnWorkloadConsumerProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	const group = "etl-848"
	sc, err := Parse("x.yaml", "x", []byte(`topic: {name: isrlab, partitions: 3}
workload:
  type: txn
  producers: 2
  consumers: 1
  send.interval: 5ms
  transaction.timeout: 15s
  txn.abort.ratio: 0.1
  txn.poll.ratio: 0.5
  txn.group.id: `+group+`
  client.config: {group.protocol: consumer, group.remote.assignor: range}
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePorts(t, 1)[0])
	args := []string{"broker", "--override", "log.dirs=" + filepath.Join(dir, "data"), "--override", "listeners=PLAINTEXT://" + addr}
	for _, o := range []string{"group.coordinator.rebalance.protocols=classic,consumer", "group.initial.rebalance.delay.ms=0",
		"offsets.topic.num.partitions=2", "transaction.state.log.num.partitions=2"} {
		args = append(args, "--override", o)
	}
	p := proctest.Start(t, dir, "broker", args...)
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if err := proctest.WaitTCP(wctx, addr); err != nil {
		t.Fatalf("%v\n%s", err, proctest.Tail(p.Log(), 20))
	}
	seeds := []string{addr}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, sc.Topic.Name); err != nil {
		t.Fatal(err)
	}

	var m history.Memory
	start := time.Now()
	rec := history.NewRecorder(&m, func() time.Duration { return time.Since(start) })
	wk := sc.Workload
	wk.Config.Sends, wk.Config.Seed = 300, 5
	w, err := newWorkload(wk, clientRun{}, rec, nil, nil, seeds)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.(*workloads.Txn); !ok {
		t.Fatalf("workload.type txn runs %T", w)
	}

	// Describe the group while the workload runs.
	var (
		mu        sync.Mutex
		described kadm.DescribedConsumerGroup
	)
	watch, unwatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watch.Err() == nil {
			ds, err := adm.DescribeConsumerGroups(watch, group)
			if d, ok := ds[group]; err == nil && ok && d.Err == nil && len(d.Members) > 0 {
				mu.Lock()
				described = d
				mu.Unlock()
			}
			select {
			case <-watch.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	err = w.Run(ctx)
	unwatch()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if described.Epoch == 0 || described.AssignorName != "range" {
		t.Errorf("the workload's group was never described as a consumer-protocol group with members and the range assignor: %+v", described)
	}
	for _, mem := range described.Members {
		if len(mem.SubscribedTopics) != 1 || mem.SubscribedTopics[0] != sc.Topic.Name {
			t.Errorf("member %s subscribes to %v", mem.MemberID, mem.SubscribedTopics)
		}
	}

	v := checker.CheckOps(m.Ops, checker.Options{})
	if v.Valid != checker.Valid {
		t.Fatalf("verdict %s: anomalies %v notes %q", v.Valid, v.Anomalies, v.Notes)
	}
	if st := v.Stats.Txn; st == nil || st.OK == 0 || st.Polls == 0 {
		t.Fatalf("txn stats %+v", st)
	}
	sendOffsets := 0
	for _, op := range m.Ops {
		if op.F != history.FTxn || op.Type != history.OK {
			continue
		}
		for _, mo := range op.Txn {
			if mo.F == history.MSendOffsets && mo.Group == group && len(mo.Offsets) > 0 {
				sendOffsets++
			}
		}
	}
	if sendOffsets == 0 {
		t.Error("no committed transaction committed the group's offsets")
	}
}
