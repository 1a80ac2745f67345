package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildBinary builds cmd/isrlab once per test binary run, into a directory
// removed by TestMain's caller (the OS temp dir; see cleanupBinary).
func buildBinary() (string, error) {
	buildOnce.Do(func() {
		// ISRLAB_BIN names a prebuilt binary (make build's bin/isrlab).
		if bin := os.Getenv("ISRLAB_BIN"); bin != "" {
			builtBin, buildErr = filepath.Abs(bin)
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "isrlab-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "isrlab")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/isrlab")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/isrlab: %v\n%s", err, out)
		}
	})
	return builtBin, buildErr
}

func cleanupBinary() {
	if builtBin != "" && os.Getenv("ISRLAB_BIN") == "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
}

// TestDockerRealCluster runs the isrlab binary in containers: 3
// coordinators and 1 broker (3 once the broker forms clusters), produce and
// consume through the client container's namespace, down without leftovers.
func TestDockerRealCluster(t *testing.T) {
	cli := requireDocker(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
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
