package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
	"github.com/isrlab/isrlab/internal/proctest"
)

// BenchmarkLeaderFailover measures the time from SIGKILL of a partition
// leader's broker to the controller's metadata naming a new leader, for
// Kafka's default coordinator session (18 s) and shorter ones:
//
//	go test ./broker -run '^$' -bench LeaderFailover -benchtime 1x
func BenchmarkLeaderFailover(b *testing.B) {
	for _, session := range []int{18000, 6000, 3000} {
		b.Run(fmt.Sprintf("session=%dms", session), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				total += measureFailover(b, session, false)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
		})
	}
}

// BenchmarkControllerFailover measures the time from SIGKILL of the
// controller's broker until another broker is controller.
//
//	go test ./broker -run '^$' -bench ControllerFailover -benchtime 1x
func BenchmarkControllerFailover(b *testing.B) {
	for _, session := range []int{18000, 3000} {
		b.Run(fmt.Sprintf("session=%dms", session), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				total += measureFailover(b, session, true)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
		})
	}
}

func measureFailover(b *testing.B, sessionMs int, controller bool) time.Duration {
	b.StopTimer()
	c := proctest.StartCluster(b, proctest.ClusterOptions{Brokers: 3, Overrides: []string{
		fmt.Sprintf("coordinator.session.timeout.ms=%d", sessionMs),
		"replica.fetch.wait.max.ms=100",
	}})
	c.CreateTopic("fo", 1, 3, nil)
	st, err := c.Describe("fo")
	if err != nil {
		b.Fatal(err)
	}
	victim := st[0].Leader
	if controller {
		victim = controllerID(b, c)
	}
	b.StartTimer()
	start := time.Now()
	c.Brokers[victim].Kill()
	deadline := start.Add(2*time.Duration(sessionMs)*time.Millisecond + 30*time.Second)
	for time.Now().Before(deadline) {
		if controller {
			if id := controllerID(b, c); id >= 0 && id != victim {
				break
			}
		} else if s, err := c.Describe("fo"); err == nil && s[0].Leader >= 0 && s[0].Leader != victim {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := time.Since(start)
	b.StopTimer()
	return d
}

// controllerID asks the running brokers who the controller is; -1 if none
// agrees with itself.
func controllerID(b testing.TB, c *proctest.Cluster) int32 {
	for id, p := range c.Brokers {
		if !p.Running() {
			continue
		}
		cl := wire.NewClient(c.BrokerAddrs[id], "bench", nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(9)
		req.Topics = []kmsg.MetadataRequestTopic{}
		raw, err := cl.Request(ctx, req)
		cancel()
		cl.Close()
		if err == nil && raw.(*kmsg.MetadataResponse).ControllerID == id {
			return id
		}
	}
	return -1
}
