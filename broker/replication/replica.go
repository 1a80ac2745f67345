package replication

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// Broker is what replication needs from the broker it runs in.
type Broker interface {
	// BrokerAddr returns where broker id listens (host:port), from the
	// broker's metadata.
	BrokerAddr(id int32) (addr string, ok bool)
	// Partitions lists the broker's local replicas.
	Partitions() []*partition.Partition
	// ObserveReplicas is called after each ISR-expiration check with the
	// replicas checked and how many led partitions have stalled
	// followers (the broker's gauges).
	ObserveReplicas(ps []*partition.Partition, stalled int)
}

// Config is the replication settings, read from the broker config.
type Config struct {
	BrokerID              int32
	NumFetchers           int           // num.replica.fetchers
	FetchBackoff          time.Duration // replica.fetch.backoff.ms
	LagTimeMax            time.Duration // replica.lag.time.max.ms
	FetchWaitMaxMs        int32         // replica.fetch.wait.max.ms
	FetchMinBytes         int32         // replica.fetch.min.bytes
	FetchResponseMaxBytes int32         // replica.fetch.response.max.bytes
	FetchMaxBytes         int32         // replica.fetch.max.bytes
	HWCheckpointInterval  time.Duration // replica.high.watermark.checkpoint.interval.ms
	// EpochFencing is KIP-320 (fetch.leader-epoch-fencing): a follower's
	// requests carry its current leader epoch.
	EpochFencing bool
}

// NewConfig reads the replication settings from a broker config.
func NewConfig(c *kafkaconfig.Config) Config {
	return Config{
		BrokerID:              int32(c.Int("broker.id")),
		NumFetchers:           c.Int("num.replica.fetchers"),
		FetchBackoff:          time.Duration(c.Int("replica.fetch.backoff.ms")) * time.Millisecond,
		LagTimeMax:            time.Duration(c.Long("replica.lag.time.max.ms")) * time.Millisecond,
		FetchWaitMaxMs:        int32(c.Int("replica.fetch.wait.max.ms")),
		FetchMinBytes:         int32(c.Int("replica.fetch.min.bytes")),
		FetchResponseMaxBytes: int32(c.Int("replica.fetch.response.max.bytes")),
		FetchMaxBytes:         int32(c.Int("replica.fetch.max.bytes")),
		HWCheckpointInterval:  time.Duration(c.Long("replica.high.watermark.checkpoint.interval.ms")) * time.Millisecond,
		EpochFencing:          c.String("fetch.leader-epoch-fencing") != "false",
	}
}

// fencingEpoch is the current leader epoch a follower puts in its requests:
// the epoch itself from Kafka 2.1 (KIP-320), so that a leader that moved on
// fences it with FENCED_LEADER_EPOCH, or -1 ("not given") before, when an
// expired follower kept fetching and was re-added to the ISR at once.
func (c *Config) fencingEpoch(e int32) int32 {
	if !c.EpochFencing {
		return -1
	}
	return e
}

// Switches resolves the replication switches from the broker config (the
// kafka.profile values fill whatever was not set alone).
func Switches(c *kafkaconfig.Config) partition.Switches {
	return partition.Switches{
		Truncation:            c.String("replication.truncation"),
		ISRUpdate:             c.String("isr.update"),
		ExpandNeedsEpochStart: c.String("isr.expand-needs-epoch-start") != "false",
		HWRequiresMinISR:      c.String("hw.requires-min-isr") == "true",
		ReplicaLagTimeMaxMs:   c.Long("replica.lag.time.max.ms"),
		TxnVerification:       c.String("transaction.partition.verification.enable") == "true",
	}
}

// OffsetStore is where the high watermarks are checkpointed (the log
// manager's replication-offset-checkpoint).
type OffsetStore interface {
	ReadReplicationOffsets() (map[klog.TopicPartition]int64, error)
	WriteReplicationOffsets(map[klog.TopicPartition]int64) error
}

// HWCheckpoint is the replication-offset-checkpoint (§2.3) as the broker
// keeps it: what was read at start, for the partitions the controller has
// not assigned a role yet, and the replicas' high watermarks when written.
type HWCheckpoint struct {
	store OffsetStore
	log   *slog.Logger

	mu   sync.Mutex
	read map[klog.TopicPartition]int64
}

// LoadHWCheckpoint reads the checkpoint once at start, before anything
// rewrites it. A checkpoint that cannot be read is the store's error (its
// log directory offline): the broker does not start.
func LoadHWCheckpoint(store OffsetStore, log *slog.Logger) (*HWCheckpoint, error) {
	hws, err := store.ReadReplicationOffsets()
	if err != nil {
		return nil, fmt.Errorf("read replication-offset-checkpoint: %w", err)
	}
	if hws == nil {
		hws = map[klog.TopicPartition]int64{}
	}
	return &HWCheckpoint{store: store, log: log, read: hws}, nil
}

// HW returns the HW last checkpointed for topic/idx.
func (c *HWCheckpoint) HW(topic string, idx int32) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read[klog.TopicPartition{Topic: topic, Partition: idx}]
}

// Forget drops a deleted partition's checkpointed HW.
func (c *HWCheckpoint) Forget(topic string, idx int32) {
	c.mu.Lock()
	delete(c.read, klog.TopicPartition{Topic: topic, Partition: idx})
	c.mu.Unlock()
}

// Write writes the checkpoint with the HW of every replica of ps that has
// a role. Entries read at start for partitions the controller has not
// assigned a role yet are kept, so a restart does not forget them.
func (c *HWCheckpoint) Write(ps []*partition.Partition) {
	c.mu.Lock()
	hws := make(map[klog.TopicPartition]int64, len(c.read))
	for k, v := range c.read {
		hws[k] = v
	}
	c.mu.Unlock()
	for _, p := range ps {
		if p.Role() != partition.None {
			hws[klog.TopicPartition{Topic: p.Topic, Partition: p.Index}] = p.HighWatermark()
		}
	}
	if err := c.store.WriteReplicationOffsets(hws); err != nil {
		c.log.Warn("write replication-offset-checkpoint", "err", err)
	}
}

// RunTasks runs the broker's periodic replica work until ctx ends: the
// isr-expiration check every replica.lag.time.max.ms/2 (§1.3) on one
// goroutine, as Kafka's scheduler does (so a check stuck on the
// coordinator delays the others), with the fetchers' reconcile check and
// the stalled-follower check, and the HW checkpoint.
func RunTasks(ctx context.Context, cfg Config, b Broker, fs *Fetchers, hw *HWCheckpoint, log *slog.Logger) {
	shrink := time.NewTicker(max(cfg.LagTimeMax/2, 10*time.Millisecond))
	defer shrink.Stop()
	hwEvery := time.NewTicker(cfg.HWCheckpointInterval)
	defer hwEvery.Stop()
	stalled := map[tp][]int32{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-shrink.C:
			ps := b.Partitions()
			for _, p := range ps {
				if p.Role() == partition.Leader {
					p.MaybeShrinkISR()
				}
			}
			fs.Reconcile(ps)
			checkStalled(ps, stalled, cfg.LagTimeMax, log)
			b.ObserveReplicas(ps, len(stalled))
		case <-hwEvery.C:
			hw.Write(b.Partitions())
		}
	}
}

// checkStalled is the broker-side invariant behind the stalled-follower
// gauge: a follower that is alive and registered but has not fetched a
// partition this broker leads for longer than replica.lag.time.max.ms has a
// fetcher that stopped, which no fault and no configuration explains. It
// logs each partition when it starts and stops being stalled; stalled
// holds the current set (partition -> stalled followers).
func checkStalled(ps []*partition.Partition, stalled map[tp][]int32, lagTimeMax time.Duration, log *slog.Logger) {
	now := map[tp][]int32{}
	for _, p := range ps {
		if ids := p.StalledFollowers(); len(ids) > 0 {
			now[tp{p.Topic, p.Index}] = ids
		}
	}
	for t, ids := range now {
		if !slices.Equal(stalled[t], ids) {
			log.Warn("followers alive but not fetching for longer than replica.lag.time.max.ms", "topic", t.topic, "partition", t.partition,
				"followers", fmt.Sprint(ids), "replica.lag.time.max.ms", lagTimeMax.Milliseconds())
		}
	}
	for t := range stalled {
		if _, ok := now[t]; !ok {
			log.Info("stalled followers fetch again (or left)", "topic", t.topic, "partition", t.partition)
		}
	}
	clear(stalled)
	for t, ids := range now {
		stalled[t] = ids
	}
}

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}
