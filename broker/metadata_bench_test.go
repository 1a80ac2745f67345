package broker

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/wire"
)

// BenchmarkMetadata measures a Metadata request (v9) answered from a
// metadata cache of 1,000 or 10,000 partitions (topics of 10 partitions,
// 3 replicas on 3 live brokers), as a controller's UpdateMetadata fills
// it, next to franz-go's kfake (3 brokers) seeded with the same topics:
// for all topics and for one topic, each a round trip on loopback with
// the client's decoding. cache_B/partition is the live heap the isrlab
// cache added per partition.
//
//	go test ./broker -run '^$' -bench '^BenchmarkMetadata$' -benchtime 2s -count 3
func BenchmarkMetadata(b *testing.B) {
	for _, parts := range []int{1000, 10000} {
		names := make([]string, parts/10)
		for i := range names {
			names[i] = fmt.Sprintf("s%05d", i)
		}
		for _, target := range []string{"isrlab", "kfake"} {
			b.Run(fmt.Sprintf("partitions=%d/%s", parts, target), func(b *testing.B) {
				var addr string
				perPartition := -1.0
				switch target {
				case "isrlab":
					tb := startBroker(b, b.TempDir())
					before := liveHeap()
					um := scaleUpdateMetadata(tb.id, parts)
					tb.meta.applyUpdateMetadata(um)
					um = nil
					perPartition = float64(liveHeap()-before) / float64(parts)
					addr = tb.Addrs()[0]
				case "kfake":
					c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(10, names...))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(c.Close)
					addr = c.ListenAddrs()[0]
				}
				cl := wire.NewClient(addr, "bench", nil)
				defer cl.Close()
				for _, c := range []struct {
					name   string
					topics []string
				}{{"all", nil}, {"one", []string{names[len(names)/2]}}} {
					b.Run(c.name, func(b *testing.B) {
						want := parts
						if c.topics != nil {
							want = 10
						}
						for b.Loop() {
							req := kmsg.NewPtrMetadataRequest()
							req.SetVersion(9)
							for _, t := range c.topics {
								rt := kmsg.NewMetadataRequestTopic()
								rt.Topic = &t
								req.Topics = append(req.Topics, rt)
							}
							ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
							raw, err := cl.Request(ctx, req)
							cancel()
							if err != nil {
								b.Fatal(err)
							}
							n := 0
							for _, t := range raw.(*kmsg.MetadataResponse).Topics {
								n += len(t.Partitions)
							}
							if n != want {
								b.Fatalf("%d partitions in the response, want %d", n, want)
							}
						}
						if perPartition >= 0 {
							b.ReportMetric(perPartition, "cache_B/partition")
						}
					})
				}
			})
		}
	}
}

// scaleUpdateMetadata is the UpdateMetadata a controller sends for parts
// partitions in topics of 10, led round robin by brokers 1-3 (self is
// among them).
func scaleUpdateMetadata(self int32, parts int) *kmsg.UpdateMetadataRequest {
	req := kmsg.NewPtrUpdateMetadataRequest()
	req.SetVersion(7)
	req.ControllerID, req.ControllerEpoch = self, 1
	for id := int32(1); id <= 3; id++ {
		lb := kmsg.NewUpdateMetadataRequestLiveBroker()
		lb.ID = id
		ep := kmsg.NewUpdateMetadataRequestLiveBrokerEndpoint()
		ep.Host, ep.Port, ep.ListenerName = "127.0.0.1", 9090+id, "PLAINTEXT"
		lb.Endpoints = append(lb.Endpoints, ep)
		req.LiveBrokers = append(req.LiveBrokers, lb)
	}
	for i := range parts / 10 {
		ts := kmsg.NewUpdateMetadataRequestTopicState()
		ts.Topic = fmt.Sprintf("s%05d", i)
		ts.TopicID = coord.NewTopicID()
		for p := range int32(10) {
			r := int32(i) + p
			ps := kmsg.NewUpdateMetadataRequestTopicPartition()
			ps.Partition = p
			ps.Replicas = []int32{1 + r%3, 1 + (r+1)%3, 1 + (r+2)%3}
			ps.ISR = append([]int32(nil), ps.Replicas...)
			ps.Leader = ps.Replicas[0]
			ps.OfflineReplicas = []int32{}
			ts.PartitionStates = append(ts.PartitionStates, ps)
		}
		req.TopicStates = append(req.TopicStates, ts)
	}
	return req
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
