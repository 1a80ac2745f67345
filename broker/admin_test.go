package broker

import (
	"context"
	"errors"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/kafkaconfig"
)

// TestAdminAPIsKadm calls each admin API through kadm against a 3-broker
// cluster: CreateTopics with a manual assignment, CreatePartitions,
// AlterConfigs (whole set), DescribeLogDirs, DescribeProducers and client
// quotas.
func TestAdminAPIsKadm(t *testing.T) {
	tc := startCluster(t, 3)
	cl := tc.client()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Manual replica assignment.
	createAssigned(t, cl, "man", nil, []int32{3, 1}, []int32{2, 3})
	proctest.Eventually(t, 20*time.Second, "manual assignment in metadata", func() error {
		md, err := metadataOf(cl, "man")
		if err != nil {
			return err
		}
		if !slices.Equal(md[0].replicas, []int32{3, 1}) || !slices.Equal(md[1].replicas, []int32{2, 3}) || md[0].leader != 3 || md[1].leader != 2 {
			return fmt.Errorf("metadata %+v", md)
		}
		return nil
	})
	bad := kmsg.NewPtrCreateTopicsRequest()
	bt := kmsg.NewCreateTopicsRequestTopic()
	bt.Topic, bt.NumPartitions, bt.ReplicationFactor = "badman", -1, -1
	for p, rs := range [][]int32{{1, 9}} {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = int32(p), rs
		bt.ReplicaAssignment = append(bt.ReplicaAssignment, ra)
	}
	bad.Topics = append(bad.Topics, bt)
	if resp, err := bad.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != kerr.InvalidReplicaAssignment.Code {
		t.Fatalf("assignment to unknown broker 9: %v %+v", err, resp)
	}

	// CreatePartitions: 2 more, placed like the existing ones, led.
	if _, err := adm.CreateTopic(ctx, 2, 2, nil, "grow"); err != nil {
		t.Fatal(err)
	}
	tc.waitMetadataEverywhere("grow", 2, 2)
	res, err := adm.CreatePartitions(ctx, 2, "grow")
	if err != nil || res["grow"].Err != nil {
		t.Fatalf("create partitions: %v %+v", err, res)
	}
	proctest.Eventually(t, 20*time.Second, "4 led partitions", func() error {
		md, err := metadataOf(cl, "grow")
		if err != nil {
			return err
		}
		if len(md) != 4 {
			return fmt.Errorf("%d partitions", len(md))
		}
		for p, pi := range md {
			if pi.leader < 0 || len(pi.replicas) != 2 || len(pi.isr) != 2 {
				return fmt.Errorf("partition %d: %+v", p, pi)
			}
		}
		return nil
	})
	// The producer below may take its metadata from any broker.
	tc.waitMetadataEverywhere("grow", 4, 2)
	if res, err := adm.UpdatePartitions(ctx, 3, "grow"); err != nil || !errors.Is(res["grow"].Err, kerr.InvalidPartitions) {
		t.Fatalf("shrinking: %v %+v", err, res)
	}
	prod := tc.client(kgo.DefaultProduceTopic("grow"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	for p := int32(0); p < 4; p++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("produce to new partition %d: %v", p, err)
		}
	}

	// AlterConfigs (the old API) replaces the whole set.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "retention.ms", Value: kmsg.StringPtr("1000000")},
		{Name: "max.message.bytes", Value: kmsg.StringPtr("200000")},
	}, "grow"); err != nil {
		t.Fatal(err)
	}
	ares, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("300000")}}, "grow")
	if err != nil || ares[0].Err != nil {
		t.Fatalf("alter configs: %v %+v", err, ares)
	}
	proctest.Eventually(t, 10*time.Second, "configs replaced", func() error {
		rcs, err := adm.DescribeTopicConfigs(ctx, "grow")
		if err != nil {
			return err
		}
		rc, err := rcs.On("grow", nil)
		if err != nil {
			return err
		}
		for _, c := range rc.Configs {
			switch c.Key {
			case "max.message.bytes":
				if c.MaybeValue() != "300000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
					return fmt.Errorf("max.message.bytes %s from %v", c.MaybeValue(), c.Source)
				}
			case "retention.ms":
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					return fmt.Errorf("retention.ms still overridden: %s", c.MaybeValue())
				}
			}
		}
		return nil
	})
	if ares, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("x")}}, "grow"); err != nil || !errors.Is(ares[0].Err, kerr.InvalidConfig) {
		t.Fatalf("invalid value: %v %+v", err, ares)
	}

	// DescribeConfigs answers every Kafka 3.7 broker key: ours with our
	// values, the others at Kafka's default, read-only.
	brc, err := adm.DescribeBrokerConfigs(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := brc.On("2", nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]kadm.Config{}
	for _, c := range bc.Configs {
		byName[c.Key] = c
	}
	for _, d := range kafkaconfig.Kafka37BrokerDefaults {
		if _, ok := byName[d.Name]; !ok {
			t.Errorf("DescribeConfigs leaves out Kafka broker key %s", d.Name)
		}
	}
	if c := byName["log.cleaner.threads"]; c.MaybeValue() != "1" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("log.cleaner.threads: %+v", c)
	}
	if c := byName["ssl.keystore.password"]; c.Value != nil || !c.Sensitive {
		t.Errorf("ssl.keystore.password: %+v", c)
	}
	if c := byName["broker.id"]; c.MaybeValue() != "2" {
		t.Errorf("broker.id: %+v", c)
	}

	// DescribeLogDirs: every broker reports its directory with the
	// replicas it holds.
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 3 {
		t.Fatalf("log dirs of %d brokers", len(dirs))
	}
	for id, ds := range dirs {
		d, ok := ds[tc.dirs[id]]
		if !ok || d.Err != nil || d.TotalBytes <= 0 || d.UsableBytes <= 0 {
			t.Fatalf("broker %d dirs %+v", id, ds)
		}
		md, _ := metadataOf(cl, "man")
		for p, pi := range md {
			_, has := d.Topics.Lookup("man", p)
			if has != slices.Contains(pi.replicas, id) {
				t.Fatalf("broker %d reports man-%d: %v, replicas %v", id, p, has, pi.replicas)
			}
		}
	}
	if lp, ok := dirs[1][tc.dirs[1]].Topics.Lookup("man", 0); !ok || lp.Size < 0 {
		t.Fatalf("man-0 on broker 1: %+v", lp)
	}

	// DescribeProducers: the idempotent producer above is listed.
	dps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"grow": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	pp := dps["grow"].Partitions[0]
	if pp.Err != nil || len(pp.ActiveProducers) != 1 {
		t.Fatalf("producers of grow-0: %+v", pp)
	}
	if ap := pp.ActiveProducers[0]; ap.ProducerID < 0 || ap.LastSequence != 0 || ap.LastTimestamp <= 0 {
		t.Fatalf("producer %+v", ap)
	}

	// Client quotas are stored (in the coordinator) and described.
	user, client := "alice", "app"
	alt, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: &user}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1024}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: &user}, {Type: "client-id", Name: &client}}, Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 2048}, {Key: "request_percentage", Value: 12.5}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 4096}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: &user}}, Ops: []kadm.AlterClientQuotaOp{{Key: "no_such_quota", Value: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range alt {
		if wantErr := i == 3; (a.Err != nil) != wantErr {
			t.Fatalf("alter quota %d (%v): %v %s", i, a.Entity, a.Err, a.ErrMessage)
		}
	}
	all, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("all quotas: %v %+v", err, all)
	}
	exact, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: &user, MatchType: 0}})
	if err != nil || len(exact) != 1 || len(exact[0].Values) != 1 || exact[0].Values[0].Value != 1024 {
		t.Fatalf("strict user=alice: %v %+v", err, exact)
	}
	defaults, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 1}})
	if err != nil || len(defaults) != 1 || defaults[0].Entity[0].Name != nil {
		t.Fatalf("default client-id: %v %+v", err, defaults)
	}
	anyClient, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}})
	if err != nil || len(anyClient) != 2 {
		t.Fatalf("any client-id: %v %+v", err, anyClient)
	}
	// Removing the last value removes the entity.
	if _, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Remove: true}}},
	}); err != nil {
		t.Fatal(err)
	}
	if all, err := adm.DescribeClientQuotas(ctx, false, nil); err != nil || len(all) != 2 {
		t.Fatalf("after removal: %v %+v", err, all)
	}
	qs, err := tc.brokers[1].Coord().ClientQuotas(ctx)
	if err != nil || len(qs) != 2 {
		t.Fatalf("coordinator quotas: %v %+v", err, qs)
	}
}
