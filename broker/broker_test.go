package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// testBroker runs a broker on a loopback port in dir until the test ends.
type testBroker struct {
	*Broker
	cancel context.CancelFunc
	done   chan error
}

func startBroker(t testing.TB, dir string, overrides ...string) *testBroker {
	t.Helper()
	return startBrokerWith(t, dir, nil, overrides...)
}

// startBrokerWith is startBroker with options for New.
func startBrokerWith(t testing.TB, dir string, opts []Option, overrides ...string) *testBroker {
	t.Helper()
	ov := append([]string{"log.dirs=" + dir, "listeners=PLAINTEXT://127.0.0.1:0"}, overrides...)
	cfg, _, err := kafkaconfig.Load("", ov)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb := &testBroker{Broker: b, cancel: cancel, done: make(chan error, 1)}
	go func() { tb.done <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-tb.done:
		t.Fatalf("broker exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("broker not ready after 10s")
	}
	t.Cleanup(func() { tb.stop(t) })
	return tb
}

func (tb *testBroker) stop(t testing.TB) {
	if tb.cancel == nil {
		return
	}
	tb.cancel()
	tb.cancel = nil
	if err := <-tb.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("broker run: %v", err)
	}
}

func (tb *testBroker) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tb.Addrs()[0])}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, configs, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
}

// produceValues sends n records "<prefix>-<i>" round robin over partitions.
func produceValues(t testing.TB, cl *kgo.Client, topic string, partitions int32, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce: %v", firstErr)
	}
}

// consumeAll reads every partition from the start until n records arrived.
func consumeAll(t testing.TB, addr, topic string, n int) map[int32][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[int32][]string{}
	count := 0
	for count < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before timeout", count, n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if int64(len(got[r.Partition])) != r.Offset {
				t.Fatalf("partition %d: offset %d after %d records", r.Partition, r.Offset, len(got[r.Partition]))
			}
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			count++
		})
	}
	return got
}

func TestProduceConsumeKgo(t *testing.T) {
	b := startBroker(t, t.TempDir())
	cl := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, cl, "rt", 4, nil)
	const n = 4000
	produceValues(t, cl, "rt", 4, "v", n)
	got := consumeAll(t, b.Addrs()[0], "rt", n)
	for p := int32(0); p < 4; p++ {
		if len(got[p]) != n/4 {
			t.Fatalf("partition %d: %d records, want %d", p, len(got[p]), n/4)
		}
		for i, v := range got[p] {
			if want := fmt.Sprintf("v-%d", i*4+int(p)); v != want {
				t.Fatalf("partition %d offset %d = %q, want %q", p, i, v, want)
			}
		}
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	cl := b.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, cl, "keep", 2, nil)
	produceValues(t, cl, "keep", 2, "a", 100)
	cl.Close()
	b.stop(t)

	b2 := startBroker(t, dir)
	cl2 := b2.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceValues(t, cl2, "keep", 2, "b", 100)
	got := consumeAll(t, b2.Addrs()[0], "keep", 200)
	if len(got[0]) != 100 || got[0][0] != "a-0" || got[0][50] != "b-0" {
		t.Fatalf("after restart partition 0 = %d records starting %q, %q", len(got[0]), got[0][0], got[0][50])
	}
}

func TestAcksAndErrors(t *testing.T) {
	b := startBroker(t, t.TempDir(), "message.max.bytes=2000", "auto.create.topics.enable=false")
	cl := b.client(t)
	createTopic(t, cl, "acks", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// acks=1 and acks=0 both write.
	for _, acks := range []kgo.Acks{kgo.LeaderAck(), kgo.NoAck()} {
		c := b.client(t, kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite())
		if err := c.ProduceSync(ctx, &kgo.Record{Topic: "acks", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("acks %v: %v", acks, err)
		}
		c.Flush(ctx)
	}
	// A record over message.max.bytes is refused with MESSAGE_TOO_LARGE.
	big := make([]byte, 4000)
	rand.Read(big) // incompressible: kgo compresses batches
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "acks", Value: big}).FirstErr()
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("big record: err = %v, want MESSAGE_TOO_LARGE", err)
	}
	// Raw requests: invalid acks and an unknown topic.
	req := kmsg.NewPtrProduceRequest()
	req.Acks = 2
	req.TimeoutMillis = 1000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "acks"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = []byte{}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.SetVersion(9)
	wc := wire.NewClient(b.Addrs()[0], "test", nil)
	defer wc.Close()
	raw, err := wc.Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := raw.(*kmsg.ProduceResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRequiredAcks.Code {
		t.Errorf("acks=2: error %d, want INVALID_REQUIRED_ACKS", code)
	}
	md := kmsg.NewPtrMetadataRequest()
	name := "nope"
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = &name
	md.Topics = append(md.Topics, mt)
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := mresp.Topics[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic: error %d", code)
	}
}

func TestListOffsets(t *testing.T) {
	b := startBroker(t, t.TempDir())
	cl := b.client(t)
	createTopic(t, cl, "lo", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := time.UnixMilli(1_700_000_000_000)
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Topic: "lo", Value: []byte("x"), Timestamp: base.Add(time.Duration(i) * time.Minute)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	start, err := adm.ListStartOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	end, err := adm.ListEndOffsets(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	at, err := adm.ListOffsetsAfterMilli(ctx, base.Add(4*time.Minute+time.Second).UnixMilli(), "lo")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := start.Lookup("lo", 0)
	e, _ := end.Lookup("lo", 0)
	a, _ := at.Lookup("lo", 0)
	if s.Offset != 0 || e.Offset != 10 || a.Offset != 5 {
		t.Fatalf("earliest %d latest %d by time %d; want 0 10 5", s.Offset, e.Offset, a.Offset)
	}
}

func createTopicIfMissing(t testing.TB, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}
}

func TestSegmentsIndexAndRetention(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, "log.segment.bytes=4096", "log.retention.check.interval.ms=50",
		"log.index.interval.bytes=256", "log.segment.delete.delay.ms=0")
	cl := b.client(t, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1024))
	createTopic(t, cl, "seg", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := time.Now().Add(-48 * time.Hour)
	for i := 0; i < 400; i++ {
		ts := time.Now()
		if i < 200 {
			ts = old // the first half is two days old
		}
		r := &kgo.Record{Topic: "seg", Value: []byte(fmt.Sprintf("value-%04d-%s", i, strings.Repeat("x", 80))), Timestamp: ts}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lg := b.partition("seg", 0).Log()
	if n := lg.NumSegments(); n < 5 {
		t.Fatalf("%d segments after 40 KiB with log.segment.bytes=4096", n)
	}
	// Fetch from the middle of an old segment goes through the index.
	c2 := b.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"seg": {0: kgo.NewOffset().At(137)}}))
	fs := c2.PollFetches(ctx)
	var first *kgo.Record
	fs.EachRecord(func(r *kgo.Record) {
		if first == nil {
			first = r
		}
	})
	if first == nil || first.Offset != 137 || !strings.HasPrefix(string(first.Value), "value-0137-") {
		t.Fatalf("first record from offset 137: %+v", first)
	}
	// Time retention: a day-long retention.ms deletes the old segments only.
	adm := kadm.NewClient(cl)
	day := "86400000"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &day}}, "seg"); err != nil {
		t.Fatal(err)
	}
	waitStart := func(cond func(int64) bool, what string) int64 {
		t.Helper()
		proctest.Eventually(t, 10*time.Second, what, func() error {
			if s := lg.LogStartOffset(); !cond(s) {
				return fmt.Errorf("log start offset %d", s)
			}
			return nil
		})
		return lg.LogStartOffset()
	}
	start := waitStart(func(s int64) bool { return s > 100 }, "time retention")
	if start > 200 {
		t.Fatalf("time retention deleted recent records: log start %d", start)
	}
	// Size retention: keep about 8 KiB.
	sz := "8192"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: &sz}}, "seg"); err != nil {
		t.Fatal(err)
	}
	// Kafka deletes the oldest segment only while the rest still holds
	// retention.bytes, so what remains is under retention.bytes plus one
	// segment.
	waitStart(func(s int64) bool { return lg.Size() <= 8192+4096 }, "size retention")
	if lg.LogStartOffset() <= start {
		t.Fatalf("size retention deleted nothing: log start %d", lg.LogStartOffset())
	}
	so, err := adm.ListStartOffsets(ctx, "seg")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := so.Lookup("seg", 0); o.Offset != lg.LogStartOffset() {
		t.Fatalf("ListOffsets earliest %d, log start %d", o.Offset, lg.LogStartOffset())
	}
}

// TestClockSkew: POST /v1/clock moves the broker's clock, and what reads
// it moves with it — here a time-based segment roll (log.roll.ms).
func TestClockSkew(t *testing.T) {
	b := startBroker(t, t.TempDir(), "metrics.listen=127.0.0.1:0", "log.roll.ms=3600000")
	cl := b.client(t)
	createTopic(t, cl, "clk", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "clk", Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, string) {
		resp, err := http.Post("http://"+b.MetricsAddr()+"/v1/clock", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := post(`{"offset_ms": 7200000}`); code != 200 || !strings.Contains(out, `"offset_ms":7200000`) {
		t.Fatalf("set skew: %d %s", code, out)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "clk", Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if n := b.partition("clk", 0).Log().NumSegments(); n != 2 {
		t.Fatalf("%d segments after the clock jumped two hours with log.roll.ms of one hour, want 2", n)
	}
	if code, _ := post(`{"offset": 1}`); code != 400 {
		t.Fatalf("malformed clock request: status %d, want 400", code)
	}
	if code, out := post(`{"offset_ms": 0}`); code != 200 || !strings.Contains(out, `"offset_ms":0`) {
		t.Fatalf("heal skew: %d %s", code, out)
	}
}

// TestClockSkewTimesOutTransaction: the transaction coordinator reads the
// broker's clock, as Kafka's compares a transaction's start with
// time.milliseconds(): a clock that jumps past the transaction timeout
// makes an open transaction time out, and the coordinator aborts it.
func TestClockSkewTimesOutTransaction(t *testing.T) {
	b := startBroker(t, t.TempDir(), "metrics.listen=127.0.0.1:0", "transaction.state.log.num.partitions=1",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms=100")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createTopic(t, b.client(t), "clktx", 1, nil)
	p := b.client(t, kgo.TransactionalID("clk"), kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic("clktx"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if s, err := describeTxn(ctx, p, "clk"); err != nil || s.State != "Ongoing" {
		t.Fatalf("before the jump: %+v %v", s, err)
	}
	resp, err := http.Post("http://"+b.MetricsAddr()+"/v1/clock", "application/json", strings.NewReader(`{"offset_ms": 60000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	proctest.Eventually(t, 30*time.Second, "the timed-out transaction aborted", func() error {
		s, err := describeTxn(ctx, p, "clk")
		if err == nil && s.State != "CompleteAbort" {
			err = fmt.Errorf("state %s", s.State)
		}
		return err
	})
}
