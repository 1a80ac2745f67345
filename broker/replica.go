package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/isrlab/isrlab/broker/partition"
)

// switches resolves the replication switches from the broker config (the
// kafka.profile values fill whatever was not set alone).
func (b *Broker) switches() partition.Switches {
	sw := partition.Switches{
		Truncation:            b.cfg.String("replication.truncation"),
		ISRUpdate:             b.cfg.String("isr.update"),
		ExpandNeedsEpochStart: b.cfg.String("isr.expand-needs-epoch-start") != "false",
		HWRequiresMinISR:      b.cfg.String("hw.requires-min-isr") == "true",
		ReplicaLagTimeMaxMs:   b.cfg.Long("replica.lag.time.max.ms"),
		TxnVerification:       b.cfg.String("transaction.partition.verification.enable") == "true",
	}
	return sw
}

// ensurePartition returns the local replica of topic/idx, creating its log
// and state on first use with the topic's configs.
func (b *Broker) ensurePartition(topic string, idx int32, configs map[string]string) (*partition.Partition, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.partitions[tp{topic, idx}]; ok {
		return p, nil
	}
	tc, err := b.cfg.TopicConfig(configs)
	if err != nil {
		b.log.Warn("topic config invalid, using broker defaults", "topic", topic, "err", err)
		tc = b.cfg.TopicDefaults()
	}
	lg, err := b.logs.GetOrCreate(topic, idx, b.logConfig(tc))
	if err != nil {
		return nil, err
	}
	p := partition.New(topic, idx, b.id, lg, partitionConfig(tc), b.now, partition.Options{
		Switches: b.switches(),
		Writer:   b.isrWriter,
		Stats:    b.metrics,
		Live:     b.replicaLive,
		MetadataChanged: func() <-chan struct{} {
			if b.meta == nil {
				return nil
			}
			return b.meta.changed()
		},
	})
	b.partitions[tp{topic, idx}] = p
	return p, nil
}

// loadHWCheckpoint reads replication-offset-checkpoint once at start,
// before anything rewrites it.
func (b *Broker) loadHWCheckpoint() {
	hws, err := b.logs.ReadReplicationOffsets()
	if err != nil {
		b.log.Warn("read replication-offset-checkpoint; high watermarks start at the log start", "err", err)
	}
	if hws == nil {
		hws = map[tpKeyT]int64{}
	}
	b.hwMu.Lock()
	b.hwCheckpoint = hws
	b.hwMu.Unlock()
}

// checkpointHW returns the HW last checkpointed for topic/idx.
func (b *Broker) checkpointHW(topic string, idx int32) int64 {
	b.hwMu.Lock()
	defer b.hwMu.Unlock()
	return b.hwCheckpoint[tpKey(topic, idx)]
}

// replicaTasks runs the broker's periodic replica work until ctx ends: the
// isr-expiration check every replica.lag.time.max.ms/2 (§1.3) on one
// goroutine, as Kafka's scheduler does (so a check stuck on the
// coordinator delays the others), and the HW checkpoint.
func (b *Broker) replicaTasks(ctx context.Context) {
	lag := time.Duration(b.cfg.Long("replica.lag.time.max.ms")) * time.Millisecond
	shrink := time.NewTicker(max(lag/2, 10*time.Millisecond))
	defer shrink.Stop()
	hwEvery := time.NewTicker(time.Duration(b.cfg.Long("replica.high.watermark.checkpoint.interval.ms")) * time.Millisecond)
	defer hwEvery.Stop()
	stalled := map[tp][]int32{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-shrink.C:
			ps := b.partitionList()
			for _, p := range ps {
				if p.Role() == partition.Leader {
					p.MaybeShrinkISR()
				}
			}
			b.fetchers.reconcile(ps)
			b.checkStalled(ps, stalled)
			b.metrics.updatePartitionGauges(ps)
			b.metrics.replica.stalled.Set(float64(len(stalled)))
		case <-hwEvery.C:
			b.writeHWCheckpoint()
		}
	}
}

func (b *Broker) partitionList() []*partition.Partition {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*partition.Partition, 0, len(b.partitions))
	for _, p := range b.partitions {
		out = append(out, p)
	}
	return out
}

// writeHWCheckpoint writes replication-offset-checkpoint (§2.3). Entries
// read at start for partitions the controller has not assigned a role yet
// are kept, so a restart does not forget them.
func (b *Broker) writeHWCheckpoint() {
	hws := map[tpKeyT]int64{}
	b.hwMu.Lock()
	for k, v := range b.hwCheckpoint {
		hws[k] = v
	}
	b.hwMu.Unlock()
	for _, p := range b.partitionList() {
		if p.Role() != partition.None {
			hws[tpKey(p.Topic, p.Index)] = p.HighWatermark()
		}
	}
	if err := b.logs.WriteReplicationOffsets(hws); err != nil {
		b.log.Warn("write replication-offset-checkpoint", "err", err)
	}
}

// forgetHW drops a deleted partition's checkpointed HW.
func (b *Broker) forgetHW(topic string, idx int32) {
	b.hwMu.Lock()
	delete(b.hwCheckpoint, tpKey(topic, idx))
	b.hwMu.Unlock()
}

// replicaLive is the partition's view of broker liveness: clustered, the
// live brokers of the controller's last UpdateMetadata.
func (b *Broker) replicaLive(id int32) bool {
	if b.cluster == nil || b.meta == nil {
		return true
	}
	return b.meta.brokerLive(id)
}

// checkStalled is the broker-side invariant behind the stalled-follower
// gauge: a follower that is alive and registered but has not fetched a
// partition this broker leads for longer than replica.lag.time.max.ms has a
// fetcher that stopped, which no fault and no configuration explains. It
// logs each partition when it starts and stops being stalled; stalled
// holds the current set (partition -> stalled followers).
func (b *Broker) checkStalled(ps []*partition.Partition, stalled map[tp][]int32) {
	now := map[tp][]int32{}
	for _, p := range ps {
		if ids := p.StalledFollowers(); len(ids) > 0 {
			now[tp{p.Topic, p.Index}] = ids
		}
	}
	for t, ids := range now {
		if !slices.Equal(stalled[t], ids) {
			b.log.Warn("followers alive but not fetching for longer than replica.lag.time.max.ms", "topic", t.topic, "partition", t.partition,
				"followers", fmt.Sprint(ids), "replica.lag.time.max.ms", b.cfg.Long("replica.lag.time.max.ms"))
		}
	}
	for t := range stalled {
		if _, ok := now[t]; !ok {
			b.log.Info("stalled followers fetch again (or left)", "topic", t.topic, "partition", t.partition)
		}
	}
	clear(stalled)
	for t, ids := range now {
		stalled[t] = ids
	}
}
