package compat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// saramaRow is sarama at one Version setting: it picks every request's
// version from it, so old settings speak the old protocol.
func saramaRow(v sarama.KafkaVersion) client {
	return client{name: "sarama-" + v.String(), missing: func() string { return "" }, run: func(ctx context.Context, t *testing.T, j job) (result, error) {
		return runSarama(ctx, v, j)
	}}
}

// headersAt is the first Version with record headers (message format v2).
var headersAt = sarama.V0_11_0_0

func saramaConfig(v sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "isrlab-compat"
	cfg.Metadata.RefreshFrequency = time.Second
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	return cfg
}

func toSarama(topic string, r record) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{Topic: topic, Partition: r.Partition, Key: sarama.StringEncoder(r.Key), Value: sarama.StringEncoder(r.Value)}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: []byte(h.Value)})
	}
	return m
}

func fromSarama(m *sarama.ConsumerMessage) record {
	r := record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, header{string(h.Key), string(h.Value)})
	}
	return r
}

func runSarama(ctx context.Context, v sarama.KafkaVersion, j job) (result, error) {
	var r result
	headers := v.IsAtLeast(headersAt)
	if !headers {
		r.NotOffered = map[string]string{"headers": "record headers need Version >= 0.11.0"}
		for i := range j.Records {
			j.Records[i].Headers = nil
		}
		for i := range j.After {
			j.After[i].Headers = nil
		}
	}
	cfg := saramaConfig(v)
	tc, err := j.tlsConfig()
	if err != nil {
		return r, err
	}
	cfg.Net.TLS.Enable, cfg.Net.TLS.Config = tc != nil, tc
	switch j.Capability {
	case "produce":
		if v.IsAtLeast(sarama.V0_11_0_0) {
			cfg.Producer.Idempotent, cfg.Net.MaxOpenRequests = true, 1
			r.Idempotent = true
		} else {
			if r.NotOffered == nil {
				r.NotOffered = map[string]string{}
			}
			r.NotOffered["idempotence"] = "the idempotent producer needs Version >= 0.11.0"
		}
		// The first half through the sync producer, the rest through the
		// async one.
		half := len(j.Records) / 2
		sp, err := sarama.NewSyncProducer(j.Bootstrap, cfg)
		if err != nil {
			return r, fmt.Errorf("sync producer: %w", err)
		}
		for _, rec := range j.Records[:half] {
			p, o, err := sp.SendMessage(toSarama(j.Topic, rec))
			if err != nil {
				sp.Close()
				return r, fmt.Errorf("sync producer: %w", err)
			}
			r.Acks = append(r.Acks, ack{p, o})
		}
		if err := sp.Close(); err != nil {
			return r, err
		}
		ap, err := sarama.NewAsyncProducer(j.Bootstrap, cfg)
		if err != nil {
			return r, fmt.Errorf("async producer: %w", err)
		}
		defer ap.Close()
		acks := make([]ack, len(j.Records)-half)
		for i, rec := range j.Records[half:] {
			m := toSarama(j.Topic, rec)
			m.Metadata = i
			ap.Input() <- m
		}
		for range acks {
			select {
			case m := <-ap.Successes():
				acks[m.Metadata.(int)] = ack{m.Partition, m.Offset}
			case err := <-ap.Errors():
				return r, fmt.Errorf("async producer: %w", err)
			case <-ctx.Done():
				return r, ctx.Err()
			}
		}
		r.Acks = append(r.Acks, acks...)
		return r, nil
	case "consume":
		c, err := sarama.NewConsumer(j.Bootstrap, cfg)
		if err != nil {
			return r, err
		}
		defer c.Close()
		want := map[int32]int{}
		for _, rec := range j.Records {
			want[rec.Partition]++
		}
		for p := int32(0); p < j.Partitions; p++ {
			pc, err := c.ConsumePartition(j.Topic, p, sarama.OffsetOldest)
			if err != nil {
				return r, fmt.Errorf("partition %d: %w", p, err)
			}
			for n := 0; n < want[p]; n++ {
				select {
				case m := <-pc.Messages():
					r.Records = append(r.Records, fromSarama(m))
				case err := <-pc.Errors():
					pc.Close()
					return r, err
				case <-ctx.Done():
					pc.Close()
					return r, fmt.Errorf("partition %d: %d of %d records: %w", p, n, want[p], ctx.Err())
				}
			}
			pc.Close()
		}
		return r, nil
	case "groups":
		prod, err := sarama.NewSyncProducer(j.Bootstrap, cfg)
		if err != nil {
			return r, err
		}
		defer prod.Close()
		gr, err := runGroup(ctx, j, func(ctx context.Context) (member, error) { return startSaramaMember(j, cfg) }, func(ctx context.Context, recs []record) error {
			var ms []*sarama.ProducerMessage
			for _, rec := range recs {
				ms = append(ms, toSarama(j.Topic, rec))
			}
			return prod.SendMessages(ms)
		})
		gr.NotOffered = r.NotOffered
		return gr, err
	case "offsets":
		cl, err := sarama.NewClient(j.Bootstrap, cfg)
		if err != nil {
			return r, err
		}
		om, err := sarama.NewOffsetManagerFromClient(j.Group, cl)
		if err != nil {
			cl.Close()
			return r, err
		}
		for p, o := range j.Commit {
			pom, err := om.ManagePartition(j.Topic, p)
			if err != nil {
				cl.Close()
				return r, err
			}
			pom.MarkOffset(o, "")
			defer pom.AsyncClose()
		}
		om.Commit()
		if err := om.Close(); err != nil {
			return r, err
		}
		cl.Close()
		adm, err := sarama.NewClusterAdmin(j.Bootstrap, cfg)
		if err != nil {
			return r, err
		}
		defer adm.Close()
		var ps []int32
		for p := int32(0); p < j.Partitions; p++ {
			ps = append(ps, p)
		}
		resp, err := adm.ListConsumerGroupOffsets(j.Group, map[string][]int32{j.Topic: ps})
		if err != nil {
			return r, fmt.Errorf("list consumer group offsets: %w", err)
		}
		r.Committed = map[int32]int64{}
		for p, b := range resp.Blocks[j.Topic] {
			if b.Err != sarama.ErrNoError {
				return r, fmt.Errorf("partition %d: %w", p, b.Err)
			}
			r.Committed[p] = b.Offset
		}
		return r, nil
	case "admin":
		return saramaAdmin(ctx, cfg, j)
	}
	return r, fmt.Errorf("unknown capability %q", j.Capability)
}

// unsupported records a call sarama refuses at this Version.
func unsupported(r *result, call string, err error, v sarama.KafkaVersion) bool {
	if !errors.Is(err, sarama.ErrUnsupportedVersion) {
		return false
	}
	if r.NotOffered == nil {
		r.NotOffered = map[string]string{}
	}
	r.NotOffered[call] = "sarama refuses it at Version " + v.String()
	return true
}

func saramaAdmin(ctx context.Context, cfg *sarama.Config, j job) (result, error) {
	var r result
	adm, err := sarama.NewClusterAdmin(j.Bootstrap, cfg)
	if err != nil {
		return r, err
	}
	defer adm.Close()
	entries := map[string]*string{}
	for k, v := range j.Configs {
		entries[k] = &v
	}
	if err := adm.CreateTopic(j.CreateTopic, &sarama.TopicDetail{NumPartitions: j.Partitions, ReplicationFactor: 3, ConfigEntries: entries}, false); err != nil {
		return r, fmt.Errorf("create topic: %w", err)
	}
	var ces []sarama.ConfigEntry
	err = untilKnown(ctx, func(err error) bool { return errors.Is(err, sarama.ErrUnknownTopicOrPartition) }, func() (err error) {
		ces, err = adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: j.CreateTopic})
		return err
	})
	if err != nil && !unsupported(&r, "describe_configs", err, cfg.Version) {
		return r, fmt.Errorf("describe configs: %w", err)
	}
	if err == nil {
		r.Configs = map[string]string{}
		for _, e := range ces {
			r.Configs[e.Name] = e.Value
		}
	}
	want := j.Partitions
	err = adm.CreatePartitions(j.CreateTopic, j.GrowTo, nil, false)
	if err != nil && !unsupported(&r, "create_partitions", err, cfg.Version) {
		return r, fmt.Errorf("create partitions: %w", err)
	}
	if err == nil {
		want = j.GrowTo
	}
	// Other brokers learn of the new partitions shortly after the answer.
	for {
		md, err := adm.DescribeTopics([]string{j.CreateTopic})
		if err != nil {
			return r, fmt.Errorf("describe topics: %w", err)
		}
		r.Partitions = int32(len(md[0].Partitions))
		if r.Partitions == want {
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("metadata shows %d partitions of %s, want %d: %w", r.Partitions, j.CreateTopic, want, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	groups, err := adm.ListConsumerGroups()
	if err != nil {
		return r, fmt.Errorf("list consumer groups: %w", err)
	}
	for g := range groups {
		r.Groups = append(r.Groups, g)
	}
	dg, err := adm.DescribeConsumerGroups([]string{j.Group})
	if err != nil {
		return r, fmt.Errorf("describe consumer groups: %w", err)
	}
	r.GroupState, r.GroupType, r.Members = dg[0].State, dg[0].ProtocolType, len(dg[0].Members)
	cl, err := sarama.NewClient(j.Bootstrap, cfg)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	r.Earliest, r.Latest = map[int32]int64{}, map[int32]int64{}
	for p := int32(0); p < j.Partitions; p++ {
		if r.Earliest[p], err = cl.GetOffset(j.Topic, p, sarama.OffsetOldest); err != nil {
			return r, fmt.Errorf("list offsets: %w", err)
		}
		if r.Latest[p], err = cl.GetOffset(j.Topic, p, sarama.OffsetNewest); err != nil {
			return r, fmt.Errorf("list offsets: %w", err)
		}
	}
	if err := adm.DeleteTopic(j.DeleteTopic); err != nil {
		return r, fmt.Errorf("delete topic: %w", err)
	}
	return r, nil
}

// saramaMember is a sarama ConsumerGroup member.
type saramaMember struct {
	memberState
	topic  string
	group  sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error
}

func startSaramaMember(j job, cfg *sarama.Config) (member, error) {
	g, err := sarama.NewConsumerGroup(j.Bootstrap, j.Group, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &saramaMember{topic: j.Topic, group: g, cancel: cancel, done: make(chan struct{})}
	go func() {
		for err := range g.Errors() {
			if !strings.Contains(err.Error(), "context canceled") {
				m.fail(err)
			}
		}
	}()
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{j.Topic}, m); err != nil && ctx.Err() == nil {
				m.fail(fmt.Errorf("consume: %w", err))
				return
			}
		}
	}()
	return m, nil
}

func (m *saramaMember) Setup(s sarama.ConsumerGroupSession) error {
	m.assign(s.Claims()[m.topic]...)
	return nil
}

func (m *saramaMember) Cleanup(sarama.ConsumerGroupSession) error {
	m.revokeAll()
	return nil
}

func (m *saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		s.MarkMessage(msg, "")
		s.Commit()
		m.add(fromSarama(msg))
	}
	return nil
}

func (m *saramaMember) close() error {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.err = m.group.Close()
	})
	return m.err
}
