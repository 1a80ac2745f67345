package docker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
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
	// The cluster's own client options: TLS and SASL on a secured one.
	opts, err := c.KafkaOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.SeedBrokers(c.Bootstrap()...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
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

// TestDockerSecuredCluster brings a secured cluster (SASL_SSL, SCRAM,
// the run's CA) up in containers: the run's secrets are files of mode
// 0600 that the broker's container mounts read-only, a client with the
// cluster's security config produces and consumes, a plaintext client
// gets no Kafka answer, and down removes the secrets with the rest.
func TestDockerSecuredCluster(t *testing.T) {
	cli := requireDocker(t)
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	t.Setenv("ISRLAB_STATE_DIR", stateDir) // the secrets dir too
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, top := upOneBroker(ctx, t, stateDir, compose.Options{Name: "dsec", Secured: true})
	sec := top.Security
	pw, err := sec.Password(sec.ClientUser)
	if err != nil || pw == "" {
		t.Fatalf("client password: %q %v", pw, err)
	}
	for _, f := range []string{"broker.properties", "client.password", "admin.password"} {
		fi, err := os.Stat(filepath.Join(sec.SecretsDir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("secret %s: %v %v, want mode 0600", f, fi, err)
		}
	}
	ins, err := cli.ContainerInspect(ctx, ContainerName(top.RunID, "b1", KindProcess))
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]bool{}
	for _, m := range ins.Mounts {
		mounts[m.Destination] = m.RW
	}
	for _, d := range []string{sec.TLSDir, sec.SecretsDir} {
		if rw, ok := mounts[d]; !ok || rw {
			t.Errorf("b1's container mounts %s: %v, read-write %v; want it read-only", d, ok, rw)
		}
	}
	produceConsume(ctx, t, c, 1)
	if err := plaintextAnswered(ctx, c, "b1"); err == nil {
		t.Error("a plaintext client got a Kafka answer from b1's SASL_SSL listener")
	} else {
		t.Logf("plaintext client refused: %v", err)
	}
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sec.SecretsDir); !os.IsNotExist(err) {
		t.Errorf("the secrets outlived the cluster: %s (%v)", sec.SecretsDir, err)
	}
	if left := leftovers(t, cli, stateDir, top.RunID); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
}

// plaintextAnswered sends node's Kafka listener an ApiVersions request
// in plaintext and returns nil if a Kafka response to it comes back.
func plaintextAnswered(ctx context.Context, c *compose.Cluster, node string) error {
	conn, err := c.Dial()(ctx, "tcp", c.Node(node).KafkaAddr())
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	// size, api key 18 (ApiVersions), version 0, correlation id 7, client id "t".
	req := []byte{0, 0, 0, 11, 0, 18, 0, 0, 0, 0, 0, 7, 0, 1, 't'}
	if _, err := conn.Write(req); err != nil {
		return err
	}
	head := make([]byte, 8)
	if _, err := io.ReadFull(conn, head); err != nil {
		return err
	}
	if id := binary.BigEndian.Uint32(head[4:]); id != 7 {
		return fmt.Errorf("no Kafka response: % x", head)
	}
	return nil
}

// upOneBroker builds the isrlab binary and brings up one coordinator,
// one broker and a client host, laid out by o (with its name and
// options) under stateDir; t's cleanup takes it down.
func upOneBroker(ctx context.Context, t *testing.T, stateDir string, o compose.Options) (*compose.Cluster, compose.Topology) {
	t.Helper()
	o.RunDir, o.Binary = filepath.Join(filepath.Dir(stateDir), "run"), proctest.Binary(t)
	o.Coordinators, o.Brokers, o.Clients, o.NoDefaults = 1, 1, 1, true
	top, err := compose.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{StateDir: stateDir, ReadyTimeout: 30 * time.Second}
	c, err := b.Up(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background()) })
	return c, top
}
