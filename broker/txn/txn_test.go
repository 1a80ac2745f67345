package txn

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, version := range []int16{0, 1} {
		for _, r := range []record{
			{producerID: 5, lastProducerID: 4, nextProducerID: -1, epoch: 2, timeoutMs: 60000, state: Empty, partitions: map[TopicPartition]bool{}, startMs: -1, updateMs: 9},
			{producerID: 5, lastProducerID: 4, nextProducerID: -1, epoch: 2, timeoutMs: 60000, state: PrepareCommit, partitions: map[TopicPartition]bool{{"a", 1}: true, {"a", 0}: true, {"b", 3}: true}, startMs: 7, updateMs: 9},
			// KIP-890 part 2: a PrepareCommit at the last epoch, with the
			// next producer id, by a transaction.version 2 client.
			{producerID: 5, lastProducerID: 5, nextProducerID: 6, tv2: true, epoch: math.MaxInt16, timeoutMs: 60000, state: PrepareCommit, partitions: map[TopicPartition]bool{{"a", 0}: true}, startMs: 7, updateMs: 9},
		} {
			got, err := parseValue(encodeValue(r, version))
			if err != nil {
				t.Fatal(err)
			}
			if version == 0 {
				// v0 stores none of them, as in Kafka 3.7.
				r.lastProducerID, r.nextProducerID, r.tv2 = -1, -1, false
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("v%d: got %+v want %+v", version, got, r)
			}
		}
	}
	id, err := parseKey(encodeKey("tx-é"))
	if err != nil || id != "tx-é" {
		t.Fatalf("key: %q %v", id, err)
	}
	// Kafka's layout: int16 version 0, then the id as a length-prefixed string.
	if k := encodeKey("ab"); !bytes.Equal(k, []byte{0, 0, 0, 2, 'a', 'b'}) {
		t.Fatalf("key bytes %v", k)
	}
	// An Empty transaction has a null partition list.
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(encodeValue(record{state: Empty}, 0)); err != nil || v.Topics != nil {
		t.Fatalf("Empty value topics %v (%v)", v.Topics, err)
	}
	for _, bad := range [][]byte{nil, {0}, {0, 9}, {0, 1, 'x'}} {
		if _, err := parseKey(bad); err == nil {
			t.Errorf("key %v accepted", bad)
		}
		if _, err := parseValue(bad); err == nil {
			t.Errorf("value %v accepted", bad)
		}
	}
}

// FuzzRecord: the __transaction_state decoder never panics, and what it
// accepts encodes back to a value it decodes the same.
func FuzzRecord(f *testing.F) {
	f.Add(encodeKey("tx"), encodeValue(record{producerID: 1, epoch: 0, timeoutMs: 1000, state: Ongoing, partitions: map[TopicPartition]bool{{"t", 0}: true}, startMs: 1, updateMs: 2}, 0))
	f.Add(encodeKey(""), encodeValue(record{state: Empty, lastProducerID: 3, nextProducerID: -1}, 1))
	f.Add(encodeKey("tx"), encodeValue(record{producerID: 1, lastProducerID: 1, nextProducerID: 2, tv2: true, epoch: math.MaxInt16, timeoutMs: 1000, state: PrepareAbort, partitions: map[TopicPartition]bool{{"t", 0}: true}, startMs: 1, updateMs: 2}, 1))
	f.Add([]byte{0, 0}, []byte{0, 1, 0xff})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		if id, err := parseKey(key); err == nil {
			if back, err := parseKey(encodeKey(id)); err != nil || back != id {
				t.Fatalf("key %q re-decoded as %q (%v)", id, back, err)
			}
		}
		r, err := parseValue(value)
		if err != nil {
			return
		}
		for _, version := range []int16{0, 1} {
			back, err := parseValue(encodeValue(r, version))
			if err != nil {
				t.Fatalf("re-encoded v%d value: %v", version, err)
			}
			want := r
			if version == 0 {
				want.lastProducerID, want.nextProducerID, want.tv2 = -1, -1, false
			}
			if !reflect.DeepEqual(back, want) {
				t.Fatalf("v%d: %+v re-decoded as %+v", version, want, back)
			}
		}
	})
}

func initReq(id string, pid int64, epoch int16, version int16) *kmsg.InitProducerIDRequest {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(version)
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return req
}

// TestEpochExhaustion: an exhausted epoch gets a new producer id at
// epoch 0; a KIP-360 retry with the old id and its exhausted epoch gets
// the new id again (Kafka's isValidProducerId).
func TestEpochExhaustion(t *testing.T) {
	h := newHarness(t, testConfig(), func(string, ...any) {})
	h.lead(0)
	ctx := context.Background()
	if r := h.m.InitProducerID(ctx, initReq("x", -1, -1, 4)); r.ErrorCode != 0 || r.ProducerID != 1000 {
		t.Fatalf("first init: %+v", r)
	}
	h.m.mu.Lock()
	h.m.txns["x"].epoch = math.MaxInt16 - 2
	h.m.mu.Unlock()
	r := h.m.InitProducerID(ctx, initReq("x", -1, -1, 4))
	if r.ErrorCode != 0 || r.ProducerID != 1000 || r.ProducerEpoch != math.MaxInt16-1 {
		t.Fatalf("bump to the last epoch: %+v", r)
	}
	r = h.m.InitProducerID(ctx, initReq("x", 1000, math.MaxInt16-1, 4))
	if r.ErrorCode != 0 || r.ProducerID != 1001 || r.ProducerEpoch != 0 {
		t.Fatalf("exhausted: %+v, want producer 1001 epoch 0", r)
	}
	// The retry of that call, from a producer that missed the answer,
	// gets the same answer.
	r = h.m.InitProducerID(ctx, initReq("x", 1000, math.MaxInt16-1, 4))
	if r.ErrorCode != 0 || r.ProducerID != 1001 || r.ProducerEpoch != 0 {
		t.Fatalf("retry after rotation: %+v", r)
	}
	// The old id at another epoch is fenced.
	if r := h.m.InitProducerID(ctx, initReq("x", 1000, 5, 4)); r.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("old id: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// TestProducerIDUnavailable: without a producer id block the answer is
// retriable.
func TestProducerIDUnavailable(t *testing.T) {
	h := newHarness(t, testConfig(), func(string, ...any) {})
	h.lead(0)
	h.ids.fail = errors.New("no quorum")
	if r := h.m.InitProducerID(context.Background(), initReq("x", -1, -1, 4)); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("%v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// TestLoadInProgress: requests wait for the load with
// COORDINATOR_LOAD_IN_PROGRESS.
func TestLoadInProgress(t *testing.T) {
	h := newHarness(t, testConfig(), func(string, ...any) {})
	gate := make(chan struct{})
	h.log.SetGate(gate)
	h.m.OnBecomeLeader(0, 0)
	if r := h.m.InitProducerID(context.Background(), initReq("x", -1, -1, 4)); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("init while loading: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := h.m.ListTransactions(kmsg.NewPtrListTransactionsRequest()); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("list while loading: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	close(gate)
	h.m.owned.Wait()
	if r := h.m.InitProducerID(context.Background(), initReq("x", -1, -1, 4)); r.ErrorCode != 0 {
		t.Fatalf("init after load: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// TestVerifyBatched: one AddPartitionsToTxn v4 from a partition leader
// carries several transactions, each answered on its own.
func TestVerifyBatched(t *testing.T) {
	h := newHarness(t, testConfig(), func(string, ...any) {})
	h.lead(0)
	ctx := context.Background()
	a := h.m.InitProducerID(ctx, initReq("a", -1, -1, 4))
	b := h.m.InitProducerID(ctx, initReq("b", -1, -1, 4))
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.SetVersion(3)
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "a", a.ProducerID, a.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	if c := h.m.AddPartitionsToTxn(add).Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.SetVersion(4)
	for _, tx := range []struct {
		id    string
		pid   int64
		epoch int16
	}{{"a", a.ProducerID, a.ProducerEpoch}, {"b", b.ProducerID, b.ProducerEpoch}, {"a", a.ProducerID, a.ProducerEpoch + 1}} {
		rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
		rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, rt.VerifyOnly = tx.id, tx.pid, tx.epoch, true
		rt.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: "t", Partitions: []int32{0}}}
		req.Transactions = append(req.Transactions, rt)
	}
	resp := h.m.AddPartitionsToTxn(req)
	var got []int16
	for _, r := range resp.Transactions {
		got = append(got, r.Topics[0].Partitions[0].ErrorCode)
	}
	want := []int16{0, kerr.InvalidTxnState.Code, kerr.ProducerFenced.Code}
	if !reflect.DeepEqual(got, want) || resp.ErrorCode != 0 {
		t.Fatalf("codes %v (top %d), want %v", got, resp.ErrorCode, want)
	}
}
