package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"hash/crc32"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// rawTxnBatch is a v2 batch of the given values from producer pid at
// epoch, base sequence seq, transactional when txn.
func rawTxnBatch(pid int64, epoch int16, seq int32, txn bool, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	var attrs int16
	if txn {
		attrs = 0x10
	}
	ts := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: recs}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// txnClient speaks raw requests to one broker for one topic.
type txnClient struct {
	t     *testing.T
	rc    *rawConn
	topic string
}

func (c *txnClient) produce(partition int32, txnID *string, batch []byte) kmsg.ProduceResponseTopicPartition {
	c.t.Helper()
	return c.rc.roundTrip(c.produceRequest(9, partition, txnID, batch)).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// produceRequest is an acks=-1 Produce at version of batch to partition.
func (c *txnClient) produceRequest(version int16, partition int32, txnID *string, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.TransactionID, req.Acks, req.TimeoutMillis = txnID, -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = c.topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func (c *txnClient) marker(partition int32, pid int64, epoch int16, commit bool, coordEpoch int32) int16 {
	c.t.Helper()
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.SetVersion(1)
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = pid, epoch, commit, coordEpoch
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = c.topic, []int32{partition}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp := c.rc.roundTrip(req).(*kmsg.WriteTxnMarkersResponse)
	if len(resp.Markers) != 1 || resp.Markers[0].ProducerID != pid || len(resp.Markers[0].Topics) != 1 || len(resp.Markers[0].Topics[0].Partitions) != 1 {
		c.t.Fatalf("WriteTxnMarkers response shape: %+v", resp)
	}
	return resp.Markers[0].Topics[0].Partitions[0].ErrorCode
}

// fetched is what a consumer fetch returned from one partition.
type fetched struct {
	hw, lso int64
	aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction
	values  []string // data records, in order
	markers int      // control batches
	next    int64    // offset after the last batch
}

func (c *txnClient) fetch(partition int32, offset int64, isolation int8) fetched {
	c.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID, req.MaxBytes, req.IsolationLevel, req.SessionEpoch = -1, 1<<20, isolation, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = c.topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = partition, offset, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	sp := c.rc.roundTrip(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if sp.ErrorCode != 0 {
		c.t.Fatalf("fetch at %d: %v", offset, kerr.ErrorForCode(sp.ErrorCode))
	}
	f := fetched{hw: sp.HighWatermark, lso: sp.LastStableOffset, aborted: sp.AbortedTransactions, next: offset}
	for rest := sp.RecordBatches; len(rest) > 0; {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(rest); err != nil {
			c.t.Fatalf("fetched batch: %v", err)
		}
		rest = rest[12+int(rb.Length):]
		f.next = rb.FirstOffset + int64(rb.LastOffsetDelta) + 1
		if rb.Attributes&0x20 != 0 {
			f.markers++
			continue
		}
		for recs, i := rb.Records, int32(0); i < rb.NumRecords; i++ {
			var r kmsg.Record
			if err := r.ReadFrom(recs); err != nil {
				c.t.Fatalf("fetched record: %v", err)
			}
			_, n := binary.Varint(recs)
			recs = recs[n+int(r.Length):]
			f.values = append(f.values, string(r.Value))
		}
	}
	return f
}

func (c *txnClient) latest(partition int32, isolation int8) int64 {
	c.t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(5)
	req.ReplicaID, req.IsolationLevel = -1, isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = c.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	sp := c.rc.roundTrip(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	if sp.ErrorCode != 0 {
		c.t.Fatalf("ListOffsets: %v", kerr.ErrorForCode(sp.ErrorCode))
	}
	return sp.Offset
}

func mustCode(t *testing.T, what string, got int16, want error) {
	t.Helper()
	wantCode := int16(0)
	if want != nil {
		wantCode = want.(*kerr.Error).Code
	}
	if got != wantCode {
		t.Fatalf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// TestHangingTransaction reproduces the hanging transaction KIP-890 part 1
// prevents: with transaction.partition.verification.enable=false a
// producer's late transactional write, after its transaction was aborted,
// opens a transaction no marker will end. The LSO stays at that write,
// read_committed fetches and ListOffsets never pass it, and the state
// survives a broker restart; read_uncommitted consumers are not affected.
func TestHangingTransaction(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, "transaction.partition.verification.enable=false")
	topic := "hang"
	createTopic(t, b.client(t), topic, 1, nil)
	c := &txnClient{t: t, rc: dialRaw(t, b.Addrs()[0]), topic: topic}
	txnID := "app-1"
	const pid, epoch = 4000, 0

	mustCode(t, "plain produce", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "before")).ErrorCode, nil)               // 0
	mustCode(t, "transactional produce", c.produce(0, &txnID, rawTxnBatch(pid, epoch, 0, true, "aborted")).ErrorCode, nil) // 1
	mustCode(t, "abort marker", c.marker(0, pid, epoch, false, 0), nil)                                                    // 2
	// The producer's late write (a retry that arrived after the abort).
	late := c.produce(0, &txnID, rawTxnBatch(pid, epoch, 1, true, "late"))
	mustCode(t, "late transactional produce", late.ErrorCode, nil)
	if late.BaseOffset != 3 {
		t.Fatalf("late write at %d, want 3", late.BaseOffset)
	}
	mustCode(t, "plain produce after", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "after-1", "after-2")).ErrorCode, nil) // 4..5

	check := func(when string) {
		t.Helper()
		rc := c.fetch(0, 0, 1)
		if rc.hw != 6 || rc.lso != 3 {
			t.Fatalf("%s: hw=%d lso=%d, want hw=6 and the LSO pinned at the late write, 3", when, rc.hw, rc.lso)
		}
		if !slices.Equal(rc.values, []string{"before", "aborted"}) || rc.markers != 1 || rc.next != 3 {
			t.Fatalf("%s: read_committed got %v (%d markers) up to %d, want the records below the LSO", when, rc.values, rc.markers, rc.next)
		}
		if len(rc.aborted) != 1 || rc.aborted[0].ProducerID != pid || rc.aborted[0].FirstOffset != 1 {
			t.Fatalf("%s: aborted transactions %+v, want producer %d from 1", when, rc.aborted, pid)
		}
		if again := c.fetch(0, 3, 1); len(again.values) != 0 || again.markers != 0 || again.aborted == nil {
			t.Fatalf("%s: read_committed at the LSO got %v, want nothing (and an empty aborted list)", when, again.values)
		}
		ru := c.fetch(0, 0, 0)
		if !slices.Equal(ru.values, []string{"before", "aborted", "late", "after-1", "after-2"}) || ru.aborted != nil {
			t.Fatalf("%s: read_uncommitted got %v aborted %v", when, ru.values, ru.aborted)
		}
		if got := c.latest(0, 1); got != 3 {
			t.Fatalf("%s: ListOffsets latest read_committed = %d, want the LSO 3", when, got)
		}
		if got := c.latest(0, 0); got != 6 {
			t.Fatalf("%s: ListOffsets latest read_uncommitted = %d, want the HW 6", when, got)
		}
	}
	check("hanging")
	adm := kmsg.NewPtrDescribeProducersRequest()
	at := kmsg.NewDescribeProducersRequestTopic()
	at.Topic, at.Partitions = topic, []int32{0}
	adm.Topics = append(adm.Topics, at)
	dp := c.rc.roundTrip(adm).(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0]
	if len(dp.ActiveProducers) != 1 || dp.ActiveProducers[0].ProducerID != pid || dp.ActiveProducers[0].CurrentTxnStartOffset != 3 || dp.ActiveProducers[0].CoordinatorEpoch != 0 {
		t.Fatalf("DescribeProducers: %+v", dp.ActiveProducers)
	}

	// The hang survives a restart: the open transaction and the aborted
	// one come back from the producer state snapshot and the .txnindex.
	b.stop(t)
	b = startBroker(t, dir, "transaction.partition.verification.enable=false")
	c.rc = dialRaw(t, b.Addrs()[0])
	proctest.Eventually(t, 30*time.Second, "the partition to lead again", func() error {
		if p := b.partition(topic, 0); p == nil || p.HighWatermark() != 6 {
			return fmt.Errorf("partition %v not at HW 6", p != nil)
		}
		return nil
	})
	check("after restart")

	// Only a marker (the coordinator aborting the producer's next epoch,
	// say) ends it.
	mustCode(t, "abort of the late write", c.marker(0, pid, epoch+1, false, 1), nil)
	if rc := c.fetch(0, 0, 1); rc.lso != 7 || !slices.Equal(rc.values, []string{"before", "aborted", "late", "after-1", "after-2"}) || len(rc.aborted) != 2 {
		t.Fatalf("after the second abort: lso=%d values=%v aborted=%+v", rc.lso, rc.values, rc.aborted)
	}
}

// TestWriteTxnMarkers: the marker is checked against the producer and
// coordinator epochs, answered after it is committed, and reported to the
// broker's hook; unknown partitions are refused.
func TestWriteTxnMarkers(t *testing.T) {
	type call struct {
		topic     string
		partition int32
		pid       int64
		epoch     int16
		commit    bool
	}
	var mu sync.Mutex
	var calls []call
	hook := func(topic string, partition int32, pid int64, epoch int16, commit bool) {
		mu.Lock()
		calls = append(calls, call{topic, partition, pid, epoch, commit})
		mu.Unlock()
	}
	b := startBrokerWith(t, t.TempDir(), []Option{withTxnMarkerHook(hook)}, "transaction.partition.verification.enable=false")
	topic := "markers"
	createTopic(t, b.client(t), topic, 2, nil)
	c := &txnClient{t: t, rc: dialRaw(t, b.Addrs()[0]), topic: topic}
	txnID := "app-2"

	mustCode(t, "produce", c.produce(1, &txnID, rawTxnBatch(77, 3, 0, true, "x")).ErrorCode, nil)
	mustCode(t, "commit", c.marker(1, 77, 3, true, 5), nil)
	mustCode(t, "older producer epoch", c.marker(1, 77, 2, false, 5), kerr.InvalidProducerEpoch)
	mustCode(t, "older coordinator epoch", c.marker(1, 77, 3, false, 4), kerr.TransactionCoordinatorFenced)
	mustCode(t, "old epoch's data", c.produce(1, &txnID, rawTxnBatch(77, 2, 0, true, "y")).ErrorCode, kerr.InvalidProducerEpoch)
	mustCode(t, "unknown partition", c.marker(7, 77, 3, true, 5), kerr.UnknownTopicOrPartition)
	// A client may not write control batches.
	ctl := rawTxnBatch(78, 0, -1, true, "z")
	ctl[22] |= 0x20
	binary.BigEndian.PutUint32(ctl[17:], crc32.Checksum(ctl[21:], crc32.MakeTable(crc32.Castagnoli)))
	mustCode(t, "client control batch", c.produce(0, &txnID, ctl).ErrorCode, kerr.InvalidRecord)

	mu.Lock()
	defer mu.Unlock()
	if want := []call{{topic, 1, 77, 3, true}}; !slices.Equal(calls, want) {
		t.Fatalf("hook calls %+v, want %+v", calls, want)
	}
	if f := c.fetch(1, 0, 1); f.lso != 2 || f.hw != 2 || !slices.Equal(f.values, []string{"x"}) || f.markers != 1 {
		t.Fatalf("after the commit: %+v", f)
	}
}

// fakeTxnCoordinator answers AddPartitionsToTxn v4 on a loopback listener
// as a transaction coordinator would: partitions in added are in the
// transaction, others are not; a transactional id in errs gets that error.
type fakeTxnCoordinator struct {
	ln    net.Listener
	added map[int32]bool
	errs  map[string]int16
	// busy is how many more times a transactional id is answered
	// CONCURRENT_TRANSACTIONS.
	busy map[string]int
	mu   sync.Mutex
	seen []kmsg.AddPartitionsToTxnRequest
}

func startFakeTxnCoordinator(t *testing.T, added map[int32]bool, errs map[string]int16) *fakeTxnCoordinator {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTxnCoordinator{ln: ln, added: added, errs: errs, busy: map[string]int{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(conn)
		}
	}()
	return f
}

func (f *fakeTxnCoordinator) requests() []kmsg.AddPartitionsToTxnRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// serve reads request frames (header v2: key, version, correlation id,
// client id, tags) and answers AddPartitionsToTxn; anything else closes
// the connection.
func (f *fakeTxnCoordinator) serve(conn net.Conn) {
	defer conn.Close()
	for {
		frame, err := wire.ReadFrame(conn, 1<<20, nil)
		if err != nil {
			return
		}
		r := kbin.Reader{Src: frame}
		key, version, corr := r.Int16(), r.Int16(), r.Int32()
		r.NullableString()
		if key != 24 || (version != 4 && version != 5) {
			return
		}
		kmsg.SkipTags(&r)
		req := kmsg.NewAddPartitionsToTxnRequest()
		req.SetVersion(version)
		if err := req.ReadFrom(r.Src); err != nil {
			return
		}
		resp := f.answer(req)
		out := binary.BigEndian.AppendUint32(nil, 0)
		out = binary.BigEndian.AppendUint32(out, uint32(corr))
		out = append(out, 0) // response header tags
		out = resp.AppendTo(out)
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

func (f *fakeTxnCoordinator) answer(req kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, req)
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	resp.SetVersion(req.GetVersion())
	for _, tx := range req.Transactions {
		rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rt.TransactionalID = tx.TransactionalID
		for _, tt := range tx.Topics {
			rtt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rtt.Topic = tt.Topic
			for _, p := range tt.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition = p
				switch code, ok := f.errs[tx.TransactionalID]; {
				case f.busy[tx.TransactionalID] > 0:
					rp.ErrorCode = kerr.ConcurrentTransactions.Code
				case ok:
					rp.ErrorCode = code
				case !f.added[p]:
					rp.ErrorCode = kerr.InvalidTxnState.Code
				}
				rtt.Partitions = append(rtt.Partitions, rp)
			}
			rt.Topics = append(rt.Topics, rtt)
		}
		resp.Transactions = append(resp.Transactions, rt)
		if f.busy[tx.TransactionalID] > 0 {
			f.busy[tx.TransactionalID]--
		}
	}
	return resp
}

// TestTxnVerification: with transaction.partition.verification.enable a
// transactional batch that opens a transaction is appended only when the
// coordinator (a fake answering AddPartitionsToTxn v4) says the partition
// is in it; the late write of TestHangingTransaction is refused, the LSO
// does not hang, and coordinator trouble is a retriable error.
func TestTxnVerification(t *testing.T) {
	coord := startFakeTxnCoordinator(t, map[int32]bool{0: true}, map[string]int16{"moving": kerr.NotCoordinator.Code, "fenced": kerr.ProducerFenced.Code})
	var down sync.Mutex
	coordDown := false
	find := func(txnID string) (int32, string, int16, string) {
		down.Lock()
		defer down.Unlock()
		if coordDown {
			return -1, "", kerr.CoordinatorNotAvailable.Code, "no coordinator"
		}
		return 9999, coord.ln.Addr().String(), 0, ""
	}
	b := startBrokerWith(t, t.TempDir(), []Option{withTxnCoordinator(find)}) // 3.7 profile: on by default
	topic := "verified"
	createTopic(t, b.client(t), topic, 2, nil)
	c := &txnClient{t: t, rc: dialRaw(t, b.Addrs()[0]), topic: topic}
	txnID := "app-3"

	mustCode(t, "first write to an added partition", c.produce(0, &txnID, rawTxnBatch(500, 0, 0, true, "a")).ErrorCode, nil)
	reqs := coord.requests()
	if len(reqs) != 1 || len(reqs[0].Transactions) != 1 {
		t.Fatalf("coordinator saw %d requests", len(reqs))
	}
	if tx := reqs[0].Transactions[0]; !tx.VerifyOnly || tx.TransactionalID != txnID || tx.ProducerID != 500 || tx.ProducerEpoch != 0 ||
		len(tx.Topics) != 1 || tx.Topics[0].Topic != topic || !slices.Equal(tx.Topics[0].Partitions, []int32{0}) {
		t.Fatalf("verification request %+v", tx)
	}
	mustCode(t, "second write of the open transaction", c.produce(0, &txnID, rawTxnBatch(500, 0, 1, true, "b")).ErrorCode, nil)
	if n := len(coord.requests()); n != 1 {
		t.Fatalf("the open transaction was verified again (%d requests)", n)
	}
	refused := c.produce(1, &txnID, rawTxnBatch(500, 0, 0, true, "c"))
	mustCode(t, "write to a partition not in the transaction", refused.ErrorCode, kerr.InvalidTxnState)
	if refused.ErrorMessage == nil || !strings.Contains(*refused.ErrorMessage, "not added") {
		t.Fatalf("error message %v", refused.ErrorMessage)
	}
	// The late write after an abort is refused: no hanging transaction.
	mustCode(t, "abort", c.marker(0, 500, 0, false, 0), nil)
	coord.mu.Lock()
	coord.added[0] = false // the coordinator's transaction is over
	coord.mu.Unlock()
	mustCode(t, "late write", c.produce(0, &txnID, rawTxnBatch(500, 0, 2, true, "late")).ErrorCode, kerr.InvalidTxnState)
	if f := c.fetch(0, 0, 1); f.lso != f.hw || f.hw != 3 {
		t.Fatalf("lso=%d hw=%d after the refused late write", f.lso, f.hw)
	}
	// Coordinator trouble: retriable for the producer.
	moving := "moving"
	mustCode(t, "NOT_COORDINATOR", c.produce(1, &moving, rawTxnBatch(501, 0, 0, true, "d")).ErrorCode, kerr.NotEnoughReplicas)
	fenced := "fenced"
	mustCode(t, "PRODUCER_FENCED", c.produce(1, &fenced, rawTxnBatch(502, 0, 0, true, "e")).ErrorCode, kerr.InvalidProducerEpoch)
	down.Lock()
	coordDown = true
	down.Unlock()
	mustCode(t, "no coordinator", c.produce(1, &txnID, rawTxnBatch(503, 0, 0, true, "f")).ErrorCode, kerr.NotEnoughReplicas)
	// Idempotent batches are not verified.
	mustCode(t, "idempotent write", c.produce(1, nil, rawTxnBatch(504, 0, 0, false, "g")).ErrorCode, nil)
}

// TestReadCommittedConsumer: franz-go's consumer with read_committed skips
// an aborted transaction's records (from the aborted-transaction list) and
// the control batches, and gets the committed ones, written raw.
func TestReadCommittedConsumer(t *testing.T) {
	b := startBroker(t, t.TempDir(), "transaction.partition.verification.enable=false")
	topic := "committed"
	createTopic(t, b.client(t), topic, 1, nil)
	c := &txnClient{t: t, rc: dialRaw(t, b.Addrs()[0]), topic: topic}
	txnID := "app-4"
	mustCode(t, "a", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "a")).ErrorCode, nil)
	mustCode(t, "x1", c.produce(0, &txnID, rawTxnBatch(600, 0, 0, true, "x1", "x2")).ErrorCode, nil)
	mustCode(t, "y1", c.produce(0, &txnID, rawTxnBatch(601, 0, 0, true, "y1")).ErrorCode, nil)
	mustCode(t, "b", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "b")).ErrorCode, nil)
	mustCode(t, "abort x", c.marker(0, 600, 0, false, 0), nil)
	mustCode(t, "y2", c.produce(0, &txnID, rawTxnBatch(601, 0, 1, true, "y2")).ErrorCode, nil)
	mustCode(t, "commit y", c.marker(0, 601, 0, true, 0), nil)
	mustCode(t, "c", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "c")).ErrorCode, nil)

	for _, tc := range []struct {
		iso  kgo.IsolationLevel
		want []string
	}{
		{kgo.ReadCommitted(), []string{"a", "y1", "b", "y2", "c"}},
		{kgo.ReadUncommitted(), []string{"a", "x1", "x2", "y1", "b", "y2", "c"}},
	} {
		cl := b.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(tc.iso))
		var got []string
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for len(got) < len(tc.want) && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		cancel()
		if !slices.Equal(got, tc.want) {
			t.Fatalf("%v consumer got %v, want %v", tc.iso, got, tc.want)
		}
	}
}

// TestTxnStateAfterFailover: the followers build the transaction state
// from the batches and markers they replicate, so after the leader's
// broker stops the new leader has the same LSO, open transaction and
// aborted transactions, and takes the open transaction's marker.
func TestTxnStateAfterFailover(t *testing.T) {
	tc := startCluster(t, 3, "transaction.partition.verification.enable=false")
	topic := "txn-failover"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	min2 := "2"
	if _, err := kadm.NewClient(tc.client()).CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &min2}, topic); err != nil {
		t.Fatal(err)
	}
	tc.waitMetadataEverywhere(topic, 1, 3)
	leaders, _, err := tc.describe(topic)
	if err != nil {
		t.Fatal(err)
	}
	old := leaders[0]
	c := &txnClient{t: t, rc: dialRaw(t, fmt.Sprintf("127.0.0.1:%d", tc.ports[old])), topic: topic}
	txnID := "app-5"
	mustCode(t, "aborted write", c.produce(0, &txnID, rawTxnBatch(900, 0, 0, true, "x")).ErrorCode, nil) // 0
	mustCode(t, "abort", c.marker(0, 900, 0, false, 1), nil)                                             // 1
	mustCode(t, "plain", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "p")).ErrorCode, nil)          // 2
	mustCode(t, "open write", c.produce(0, &txnID, rawTxnBatch(901, 0, 0, true, "y")).ErrorCode, nil)    // 3
	mustCode(t, "plain", c.produce(0, nil, rawTxnBatch(-1, -1, -1, false, "q")).ErrorCode, nil)          // 4
	before := c.fetch(0, 0, 1)
	if before.lso != 3 || before.hw != 5 || len(before.aborted) != 1 {
		t.Fatalf("on the first leader: %+v", before)
	}

	tc.stop(old)
	var nc *txnClient
	proctest.Eventually(t, 30*time.Second, "a new leader with the partition", func() error {
		ls, _, err := tc.describe(topic)
		if err != nil {
			return err
		}
		if ls[0] == old || ls[0] < 0 {
			return fmt.Errorf("leader %d", ls[0])
		}
		p := tc.brokers[ls[0]].partition(topic, 0)
		if p == nil || p.HighWatermark() != 5 {
			return fmt.Errorf("new leader %d not at HW 5", ls[0])
		}
		nc = &txnClient{t: t, rc: dialRaw(t, fmt.Sprintf("127.0.0.1:%d", tc.ports[ls[0]])), topic: topic}
		return nil
	})
	after := nc.fetch(0, 0, 1)
	if after.lso != 3 || after.hw != 5 || !slices.Equal(after.values, before.values) || len(after.aborted) != 1 || after.aborted[0].ProducerID != 900 || after.aborted[0].FirstOffset != 0 {
		t.Fatalf("on the new leader: %+v, before %+v", after, before)
	}
	mustCode(t, "stale coordinator on the new leader", nc.marker(0, 900, 0, true, 0), kerr.TransactionCoordinatorFenced)
	mustCode(t, "commit the open transaction", nc.marker(0, 901, 0, true, 1), nil)
	if f := nc.fetch(0, 0, 1); f.lso != 6 || !slices.Equal(f.values, []string{"x", "p", "y", "q"}) {
		t.Fatalf("after the commit on the new leader: %+v", f)
	}
}
