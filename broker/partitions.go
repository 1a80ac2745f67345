package broker

import (
	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/broker/replication"
	"github.com/isrlab/isrlab/kafkaconfig"
)

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
		Switches: replication.Switches(b.cfg),
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

func (b *Broker) partitionList() []*partition.Partition {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*partition.Partition, 0, len(b.partitions))
	for _, p := range b.partitions {
		out = append(out, p)
	}
	return out
}

// applyTopicConfig gives the local replica of topic/idx, if any, a new
// topic config.
func (b *Broker) applyTopicConfig(topic string, idx int32, tc *kafkaconfig.Config) {
	if p := b.partition(topic, idx); p != nil {
		p.SetConfig(partitionConfig(tc))
		p.Log().SetConfig(b.logConfig(tc))
	}
}

// replicaLive is the partition's view of broker liveness: clustered, the
// live brokers of the controller's last UpdateMetadata.
func (b *Broker) replicaLive(id int32) bool {
	if b.cluster == nil || b.meta == nil {
		return true
	}
	return b.meta.brokerLive(id)
}

// replicaHost is the broker as package replication sees it.
type replicaHost struct{ b *Broker }

func (h replicaHost) BrokerAddr(id int32) (string, bool) { return h.b.meta.brokerAddr(id) }

func (h replicaHost) Partitions() []*partition.Partition { return h.b.partitionList() }

func (h replicaHost) ObserveReplicas(ps []*partition.Partition, stalled int) {
	h.b.metrics.updatePartitionGauges(ps)
	h.b.metrics.replica.stalled.Set(float64(stalled))
}
