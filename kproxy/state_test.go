package kproxy

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/units"
)

func newTestState(t testing.TB, rules ...Rule) (*Proxy, *pairState) {
	t.Helper()
	p := newProxy(Options{Seed: 1})
	for _, r := range rules {
		if err := p.Set(r); err != nil {
			t.Fatal(err)
		}
	}
	return p, newPairState(p, slog.New(slog.DiscardHandler))
}

func produceReq(version int16, corr int32, acks int16, topic string, txn *string) []byte {
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(version)
	r.Acks = acks
	r.TransactionID = txn
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = 0
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	return appendRequest(r, corr, "c")
}

func produceResp(version int16, corr int32, topic string) []byte {
	r := kmsg.NewPtrProduceResponse()
	r.SetVersion(version)
	rt := kmsg.NewProduceResponseTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceResponseTopicPartition()
	rp.BaseOffset = 10
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	return appendResponse(r, corr)
}

func metadataReq(version int16, corr int32) []byte {
	r := kmsg.NewPtrMetadataRequest()
	r.SetVersion(version)
	return appendRequest(r, corr, "c")
}

func metadataResp(version int16, corr int32) []byte {
	r := kmsg.NewPtrMetadataResponse()
	r.SetVersion(version)
	return appendResponse(r, corr)
}

func mustRequest(t *testing.T, s *pairState, raw []byte) reqPlan {
	t.Helper()
	plan, err := s.onRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func mustResponse(t *testing.T, s *pairState, raw []byte) {
	t.Helper()
	if err := s.onResponse(raw); err != nil {
		t.Fatal(err)
	}
}

// drain takes the queued client items.
func drain(s *pairState) []outItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.out
	s.out = nil
	return out
}

func corrOf(t *testing.T, it outItem) int32 {
	t.Helper()
	if len(it.frame) < 8 {
		t.Fatalf("item %+v has no frame", it)
	}
	return int32(binary.BigEndian.Uint32(it.frame[4:]))
}

func TestStateForwardsUnchangedInOrder(t *testing.T) {
	_, s := newTestState(t)
	reqs := [][]byte{metadataReq(12, 1), produceReq(9, 2, -1, "t", nil), produceReq(9, 3, 0, "t", nil), metadataReq(4, 4)}
	for _, r := range reqs {
		if plan := mustRequest(t, s, r); plan.forward != 1 || plan.delay != 0 || plan.close {
			t.Fatalf("plan %+v without rules", plan)
		}
	}
	if len(s.fifo) != 3 {
		t.Fatalf("%d in flight, want 3 (acks=0 expects no response)", len(s.fifo))
	}
	resps := [][]byte{metadataResp(12, 1), produceResp(9, 2, "t"), metadataResp(4, 4)}
	for _, r := range resps {
		mustResponse(t, s, r)
	}
	out := drain(s)
	if len(out) != 3 || len(s.fifo) != 0 {
		t.Fatalf("%d out, %d in flight", len(out), len(s.fifo))
	}
	for i, it := range out {
		if !bytes.Equal(it.frame, resps[i]) || !it.fromBroker || it.delay != 0 || it.close {
			t.Fatalf("response %d changed: %+v", i, it)
		}
	}
}

func TestStateUnmatchedResponseForwarded(t *testing.T) {
	_, s := newTestState(t, Rule{ID: "e", API: "Metadata", Action: "error", Error: "NOT_CONTROLLER"})
	mustRequest(t, s, metadataReq(9, 5))
	stray := metadataResp(9, 99)
	mustResponse(t, s, stray)
	out := drain(s)
	if len(out) != 1 || !bytes.Equal(out[0].frame, stray) || len(s.fifo) != 1 {
		t.Fatalf("stray response: %d out, %d in flight", len(out), len(s.fifo))
	}
	// A response to a later request forgets the ones before it.
	mustRequest(t, s, metadataReq(9, 6))
	mustResponse(t, s, metadataResp(9, 6))
	if len(s.fifo) != 0 {
		t.Fatalf("%d in flight after resync", len(s.fifo))
	}
	if err := s.onResponse([]byte{0, 0, 0, 1, 0}); err == nil {
		t.Fatal("a response without a correlation id is not an error")
	}
}

func TestStateRequestActions(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) {
		p, s := newTestState(t, Rule{ID: "d", API: "Produce", Direction: "request", Action: "duplicate"})
		if plan := mustRequest(t, s, produceReq(7, 1, -1, "t", nil)); plan.forward != 2 {
			t.Fatalf("plan %+v", plan)
		}
		mustResponse(t, s, produceResp(7, 1, "t"))
		mustResponse(t, s, produceResp(7, 1, "t"))
		if out := drain(s); len(out) != 1 || corrOf(t, out[0]) != 1 {
			t.Fatalf("client got %d responses, want 1", len(out))
		}
		if st := p.Status().Rules[0]; st.Matched != 1 || st.Acted != 1 {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("drop", func(t *testing.T) {
		_, s := newTestState(t, Rule{ID: "d", API: "Produce", Direction: "request", Action: "drop", Count: 1})
		if plan := mustRequest(t, s, produceReq(7, 1, -1, "t", nil)); plan.forward != 0 {
			t.Fatalf("plan %+v", plan)
		}
		if plan := mustRequest(t, s, produceReq(7, 2, -1, "t", nil)); plan.forward != 1 {
			t.Fatalf("second request: plan %+v (count 1)", plan)
		}
		if len(s.fifo) != 1 || s.fifo[0].corr != 2 {
			t.Fatalf("in flight %+v", s.fifo)
		}
	})
	t.Run("delay and close", func(t *testing.T) {
		_, s := newTestState(t,
			Rule{ID: "slow", API: "Metadata", Direction: "request", Action: "delay", Delay: units.Duration(time.Second)},
			Rule{ID: "cut", API: "Produce", Direction: "request", Action: "close"})
		if plan := mustRequest(t, s, metadataReq(9, 1)); plan.delay != time.Second || plan.forward != 1 {
			t.Fatalf("plan %+v", plan)
		}
		if plan := mustRequest(t, s, produceReq(9, 2, -1, "t", nil)); !plan.close || plan.forward != 0 {
			t.Fatalf("plan %+v", plan)
		}
	})
	t.Run("error waits its turn", func(t *testing.T) {
		_, s := newTestState(t, Rule{ID: "e", API: "Produce", Direction: "request", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER"})
		mustRequest(t, s, metadataReq(9, 1))
		if plan := mustRequest(t, s, produceReq(9, 2, -1, "t", nil)); plan.forward != 0 {
			t.Fatalf("plan %+v", plan)
		}
		if out := drain(s); len(out) != 0 {
			t.Fatal("the made-up response overtook the one before it")
		}
		mustResponse(t, s, metadataResp(9, 1))
		out := drain(s)
		if len(out) != 2 || corrOf(t, out[0]) != 1 || corrOf(t, out[1]) != 2 {
			t.Fatalf("client got %d items", len(out))
		}
		resp := decodeResponse(t, out[1].frame, 0, 9).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || resp.Topics[0].Topic != "t" || resp.Topics[0].Partitions[0].ErrorCode != 6 {
			t.Fatalf("made-up response %+v", resp)
		}
		// With nothing in flight, it goes out at once; acks=0 gets none.
		mustRequest(t, s, produceReq(9, 3, -1, "t", nil))
		mustRequest(t, s, produceReq(9, 4, 0, "t", nil))
		if out := drain(s); len(out) != 1 || corrOf(t, out[0]) != 3 || len(s.fifo) != 0 {
			t.Fatalf("client got %d items, %d in flight", len(out), len(s.fifo))
		}
	})
}

func TestStateResponseActions(t *testing.T) {
	p, s := newTestState(t,
		Rule{ID: "drop", API: "Produce", Action: "drop", Count: 1},
		Rule{ID: "err", API: "Produce", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER", Count: 1},
		Rule{ID: "slow", API: "Produce", Action: "delay", Delay: units.Duration(time.Second), Count: 1},
		Rule{ID: "cut", API: "Produce", Action: "close", Count: 1})
	for corr := int32(1); corr <= 5; corr++ {
		mustRequest(t, s, produceReq(9, corr, -1, "t", nil))
	}
	for corr := int32(1); corr <= 5; corr++ {
		mustResponse(t, s, produceResp(9, corr, "t"))
	}
	out := drain(s)
	if len(out) != 4 {
		t.Fatalf("%d items, want 4 (one response dropped)", len(out))
	}
	if corrOf(t, out[0]) != 2 {
		t.Fatalf("first item is corr %d, want 2 (1 dropped)", corrOf(t, out[0]))
	}
	if resp := decodeResponse(t, out[0].frame, 0, 9).(*kmsg.ProduceResponse); resp.Topics[0].Partitions[0].ErrorCode != 6 {
		t.Fatalf("response 2 not rewritten: %+v", resp)
	}
	if corrOf(t, out[1]) != 3 || out[1].delay != time.Second {
		t.Fatalf("response 3 not delayed: %+v", out[1])
	}
	if !out[2].close || out[2].frame != nil {
		t.Fatalf("response 4 not a close: %+v", out[2])
	}
	if corrOf(t, out[3]) != 5 || out[3].delay != 0 || !bytes.Equal(out[3].frame, produceResp(9, 5, "t")) {
		t.Fatalf("response 5 changed: %+v", out[3])
	}
	for _, rs := range p.Status().Rules {
		if rs.Acted != 1 {
			t.Errorf("rule %s acted %d times, want 1", rs.ID, rs.Acted)
		}
	}
}

func TestStateFilters(t *testing.T) {
	txn := "tx-1"
	p, s := newTestState(t,
		Rule{ID: "topic", API: "Produce", Direction: "request", Action: "drop", Topic: "hit"},
		Rule{ID: "txn", API: "EndTxn", Action: "drop", TransactionalID: txn},
		Rule{ID: "ptxn", API: "Produce", Action: "drop", TransactionalID: txn})
	if plan := mustRequest(t, s, produceReq(9, 1, -1, "miss", nil)); plan.forward != 1 {
		t.Fatal("topic filter matched another topic")
	}
	if plan := mustRequest(t, s, produceReq(9, 2, -1, "hit", nil)); plan.forward != 0 {
		t.Fatal("topic filter missed its topic")
	}
	mustRequest(t, s, produceReq(3, 3, -1, "miss", &txn))
	if s.fifo[len(s.fifo)-1].resp == nil {
		t.Fatal("produce v3 transactional id filter missed")
	}
	for i, id := range []string{"other", txn} {
		r := kmsg.NewPtrEndTxnRequest()
		r.SetVersion(3)
		r.TransactionalID = id
		mustRequest(t, s, appendRequest(r, int32(10+i), "c"))
	}
	if s.fifo[len(s.fifo)-2].resp != nil || s.fifo[len(s.fifo)-1].resp == nil {
		t.Fatal("EndTxn transactional id filter wrong")
	}
	st := p.Status()
	want := map[string][2]int64{"topic": {1, 1}, "txn": {1, 1}, "ptxn": {1, 1}}
	for _, rs := range st.Rules {
		if got := [2]int64{rs.Matched, rs.Acted}; got != want[rs.ID] {
			t.Errorf("rule %s matched, acted %v, want %v", rs.ID, got, want[rs.ID])
		}
	}
}

func TestProbabilityAndCount(t *testing.T) {
	p, s := newTestState(t,
		Rule{ID: "half", API: "Metadata", Direction: "request", Action: "drop", Probability: 0.5},
		Rule{ID: "two", API: "Produce", Direction: "request", Action: "drop", Count: 2})
	for i := int32(0); i < 200; i++ {
		mustRequest(t, s, metadataReq(9, i))
		mustRequest(t, s, produceReq(9, 1000+i, -1, "t", nil))
	}
	st := p.Status()
	if h := st.Rules[0]; h.Matched != 200 || h.Acted < 50 || h.Acted > 150 {
		t.Fatalf("probability 0.5: %+v", h)
	}
	if c := st.Rules[1]; c.Matched != 200 || c.Acted != 2 {
		t.Fatalf("count 2: %+v", c)
	}
	// The same seed draws the same.
	p2, s2 := newTestState(t, Rule{ID: "half", API: "Metadata", Direction: "request", Action: "drop", Probability: 0.5})
	for i := int32(0); i < 200; i++ {
		mustRequest(t, s2, metadataReq(9, i))
	}
	if a, b := st.Rules[0].Acted, p2.Status().Rules[0].Acted; a != b {
		t.Fatalf("seed 1 acted %d then %d times", a, b)
	}
}

// FuzzFrames feeds arbitrary bytes as request and response frames to the
// rule engine and the protocol state: it must never panic.
func FuzzFrames(f *testing.F) {
	f.Add(produceReq(9, 1, -1, "t", nil)[4:], produceResp(9, 1, "t")[4:])
	f.Add(produceReq(3, 2, 1, "t", kmsg.StringPtr("x"))[4:], produceResp(3, 2, "t")[4:])
	f.Add(metadataReq(12, 3)[4:], metadataResp(12, 3)[4:])
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0}, []byte{0, 0, 0, 1, 0x7f})
	f.Add([]byte{0, 1, 0, 16, 0, 0, 0, 1, 0, 0, 3, 1, 1}, []byte{0, 0, 0, 1, 5, 1, 2})
	f.Add([]byte{0, 7, 0, 0, 0, 0, 0, 1}, []byte{})
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		_, s := newTestState(t,
			Rule{ID: "a", API: "Produce", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER", Probability: 0.5},
			Rule{ID: "b", API: "Produce", Direction: "request", Action: "error", Error: "CORRUPT_MESSAGE", Probability: 0.5},
			Rule{ID: "c", API: "Produce", Direction: "request", Action: "duplicate", Topic: "t", Probability: 0.5},
			Rule{ID: "d", API: "Fetch", Action: "error", Error: "FENCED_LEADER_EPOCH", Topic: "t"},
			Rule{ID: "e", API: "Metadata", Action: "close", Probability: 0.5},
			Rule{ID: "f", API: "EndTxn", Action: "error", Error: "INVALID_TXN_STATE", TransactionalID: "x"},
			Rule{ID: "g", API: "OffsetFetch", Action: "error", Error: "COORDINATOR_NOT_AVAILABLE"})
		for range 3 {
			if _, err := s.onRequest(withSize(req)); err != nil {
				break
			}
		}
		_ = s.onResponse(withSize(resp))
		if len(req) >= 8 {
			// A response to that request: its correlation id, then resp.
			matched := append(append([]byte(nil), req[4:8]...), resp...)
			_ = s.onResponse(withSize(matched))
			_ = s.onResponse(withSize(matched))
			key := int16(binary.BigEndian.Uint16(req))
			version := int16(binary.BigEndian.Uint16(req[2:]))
			_, _ = rewriteErrors(matched, key, version, 6)
		}
		_, _ = parseProduce(int16(len(resp)%16), resp)
		_, _ = produceErrorResponse(1, int16(len(req)%16), resp, 6)
		_ = drain(s)
	})
}
