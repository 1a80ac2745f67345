package netns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// TestRealCluster brings up coordinators and brokers of the real isrlab
// binary, produces and consumes through the client namespace with kgo, and
// takes the cluster down without leftovers.
func TestRealCluster(t *testing.T) {
	requireNetns(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	tests := []struct {
		name                  string
		coordinators, brokers int
	}{
		{"3 coordinators", 3, 0},
		{"3 coordinators 1 broker", 3, 1},
		{"3 coordinators 3 brokers", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t)
			top, err := compose.Build(compose.Options{
				Name: "real", RunDir: l.runDir, Binary: bin, NoDefaults: true,
				Coordinators: tt.coordinators, Brokers: tt.brokers, Clients: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			b := l.backend()
			b.ReadyTimeout = 15 * time.Second
			begin := time.Now()
			c, err := b.Up(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Down(context.Background()) })
			t.Logf("ready after %v", time.Since(begin))
			pids := pidsOf(c)
			if tt.brokers > 0 {
				produceConsume(ctx, t, c, int16(min(tt.brokers, 3)))
			}
			begin = time.Now()
			if err := c.Down(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("down after %v", time.Since(begin))
			if left := l.leftovers(top.RunID, pids); len(left) > 0 {
				t.Fatalf("leftovers: %v", left)
			}
		})
	}
}

// produceConsume writes records with acks=all through the client namespace
// and reads them back in order.
func produceConsume(ctx context.Context, t *testing.T, c *compose.Cluster, rf int16) {
	t.Helper()
	const topic, n = "compose-smoke", 50
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.Bootstrap()...),
		kgo.Dialer(c.Dial()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, 1, rf, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	for i := range n {
		r := &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "m%03d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: got %d of %d: %v", len(got), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if want := fmt.Sprintf("m%03d", i); v != want {
			t.Fatalf("record %d = %q, want %q", i, v, want)
		}
	}
}
