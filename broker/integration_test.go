package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// startBrokerProc runs `isrlab broker` as a process on a free port.
func startBrokerProc(t *testing.T, dir string, overrides ...string) (*proctest.Proc, string) {
	t.Helper()
	port := proctest.FreePorts(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"broker", "--override", "log.dirs=" + filepath.Join(dir, "data"), "--override", "listeners=PLAINTEXT://" + addr}
	for _, o := range overrides {
		args = append(args, "--override", o)
	}
	p := proctest.Start(t, dir, "broker", args...)
	waitBroker(t, p, addr)
	return p, addr
}

func waitBroker(t *testing.T, p *proctest.Proc, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := proctest.WaitTCP(ctx, addr); err != nil {
		t.Fatalf("%v\n%s", err, proctest.Tail(p.Log(), 20))
	}
}

func mustCreate(t *testing.T, addr, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, configs, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// readAll consumes every partition of topic from the start until it has
// read to the end offsets it saw first.
func readAll(t *testing.T, addr, topic string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Metadata may still name a dead leader for a moment: retry.
	var ends kadm.ListedOffsets
	proctest.Eventually(t, 30*time.Second, "end offsets of "+topic, func() error {
		var err error
		ends, err = kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	want := map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset; total += o.Offset })
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		offsets[topic][p] = kgo.NewOffset().AtStart()
	}
	cl.AddConsumePartitions(offsets)
	var out []string
	next := map[int32]int64{}
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), total)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, expected %d (gap or reorder)", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			if r.Offset < want[r.Partition] {
				out = append(out, string(r.Value))
			}
		})
	}
	return out
}

func TestKcatRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed (make deps installs it)")
	}
	dir := t.TempDir()
	_, addr := startBrokerProc(t, dir)
	mustCreate(t, addr, "kc", 3, nil)
	var in bytes.Buffer
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&in, "k%d:v%d\n", i, i)
	}
	prod := exec.Command("kcat", "-P", "-b", addr, "-t", "kc", "-K:", "-X", "acks=all")
	prod.Stdin = &in
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	out, err := exec.Command("kcat", "-C", "-b", addr, "-t", "kc", "-o", "beginning", "-e", "-q", "-f", "%k=%s\n").Output()
	if err != nil {
		t.Fatalf("kcat -C: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		if "k"+strings.TrimPrefix(v, "v") != k {
			t.Fatalf("key/value mismatch: %q", l)
		}
		seen[v] = true
	}
	if len(lines) != 3000 || len(seen) != 3000 {
		t.Fatalf("kcat read %d lines, %d distinct; want 3000", len(lines), len(seen))
	}
	// kcat's metadata listing sees the topic and its leader.
	md, err := exec.Command("kcat", "-L", "-b", addr, "-t", "kc").Output()
	if err != nil || !strings.Contains(string(md), `topic "kc" with 3 partitions`) {
		t.Fatalf("kcat -L: %v\n%s", err, md)
	}
}

func TestSaramaRoundTrip(t *testing.T) {
	dir := t.TempDir()
	_, addr := startBrokerProc(t, dir)
	mustCreate(t, addr, "sa", 2, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 200; i++ {
		p, off, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "sa", Partition: int32(i % 2), Value: sarama.StringEncoder(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("sarama send %d: %v", i, err)
		}
		if off != int64(i/2) {
			t.Fatalf("send %d: partition %d offset %d, want %d", i, p, off, i/2)
		}
	}
	cfg.Consumer.Return.Errors = true
	cons, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for p := int32(0); p < 2; p++ {
		pc, err := cons.ConsumePartition("sa", p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			select {
			case m := <-pc.Messages():
				if want := strconv.Itoa(i*2 + int(p)); string(m.Value) != want || m.Offset != int64(i) {
					t.Fatalf("partition %d offset %d = %q, want %q at %d", p, m.Offset, m.Value, want, i)
				}
			case err := <-pc.Errors():
				t.Fatal(err)
			case <-time.After(10 * time.Second):
				t.Fatalf("partition %d: only %d messages", p, i)
			}
		}
		pc.Close()
	}
}

// TestKillRecovery SIGKILLs the broker while a producer writes with
// log.flush.interval.messages=1, tears the tail of a segment the way a
// power cut would, restarts, and checks every acknowledged record is there
// and the log accepts new writes.
func TestKillRecovery(t *testing.T) {
	dir := t.TempDir()
	p, addr := startBrokerProc(t, dir, "log.flush.interval.messages=1", "log.segment.bytes=65536")
	mustCreate(t, addr, "crash", 2, nil)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("crash"),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0),
		kgo.ProducerLinger(0), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			v := strconv.Itoa(i)
			cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[v] = true
					mu.Unlock()
				}
			})
		}
	}()
	proctest.Eventually(t, 20*time.Second, "acknowledged writes", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < 3000 {
			return fmt.Errorf("%d acked", len(acked))
		}
		return nil
	})
	p.Kill()
	cancel()
	wg.Wait()
	cl.Close()
	mu.Lock()
	ackedCopy := make([]string, 0, len(acked))
	for v := range acked {
		ackedCopy = append(ackedCopy, v)
	}
	mu.Unlock()

	// Tear the active segment of partition 0 as a power cut would: a batch
	// header promising 1000 bytes followed by only part of them.
	segs, _ := filepath.Glob(filepath.Join(dir, "data", "crash-0", "*.log"))
	sort.Strings(segs)
	if len(segs) == 0 {
		t.Fatal("no segments written")
	}
	active := segs[len(segs)-1]
	before, err := os.Stat(active)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(active, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := make([]byte, 120)
	copy(torn[8:], []byte{0, 0, 0x03, 0xe8}) // batchLength 1000
	torn[16] = 2                             // magic
	f.Write(torn)
	f.Close()

	p.Restart()
	waitBroker(t, p, addr)
	got := readAll(t, addr, "crash")
	have := map[string]bool{}
	for _, v := range got {
		have[v] = true
	}
	lost := 0
	for _, v := range ackedCopy {
		if !have[v] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged records lost after SIGKILL with log.flush.interval.messages=1", lost, len(ackedCopy))
	}
	if len(have) != len(got) {
		t.Fatalf("duplicates after recovery: %d records, %d distinct", len(got), len(have))
	}
	if after, err := os.Stat(active); err != nil || after.Size() != before.Size() {
		t.Fatalf("torn tail not truncated: segment was %d bytes before the tear, %v after recovery (%v)", before.Size(), after.Size(), err)
	}
	// The repaired log takes new writes at the right offsets.
	cl2, _ := kgo.NewClient(kgo.SeedBrokers(addr))
	defer cl2.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	r := &kgo.Record{Topic: "crash", Partition: 0, Value: []byte("after")}
	if err := cl2.ProduceSync(wctx, r).FirstErr(); err != nil {
		t.Fatalf("produce after recovery: %v", err)
	}
	t.Logf("%d acknowledged, %d read after recovery", len(ackedCopy), len(got))
}
