package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/series"
)

// TestReplicationMetrics: the leader counts its followers' fetches as
// FetchFollower and a consumer's as FetchConsumer (Kafka's RequestMetrics
// names), every produce and fetch waits for the partition's read lock
// (measured, even when the wait is nothing), and a follower exports
// ReplicaFetcherManager's MaxLag.
func TestReplicationMetrics(t *testing.T) {
	tc := startCluster(t, 2, "metrics.listen=127.0.0.1:0")
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ConsumeTopics("rm"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 2, nil, "rm"); err != nil {
		t.Fatal(err)
	}
	waitISR(t, tc.bootstrap()[0], "rm", 2)
	produceValues(t, cl, "rm", 1, "v", 20)
	for n := 0; n < 20; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of 20: %v", n, err)
		}
		n += fs.NumRecords()
	}
	leaders, _, err := tc.describe("rm")
	if err != nil {
		t.Fatal(err)
	}
	leader := leaders[0]
	follower := int32(3) - leader
	scrape := func(id int32) *series.Snapshot {
		resp, err := http.Get("http://" + tc.brokers[id].MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		s, err := series.ParseMetrics(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	proctest.Eventually(t, 10*time.Second, "leader metrics", func() error {
		s := scrape(leader)
		for _, k := range []string{
			`kafka_network_RequestTotalTimeMs{request="FetchFollower"}`,
			`kafka_network_RequestTotalTimeMs{request="FetchConsumer"}`,
			`kafka_cluster_Partition_LeaderIsrUpdateLockWaitTimeMs{lock="read"}`,
			`kafka_cluster_Partition_LeaderIsrUpdateLockWaitTimeMs{lock="write"}`, // MakeLeader
		} {
			if h := s.Histograms[k]; h.Count == 0 {
				return fmt.Errorf("%s has no observations", k)
			}
		}
		return nil
	})
	if _, ok := scrape(follower).Values["kafka_server_ReplicaFetcherManager_MaxLag"]; !ok {
		t.Error("the follower exports no MaxLag")
	}
}
