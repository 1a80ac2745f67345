package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
		waitFor(t, 2*time.Minute, fmt.Sprintf("%s retention.ms %d on every replica", topic, want), func() error {
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
