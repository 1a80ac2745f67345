package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// txnCall sends a transaction coordinator request on rc until its error is
// not one a producer retries (CONCURRENT_TRANSACTIONS while the previous
// transaction's markers are written, a coordinator still loading), and
// returns the response.
func txnCall[R kmsg.Response](t *testing.T, rc *rawConn, req kmsg.Request, code func(R) int16) R {
	t.Helper()
	var resp R
	proctest.Eventually(t, 30*time.Second, kmsg.NameForKey(req.Key()), func() error {
		resp = rc.roundTrip(req).(R)
		switch c := code(resp); c {
		case kerr.ConcurrentTransactions.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
			return kerr.ErrorForCode(c)
		}
		return nil
	})
	return resp
}

// produceV is txnClient.produce at a given Produce version, retrying the
// NOT_ENOUGH_REPLICAS a leader answers while it cannot reach a decision
// from the coordinator (the previous transaction's markers pending).
func (c *txnClient) produceV(version int16, partition int32, txnID *string, batch []byte) kmsg.ProduceResponseTopicPartition {
	c.t.Helper()
	req := c.produceRequest(version, partition, txnID, batch)
	var p kmsg.ProduceResponseTopicPartition
	proctest.Eventually(c.t, 30*time.Second, "produce", func() error {
		p = c.rc.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if p.ErrorCode == kerr.NotEnoughReplicas.Code {
			return kerr.NotEnoughReplicas
		}
		return nil
	})
	return p
}

// TestLateWriteAfterAbort is the late-write problem KIP-890 part 2 fixes.
// A producer's write of transaction N is delayed in the network; the
// producer aborts N and starts N+1 on the same partition; then the late
// write arrives. Part 1's verification asks the coordinator whether the
// partition is in the producer's ongoing transaction — it is, in N+1, at
// the same epoch — so the write of the aborted N is appended into N+1 and
// committed with it. Under transaction.version 2 every EndTxn bumps the
// epoch: the late write carries N's epoch and is fenced, by the
// coordinator when N+1 has not reached the partition yet and by the
// partition when it has.
func TestLateWriteAfterAbort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overrides []string
		want      []string // what read_committed sees
	}{
		{"transaction.version=0", nil, []string{"n1-late", "n1-next"}},
		{"transaction.version=2", []string{"transaction.version=2"}, []string{"n1-next"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tv2 := len(tc.overrides) > 0
			b := startBroker(t, t.TempDir(), tc.overrides...)
			topic := "late"
			createTopic(t, b.client(t), topic, 1, nil)
			rc := dialRaw(t, b.Addrs()[0])
			c := &txnClient{t: t, rc: rc, topic: topic}
			txnID := "late-1"

			// FindCoordinator creates __transaction_state, as a producer's
			// first request does.
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.SetVersion(4)
			fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{txnID}
			txnCall(t, rc, fc, func(r *kmsg.FindCoordinatorResponse) int16 { return r.Coordinators[0].ErrorCode })

			ip := kmsg.NewPtrInitProducerIDRequest()
			ip.SetVersion(4)
			ip.TransactionalID, ip.TransactionTimeoutMillis, ip.ProducerID, ip.ProducerEpoch = &txnID, 60000, -1, -1
			ir := txnCall(t, rc, ip, func(r *kmsg.InitProducerIDResponse) int16 { return r.ErrorCode })
			mustCode(t, "InitProducerId", ir.ErrorCode, nil)
			pid, epoch := ir.ProducerID, ir.ProducerEpoch

			// add puts partition 0 in the transaction as a 3.7 producer
			// does; under part 2 the first produce (v12) does it.
			add := func(epoch int16) {
				t.Helper()
				if tv2 {
					return
				}
				ap := kmsg.NewPtrAddPartitionsToTxnRequest()
				ap.SetVersion(3)
				ap.TransactionalID, ap.ProducerID, ap.ProducerEpoch = txnID, pid, epoch
				ap.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: topic, Partitions: []int32{0}}}
				ar := txnCall(t, rc, ap, func(r *kmsg.AddPartitionsToTxnResponse) int16 { return r.Topics[0].Partitions[0].ErrorCode })
				mustCode(t, "AddPartitionsToTxn", ar.Topics[0].Partitions[0].ErrorCode, nil)
			}
			produceVersion := int16(9)
			endVersion := int16(3)
			if tv2 {
				produceVersion, endVersion = 12, 5
			}
			end := func(epoch int16, commit bool) (int64, int16) {
				t.Helper()
				et := kmsg.NewPtrEndTxnRequest()
				et.SetVersion(endVersion)
				et.TransactionalID, et.ProducerID, et.ProducerEpoch, et.Commit = txnID, pid, epoch, commit
				er := txnCall(t, rc, et, func(r *kmsg.EndTxnResponse) int16 { return r.ErrorCode })
				mustCode(t, fmt.Sprintf("EndTxn commit=%v", commit), er.ErrorCode, nil)
				return er.ProducerID, er.ProducerEpoch
			}

			// Transaction N: one write acknowledged, one delayed.
			add(epoch)
			mustCode(t, "N's first write", c.produceV(produceVersion, 0, &txnID, rawTxnBatch(pid, epoch, 0, true, "n0")).ErrorCode, nil)
			late := rawTxnBatch(pid, epoch, 1, true, "n1-late")
			nextPID, nextEpoch := end(epoch, false)
			// The abort's markers are written once its coordinator has
			// completed it.
			proctest.Eventually(t, 30*time.Second, "CompleteAbort", func() error {
				dt := kmsg.NewPtrDescribeTransactionsRequest()
				dt.TransactionalIDs = []string{txnID}
				if s := rc.roundTrip(dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]; s.State != "CompleteAbort" {
					return fmt.Errorf("state %s", s.State)
				}
				return nil
			})
			if tv2 {
				if nextPID != pid || nextEpoch != epoch+1 {
					t.Fatalf("EndTxn v5 answered producer %d epoch %d, want %d and %d", nextPID, nextEpoch, pid, epoch+1)
				}
				// Arriving before N+1 reached the partition, the late
				// write is fenced by the coordinator.
				mustCode(t, "late write before N+1", c.produceV(produceVersion, 0, &txnID, late).ErrorCode, kerr.InvalidProducerEpoch)
				epoch = nextEpoch
			}

			// Transaction N+1 on the same partition (under part 2 its
			// first write starts it there); the late write arrives.
			add(epoch)
			next := rawTxnBatch(pid, epoch, 1, true, "n1-next")
			if tv2 {
				next = rawTxnBatch(pid, epoch, 0, true, "n1-next")
				mustCode(t, "N+1's write", c.produceV(produceVersion, 0, &txnID, next).ErrorCode, nil)
				mustCode(t, "late write after N+1 started", c.produceV(produceVersion, 0, &txnID, late).ErrorCode, kerr.InvalidProducerEpoch)
				mustCode(t, "late write as a 3.7 producer would send it", c.produceV(9, 0, &txnID, late).ErrorCode, kerr.InvalidProducerEpoch)
			} else {
				mustCode(t, "late write", c.produceV(produceVersion, 0, &txnID, late).ErrorCode, nil)
				next = rawTxnBatch(pid, epoch, 2, true, "n1-next")
				mustCode(t, "N+1's write", c.produceV(produceVersion, 0, &txnID, next).ErrorCode, nil)
			}
			end(epoch, true)

			consumer := b.client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			var read []string
			proctest.Eventually(t, 30*time.Second, "read_committed", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { read = append(read, string(r.Value)) })
				if !slices.Contains(read, "n1-next") {
					return fmt.Errorf("read_committed got %v", read)
				}
				return nil
			})
			if !slices.Equal(read, tc.want) {
				t.Fatalf("read_committed got %v, want %v", read, tc.want)
			}
			if f := c.fetch(0, 0, 1); f.lso != f.hw {
				t.Fatalf("lso %d hw %d: a transaction is left open", f.lso, f.hw)
			}
		})
	}
}

// hookRequests counts the requests a kgo client writes, by API key.
type hookRequests struct {
	mu   sync.Mutex
	keys map[int16]int
}

func (h *hookRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[key]++
}

func (h *hookRequests) count(key kmsg.Key) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keys[int16(key)]
}

// TestTransactionVersion2 runs franz-go's transactional producer against
// three brokers with transaction.version=2: ApiVersions finalizes the
// feature, the client opts into KIP-890 part 2 (no AddPartitionsToTxn: its
// v12 produce requests add the partitions through their leaders), each
// EndTxn bumps the epoch and __transaction_state records every
// transaction's PrepareX and CompleteX at the bumped epoch; read_committed
// sees exactly the committed rounds. A GroupTransactSession commits its
// offsets with TxnOffsetCommit v5, without AddOffsetsToTxn.
func TestTransactionVersion2(t *testing.T) {
	tc := startCluster(t, 3, append(txnClusterOverrides, "transaction.version=2")...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	createTopicRF(t, tc.bootstrap()[0], "tv2", 3, 3)
	tc.waitMetadataEverywhere("tv2", 3, 3)

	rc := dialRaw(t, tc.bootstrap()[0])
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "isrlab", "1"
	avr := rc.roundTrip(av).(*kmsg.ApiVersionsResponse)
	levels := map[string]int16{}
	for _, f := range avr.FinalizedFeatures {
		levels[f.Name] = f.MaxVersionLevel
	}
	if levels["transaction.version"] != 2 || avr.FinalizedFeaturesEpoch < 0 {
		t.Fatalf("finalized features %+v (epoch %d)", avr.FinalizedFeatures, avr.FinalizedFeaturesEpoch)
	}
	maxes := map[int16]int16{}
	for _, k := range avr.ApiKeys {
		maxes[k.ApiKey] = k.MaxVersion
	}
	for key, want := range map[kmsg.Key]int16{kmsg.Produce: 12, kmsg.EndTxn: 5, kmsg.TxnOffsetCommit: 5, kmsg.AddPartitionsToTxn: 5, kmsg.InitProducerID: 5, kmsg.AddOffsetsToTxn: 4} {
		if maxes[int16(key)] != want {
			t.Errorf("ApiVersions: %s up to v%d, want v%d", key.Name(), maxes[int16(key)], want)
		}
	}

	hooks := &hookRequests{keys: map[int16]int{}}
	p := tc.client(kgo.TransactionalID("tv2-1"), kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic("tv2"), kgo.WithHooks(hooks))
	ends := []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit}
	var want []string
	for round, commit := range ends {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			v := fmt.Sprintf("r%d-%d", round, i)
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 3), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("round %d produce: %v", round, err)
			}
			if commit {
				want = append(want, v)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("round %d end: %v", round, err)
		}
		if _, epoch, err := p.ProducerID(ctx); err != nil || epoch != int16(round+1) {
			t.Fatalf("after round %d: epoch %d (%v), want %d: one bump per transaction", round, epoch, err, round+1)
		}
	}
	if n := hooks.count(kmsg.AddPartitionsToTxn); n != 0 {
		t.Errorf("the client sent %d AddPartitionsToTxn: it did not opt into KIP-890 part 2", n)
	}
	if n := hooks.count(kmsg.EndTxn); n < len(ends) {
		t.Errorf("EndTxn sent %d times", n)
	}

	// EndTxn answers once PrepareCommit is written; the markers and the
	// CompleteCommit record follow.
	proctest.Eventually(t, 30*time.Second, "CompleteCommit described", func() error {
		s, err := describeTxn(ctx, p, "tv2-1")
		if err == nil && (s.State != "CompleteCommit" || s.ProducerEpoch != 3) {
			err = fmt.Errorf("state %s epoch %d", s.State, s.ProducerEpoch)
		}
		return err
	})
	var got []string
	for _, s := range txnStates(t, tc)["tv2-1"] {
		if len(got) == 0 || got[len(got)-1] != s {
			got = append(got, s) // one Ongoing record per partition added
		}
	}
	wantStates := []string{"Empty/0/0", "Ongoing/0/1", "PrepareCommit/1/1", "CompleteCommit/1/0", "Ongoing/1/1", "PrepareAbort/2/1", "CompleteAbort/2/0", "Ongoing/2/1", "PrepareCommit/3/1", "CompleteCommit/3/0"}
	if !slices.Equal(got, wantStates) {
		t.Fatalf("__transaction_state for tv2-1:\n got %v\nwant %v", got, wantStates)
	}

	consumer := tc.client(kgo.ConsumeTopics("tv2"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var read []string
	proctest.Eventually(t, 30*time.Second, "read_committed", func() error {
		fs := consumer.PollRecords(ctx, 100)
		fs.EachRecord(func(r *kgo.Record) { read = append(read, string(r.Value)) })
		if len(read) < len(want) {
			return fmt.Errorf("read %d of %d", len(read), len(want))
		}
		return nil
	})
	slices.Sort(read)
	slices.Sort(want)
	if !slices.Equal(read, want) {
		t.Fatalf("read_committed got %v, want %v", read, want)
	}

	// Read-process-write: offsets committed inside the transaction with
	// TxnOffsetCommit v5, which adds __consumer_offsets itself.
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{kgo.SeedBrokers(tc.bootstrap()...)},
		kgo.TransactionalID("tv2-eos"), kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic("tv2-out"),
		kgo.ConsumerGroup("tv2-g"), kgo.ConsumeTopics("tv2"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation(), kgo.WithHooks(hooks))...)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	copied := 0
	proctest.Eventually(t, 60*time.Second, "copy through a GroupTransactSession", func() error {
		fs := sess.PollFetches(ctx)
		if err := sess.Begin(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Value: r.Value}, nil)
			copied++
		})
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil || !committed {
			return fmt.Errorf("end: committed=%v %v", committed, err)
		}
		if copied < len(want) {
			return fmt.Errorf("copied %d of %d", copied, len(want))
		}
		return nil
	})
	if n := hooks.count(kmsg.AddOffsetsToTxn); n != 0 {
		t.Errorf("the session sent %d AddOffsetsToTxn", n)
	}
	if n := hooks.count(kmsg.TxnOffsetCommit); n == 0 {
		t.Error("the session committed no offsets")
	}
	adm := tc.client()
	oreq := kmsg.NewPtrOffsetFetchRequest()
	oreq.SetVersion(8)
	oreq.RequireStable = true
	oreq.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "tv2-g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "tv2", Partitions: []int32{0, 1, 2}}}}}
	proctest.Eventually(t, 30*time.Second, "the group's committed offsets", func() error {
		resp, err := oreq.RequestWith(ctx, adm)
		if err != nil {
			return err
		}
		g := resp.Groups[0]
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return err
		}
		var sum int64
		for _, p := range g.Topics[0].Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
			sum += p.Offset
		}
		// Each partition's offset is past its records and the markers.
		if sum < int64(copied) {
			return fmt.Errorf("committed offsets sum to %d, copied %d", sum, copied)
		}
		return nil
	})
}

// TestTransactionVersionConfig: transaction.version needs the 3.7 profile,
// and part 2 needs verification, which the leader's implicit add is.
func TestTransactionVersionConfig(t *testing.T) {
	for _, tc := range []struct {
		overrides []string
		err       string
	}{
		{[]string{"transaction.version=2", "kafka.profile=2.6"}, "needs kafka.profile 3.7 or 4.0"},
		{[]string{"transaction.version=1", "kafka.profile=0.10"}, "needs kafka.profile 3.7 or 4.0"},
		{[]string{"kafka.profile=4.0", "process.roles="}, ""}, // 4.0's default: transaction.version 2
		{[]string{"kafka.profile=4.0", "process.roles=", "transaction.partition.verification.enable=false"}, "needs transaction.partition.verification.enable=true"},
		{[]string{"transaction.version=2", "transaction.partition.verification.enable=false"}, "needs transaction.partition.verification.enable=true"},
		{[]string{"transaction.version=1", "transaction.partition.verification.enable=false"}, ""},
		{[]string{"transaction.version=3"}, "expected one of"},
	} {
		ov := append([]string{"log.dirs=" + t.TempDir(), "listeners=PLAINTEXT://127.0.0.1:0"}, tc.overrides...)
		cfg, _, err := kafkaconfig.Load("", ov)
		if err == nil {
			var b *Broker
			b, err = New(cfg)
			if b != nil {
				b.logs.Close()
			}
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.overrides, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one saying %q", tc.overrides, err, tc.err)
		}
	}
}

// TestImplicitAdd: under transaction.version 2 a Produce v12 that opens a
// transaction on a partition makes its leader add the partition
// (AddPartitionsToTxn v5, not verify-only), while a v11 request is only
// verified; the leader retries CONCURRENT_TRANSACTIONS itself for up to
// add.partitions.to.txn.retry.backoff.max.ms, then answers the producer
// NOT_ENOUGH_REPLICAS, which it retries.
func TestImplicitAdd(t *testing.T) {
	coord := startFakeTxnCoordinator(t, map[int32]bool{0: true, 1: true}, nil)
	find := func(string) (int32, string, int16, string) { return 9999, coord.ln.Addr().String(), 0, "" }
	for _, tc := range []struct {
		name     string
		maxMs    string
		busy     int
		requests int
		code     error
	}{
		{"answered", "60000", 0, 1, nil},
		{"retried by the leader", "60000", 2, 3, nil},
		{"retries exhausted", "0", 1, 1, kerr.NotEnoughReplicas},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBrokerWith(t, t.TempDir(), []Option{withTxnCoordinator(find)}, "transaction.version=2",
				"add.partitions.to.txn.retry.backoff.ms=1", "add.partitions.to.txn.retry.backoff.max.ms="+tc.maxMs)
			topic := "implicit"
			createTopic(t, b.client(t), topic, 2, nil)
			c := &txnClient{t: t, rc: dialRaw(t, b.Addrs()[0]), topic: topic}
			txnID := "tv2-" + strings.ReplaceAll(tc.name, " ", "-")
			coord.mu.Lock()
			coord.busy[txnID] = tc.busy
			before := len(coord.seen)
			coord.mu.Unlock()

			req := c.produceRequest(12, 0, &txnID, rawTxnBatch(700, 3, 0, true, "a"))
			got := c.rc.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
			mustCode(t, "produce v12", got.ErrorCode, tc.code)
			reqs := coord.requests()[before:]
			if len(reqs) != tc.requests {
				t.Fatalf("the coordinator saw %d requests, want %d", len(reqs), tc.requests)
			}
			for _, r := range reqs {
				if tx := r.Transactions[0]; r.GetVersion() != 5 || tx.VerifyOnly || tx.ProducerID != 700 || tx.ProducerEpoch != 3 || tx.Topics[0].Partitions[0] != 0 {
					t.Fatalf("add request v%d %+v", r.GetVersion(), tx)
				}
			}
			if tc.code != nil {
				return
			}
			// A v11 request (a client not opted into part 2) is verified.
			req.SetVersion(11)
			req.Topics[0].Partitions[0] = kmsg.ProduceRequestTopicPartition{Partition: 1, Records: rawTxnBatch(700, 3, 0, true, "b")}
			mustCode(t, "produce v11", c.rc.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode, nil)
			last := coord.requests()[len(coord.requests())-1]
			if last.GetVersion() != 4 || !last.Transactions[0].VerifyOnly {
				t.Fatalf("v11's request: v%d verify-only=%v", last.GetVersion(), last.Transactions[0].VerifyOnly)
			}
		})
	}
}
