package controller

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// TestAlterPartitionBatch sends one AlterPartition with more partitions
// than one coordinator Txn holds, one of them with a stale partition
// epoch: that one is INVALID_UPDATE_VERSION, every other is written (the
// ones sharing its Txn are tried again) and answered with its new state,
// and every broker learns the new ISRs.
func TestAlterPartitionBatch(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	c := e.startController(100, nil)
	const parts = coord.MaxTxnOps + 40
	assign := map[int32][]int32{}
	for p := range int32(parts) {
		assign[p] = []int32{1, 2, 3}
	}
	e.createTopic("t", assign, nil)
	e.waitLAI(1, tp("t", parts-1), 1, ids(1, 2, 3), 0)
	states, err := e.admin.PartitionStates(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	const stale = 3
	req := kmsg.NewPtrAlterPartitionRequest()
	req.SetVersion(1)
	req.BrokerID, req.BrokerEpoch = 1, e.regs[1].Epoch()
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.Topic = "t"
	for p := range int32(parts) {
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.NewISR, rp.PartitionEpoch = p, 0, ids(1, 2), int32(states[p].Version)
		if p == stale {
			rp.PartitionEpoch--
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := c.ctrl.AlterPartition(context.Background(), req)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != parts {
		t.Fatalf("response: %v, %+v", kerr.ErrorForCode(resp.ErrorCode), resp.Topics)
	}
	after, err := e.admin.PartitionStates(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range resp.Topics[0].Partitions {
		p := int32(i)
		if pr.Partition != p {
			t.Fatalf("answer %d is for partition %d", i, pr.Partition)
		}
		if p == stale {
			if pr.ErrorCode != kerr.InvalidUpdateVersion.Code || !slices.Equal(after[p].ISR, ids(1, 2, 3)) {
				t.Fatalf("stale partition: %v, stored ISR %v", kerr.ErrorForCode(pr.ErrorCode), after[p].ISR)
			}
			continue
		}
		if pr.ErrorCode != 0 || !slices.Equal(pr.ISR, ids(1, 2)) || pr.PartitionEpoch != int32(after[p].Version) || !slices.Equal(after[p].ISR, ids(1, 2)) {
			t.Fatalf("partition %d: %v, answer %+v, stored %+v", p, kerr.ErrorForCode(pr.ErrorCode), pr, after[p])
		}
	}
	for _, id := range []int32{1, 2, 3} {
		e.waitUMISR(id, tp("t", 0), ids(1, 2))
		e.waitUMISR(id, tp("t", parts-1), ids(1, 2))
	}
}

// TestFailoverManyTopics: a new controller reads the states of more topics
// than one batched read holds and sends every broker each partition's
// state as the previous controller left it.
func TestFailoverManyTopics(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	first := e.startController(100, nil)
	const topics = coord.MaxTxnOps + 23 // (topics-1)%3 == 0
	for i := range topics {
		r := int32(i % 3)
		e.createTopic(fmt.Sprintf("t%03d", i), map[int32][]int32{0: {1 + r, 1 + (r+1)%3, 1 + (r+2)%3}, 1: {1 + (r+1)%3, 1 + (r+2)%3, 1 + r}}, nil)
	}
	last := fmt.Sprintf("t%03d", topics-1)
	e.waitLAI(1, tp(last, 0), 1, ids(1, 2, 3), 0) // (topics-1)%3 == 0: replicas 1, 2, 3
	// The first controller sees broker 3 die: its partitions get new leaders.
	e.kill(3)
	e.waitState(tp(last, 0), 1, ids(1, 2), 1)
	proctest.Eventually(t, 30*time.Second, "condition", func() error {
		for i := range topics {
			for p := range int32(2) {
				st, err := e.admin.PartitionState(context.Background(), fmt.Sprintf("t%03d", i), p)
				if err != nil {
					return err
				}
				if st.Leader == 3 || slices.Contains(st.ISR, 3) {
					return fmt.Errorf("t%03d-%d: %+v", i, p, st)
				}
			}
		}
		return nil
	})
	if err := first.l.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := e.startController(101, nil)
	for i := range topics {
		name := fmt.Sprintf("t%03d", i)
		for p := range int32(2) {
			st, err := e.admin.PartitionState(context.Background(), name, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []int32{1, 2} {
				proctest.Eventually(t, 30*time.Second, "condition", func() error {
					lai, req, ok := e.brokers[id].lastLAI(tp(name, p))
					if !ok || req.ControllerEpoch != int32(second.l.Epoch()) {
						return fmt.Errorf("broker %d: no LeaderAndIsr for %s-%d from epoch %d", id, name, p, second.l.Epoch())
					}
					if lai.Leader != st.Leader || lai.LeaderEpoch != st.LeaderEpoch || !slices.Equal(lai.ISR, st.ISR) || lai.ZKVersion != int32(st.Version) {
						return fmt.Errorf("broker %d: %s-%d %+v, stored %+v", id, name, p, lai, st)
					}
					return nil
				})
			}
		}
	}
}

// TestManyTopicsAtOnce: topics written in quick succession reach the
// controller in a few snapshots; each of their partitions is initialized
// with its preferred leader and announced to its replicas.
func TestManyTopicsAtOnce(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	e.startController(100, nil)
	const topics = 60
	for i := range topics {
		r := int32(i % 3)
		e.createTopic(fmt.Sprintf("n%02d", i), map[int32][]int32{0: {1 + r, 1 + (r+1)%3}, 1: {1 + (r+1)%3, 1 + (r+2)%3}, 2: {1 + (r+2)%3, 1 + r}}, nil)
	}
	for i := range topics {
		r := int32(i % 3)
		name := fmt.Sprintf("n%02d", i)
		for p, rs := range [][]int32{{1 + r, 1 + (r+1)%3}, {1 + (r+1)%3, 1 + (r+2)%3}, {1 + (r+2)%3, 1 + r}} {
			e.waitState(tp(name, int32(p)), rs[0], rs, 0)
			for _, id := range rs {
				e.waitLAI(id, tp(name, int32(p)), rs[0], rs, 0)
			}
		}
	}
}

// TestGaugesAfterBurst: during a burst of events the partition gauges are
// recomputed at most once per gaugeInterval; when the burst ends they
// still settle on the cluster's state.
func TestGaugesAfterBurst(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	reg := prometheus.NewRegistry()
	c := e.startController(100, func(cfg *Config) { cfg.Registerer = reg })
	const parts = 40
	assign := map[int32][]int32{}
	for p := range int32(parts) {
		assign[p] = []int32{1 + p%2, 2 - p%2}
	}
	e.createTopic("g", assign, nil)
	e.waitLAI(1, tp("g", parts-1), 2, ids(2, 1), 0)
	// A burst: one AlterPartition event per partition, each a no-op
	// answered with the current state.
	states, err := e.admin.PartitionStates(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.SetVersion(1)
		req.BrokerID, req.BrokerEpoch = assign[p][0], e.regs[assign[p][0]].Epoch()
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.Topic = "g"
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.NewISR, rp.PartitionEpoch = p, assign[p], int32(states[p].Version)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if resp := c.ctrl.AlterPartition(context.Background(), req); resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("AlterPartition %d: %v", p, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
		}
	}
	// Brokers 1 and 2 hold every replica: without them all are offline.
	e.kill(1)
	e.kill(2)
	proctest.Eventually(t, 10*time.Second, "condition", func() error {
		if g, o := metricValue(c.ctrl.metrics.global), metricValue(c.ctrl.metrics.offline); g != parts || o != parts {
			return fmt.Errorf("GlobalPartitionCount %v, OfflinePartitionsCount %v, want %d and %d", g, o, parts, parts)
		}
		return nil
	})
}

// TestISRChangeNotificationBatch: leaders' own ISR writes (Kafka <= 2.6)
// for partitions of several topics, notified together, reach every broker
// in UpdateMetadata with the written ISRs.
func TestISRChangeNotificationBatch(t *testing.T) {
	e := newEnv(t, 1, 2, 3)
	e.startController(100, nil)
	var tps []coord.TopicPartition
	for i := range 5 {
		name := fmt.Sprintf("i%d", i)
		e.createTopic(name, map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}, nil)
		tps = append(tps, tp(name, 0), tp(name, 1))
	}
	for _, p := range tps {
		st := e.waitState(p, p.Partition+1, map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}[p.Partition], 0)
		st.ISR = st.ISR[:2]
		if _, err := e.admin.SetPartitionStates(context.Background(), nil, []coord.PartitionStateUpdate{
			{Topic: p.Topic, Partition: p.Partition, State: st, ExpectedVersion: st.Version},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.admin.NotifyISRChange(context.Background(), tps); err != nil {
		t.Fatal(err)
	}
	for _, p := range tps {
		want := map[int32][]int32{0: {1, 2}, 1: {2, 3}}[p.Partition]
		for _, r := range []int32{1, 2, 3} {
			e.waitUMISR(r, p, want)
		}
	}
}
