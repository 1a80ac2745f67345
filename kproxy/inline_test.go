package kproxy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestInline: a proxy that listens nowhere serves a client through its
// dialer, in front of a broker that knows nothing of it (as the user's
// own cluster does): every connection of the client goes through it, a
// lost produce response makes a retrying producer write twice, a closed
// connection is retried like a TCP one, and Close ends every connection.
func TestInline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an isrlab cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1})
	p := NewInline(Options{RunID: "test", Seed: 1})
	l := &lab{p: p, c: c}
	var dialed atomic.Int64 // the client dials from its own goroutines
	client := func(t *testing.T, topic string, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed.Add(1)
			return p.DialVia(ctx, network, addr, (&net.Dialer{Timeout: 5 * time.Second}).DialContext)
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.Dialer(dial),
			kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}

	c.CreateTopic("plain", 1, 1, nil)
	cl := client(t, "plain")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	vals := l.values(t, "plain")
	for i := range 100 {
		if v := strconv.Itoa(i); vals[v] != 1 {
			t.Fatalf("value %s: %d times in the log", v, vals[v])
		}
	}
	// A dial of the client's may still be on its way into the proxy.
	proctest.Eventually(t, 10*time.Second, "the proxy saw every dial", func() error {
		if st, d := p.Status(), dialed.Load(); d == 0 || st.Accepted != d || st.Requests == 0 || st.Responses == 0 {
			return fmt.Errorf("dialed %d; proxy status %+v", d, st)
		}
		return nil
	})

	c.CreateTopic("lost", 1, 1, nil)
	cl = client(t, "lost", retrying(false)...)
	if n := l.throughLostResponse(t, cl, "lost"); n != 2 {
		t.Fatalf("value written %d times through a lost response, want 2", n)
	}

	// A connection the proxy closes looks to the client like a TCP
	// connection the broker closed: it reconnects and retries.
	l.rule(t, Rule{ID: "cut", API: "Produce", Direction: "request", Action: "close", Count: 1})
	if err := produceOne(t, cl, "after-close"); err != nil {
		t.Fatalf("produce through a closed connection: %v", err)
	}
	if a := l.acted(t, "cut"); a != 1 {
		t.Fatalf("close rule acted %d times", a)
	}

	p.Close()
	if st := p.Status(); st.Conns != 0 {
		t.Fatalf("%d connections left after Close", st.Conns)
	}
	if _, err := p.DialVia(ctx, "tcp", c.Bootstrap()[0], (&net.Dialer{}).DialContext); err == nil {
		t.Fatal("a closed proxy dialed")
	}
}
