package log

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRealClientBatches stores batches exactly as franz-go's producer builds
// them, with every compression codec: the batches come from an in-process
// kfake broker on loopback, fetched raw.
func TestRealClientBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process kfake cluster")
	}
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		id    int
	}{
		{"none", kgo.NoCompression(), 0},
		{"gzip", kgo.GzipCompression(), 1},
		{"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3},
		{"zstd", kgo.ZstdCompression(), 4},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic("t"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			base := time.UnixMilli(1_700_000_000_000)
			var recs []*kgo.Record
			for i := 0; i < 50; i++ {
				recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("value %d value %d value %d", i, i, i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			// Fetch v13+ names topics by ID.
			meta := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr("t")
			meta.Topics = append(meta.Topics, mt)
			mresp, err := meta.RequestWith(ctx, cl)
			if err != nil || len(mresp.Topics) != 1 {
				t.Fatalf("metadata: %v", err)
			}
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis = 0
			req.MaxBytes = 1 << 20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "t"
			rt.TopicID = mresp.Topics[0].TopicID
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes = 1 << 20
			rp.LogStartOffset = -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
				t.Fatalf("fetch v%d: error %d, %d topics", req.Version, resp.ErrorCode, len(resp.Topics))
			}
			raw := resp.Topics[0].Partitions[0].RecordBatches
			if ec := resp.Topics[0].Partitions[0].ErrorCode; ec != 0 || len(raw) == 0 {
				t.Fatalf("fetch v%d: error %d, %d bytes", req.Version, ec, len(raw))
			}
			bs, err := ParseBatches(raw, 0)
			if err != nil {
				t.Fatalf("franz-go batches rejected: %v", err)
			}
			for _, b := range bs {
				if b.Compression() != c.id {
					t.Fatalf("batch compression %d, want %d", b.Compression(), c.id)
				}
			}
			// A follower stores them as they are; a leader re-stamps them.
			f := openTest(t, DefaultConfig())
			if _, err := f.AppendAsFollower(append([]byte{}, raw...)); err != nil {
				t.Fatal(err)
			}
			l := openTest(t, DefaultConfig())
			if _, err := l.AppendAsLeader(append([]byte{}, raw...), 3); err != nil {
				t.Fatal(err)
			}
			for _, lg := range []*Log{f, l} {
				if lg.LogEndOffset() != 50 {
					t.Fatalf("LEO %d, want 50", lg.LogEndOffset())
				}
				res, err := lg.Read(0, 1<<20, 50, true)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ParseBatches(res.Records, 0); err != nil {
					t.Fatalf("stored batches no longer valid: %v", err)
				}
				// Record 17 has timestamp base+17: exact when uncompressed,
				// else the batch that holds it.
				off, ts, ok := lg.OffsetForTimestamp(base.UnixMilli() + 17)
				if !ok || c.id == 0 && (off != 17 || ts != base.UnixMilli()+17) || c.id != 0 && off > 17 {
					t.Fatalf("OffsetForTimestamp = %d %d %v", off, ts, ok)
				}
			}
		})
	}
}
