package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// TestTopicConfigReachesReplicas: a topic's config change reaches every
// replica, also after snapshots in which only other topics changed, and
// a topic created later gets its own configs.
func TestTopicConfigReachesReplicas(t *testing.T) {
	tc := startCluster(t, 2)
	adm := kadm.NewClient(tc.client())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hour := "3600000"
	if _, err := adm.CreateTopic(ctx, 2, 2, map[string]*string{"retention.ms": &hour}, "a"); err != nil {
		t.Fatal(err)
	}
	// Snapshots with "a" unchanged.
	for _, name := range []string{"b", "c"} {
		if _, err := adm.CreateTopic(ctx, 1, 2, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	waitRetention := func(topic string, parts int32, want int64) {
		t.Helper()
		proctest.Eventually(t, 2*time.Minute, fmt.Sprintf("%s retention.ms %d on every replica", topic, want), func() error {
			for id, tb := range tc.brokers {
				for p := range parts {
					rp := tb.partition(topic, p)
					if rp == nil {
						return fmt.Errorf("broker %d has no replica %s-%d", id, topic, p)
					}
					if got := rp.Log().Config().RetentionMs; got != want {
						return fmt.Errorf("broker %d %s-%d: retention.ms %d", id, topic, p, got)
					}
				}
			}
			return nil
		})
	}
	waitRetention("a", 2, 3600000)
	day := "86400000"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &day}}, "a"); err != nil {
		t.Fatal(err)
	}
	waitRetention("a", 2, 86400000)
	if _, err := adm.CreateTopic(ctx, 1, 2, map[string]*string{"retention.ms": &hour}, "d"); err != nil {
		t.Fatal(err)
	}
	waitRetention("d", 1, 3600000)
	waitRetention("b", 1, 604800000) // Kafka's default, 7 days
}

// TestDescribeConfigsIsCurrent: DescribeConfigs sent to any broker right
// after a topic is created with overrides, and right after they change,
// reports the new overrides: brokers answer from the coordinator, as
// Kafka answers from ZooKeeper, not from a cache the topic watch may not
// have updated yet.
func TestDescribeConfigsIsCurrent(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(tc.client())
	describeEverywhere := func(topic, want string) {
		t.Helper()
		for id := range tc.brokers {
			one := wire.NewClient(fmt.Sprintf("127.0.0.1:%d", tc.ports[id]), "describe-test", nil)
			req := kmsg.NewPtrDescribeConfigsRequest()
			r := kmsg.NewDescribeConfigsRequestResource()
			r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, []string{"retention.ms"}
			req.Resources = append(req.Resources, r)
			var res kmsg.DescribeConfigsResponseResource
			// A broker whose metadata has not the new topic yet answers
			// UNKNOWN_TOPIC_OR_PARTITION, as Kafka's do; clients retry.
			proctest.Eventually(t, 30*time.Second, fmt.Sprintf("b%d knows %s", id, topic), func() error {
				raw, err := one.Request(ctx, req)
				if err != nil {
					return err
				}
				res = raw.(*kmsg.DescribeConfigsResponse).Resources[0]
				if res.ErrorCode == kerr.UnknownTopicOrPartition.Code {
					return kerr.UnknownTopicOrPartition
				}
				return nil
			})
			one.Close()
			if res.ErrorCode != 0 || len(res.Configs) != 1 || res.Configs[0].Value == nil || *res.Configs[0].Value != want {
				t.Fatalf("b%d describes %s retention.ms as %+v (error %d), want %s", id, topic, res.Configs, res.ErrorCode, want)
			}
		}
	}
	v := "123456789"
	resp, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"retention.ms": &v}, "described")
	if err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	describeEverywhere("described", v)
	w := "987654321"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &w}}, "described"); err != nil {
		t.Fatal(err)
	}
	describeEverywhere("described", w)
}
