package kproxy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/units"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// lab is a one-broker isrlab cluster whose broker advertises the proxy's
// address, so that every client connection after the bootstrap goes
// through the proxy.
type lab struct {
	p *Proxy
	c *proctest.Cluster
}

func startLab(t *testing.T) *lab {
	t.Helper()
	p, err := New(Options{Listen: "127.0.0.1:0", RunID: "test", Seed: 1,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1,
		BrokerOverrides: map[int32][]string{1: {"advertised.listeners=PLAINTEXT://" + p.Addr()}},
		BeforeBrokers:   func(addrs map[int32]string) { p.SetUpstream(addrs[1]) }})
	return &lab{p: p, c: c}
}

// client is a franz-go client bootstrapped through the proxy.
func (l *lab) client(t *testing.T, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(l.p.Addr()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// retrying makes a non-idempotent producer that retries a produce
// request whose answer does not come within about two seconds.
func retrying(idempotent bool) []kgo.Opt {
	opts := []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxProduceRequestsInflightPerBroker(1),
		kgo.ProduceRequestTimeout(time.Second), kgo.RequestTimeoutOverhead(time.Second), kgo.RecordDeliveryTimeout(60 * time.Second),
		// A NOT_LEADER answer refreshes metadata before the retry: at
		// once, not after franz-go's 5 s minimum age.
		kgo.MetadataMinAge(50 * time.Millisecond)}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return opts
}

// values reads partition 0 of topic from the broker directly, from the
// start to the end offset, and counts each value.
func (l *lab) values(t *testing.T, topic string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(l.c.Client())
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of %s: %+v", topic, end)
	}
	out := map[string]int{}
	if end.Offset == 0 {
		return out
	}
	cl := l.c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	for n := int64(0); n < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, n, end.Offset, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end.Offset {
				out[string(r.Value)]++
				n++
			}
		})
	}
	return out
}

func produceOne(t *testing.T, cl *kgo.Client, value string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr()
}

// throughLostResponse produces one value on topic through cl whose
// produce response the proxy drops, and returns how often it was written.
func (l *lab) throughLostResponse(t *testing.T, cl *kgo.Client, topic string) int {
	t.Helper()
	// Warm up: metadata (and the producer id) before the rule.
	if err := produceOne(t, cl, "warm"); err != nil {
		t.Fatal(err)
	}
	l.rule(t, Rule{ID: "lose", API: "Produce", Action: "drop", Count: 1})
	if err := produceOne(t, cl, "v"); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if a := l.acted(t, "lose"); a != 1 {
		t.Fatalf("rule acted %d times", a)
	}
	return l.values(t, topic)["v"]
}

func (l *lab) rule(t *testing.T, r Rule) {
	t.Helper()
	if err := l.p.Set(r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.p.Clear(r.ID) })
}

func (l *lab) acted(t *testing.T, id string) int64 {
	t.Helper()
	for _, rs := range l.p.Status().Rules {
		if rs.ID == id {
			return rs.Acted
		}
	}
	t.Fatalf("no rule %s", id)
	return 0
}

// TestEndToEnd runs franz-go clients through the proxy against a real
// isrlab broker, with and without faults.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an isrlab cluster")
	}
	l := startLab(t)
	topic := func(name string) string {
		l.c.CreateTopic(name, 1, 1, nil)
		return name
	}

	t.Run("no rules", func(t *testing.T) {
		tp := topic("plain")
		cl := l.client(t, tp)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var recs []*kgo.Record
		for i := range 200 {
			recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// Consume back through the proxy too.
		cons := l.client(t, tp, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp: {0: kgo.NewOffset().AtStart()}}))
		seen := map[string]int{}
		for len(seen) < 200 {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of 200 through the proxy", len(seen))
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
		}
		vals := l.values(t, tp)
		for i := range 200 {
			if v := strconv.Itoa(i); vals[v] != 1 || seen[v] != 1 {
				t.Fatalf("value %s: %d times in the log, consumed %d times", v, vals[v], seen[v])
			}
		}
		if len(vals) != 200 {
			t.Fatalf("%d distinct values in the log", len(vals))
		}
		st := l.p.Status()
		if st.Requests == 0 || st.Responses == 0 || st.Accepted == 0 || st.Conns == 0 {
			t.Fatalf("status %+v", st)
		}
	})

	// A lost Produce response: the broker wrote the batch; the client
	// times out and sends it again.
	for _, idem := range []bool{false, true} {
		t.Run(fmt.Sprintf("response drop idempotent=%v", idem), func(t *testing.T) {
			tp := topic(fmt.Sprintf("drop-%v", idem))
			cl := l.client(t, tp, retrying(idem)...)
			if err := cl.ProduceSync(context.Background()).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want := 2
			if idem {
				want = 1
			}
			if n := l.throughLostResponse(t, cl, tp); n != want {
				t.Fatalf("value written %d times, want %d", n, want)
			}
		})
	}

	t.Run("response error", func(t *testing.T) {
		tp := topic("nl")
		cl := l.client(t, tp, retrying(false)...)
		if err := produceOne(t, cl, "warm"); err != nil {
			t.Fatal(err)
		}
		l.rule(t, Rule{ID: "nl", API: "Produce", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER", Count: 1})
		if err := produceOne(t, cl, "v"); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if a := l.acted(t, "nl"); a != 1 {
			t.Fatalf("rule acted %d times", a)
		}
		if n := l.values(t, tp)["v"]; n != 2 {
			t.Fatalf("value written %d times, want 2 (written, failed, retried)", n)
		}
	})

	t.Run("request error", func(t *testing.T) {
		tp := topic("reqerr")
		cl := l.client(t, tp, retrying(false)...)
		if err := produceOne(t, cl, "warm"); err != nil {
			t.Fatal(err)
		}
		l.rule(t, Rule{ID: "nl", API: "Produce", Direction: "request", Action: "error", Error: "NOT_LEADER_OR_FOLLOWER", Count: 1})
		if err := produceOne(t, cl, "v"); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if a := l.acted(t, "nl"); a != 1 {
			t.Fatalf("rule acted %d times", a)
		}
		if n := l.values(t, tp)["v"]; n != 1 {
			t.Fatalf("value written %d times, want 1 (the failed request never reached the broker)", n)
		}
	})

	t.Run("response close", func(t *testing.T) {
		tp := topic("cut")
		cl := l.client(t, tp, retrying(false)...)
		if err := produceOne(t, cl, "warm"); err != nil {
			t.Fatal(err)
		}
		before := l.p.Status().Accepted
		l.rule(t, Rule{ID: "cut", API: "Produce", Action: "close", Count: 1})
		err := produceOne(t, cl, "v")
		t.Logf("produce after the cut: %v", err)
		if a := l.acted(t, "cut"); a != 1 {
			t.Fatalf("rule acted %d times", a)
		}
		st := l.p.Status()
		if st.Accepted < 2 {
			t.Fatalf("accepted %d connections", st.Accepted)
		}
		if err == nil && st.Accepted <= before {
			t.Fatalf("the send succeeded without a new connection (accepted %d before, %d after)", before, st.Accepted)
		}
		if n := l.values(t, tp)["v"]; n < 1 {
			t.Fatalf("value written %d times: the broker processed the request before the cut", n)
		}
	})

	// The other request actions, each once on a non-idempotent producer.
	for _, tc := range []struct {
		rule Rule
		want int // times the value is in the log
	}{
		{Rule{ID: "twice", API: "Produce", Direction: "request", Action: "duplicate", Count: 1}, 2},
		{Rule{ID: "lost", API: "Produce", Direction: "request", Action: "drop", Count: 1}, 1},
		{Rule{ID: "slow-req", API: "Produce", Direction: "request", Action: "delay", Delay: units.Duration(300 * time.Millisecond), Count: 1}, 1},
		{Rule{ID: "slow-resp", API: "Produce", Action: "delay", Delay: units.Duration(300 * time.Millisecond), Count: 1}, 1},
		{Rule{ID: "topic-miss", API: "Produce", Direction: "request", Action: "drop", Topic: "elsewhere"}, 1},
	} {
		t.Run(tc.rule.ID, func(t *testing.T) {
			tp := topic(tc.rule.ID)
			cl := l.client(t, tp, retrying(false)...)
			if err := produceOne(t, cl, "warm"); err != nil {
				t.Fatal(err)
			}
			l.rule(t, tc.rule)
			if err := produceOne(t, cl, "v"); err != nil {
				t.Fatalf("produce: %v", err)
			}
			want := int64(1)
			if tc.rule.Topic != "" {
				want = 0
			}
			if a := l.acted(t, tc.rule.ID); a != want {
				t.Fatalf("rule acted %d times, want %d", a, want)
			}
			// The client has its answer before the broker reads a
			// duplicate's second copy (one connection's requests are
			// handled in order, the first answered first).
			proctest.Eventually(t, 10*time.Second, fmt.Sprintf("the value written %d times", tc.want), func() error {
				if n := l.values(t, tp)["v"]; n != tc.want {
					return fmt.Errorf("written %d times", n)
				}
				return nil
			})
		})
	}
}
