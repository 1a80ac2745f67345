package broker

import (
	"context"
	"crypto/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The throughput benchmarks run the same kgo workload against an isrlab
// broker (storing on disk) and franz-go's in-memory kfake, side by side:
//
//	go test ./broker -run '^$' -bench 'Produce|Consume' -benchtime 200000x
//
// 1 KiB random records, no compression, acks=1, 8 partitions, one
// producer client. Client and server share the process, so the reported
// RSS growth covers both; kfake keeps every record in memory, the isrlab
// broker keeps them in the page cache.

const (
	benchPartitions = 8
	benchRecordSize = 1024
)

type benchTarget struct {
	name  string
	start func(b *testing.B) (addr string, rss func() int64)
}

func benchTargets() []benchTarget {
	return []benchTarget{
		{"isrlab", func(b *testing.B) (string, func() int64) {
			tb := startBroker(b, b.TempDir())
			return tb.Addrs()[0], selfRSS
		}},
		{"kfake", func(b *testing.B) (string, func() int64) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, "bench"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			return c.ListenAddrs()[0], selfRSS
		}},
	}
}

// selfRSS reads this process's resident set size in bytes.
func selfRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func benchProduce(b *testing.B, addr string, n int) {
	benchProduceAcks(b, addr, n, kgo.LeaderAck())
}

func benchProduceAcks(b *testing.B, addr string, n int, acks kgo.Acks, opts ...kgo.Opt) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite(),
		kgo.DefaultProduceTopic("bench"), kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(100000),
		kgo.ProducerBatchCompression(kgo.NoCompression())}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	// Random, uncompressed payloads: the conservative case (seed 002).
	value := make([]byte, benchRecordSize)
	rand.Read(value)
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	wg.Add(n)
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				errOnce.Do(func() { firstErr = err })
			}
			wg.Done()
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func ensureTopic(b *testing.B, addr string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	createTopicIfMissing(b, cl, "bench", benchPartitions)
}

func BenchmarkProduce(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			addr, rss := tg.start(b)
			ensureTopic(b, addr)
			runtime.GC()
			before := rss()
			b.SetBytes(benchRecordSize)
			b.ResetTimer()
			benchProduce(b, addr, b.N)
			b.StopTimer()
			b.ReportMetric(float64(rss()-before)/(1<<20), "MiB-rss-growth")
		})
	}
}

func BenchmarkConsume(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			addr, _ := tg.start(b)
			ensureTopic(b, addr)
			benchProduce(b, addr, b.N)
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			b.SetBytes(benchRecordSize)
			b.ResetTimer()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			got := 0
			for got < b.N {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					b.Fatalf("consumed %d of %d", got, b.N)
				}
				fs.EachError(func(t string, p int32, err error) { b.Fatalf("%s/%d: %v", t, p, err) })
				got += fs.NumRecords()
			}
		})
	}
}

// BenchmarkReplication compares acks=all produce to 3 brokers with
// replication factor 3 against 1 broker with factor 1, same client and
// records, side by side (all in this process, on this machine's 2 cores):
//
//	go test ./broker -run '^$' -bench Replication -benchtime 100000x
func BenchmarkReplication(b *testing.B) {
	for _, tg := range []struct {
		name    string
		brokers int
	}{{"rf1-1broker", 1}, {"rf3-3brokers", 3}} {
		b.Run(tg.name, func(b *testing.B) {
			var addr string
			var tc *testCluster
			if tg.brokers == 1 {
				addr = startBroker(b, b.TempDir()).Addrs()[0]
			} else {
				tc = startClusterB(b, tg.brokers)
				addr = tc.bootstrap()[0]
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, benchPartitions, int16(tg.brokers), nil, "bench"); err != nil {
				b.Fatal(err)
			}
			cl.Close()
			waitISR(b, addr, "bench", tg.brokers)
			if tc != nil {
				tc.waitMetadataEverywhere("bench", benchPartitions, tg.brokers)
			}
			b.SetBytes(benchRecordSize)
			b.ResetTimer()
			benchProduceAcks(b, addr, b.N, kgo.AllISRAcks())
			b.StopTimer()
			b.ReportMetric(float64(b.N)*benchRecordSize/b.Elapsed().Seconds()/1e6/float64(tg.brokers), "MB/s/broker")
		})
	}
}

func createTopicRF(t testing.TB, addr, topic string, partitions int32, rf int16) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, rf, nil, topic); err != nil {
		t.Fatal(err)
	}
}
