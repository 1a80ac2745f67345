package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// TestDockerRealCluster runs the isrlab binary in containers: 3
// coordinators and 1 broker (3 once the broker forms clusters), produce and
// consume through the client container's namespace, down without leftovers.
func TestDockerRealCluster(t *testing.T) {
	cli := requireDocker(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin := proctest.Binary(t)
	for _, brokers := range []int{1, 3} {
		t.Run(fmt.Sprintf("3c%db", brokers), func(t *testing.T) {
			dir := t.TempDir()
			stateDir := filepath.Join(dir, "state")
			top, err := compose.Build(compose.Options{Name: "dreal", RunDir: filepath.Join(dir, "run"), Binary: bin,
				Coordinators: 3, Brokers: brokers, Clients: 1, NoDefaults: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			b := &Backend{StateDir: stateDir, ReadyTimeout: 20 * time.Second}
			begin := time.Now()
			c, err := b.Up(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Down(context.Background()) })
			t.Logf("ready after %v", time.Since(begin))
			produceConsume(ctx, t, c, int16(brokers))
			begin = time.Now()
			if err := c.Down(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("down after %v", time.Since(begin))
			if left := leftovers(t, cli, stateDir, top.RunID); len(left) > 0 {
				t.Fatalf("leftovers: %v", left)
			}
		})
	}
}

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
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, rf, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "m%03d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: got %d of %d: %v", len(got), n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if want := fmt.Sprintf("m%03d", i); v != want {
			t.Fatalf("record %d = %q, want %q", i, v, want)
		}
	}
}
