package compat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franz is the franz-go row: kgo produces (idempotent, acks=all) and
// consumes, kadm does the admin calls.
func franz() client {
	return client{name: "franz-go", missing: func() string { return "" }, run: runFranz}
}

func toKgo(topic string, r record) *kgo.Record {
	kr := &kgo.Record{Topic: topic, Partition: r.Partition, Key: []byte(r.Key), Value: []byte(r.Value)}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return kr
}

func fromKgo(kr *kgo.Record) record {
	r := record{Partition: kr.Partition, Offset: kr.Offset, Key: string(kr.Key), Value: string(kr.Value)}
	for _, h := range kr.Headers {
		r.Headers = append(r.Headers, header{h.Key, string(h.Value)})
	}
	return r
}

func runFranz(ctx context.Context, t *testing.T, j job) (result, error) {
	base := []kgo.Opt{kgo.SeedBrokers(j.Bootstrap...)}
	tc, err := j.tlsConfig()
	if err != nil {
		return result{}, err
	}
	if tc != nil {
		// kgo retries a record whose topic's metadata it cannot load
		// until the record's context ends, a refused handshake included
		// (TestMutualTLS): over TLS, a few metadata loads and the last
		// one's error.
		base = append(base, kgo.DialTLSConfig(tc), kgo.RecordRetries(3), kgo.MetadataMinAge(200*time.Millisecond))
	}
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return kgo.NewClient(append(base, opts...)...) }
	switch j.Capability {
	case "produce":
		cl, err := newClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		var r result
		r.Idempotent = true // kgo's default with acks=all
		for _, rec := range j.Records {
			kr := toKgo(j.Topic, rec)
			if err := cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
				return r, err
			}
			r.Acks = append(r.Acks, ack{kr.Partition, kr.Offset})
		}
		return r, nil
	case "consume":
		parts := map[int32]kgo.Offset{}
		for p := int32(0); p < j.Partitions; p++ {
			parts[p] = kgo.NewOffset().AtStart()
		}
		cl, err := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{j.Topic: parts}))
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		var r result
		for len(r.Records) < len(j.Records) {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return r, err
			}
			if err := fs.Err(); err != nil {
				return r, err
			}
			fs.EachRecord(func(kr *kgo.Record) { r.Records = append(r.Records, fromKgo(kr)) })
		}
		return r, nil
	case "groups":
		prod, err := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			return result{}, err
		}
		defer prod.Close()
		return runGroup(ctx, j, func(ctx context.Context) (member, error) { return startKgoMember(j, base) }, func(ctx context.Context, recs []record) error {
			var krs []*kgo.Record
			for _, r := range recs {
				krs = append(krs, toKgo(j.Topic, r))
			}
			return prod.ProduceSync(ctx, krs...).FirstErr()
		})
	case "offsets":
		cl, err := newClient()
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		var os kadm.Offsets
		for p, o := range j.Commit {
			os.Add(kadm.Offset{Topic: j.Topic, Partition: p, At: o, LeaderEpoch: -1})
		}
		if err := kadm.NewClient(cl).CommitAllOffsets(ctx, j.Group, os); err != nil {
			return result{}, err
		}
		fresh, err := newClient()
		if err != nil {
			return result{}, err
		}
		defer fresh.Close()
		got, err := kadm.NewClient(fresh).FetchOffsets(ctx, j.Group)
		if err != nil {
			return result{}, err
		}
		r := result{Committed: map[int32]int64{}}
		got.Each(func(o kadm.OffsetResponse) { r.Committed[o.Partition] = o.At })
		return r, nil
	case "admin":
		cl, err := newClient(kgo.MetadataMinAge(100 * time.Millisecond))
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		return kadmAdmin(ctx, kadm.NewClient(cl), j)
	}
	return result{}, fmt.Errorf("unknown capability %q", j.Capability)
}

func kadmAdmin(ctx context.Context, adm *kadm.Client, j job) (result, error) {
	var r result
	cfg := map[string]*string{}
	for k, v := range j.Configs {
		cfg[k] = &v
	}
	ct, err := adm.CreateTopic(ctx, j.Partitions, 3, cfg, j.CreateTopic)
	if err == nil {
		err = ct.Err
	}
	if err != nil {
		return r, fmt.Errorf("create topic: %w", err)
	}
	var rc kadm.ResourceConfig
	err = untilKnown(ctx, func(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }, func() error {
		rcs, err := adm.DescribeTopicConfigs(ctx, j.CreateTopic)
		if err != nil {
			return err
		}
		rc, err = rcs.On(j.CreateTopic, nil)
		if err == nil {
			err = rc.Err
		}
		return err
	})
	if err != nil {
		return r, fmt.Errorf("describe configs: %w", err)
	}
	r.Configs = map[string]string{}
	for _, c := range rc.Configs {
		r.Configs[c.Key] = c.MaybeValue()
	}
	// kadm looks the partition count up first, from any broker.
	err = untilKnown(ctx, func(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }, func() error {
		cps, err := adm.CreatePartitions(ctx, int(j.GrowTo-j.Partitions), j.CreateTopic)
		if err == nil {
			err = cps.Error()
		}
		return err
	})
	if err != nil {
		return r, fmt.Errorf("create partitions: %w", err)
	}
	// The controller's metadata reaches every broker shortly after.
	errNotGrown := errors.New("not grown yet")
	err = untilKnown(ctx, func(err error) bool { return errors.Is(err, errNotGrown) }, func() error {
		td, err := adm.ListTopics(ctx, j.CreateTopic)
		if err != nil {
			return err
		}
		if r.Partitions = int32(len(td[j.CreateTopic].Partitions)); r.Partitions != j.GrowTo {
			return fmt.Errorf("%w: %d partitions", errNotGrown, r.Partitions)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("metadata: %w", err)
	}
	lg, err := adm.ListGroups(ctx)
	if err != nil {
		return r, fmt.Errorf("list groups: %w", err)
	}
	r.Groups = lg.Groups()
	dg, err := adm.DescribeGroups(ctx, j.Group)
	if err != nil {
		return r, fmt.Errorf("describe groups: %w", err)
	}
	g := dg[j.Group]
	r.GroupState, r.GroupType, r.Members = g.State, g.ProtocolType, len(g.Members)
	start, err := adm.ListStartOffsets(ctx, j.Topic)
	if err != nil {
		return r, fmt.Errorf("list offsets: %w", err)
	}
	end, err := adm.ListEndOffsets(ctx, j.Topic)
	if err != nil {
		return r, fmt.Errorf("list offsets: %w", err)
	}
	r.Earliest, r.Latest = map[int32]int64{}, map[int32]int64{}
	start.Each(func(o kadm.ListedOffset) { r.Earliest[o.Partition] = o.Offset })
	end.Each(func(o kadm.ListedOffset) { r.Latest[o.Partition] = o.Offset })
	dt, err := adm.DeleteTopic(ctx, j.DeleteTopic)
	if err == nil {
		err = dt.Err
	}
	if err != nil {
		return r, fmt.Errorf("delete topic: %w", err)
	}
	return r, nil
}

// kgoMember is a kgo group consumer (cooperative-sticky, kgo's default).
type kgoMember struct {
	memberState
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startKgoMember(j job, base []kgo.Opt) (member, error) {
	m := &kgoMember{done: make(chan struct{})}
	parts := func(a map[string][]int32) []int32 { return a[j.Topic] }
	cl, err := kgo.NewClient(append(base,
		kgo.ConsumerGroup(j.Group), kgo.ConsumeTopics(j.Topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(500*time.Millisecond), kgo.SessionTimeout(6*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.assign(parts(a)...) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, a map[string][]int32) {
			m.revoke(parts(a)...)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.revoke(parts(a)...) }),
	)...)
	if err != nil {
		return nil, err
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			if err := fs.Err(); err != nil {
				m.fail(err)
				return
			}
			var recs []record
			fs.EachRecord(func(kr *kgo.Record) { recs = append(recs, fromKgo(kr)) })
			if err := cl.CommitRecords(ctx, fs.Records()...); err != nil && ctx.Err() == nil {
				m.fail(fmt.Errorf("commit: %w", err))
				return
			}
			m.add(recs...)
		}
	}()
	return m, nil
}

func (m *kgoMember) close() error {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.cl.Close()
	})
	return nil
}
