package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Snapshot is the whole coordinator state at one revision, in a JSON form
// that includes what the stored JSON leaves out (epochs, versions): for
// `isrlab coordinator dump` and for run records.
type Snapshot struct {
	Revision int64 `json:"revision"`
	// Controller is nil when no controller is elected.
	Controller *SnapshotController `json:"controller,omitempty"`
	Brokers    []SnapshotBroker    `json:"brokers"`
	Topics     []SnapshotTopic     `json:"topics"`
	// ISRChangeNotifications are the entries not yet processed.
	ISRChangeNotifications []ISRChangeNotification `json:"isr_change_notifications"`
	// LatestProducerIDBlock is nil until a broker reserved producer ids.
	LatestProducerIDBlock *ProducerIDBlock `json:"latest_producer_id_block,omitempty"`
}

// SnapshotController is the elected controller.
type SnapshotController struct {
	BrokerID int32 `json:"broker_id"`
	Epoch    int64 `json:"epoch"`
}

// SnapshotBroker is a live registration with its broker epoch.
type SnapshotBroker struct {
	BrokerInfo
	Epoch int64 `json:"epoch"`
}

// SnapshotTopic is a topic with every partition's assignment and state.
type SnapshotTopic struct {
	Name              string              `json:"name"`
	ID                string              `json:"topic_id,omitempty"`
	Configs           map[string]string   `json:"configs"`
	MarkedForDeletion bool                `json:"marked_for_deletion,omitempty"`
	Partitions        []SnapshotPartition `json:"partitions"`
}

// SnapshotPartition is one partition; State is nil before the controller
// created it.
type SnapshotPartition struct {
	Partition int32                   `json:"partition"`
	Replicas  []int32                 `json:"replicas"`
	State     *SnapshotPartitionState `json:"state,omitempty"`
}

// SnapshotPartitionState is a PartitionState with its version.
type SnapshotPartitionState struct {
	PartitionState
	Version int64 `json:"version"`
}

// Snapshot reads every isrlab key in one consistent read.
func (c *Client) Snapshot(ctx context.Context) (Snapshot, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, "/", clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, wrapErr("read coordinator snapshot", err)
	}
	snap := Snapshot{Revision: resp.Header.Revision, Brokers: []SnapshotBroker{}, Topics: []SnapshotTopic{},
		ISRChangeNotifications: []ISRChangeNotification{}}
	topics := map[string]*SnapshotTopic{}
	topic := func(name string) *SnapshotTopic {
		if t, ok := topics[name]; ok {
			return t
		}
		t := &SnapshotTopic{Name: name, Configs: map[string]string{}}
		topics[name] = t
		return t
	}
	states := map[TopicPartition]PartitionState{}
	assignments := map[string]map[int32][]int32{}
	var ctrlRev int64
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, brokerIDsPrefix):
			info, err := decodeBroker(kv.Value, kv.CreateRevision)
			if err != nil {
				return Snapshot{}, err
			}
			snap.Brokers = append(snap.Brokers, SnapshotBroker{BrokerInfo: info, Epoch: info.Epoch})
		case strings.HasPrefix(k, controllerPrefix+"/"):
			if ctrlRev == 0 || kv.CreateRevision < ctrlRev {
				var id int32
				if _, err := fmt.Sscan(string(kv.Value), &id); err != nil {
					return Snapshot{}, fmt.Errorf("read coordinator snapshot: bad election value %q", kv.Value)
				}
				ctrlRev = kv.CreateRevision
				snap.Controller = &SnapshotController{BrokerID: id, Epoch: kv.CreateRevision}
			}
		case strings.HasPrefix(k, topicsPrefix):
			if name, ok := topicFromKey(k); ok {
				spec, err := decodeTopic(name, kv.Value)
				if err != nil {
					return Snapshot{}, err
				}
				if spec.ID != ([16]byte{}) {
					topic(name).ID = FormatTopicID(spec.ID)
				} else {
					topic(name)
				}
				assignments[name] = spec.Assignment
			} else if name, p, ok := parsePartitionStateKey(k); ok {
				st, err := decodeState(kv.Value, kv.ModRevision)
				if err != nil {
					return Snapshot{}, err
				}
				states[TopicPartition{name, p}] = st
			}
		case strings.HasPrefix(k, topicConfigPrefix):
			name := strings.TrimPrefix(k, topicConfigPrefix)
			cfg, err := decodeConfigs(kv.Value)
			if err != nil {
				return Snapshot{}, fmt.Errorf("read coordinator snapshot: %s: %w", name, err)
			}
			topic(name).Configs = cfg
		case strings.HasPrefix(k, deleteTopicsPrefix):
			topic(strings.TrimPrefix(k, deleteTopicsPrefix)).MarkedForDeletion = true
		case strings.HasPrefix(k, isrChangePrefix):
			var n isrChangeJSON
			if err := json.Unmarshal(kv.Value, &n); err != nil {
				return Snapshot{}, fmt.Errorf("decode isr change notification %s: %w", k, err)
			}
			snap.ISRChangeNotifications = append(snap.ISRChangeNotifications, ISRChangeNotification{Key: k, Partitions: n.Partitions, Revision: kv.CreateRevision})
		case k == producerIDBlockKey:
			blk, err := decodeProducerIDBlock(kv.Value)
			if err != nil {
				return Snapshot{}, err
			}
			snap.LatestProducerIDBlock = &blk
		}
	}
	for name, t := range topics {
		ps := map[int32]bool{}
		for p := range assignments[name] {
			ps[p] = true
		}
		for tp := range states {
			if tp.Topic == name {
				ps[tp.Partition] = true
			}
		}
		for p := range ps {
			sp := SnapshotPartition{Partition: p, Replicas: assignments[name][p]}
			if st, ok := states[TopicPartition{name, p}]; ok {
				sp.State = &SnapshotPartitionState{PartitionState: st, Version: st.Version}
			}
			t.Partitions = append(t.Partitions, sp)
		}
		sort.Slice(t.Partitions, func(i, j int) bool { return t.Partitions[i].Partition < t.Partitions[j].Partition })
		snap.Topics = append(snap.Topics, *t)
	}
	sort.Slice(snap.Brokers, func(i, j int) bool { return snap.Brokers[i].ID < snap.Brokers[j].ID })
	sort.Slice(snap.Topics, func(i, j int) bool { return snap.Topics[i].Name < snap.Topics[j].Name })
	sort.Slice(snap.ISRChangeNotifications, func(i, j int) bool {
		return snap.ISRChangeNotifications[i].Revision < snap.ISRChangeNotifications[j].Revision
	})
	return snap, nil
}
