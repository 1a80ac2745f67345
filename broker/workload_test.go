package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestLogWorkloadThroughLeaderKill runs the lab's log workload (kgo
// producers and consumers recording every operation) against a 3-broker
// cluster with acks=all and min.insync.replicas=2, SIGKILLs a partition
// leader mid-run and restarts it, drains, and hands the history to the
// checker: the verdict must be valid — no lost, duplicated, reordered or
// phantom records.
func TestLogWorkloadThroughLeaderKill(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 3, Overrides: fastFailover})
	c.CreateTopic("wl", 3, 3, map[string]string{"min.insync.replicas": "2"})
	start := time.Now()
	mem := &countingSink{}
	rec := history.NewRecorder(mem, func() time.Duration { return time.Since(start) })
	cfg := workloads.Config{Topic: "wl", Partitions: 3, Producers: 2, Consumers: 2, Acks: "all", Idempotent: true,
		SendInterval: 2 * time.Millisecond, DeliveryTimeout: 30 * time.Second, Seed: 1}
	w, err := workloads.NewLog(cfg, rec, c.Bootstrap())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	st, _ := c.Describe("wl")
	victim := st[0].Leader
	waitSends(t, mem, rec, 500)
	targets, _ := json.Marshal([]string{fmt.Sprintf("b%d", victim)})
	inv := history.NewOp(history.Nemesis, history.Invoke, "start-kill")
	inv.RawValue = targets
	rec.Record(inv)
	c.Brokers[victim].Kill()
	okOp := history.NewOp(history.Nemesis, history.Info, "start-kill")
	okOp.RawValue = targets
	rec.Record(okOp)
	proctest.Eventually(t, 30*time.Second, "new leader", func() error {
		s, err := c.Describe("wl")
		if err != nil {
			return err
		}
		if s[0].Leader == victim || s[0].Leader < 0 {
			return fmt.Errorf("leader %d", s[0].Leader)
		}
		return nil
	})
	waitSends(t, mem, rec, 1500)
	rec.Record(history.NewOp(history.Nemesis, history.Invoke, "stop-kill"))
	c.Brokers[victim].Restart()
	c.WaitBrokers(3, 60*time.Second)
	rec.Record(history.NewOp(history.Nemesis, history.Info, "stop-kill"))
	waitSends(t, mem, rec, 2500)
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatalf("workload: %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer dcancel()
	if err := w.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	v := checker.CheckOps(mem.mem.Ops, checker.Options{})
	out, _ := json.MarshalIndent(v, "", "  ")
	if v.Valid != checker.Valid {
		t.Fatalf("verdict %v after killing leader b%d:\n%s", v.Valid, victim, out)
	}
	t.Logf("valid history of %d operations through a leader kill: anomalies %v, availability %+v", len(mem.mem.Ops), v.Anomalies, v.Availability)
}

// countingSink keeps the history in memory and counts acknowledged sends.
type countingSink struct {
	mu  sync.Mutex
	mem history.Memory
	ok  int
}

func (s *countingSink) Write(op *history.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if op.Type == history.OK && op.F == "send" {
		s.ok++
	}
	return s.mem.Write(op)
}

func (s *countingSink) acked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok
}

// waitSends waits until n sends have completed ok.
func waitSends(t *testing.T, mem *countingSink, _ *history.Recorder, n int) {
	t.Helper()
	proctest.Eventually(t, 60*time.Second, fmt.Sprintf("%d acknowledged sends", n), func() error {
		ok := mem.acked()
		if ok < n {
			return fmt.Errorf("%d acknowledged", ok)
		}
		return nil
	})
}
