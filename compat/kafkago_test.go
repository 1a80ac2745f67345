package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// kafkaGo is the segmentio/kafka-go row: Writer, Reader (alone and in a
// group), Conn for topic creation and deletion, Client for the other
// admin calls.
func kafkaGo() client {
	return client{name: "kafka-go", missing: func() string { return "" }, run: runKafkaGo}
}

func toKafkaGo(r record) kafka.Message {
	m := kafka.Message{Key: []byte(r.Key), Value: []byte(r.Value)}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: []byte(h.Value)})
	}
	return m
}

func fromKafkaGo(m kafka.Message) record {
	r := record{Partition: int32(m.Partition), Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, header{h.Key, string(h.Value)})
	}
	return r
}

// writer sends each record to its partition (the Writer's Balancer picks
// it from the key) and reports the offsets through Completion.
func kafkaGoWriter(j job, tr *kafka.Transport, recs []record, acked func([]kafka.Message)) *kafka.Writer {
	part := map[string]int{}
	for _, r := range recs {
		part[r.Key] = int(r.Partition)
	}
	return &kafka.Writer{
		Addr: kafka.TCP(j.Bootstrap...), Topic: j.Topic, RequiredAcks: kafka.RequireAll,
		Balancer:     kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return part[string(m.Key)] }),
		BatchTimeout: 5 * time.Millisecond, Transport: tr,
		Completion: func(ms []kafka.Message, err error) {
			if err == nil && acked != nil {
				acked(ms)
			}
		},
	}
}

// transport is a job's own: kafka-go's default one is shared by the
// process and caches metadata for 6 s, across jobs that create topics.
func transport() *kafka.Transport {
	return &kafka.Transport{MetadataTTL: 200 * time.Millisecond, ClientID: "isrlab-compat"}
}

func runKafkaGo(ctx context.Context, t *testing.T, j job) (result, error) {
	var r result
	tc, err := j.tlsConfig()
	if err != nil {
		return r, err
	}
	tr := transport()
	tr.TLS = tc
	defer tr.CloseIdleConnections()
	switch j.Capability {
	case "produce":
		r.NotOffered = map[string]string{"idempotence": "kafka-go's Writer has no idempotent producer"}
		var mu sync.Mutex
		at := map[string]ack{}
		w := kafkaGoWriter(j, tr, j.Records, func(ms []kafka.Message) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				at[string(m.Key)] = ack{int32(m.Partition), m.Offset}
			}
		})
		defer w.Close()
		// One record per call keeps them in order on their partition.
		for _, rec := range j.Records {
			if err := w.WriteMessages(ctx, toKafkaGo(rec)); err != nil {
				return r, fmt.Errorf("write: %w", err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rec := range j.Records {
			a, ok := at[rec.Key]
			if !ok {
				return r, fmt.Errorf("no completion for %s", rec.Key)
			}
			r.Acks = append(r.Acks, a)
		}
		return r, nil
	case "consume":
		want := map[int32]int{}
		for _, rec := range j.Records {
			want[rec.Partition]++
		}
		for p := int32(0); p < j.Partitions; p++ {
			rd := kafka.NewReader(kafka.ReaderConfig{Brokers: j.Bootstrap, Topic: j.Topic, Partition: int(p), MaxWait: 200 * time.Millisecond,
				Dialer: &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tc}})
			if err := rd.SetOffset(kafka.FirstOffset); err != nil {
				rd.Close()
				return r, err
			}
			for n := 0; n < want[p]; n++ {
				m, err := rd.ReadMessage(ctx)
				if err != nil {
					rd.Close()
					return r, fmt.Errorf("partition %d: %d of %d records: %w", p, n, want[p], err)
				}
				r.Records = append(r.Records, fromKafkaGo(m))
			}
			rd.Close()
		}
		return r, nil
	case "groups":
		w := kafkaGoWriter(j, tr, j.After, nil)
		defer w.Close()
		n := 0
		return runGroup(ctx, j, func(ctx context.Context) (member, error) {
			n++
			return startKafkaGoMember(j, fmt.Sprintf("%s-member-%d", j.Group, n))
		}, func(ctx context.Context, recs []record) error {
			var ms []kafka.Message
			for _, rec := range recs {
				ms = append(ms, toKafkaGo(rec))
			}
			return w.WriteMessages(ctx, ms...)
		})
	case "offsets":
		cl := &kafka.Client{Addr: kafka.TCP(j.Bootstrap...), Timeout: 30 * time.Second, Transport: tr}
		var commits []kafka.OffsetCommit
		for p, o := range j.Commit {
			commits = append(commits, kafka.OffsetCommit{Partition: int(p), Offset: o})
		}
		cr, err := cl.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: j.Group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{j.Topic: commits}})
		if err != nil {
			return r, fmt.Errorf("offset commit: %w", err)
		}
		for _, p := range cr.Topics[j.Topic] {
			if p.Error != nil {
				return r, fmt.Errorf("offset commit partition %d: %w", p.Partition, p.Error)
			}
		}
		ftr := transport()
		defer ftr.CloseIdleConnections()
		fresh := &kafka.Client{Addr: kafka.TCP(j.Bootstrap...), Timeout: 30 * time.Second, Transport: ftr}
		var ps []int
		for p := 0; p < int(j.Partitions); p++ {
			ps = append(ps, p)
		}
		fr, err := fresh.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: j.Group, Topics: map[string][]int{j.Topic: ps}})
		if err == nil {
			err = fr.Error
		}
		if err != nil {
			return r, fmt.Errorf("offset fetch: %w", err)
		}
		r.Committed = map[int32]int64{}
		for _, p := range fr.Topics[j.Topic] {
			if p.Error != nil {
				return r, fmt.Errorf("offset fetch partition %d: %w", p.Partition, p.Error)
			}
			r.Committed[int32(p.Partition)] = p.CommittedOffset
		}
		return r, nil
	case "admin":
		return kafkaGoAdmin(ctx, j, tr)
	}
	return r, fmt.Errorf("unknown capability %q", j.Capability)
}

// controllerConn dials the controller, where Conn's topic calls go.
func controllerConn(ctx context.Context, bootstrap string) (*kafka.Conn, error) {
	c, err := kafka.DialContext(ctx, "tcp", bootstrap)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctrl, err := c.Controller()
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	return kafka.DialContext(ctx, "tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
}

func kafkaGoAdmin(ctx context.Context, j job, tr *kafka.Transport) (result, error) {
	var r result
	conn, err := controllerConn(ctx, j.Bootstrap[0])
	if err != nil {
		return r, err
	}
	defer conn.Close()
	tc := kafka.TopicConfig{Topic: j.CreateTopic, NumPartitions: int(j.Partitions), ReplicationFactor: 3}
	for k, v := range j.Configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	if err := conn.CreateTopics(tc); err != nil {
		return r, fmt.Errorf("create topics: %w", err)
	}
	cl := &kafka.Client{Addr: kafka.TCP(j.Bootstrap...), Timeout: 30 * time.Second, Transport: tr}
	var dc *kafka.DescribeConfigsResponse
	err = untilKnown(ctx, func(err error) bool { return errors.Is(err, kafka.UnknownTopicOrPartition) }, func() (err error) {
		dc, err = cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{ResourceType: kafka.ResourceTypeTopic, ResourceName: j.CreateTopic}}})
		if err == nil {
			for _, res := range dc.Resources {
				err = errors.Join(err, res.Error)
			}
		}
		return err
	})
	if err != nil {
		return r, fmt.Errorf("describe configs: %w", err)
	}
	r.Configs = map[string]string{}
	for _, res := range dc.Resources {
		for _, e := range res.ConfigEntries {
			r.Configs[e.ConfigName] = e.ConfigValue
		}
	}
	cp, err := cl.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: j.CreateTopic, Count: j.GrowTo}}})
	if err == nil {
		err = errors.Join(mapErrors(cp.Errors)...)
	}
	if err != nil {
		return r, fmt.Errorf("create partitions: %w", err)
	}
	// Other brokers learn of the new partitions shortly after the answer.
	for {
		ps, err := conn.ReadPartitions(j.CreateTopic)
		if err != nil {
			return r, fmt.Errorf("read partitions: %w", err)
		}
		r.Partitions = int32(len(ps))
		if r.Partitions == j.GrowTo {
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("metadata shows %d partitions: %w", r.Partitions, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	lg, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err == nil {
		err = lg.Error
	}
	if err != nil {
		return r, fmt.Errorf("list groups: %w", err)
	}
	for _, g := range lg.Groups {
		r.Groups = append(r.Groups, g.GroupID)
	}
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{j.Group}})
	if err == nil {
		err = dg.Groups[0].Error
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "failed to decode member metadata"):
		// The live group's member is franz-go, whose consumer metadata
		// is version 3 (KIP-881, as Java clients from 3.5 send it).
		r.Gaps = map[string]string{"describe_groups": "kafka-go decodes consumer member metadata of versions 0 and 1 only; the live group's franz-go member sends version 3, as Java consumers do since 3.5 (" + err.Error() + ")"}
	case err != nil:
		return r, fmt.Errorf("describe groups: %w", err)
	default:
		r.GroupState, r.Members = dg.Groups[0].GroupState, len(dg.Groups[0].Members)
	}
	// kafka-go's DescribeGroupsResponseGroup drops the protocol type; the
	// one ListGroups gave stands in.
	for _, g := range lg.Groups {
		if g.GroupID == j.Group {
			r.GroupType = g.ProtocolType
		}
	}
	var reqs []kafka.OffsetRequest
	for p := 0; p < int(j.Partitions); p++ {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	lo, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{j.Topic: reqs}})
	if err != nil {
		return r, fmt.Errorf("list offsets: %w", err)
	}
	r.Earliest, r.Latest = map[int32]int64{}, map[int32]int64{}
	for _, po := range lo.Topics[j.Topic] {
		if po.Error != nil {
			return r, fmt.Errorf("list offsets partition %d: %w", po.Partition, po.Error)
		}
		r.Earliest[int32(po.Partition)], r.Latest[int32(po.Partition)] = po.FirstOffset, po.LastOffset
	}
	if err := conn.DeleteTopics(j.DeleteTopic); err != nil {
		return r, fmt.Errorf("delete topics: %w", err)
	}
	return r, nil
}

func mapErrors(m map[string]error) []error {
	var out []error
	for k, err := range m {
		if err != nil {
			out = append(out, fmt.Errorf("%s: %w", k, err))
		}
	}
	return out
}

// kafkaGoMember is a Reader in a group. The Reader does not say what it
// was assigned, so the member asks the group (DescribeGroups, through
// kafka-go's Client) for the partitions assigned to its client id.
type kafkaGoMember struct {
	memberState
	rd       *kafka.Reader
	cl       *kafka.Client
	group    string
	clientID string
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
	err      error
}

func startKafkaGoMember(j job, clientID string) (member, error) {
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers: j.Bootstrap, GroupID: j.Group, Topic: j.Topic,
		Dialer:            &kafka.Dialer{ClientID: clientID, Timeout: 10 * time.Second},
		StartOffset:       kafka.FirstOffset,
		MaxWait:           200 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: 200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := &kafkaGoMember{rd: rd, cl: &kafka.Client{Addr: kafka.TCP(j.Bootstrap...), Timeout: 10 * time.Second, Transport: transport()},
		group: j.Group, clientID: clientID, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			msg, err := rd.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.fail(err)
				}
				return
			}
			if err := rd.CommitMessages(ctx, msg); err != nil {
				if ctx.Err() == nil {
					m.fail(fmt.Errorf("commit: %w", err))
				}
				return
			}
			m.add(fromKafkaGo(msg))
		}
	}()
	return m, nil
}

func (m *kafkaGoMember) state() ([]int32, []record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var assigned []int32
	dg, err := m.cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{m.group}})
	if err == nil && len(dg.Groups) == 1 && dg.Groups[0].GroupState == "Stable" {
		for _, mem := range dg.Groups[0].Members {
			if mem.ClientID != m.clientID {
				continue
			}
			for _, tp := range mem.MemberAssignments.Topics {
				for _, p := range tp.Partitions {
					assigned = append(assigned, int32(p))
				}
			}
		}
	}
	_, recs, ferr := m.memberState.state()
	return assigned, recs, ferr
}

func (m *kafkaGoMember) close() error {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.err = m.rd.Close()
		m.cl.Transport.(*kafka.Transport).CloseIdleConnections()
	})
	return m.err
}
