package broker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// testCluster is a coordinator and n in-process brokers on loopback.
type testCluster struct {
	t       testing.TB
	coord   *coord.Server
	brokers map[int32]*testBroker
	dirs    map[int32]string
	ports   map[int32]int
	extra   []string
	// listeners, if set, gives a broker's listeners from its port
	// (default: one PLAINTEXT listener).
	listeners func(port int) string
}

func testLogger() *slog.Logger {
	if os.Getenv("ISRLAB_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startCluster(t *testing.T, n int, overrides ...string) *testCluster {
	return startClusterB(t, n, overrides...)
}

func startClusterB(t testing.TB, n int, overrides ...string) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, coord: coordtest.Start(t), brokers: map[int32]*testBroker{}, dirs: map[int32]string{}, ports: map[int32]int{}, extra: overrides}
	ports := coordtest.FreePorts(t, n)
	for i := 1; i <= n; i++ {
		id := int32(i)
		tc.dirs[id] = t.TempDir()
		tc.ports[id] = ports[i-1]
		tc.start(id)
	}
	tc.waitBrokers(n)
	return tc
}

// start (re)starts broker id on its directory and port.
func (tc *testCluster) start(id int32) {
	t := tc.t
	listeners := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", tc.ports[id])
	if tc.listeners != nil {
		listeners = tc.listeners(tc.ports[id])
	}
	ov := append([]string{
		"broker.id=" + fmt.Sprint(id),
		"log.dirs=" + tc.dirs[id],
		"listeners=" + listeners,
		"coordinator.connect=" + strings.Join(tc.coord.ClientURLs(), ","),
		"coordinator.session.timeout.ms=3000",
		"replica.fetch.wait.max.ms=100",
		"replica.fetch.backoff.ms=100",
		"controlled.shutdown.retry.backoff.ms=100",
	}, tc.extra...)
	cfg, _, err := kafkaconfig.Load("", ov)
	if err != nil {
		t.Fatal(err)
	}
	logger := testLogger().With("broker", id)
	b, err := New(cfg, WithLogger(logger), WithController(func(b *Broker, c *coord.Client) Controller {
		return controller.New(controller.Config{BrokerID: b.ID(), Coord: c, Broker: cfg, Logger: logger, ImbalanceCheckInterval: 500 * time.Millisecond, Dial: b.InterBrokerDial()})
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb := &testBroker{Broker: b, cancel: cancel, done: make(chan error, 1)}
	go func() { tb.done <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-tb.done:
		t.Fatalf("broker %d exited: %v", id, err)
	}
	tc.brokers[id] = tb
	t.Cleanup(func() { tb.stop(t) })
}

// stop shuts broker id down (controlled shutdown when enabled).
func (tc *testCluster) stop(id int32) {
	tc.brokers[id].stop(tc.t)
}

func (tc *testCluster) bootstrap() []string {
	var out []string
	for id, tb := range tc.brokers {
		if tb.cancel != nil {
			out = append(out, fmt.Sprintf("127.0.0.1:%d", tc.ports[id]))
		}
	}
	return out
}

func (tc *testCluster) client(opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tc.bootstrap()...)}, opts...)...)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(cl.Close)
	return cl
}

func (tc *testCluster) waitBrokers(n int) {
	proctest.Eventually(tc.t, 20*time.Second, "brokers in metadata", func() error {
		cl := tc.client()
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(m.Brokers) != n {
			return fmt.Errorf("%d brokers", len(m.Brokers))
		}
		return nil
	})
}

// describe returns leader and ISR per partition of topic.
func (tc *testCluster) describe(topic string) (map[int32]int32, map[int32][]int32, error) {
	cl := tc.client()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return nil, nil, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	leaders, isrs := map[int32]int32{}, map[int32][]int32{}
	for p, pd := range td.Partitions {
		leaders[p], isrs[p] = pd.Leader, slices.Sorted(slices.Values(pd.ISR))
	}
	return leaders, isrs, nil
}

func TestClusterReplicatesAndFailsOver(t *testing.T) {
	tc := startCluster(t, 3)
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	min2 := "2"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 3, map[string]*string{"min.insync.replicas": &min2}, "rep"); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "full ISRs", func() error {
		leaders, isrs, err := tc.describe("rep")
		if err != nil {
			return err
		}
		for p := int32(0); p < 2; p++ {
			if leaders[p] < 0 || len(isrs[p]) != 3 {
				return fmt.Errorf("partition %d leader %d isr %v", p, leaders[p], isrs[p])
			}
		}
		return nil
	})
	produceValues(t, cl, "rep", 2, "a", 1000)
	// Every replica holds the data: each broker's log reaches the LEO.
	proctest.Eventually(t, 10*time.Second, "followers caught up", func() error {
		for id, tb := range tc.brokers {
			for p := int32(0); p < 2; p++ {
				pp := tb.partition("rep", p)
				if pp == nil || pp.Log().LogEndOffset() != 500 {
					return fmt.Errorf("broker %d partition %d not at 500", id, p)
				}
			}
		}
		return nil
	})
	leaders, _, _ := tc.describe("rep")
	victim := leaders[0]
	tc.stop(victim)
	proctest.Eventually(t, 20*time.Second, "new leader", func() error {
		l, isrs, err := tc.describe("rep")
		if err != nil {
			return err
		}
		if l[0] == victim || l[0] < 0 || slices.Contains(isrs[0], victim) {
			return fmt.Errorf("leader %d isr %v", l[0], isrs[0])
		}
		return nil
	})
	produceValues(t, cl, "rep", 2, "b", 200)
	got := consumeAll(t, tc.bootstrap()[0], "rep", 1200)
	for p := int32(0); p < 2; p++ {
		if len(got[p]) != 600 {
			t.Fatalf("partition %d has %d records after failover", p, len(got[p]))
		}
	}
}

// waitISR waits until every partition of topic has an ISR of n.
func waitISR(t testing.TB, addr, topic string, n int) {
	proctest.Eventually(t, 30*time.Second, "full ISRs", func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if td := tds[topic]; td.Err != nil || len(td.Partitions) == 0 {
			return fmt.Errorf("topic %s: %d partitions, %v", topic, len(td.Partitions), td.Err)
		}
		for p, pd := range tds[topic].Partitions {
			if pd.Leader < 0 || len(pd.ISR) != n {
				return fmt.Errorf("partition %d leader %d isr %v", p, pd.Leader, pd.ISR)
			}
		}
		return nil
	})
}

// TestStateEndpoints: /v1/partitions shows each replica's role, leader,
// epoch, ISR and HW, and /v1/events records the leadership change a
// failover causes, with timestamps, for the lab's cluster-state timeline.
func TestStateEndpoints(t *testing.T) {
	tc := startCluster(t, 2, "metrics.listen=127.0.0.1:0")
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 2, nil, "st"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "st", 2)
	produceValues(t, cl, "st", 1, "v", 10)
	get := func(b *testBroker, path string, v any) error {
		resp, err := http.Get("http://" + b.MetricsAddr() + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(v)
	}
	var leader int32
	proctest.Eventually(t, 10*time.Second, "leader reports hw 10", func() error {
		for id, b := range tc.brokers {
			var snap struct {
				Partitions []PartitionStatus `json:"partitions"`
			}
			if err := get(b, "/v1/partitions", &snap); err != nil {
				return err
			}
			for _, p := range snap.Partitions {
				if p.Topic == "st" && p.Role == "leader" && p.HighWatermark == 10 && len(p.ISR) == 2 {
					leader = id
					return nil
				}
			}
		}
		return fmt.Errorf("no leader at hw 10 yet")
	})
	var survivor int32 = 1
	if leader == 1 {
		survivor = 2
	}
	tc.stop(leader)
	proctest.Eventually(t, 20*time.Second, "survivor's events show it became leader", func() error {
		var evs struct {
			Events []StateEvent `json:"events"`
		}
		if err := get(tc.brokers[survivor], "/v1/events?since=0", &evs); err != nil {
			return err
		}
		for _, e := range evs.Events {
			if e.Topic == "st" && e.Role == "leader" && e.Leader == survivor && e.LeaderEpoch > 0 && e.TimeMs > 0 {
				return nil
			}
		}
		return fmt.Errorf("events %+v", evs.Events)
	})
}

// waitMetadataEverywhere waits until every running broker's metadata shows
// topic with n partitions, each with a leader and an ISR of rf: clients
// may ask any of them.
func (tc *testCluster) waitMetadataEverywhere(topic string, n int, rf int) {
	proctest.Eventually(tc.t, 30*time.Second, "metadata on every broker", func() error {
		for id, tb := range tc.brokers {
			if tb.cancel == nil {
				continue
			}
			cl := wire.NewClient(fmt.Sprintf("127.0.0.1:%d", tc.ports[id]), "test", nil)
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(9)
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &topic
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			raw, err := cl.Request(ctx, req)
			cancel()
			cl.Close()
			if err != nil {
				return err
			}
			mt := raw.(*kmsg.MetadataResponse).Topics[0]
			if mt.ErrorCode != 0 || len(mt.Partitions) != n {
				return fmt.Errorf("broker %d: error %d, %d partitions", id, mt.ErrorCode, len(mt.Partitions))
			}
			for _, p := range mt.Partitions {
				if p.Leader < 0 || len(p.ISR) != rf {
					return fmt.Errorf("broker %d: partition %d leader %d isr %v", id, p.Partition, p.Leader, p.ISR)
				}
			}
		}
		return nil
	})
}

// TestAcksAllManyPartitionsNoTimeouts: an acks=all produce request covers
// partitions whose high watermarks advance at different moments (followers
// fetch one batch per response here); the delayed produce must complete
// when the last of them does, not sit out its timeout, which makes clients
// retry and write duplicates.
func TestAcksAllManyPartitionsNoTimeouts(t *testing.T) {
	tc := startCluster(t, 3, "replica.fetch.response.max.bytes=1")
	addr := tc.bootstrap()[0]
	createTopicRF(t, addr, "many", 4, 3)
	tc.waitMetadataEverywhere("many", 4, 3)
	leaders, _, err := tc.describe("many")
	if err != nil {
		t.Fatal(err)
	}
	// Group partitions by leader and send each leader one request for all
	// of its partitions, many times.
	byLeader := map[int32][]int32{}
	for p, l := range leaders {
		byLeader[l] = append(byLeader[l], p)
	}
	for round := 0; round < 20; round++ {
		for l, parts := range byLeader {
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(9)
			// The broker may take up to its 30 s timeout to answer; the
			// client waits 20 s: a delayed produce that waits on an
			// already-complete partition never answers in time.
			req.Acks, req.TimeoutMillis = -1, 30000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "many"
			for _, p := range parts {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = p, testBatch(3)
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			cl := wire.NewClient(fmt.Sprintf("127.0.0.1:%d", tc.ports[l]), "test", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			raw, err := cl.Request(ctx, req)
			cancel()
			cl.Close()
			if err != nil {
				t.Fatalf("round %d, leader %d, partitions %v: %v", round, l, parts, err)
			}
			for _, rp := range raw.(*kmsg.ProduceResponse).Topics[0].Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("round %d, leader %d, partitions %v: partition %d got %v", round, l, parts, rp.Partition, kerr.ErrorForCode(rp.ErrorCode))
				}
			}
		}
	}
}

// testBatch builds a v2 record batch of n small records.
func testBatch(n int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	ts := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: recs}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
