package broker

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/txn"
)

var txnClusterOverrides = []string{
	"transaction.state.log.num.partitions=4",
	"offsets.topic.num.partitions=4",
	"group.initial.rebalance.delay.ms=0",
}

// txnStates reads __transaction_state and returns, per transactional id,
// the states its records hold in order, decoded as Kafka's TransactionLog
// key and value.
func txnStates(t *testing.T, tc *testCluster) map[string][]string {
	t.Helper()
	cl := tc.client(kgo.ConsumeTopics(txn.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out
		}
		fs.EachRecord(func(r *kgo.Record) {
			var k kmsg.TxnMetadataKey
			if err := k.ReadFrom(r.Key); err != nil {
				t.Fatalf("key at %d: %v", r.Offset, err)
			}
			if r.Value == nil {
				out[k.TransactionalID] = append(out[k.TransactionalID], "tombstone")
				return
			}
			v := kmsg.NewTxnMetadataValue()
			if err := v.ReadFrom(r.Value); err != nil {
				t.Fatalf("value at %d: %v", r.Offset, err)
			}
			out[k.TransactionalID] = append(out[k.TransactionalID], fmt.Sprintf("%s/%d/%d", v.State, v.ProducerEpoch, len(v.Topics)))
		})
	}
}

// TestTransactionalProducer runs franz-go's transactional producer
// against three brokers: InitProducerId, AddPartitionsToTxn and EndTxn
// reach the coordinator found with FindCoordinator key type 1, and
// __transaction_state holds each step in Kafka's format.
func TestTransactionalProducer(t *testing.T) {
	tc := startCluster(t, 3, txnClusterOverrides...)
	admin := tc.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createTopicRF(t, tc.bootstrap()[0], "txt", 3, 3)
	tc.waitMetadataEverywhere("txt", 3, 3)

	p := tc.client(kgo.TransactionalID("tx-1"), kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic("txt"))
	for round, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 9; i++ {
			r := &kgo.Record{Partition: int32(i % 3), Value: []byte(fmt.Sprintf("r%d-%d", round, i))}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("round %d produce: %v", round, err)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("round %d end: %v", round, err)
		}
	}
	pid, epoch, err := p.ProducerID(ctx)
	if err != nil || pid < 0 || epoch != 0 {
		t.Fatalf("producer id %d epoch %d: %v", pid, epoch, err)
	}

	// The coordinator describes the id and lists it.
	var state string
	proctest.Eventually(t, 30*time.Second, "CompleteAbort described", func() error {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{"tx-1"}
		resp, err := req.RequestWith(ctx, admin)
		if err != nil {
			return err
		}
		s := resp.TransactionStates[0]
		if err := kerr.ErrorForCode(s.ErrorCode); err != nil {
			return err
		}
		if state = s.State; state != "CompleteAbort" || s.ProducerID != pid {
			return fmt.Errorf("state %s producer %d", state, s.ProducerID)
		}
		return nil
	})
	lreq := kmsg.NewPtrListTransactionsRequest()
	lreq.StateFilters = []string{"CompleteAbort"}
	shards := admin.RequestSharded(ctx, lreq)
	var listed []string
	for _, sh := range shards {
		if sh.Err != nil {
			t.Fatalf("ListTransactions to %d: %v", sh.Meta.NodeID, sh.Err)
		}
		for _, s := range sh.Resp.(*kmsg.ListTransactionsResponse).TransactionStates {
			listed = append(listed, s.TransactionalID)
		}
	}
	if !slices.Equal(listed, []string{"tx-1"}) {
		t.Fatalf("ListTransactions CompleteAbort: %v", listed)
	}

	got := txnStates(t, tc)["tx-1"]
	want := []string{"Empty/0/0", "Ongoing/0/1", "PrepareCommit/0/1", "CompleteCommit/0/0", "Ongoing/0/1", "PrepareAbort/0/1", "CompleteAbort/0/0"}
	if !slices.Equal(got, want) {
		t.Fatalf("__transaction_state for tx-1:\n got %v\nwant %v", got, want)
	}

	// A second producer with the same id fences the first.
	p2 := tc.client(kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("txt"))
	if _, e2, err := p2.ProducerID(ctx); err != nil || e2 != 1 {
		t.Fatalf("second producer epoch %d: %v", e2, err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	err = p.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr()
	if err == nil {
		err = p.EndTransaction(ctx, kgo.TryCommit)
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("fenced producer: %v, want PRODUCER_FENCED", err)
	}
}

// TestTxnOffsetCommit sends, as a transactional producer does, the
// offsets of a consume-transform-produce step: AddOffsetsToTxn to the
// transaction coordinator, TxnOffsetCommit to the group coordinator. The
// offsets stay pending (require_stable answers UNSTABLE_OFFSET_COMMIT)
// until EndTxn's marker reaches __consumer_offsets.
func TestTxnOffsetCommit(t *testing.T) {
	tc := startCluster(t, 3, txnClusterOverrides...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createTopicRF(t, tc.bootstrap()[0], "src", 1, 3)
	tc.waitMetadataEverywhere("src", 1, 3)
	cl := tc.client(kgo.TransactionalID("tx-o"))
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{true, false} {
		offset := int64(5)
		if !commit {
			offset = 9
		}
		commitTxnOffset(ctx, t, cl, "tx-o", pid, epoch, offset)
		if off, code := fetchStable(ctx, t, cl); code != kerr.UnstableOffsetCommit.Code {
			t.Fatalf("require_stable fetch before EndTxn: offset %d code %v, want UNSTABLE_OFFSET_COMMIT", off, kerr.ErrorForCode(code))
		}
		endTxn(ctx, t, cl, "tx-o", pid, epoch, commit)
		proctest.Eventually(t, 30*time.Second, "stable offsets after the marker", func() error {
			off, code := fetchStable(ctx, t, cl)
			if code != 0 {
				return kerr.ErrorForCode(code)
			}
			if off != 5 {
				return fmt.Errorf("offset %d, want 5 (the committed transaction's)", off)
			}
			return nil
		})
	}
}

// TestTxnOffsetCommitsOfOneProducer: the group coordinator writes every
// TxnOffsetCommit of a producer as a batch starting at sequence 0; each
// one is appended, not taken for a retried duplicate of the first, so the
// last committed transaction's offset is the group's, before and after a
// restart reloads __consumer_offsets.
func TestTxnOffsetCommitsOfOneProducer(t *testing.T) {
	dir := t.TempDir()
	overrides := []string{"transaction.state.log.num.partitions=2", "offsets.topic.num.partitions=2"}
	b := startBroker(t, dir, overrides...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createTopic(t, b.client(t), "src", 1, nil)
	cl := b.client(t, kgo.TransactionalID("tx-o2"))
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStable := func(cl *kgo.Client, step string, want int64) {
		t.Helper()
		proctest.Eventually(t, 30*time.Second, step, func() error {
			off, code := fetchStable(ctx, t, cl)
			if code != 0 {
				return kerr.ErrorForCode(code)
			}
			if off != want {
				return fmt.Errorf("offset %d, want %d", off, want)
			}
			return nil
		})
	}
	for _, offset := range []int64{5, 8, 13} {
		commitTxnOffset(ctx, t, cl, "tx-o2", pid, epoch, offset)
		endTxn(ctx, t, cl, "tx-o2", pid, epoch, true)
		wantStable(cl, fmt.Sprintf("offset %d committed", offset), offset)
	}
	cl.Close()
	b.stop(t)

	b = startBroker(t, dir, overrides...)
	wantStable(b.client(t), "offset 13 after the restart", 13)
}

// commitTxnOffset adds group g to transactional id's transaction and
// commits offset for src/0 in it (AddOffsetsToTxn, TxnOffsetCommit).
func commitTxnOffset(ctx context.Context, t *testing.T, cl *kgo.Client, id string, pid int64, epoch int16, offset int64) {
	t.Helper()
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = id, pid, epoch, "g"
	// CONCURRENT_TRANSACTIONS until the previous transaction's
	// Complete record is written, as a producer retries it.
	proctest.Eventually(t, 30*time.Second, "AddOffsetsToTxn", func() error {
		r, err := ao.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(r.ErrorCode)
	})
	oc := kmsg.NewPtrTxnOffsetCommitRequest()
	oc.TransactionalID, oc.Group, oc.ProducerID, oc.ProducerEpoch, oc.Generation = id, "g", pid, epoch, -1
	oc.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "src", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
	ocr, err := oc.RequestWith(ctx, cl)
	if err != nil || ocr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("TxnOffsetCommit %d: %v %+v", offset, err, ocr)
	}
}

// endTxn ends transactional id's transaction, retrying until it is
// answered without error.
func endTxn(ctx context.Context, t *testing.T, cl *kgo.Client, id string, pid int64, epoch int16, commit bool) {
	t.Helper()
	et := kmsg.NewPtrEndTxnRequest()
	et.TransactionalID, et.ProducerID, et.ProducerEpoch, et.Commit = id, pid, epoch, commit
	proctest.Eventually(t, 30*time.Second, "EndTxn", func() error {
		r, err := et.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(r.ErrorCode)
	})
}

// fetchStable is OffsetFetch v8 with require_stable of g's src/0.
func fetchStable(ctx context.Context, t *testing.T, cl *kgo.Client) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(8)
	req.RequireStable = true
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "src", Partitions: []int32{0}}}}}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return -1, g.ErrorCode
	}
	p := g.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// describeTxn returns the coordinator's view of a transactional id.
func describeTxn(ctx context.Context, cl *kgo.Client, id string) (kmsg.DescribeTransactionsResponseTransactionState, error) {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.DescribeTransactionsResponseTransactionState{}, err
	}
	s := resp.TransactionStates[0]
	return s, kerr.ErrorForCode(s.ErrorCode)
}

// TestTransactionsStandalone: a single broker creates __transaction_state
// with one replica (and min.insync.replicas 1), and a restarted broker
// reloads it: the id keeps its producer id and the next InitProducerId
// bumps the epoch.
func TestTransactionsStandalone(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, "transaction.state.log.num.partitions=2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createTopic(t, b.client(t), "st", 1, nil)
	p := b.client(t, kgo.TransactionalID("solo"), kgo.DefaultProduceTopic("st"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	pid, _, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 30*time.Second, "CompleteCommit", func() error {
		s, err := describeTxn(ctx, p, "solo")
		if err == nil && s.State != "CompleteCommit" {
			err = fmt.Errorf("state %s", s.State)
		}
		return err
	})
	p.Close()
	b.stop(t)

	b = startBroker(t, dir, "transaction.state.log.num.partitions=2")
	adm := b.client(t)
	proctest.Eventually(t, 30*time.Second, "reloaded", func() error {
		s, err := describeTxn(ctx, adm, "solo")
		if err == nil && (s.State != "CompleteCommit" || s.ProducerID != pid || s.ProducerEpoch != 0) {
			err = fmt.Errorf("state %s producer %d/%d, want CompleteCommit %d/0", s.State, s.ProducerID, s.ProducerEpoch, pid)
		}
		return err
	})
	p2 := b.client(t, kgo.TransactionalID("solo"))
	if id, epoch, err := p2.ProducerID(ctx); err != nil || id != pid || epoch != 1 {
		t.Fatalf("after restart: producer %d/%d (%v), want %d/1", id, epoch, err, pid)
	}
}

// TestTxnCoordinatorFailover stops the coordinator of an ongoing
// transaction: the broker elected leader of its __transaction_state
// partition loads it, and the producer's EndTxn, retried there after
// NOT_COORDINATOR, commits it.
func TestTxnCoordinatorFailover(t *testing.T) {
	tc := startCluster(t, 3, txnClusterOverrides...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	createTopicRF(t, tc.bootstrap()[0], "fo", 3, 3)
	tc.waitMetadataEverywhere("fo", 3, 3)
	p := tc.client(kgo.TransactionalID("tx-fo"), kgo.DefaultProduceTopic("fo"), kgo.TransactionTimeout(60*time.Second))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Partition: int32(i), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{"tx-fo"}
	fr, err := fc.RequestWith(ctx, tc.client())
	if err != nil || fr.Coordinators[0].ErrorCode != 0 {
		t.Fatalf("FindCoordinator: %v %+v", err, fr)
	}
	old := fr.Coordinators[0].NodeID
	tc.stop(old)

	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("EndTransaction after the coordinator stopped: %v", err)
	}
	admin := tc.client()
	proctest.Eventually(t, 60*time.Second, "CompleteCommit at the new coordinator", func() error {
		s, err := describeTxn(ctx, admin, "tx-fo")
		if err == nil && s.State != "CompleteCommit" {
			err = fmt.Errorf("state %s", s.State)
		}
		return err
	})
	// FindCoordinator answers from the metadata of whichever broker it
	// reaches, which may not yet have the new leader of the id's partition.
	proctest.Eventually(t, 30*time.Second, "FindCoordinator names the new coordinator", func() error {
		fr, err := fc.RequestWith(ctx, admin)
		if err != nil {
			return err
		}
		if c := fr.Coordinators[0]; c.ErrorCode != 0 || c.NodeID == old {
			return fmt.Errorf("coordinator %d (%v), old %d", c.NodeID, kerr.ErrorForCode(c.ErrorCode), old)
		}
		return nil
	})
}
