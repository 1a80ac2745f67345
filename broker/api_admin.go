package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/partition"
)

// Admin APIs that tools call besides the topic and config basics:
// CreatePartitions, the old (whole-set) AlterConfigs, DescribeLogDirs and
// DescribeProducers. Client quotas are in api_quotas.go, reassignment in
// api_reassign.go.

var _ = serve(37, "CreatePartitions", 0, 3, (*Broker).handleCreatePartitions, notIn("0.10"), in("2.4", 0, 2), in("2.6", 0, 2), k40(0, 3))

// handleCreatePartitions adds partitions to topics, as Kafka's
// ZkAdminManager.createPartitions: the count must grow, manual assignments
// must match the topic's replication factor and name known brokers, and a
// topic with a reassignment in progress is refused. New partitions
// continue the topic's placement (AssignMoreReplicas); the controller
// creates their states when it sees the new assignment.
func (b *Broker) handleCreatePartitions(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	var grown []awaited
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		if seen[rt.Topic] > 1 {
			st.ErrorCode, st.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr("Duplicate topic in request.")
		} else if e, msg := b.createPartitions(rt, req.ValidateOnly, 0); e != nil {
			st.ErrorCode, st.ErrorMessage = e.Code, &msg
		} else if !req.ValidateOnly {
			grown = append(grown, awaited{index: len(resp.Topics), topic: rt.Topic, partitions: rt.Count})
		}
		resp.Topics = append(resp.Topics, st)
	}
	b.respondWhenVisible(rq, req.TimeoutMillis, grown, func(w awaited) {
		resp.Topics[w.index].ErrorCode = kerr.RequestTimedOut.Code
	}, resp)
}

func (b *Broker) createPartitions(rt kmsg.CreatePartitionsRequestTopic, validateOnly bool, attempt int) (*kerr.Error, string) {
	ctx, cancel := context.WithTimeout(b.runCtx, 10*time.Second)
	defer cancel()
	var spec coord.TopicSpec
	if b.cluster != nil {
		var err error
		spec, err = b.cluster.coord.Topic(ctx, rt.Topic)
		switch {
		case errors.Is(err, coord.ErrTopicNotFound):
			return kerr.UnknownTopicOrPartition, "The topic '" + rt.Topic + "' does not exist."
		case err != nil:
			return kerr.UnknownServerError, err.Error()
		case spec.MarkedForDeletion:
			return kerr.InvalidTopicException, "The topic is queued for deletion."
		case len(spec.Adding) > 0 || len(spec.Removing) > 0:
			return kerr.ReassignmentInProgress, "A partition reassignment is in progress."
		}
	} else {
		t, ok := b.meta.topic(rt.Topic)
		if !ok {
			return kerr.UnknownTopicOrPartition, "The topic '" + rt.Topic + "' does not exist."
		}
		spec = coord.TopicSpec{Name: rt.Topic, Assignment: map[int32][]int32{}}
		for i, pm := range t.Partitions {
			spec.Assignment[int32(i)] = pm.Replicas
		}
	}
	cur := int32(len(spec.Assignment))
	switch {
	case rt.Count < cur:
		return kerr.InvalidPartitions, fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", cur, rt.Count)
	case rt.Count == cur:
		return kerr.InvalidPartitions, fmt.Sprintf("Topic already has %d partitions.", cur)
	}
	rf := int16(len(spec.Assignment[0]))
	add := rt.Count - cur
	var brokers []int32
	for _, be := range b.meta.brokerList() {
		brokers = append(brokers, be.ID)
	}
	var more map[int32][]int32
	if rt.Assignment != nil {
		if int32(len(rt.Assignment)) != add {
			return kerr.InvalidReplicaAssignment, fmt.Sprintf("Increasing the number of partitions by %d but %d assignments provided.", add, len(rt.Assignment))
		}
		more = map[int32][]int32{}
		for i, a := range rt.Assignment {
			switch {
			case len(a.Replicas) != int(rf):
				return kerr.InvalidReplicaAssignment, fmt.Sprintf("Inconsistent replication factor between partitions, partition 0 has %d while partition %d has replicas %v.", rf, cur+int32(i), a.Replicas)
			case len(slices.Compact(slices.Sorted(slices.Values(a.Replicas)))) != len(a.Replicas):
				return kerr.InvalidReplicaAssignment, fmt.Sprintf("Duplicate brokers not allowed in replica assignment: %v", a.Replicas)
			}
			for _, r := range a.Replicas {
				if !slices.Contains(brokers, r) {
					return kerr.InvalidReplicaAssignment, fmt.Sprintf("Unknown broker(s) in replica assignment: %d.", r)
				}
			}
			more[cur+int32(i)] = a.Replicas
		}
	} else {
		var err error
		first := int32(-1)
		if rs := spec.Assignment[0]; len(rs) > 0 {
			first = rs[0]
		}
		if more, err = controller.AssignMoreReplicas(brokers, first, cur, add, rf); err != nil {
			return kerr.InvalidReplicationFactor, err.Error()
		}
	}
	if validateOnly {
		return nil, ""
	}
	if b.cluster == nil {
		if err := b.addPartitionsStandalone(rt.Topic, add); err != nil {
			return kerr.UnknownServerError, err.Error()
		}
		return nil, ""
	}
	for p, rs := range more {
		spec.Assignment[p] = rs
	}
	if _, err := b.cluster.coord.SetTopicAssignment(ctx, nil, spec, spec.Version); err != nil {
		if errors.Is(err, coord.ErrTopicChanged) && attempt < 3 {
			// Another writer (the controller, another admin) won: decide
			// again on what it wrote.
			return b.createPartitions(rt, validateOnly, attempt+1)
		}
		return kerr.UnknownServerError, err.Error()
	}
	return nil, ""
}

// addPartitionsStandalone appends partitions led by this broker.
func (b *Broker) addPartitionsStandalone(topic string, add int32) error {
	m := b.meta
	m.mu.Lock()
	t, ok := m.topics[topic]
	if !ok {
		m.mu.Unlock()
		return errUnknownTopic
	}
	old := len(t.Partitions)
	for i := int32(0); i < add; i++ {
		t.Partitions = append(t.Partitions, partitionMeta{Leader: b.id, Replicas: []int32{b.id}, ISR: []int32{b.id}})
	}
	if err := m.persistLocked(); err != nil {
		t.Partitions = t.Partitions[:old]
		m.mu.Unlock()
		return fmt.Errorf("persist topic %s: %w", topic, err)
	}
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	m.mu.Unlock()
	return b.openTopicPartitions(&c)
}

var _ = serve(33, "AlterConfigs", 0, 2, configHandler((*configAPI).handleAlterConfigs), notIn("0.10"), in("2.4", 0, 1), in("2.6", 0, 1), k40(0, 2))

// handleAlterConfigs is the old, non-incremental AlterConfigs: a topic's
// overrides become exactly the configs given (entries with a null value
// are dropped, as Kafka does), so anything not named goes back to its
// default. A BROKER resource's dynamic configs are replaced the same way
// (alterBrokerConfigs).
func (a *configAPI) handleAlterConfigs(ctx context.Context, rq *request) {
	req := rq.req.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		fail := func(e *kerr.Error, msg string) { sr.ErrorCode, sr.ErrorMessage = e.Code, &msg }
		switch {
		case rr.ResourceType == resourceTypeBroker:
			// The whole set: what is not named goes back to its static value.
			next := map[string]string{}
			for _, c := range rr.Configs {
				if c.Value != nil {
					next[c.Name] = *c.Value
				}
			}
			if e, msg := a.alterBrokerConfigs(ctx, rr.ResourceName, req.ValidateOnly, func(map[string]string) (map[string]string, error) { return next, nil }); e != nil {
				fail(e, msg)
			}
		case rr.ResourceType != resourceTypeTopic:
			fail(kerr.InvalidRequest, fmt.Sprintf("unsupported resource type %d", rr.ResourceType))
		default:
			if _, ok := a.meta.topic(rr.ResourceName); !ok {
				fail(kerr.UnknownTopicOrPartition, "unknown topic "+rr.ResourceName)
				break
			}
			next := map[string]string{}
			for _, c := range rr.Configs {
				if c.Value != nil {
					next[c.Name] = *c.Value
				}
			}
			if _, err := a.cfg.TopicConfig(next); err != nil {
				fail(kerr.InvalidConfig, err.Error())
				break
			}
			if req.ValidateOnly {
				break
			}
			if err := a.alterTopicConfig(ctx, rr.ResourceName, next); err != nil {
				fail(kerr.UnknownServerError, err.Error())
			}
		}
		resp.Resources = append(resp.Resources, sr)
	}
	rq.respond(resp)
}

var _ = serve(35, "DescribeLogDirs", 0, 4, (*Broker).handleDescribeLogDirs, notIn("0.10"), in("2.4", 0, 1), in("2.6", 0, 2), k40(1, 4))

// handleDescribeLogDirs lists this broker's log directories with the
// replicas each holds (all of them for null topics), their sizes and, as
// OffsetLag, how far a follower's log end is behind the leader's high
// watermark (0 on a leader, as Kafka's ReplicaManager reports it). v4
// carries each directory's total and usable bytes.
func (b *Broker) handleDescribeLogDirs(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	var want map[tp]bool
	if req.Topics != nil {
		want = map[tp]bool{}
		for _, rt := range req.Topics {
			for _, p := range rt.Partitions {
				want[tp{rt.Topic, p}] = true
			}
		}
	}
	byDir := map[string][]tp{}
	for k := range b.logs.Logs() {
		if want != nil && !want[tp{k.Topic, k.Partition}] {
			continue
		}
		l, ok := b.logs.Get(k.Topic, k.Partition)
		if !ok {
			continue
		}
		dir := filepath.Clean(filepath.Dir(l.Dir()))
		byDir[dir] = append(byDir[dir], tp{k.Topic, k.Partition})
	}
	for _, dir := range b.cfg.LogDirs() {
		d := kmsg.NewDescribeLogDirsResponseDir()
		d.Dir = dir
		d.TotalBytes, d.UsableBytes = -1, -1
		var fs syscall.Statfs_t
		if err := syscall.Statfs(dir, &fs); err == nil {
			d.TotalBytes = int64(fs.Blocks) * fs.Bsize
			d.UsableBytes = int64(fs.Bavail) * fs.Bsize
		} else {
			d.ErrorCode = kerr.KafkaStorageError.Code
		}
		parts := byDir[filepath.Clean(dir)]
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].topic != parts[j].topic {
				return parts[i].topic < parts[j].topic
			}
			return parts[i].partition < parts[j].partition
		})
		for _, k := range parts {
			l, ok := b.logs.Get(k.topic, k.partition)
			if !ok {
				continue
			}
			if n := len(d.Topics); n == 0 || d.Topics[n-1].Topic != k.topic {
				dt := kmsg.NewDescribeLogDirsResponseDirTopic()
				dt.Topic = k.topic
				d.Topics = append(d.Topics, dt)
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition, dp.Size = k.partition, l.Size()
			if p := b.partition(k.topic, k.partition); p != nil && p.Role() == partition.Follower {
				dp.OffsetLag = max(0, p.HighWatermark()-l.LogEndOffset())
			}
			last := &d.Topics[len(d.Topics)-1]
			last.Partitions = append(last.Partitions, dp)
		}
		resp.Dirs = append(resp.Dirs, d)
	}
	rq.respond(resp)
}

var _ = serve(61, "DescribeProducers", 0, 0, (*Broker).handleDescribeProducers, notIn("0.10", "2.4", "2.6"), k40(0, 0))

// handleDescribeProducers lists the producers each led partition tracks:
// id, epoch, last sequence, the last batch's timestamp, the coordinator
// epoch of its last transaction marker and the first offset of its open
// transaction (-1 when none). A replica that does not lead answers
// NOT_LEADER_OR_FOLLOWER.
func (b *Broker) handleDescribeProducers(_ context.Context, rq *request) {
	req := rq.req.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		for _, pi := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = pi
			p := b.partition(rt.Topic, pi)
			if p == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			ps, err := p.ActiveProducers()
			if err != nil {
				sp.ErrorCode = errCode(err)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			for _, ap := range ps {
				a := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				a.ProducerID, a.ProducerEpoch, a.LastSequence, a.LastTimestamp = ap.ID, int32(ap.Epoch), ap.LastSequence, ap.LastTimestamp
				a.CoordinatorEpoch, a.CurrentTxnStartOffset = ap.CoordinatorEpoch, ap.CurrentTxnStartOffset
				sp.ActiveProducers = append(sp.ActiveProducers, a)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	rq.respond(resp)
}
