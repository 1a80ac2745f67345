package coord

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkCAS measures partition-state compare-and-swap Txns (one fenced
// controller write each): sequential from one goroutine, and 16 concurrent
// writers on distinct partitions.
func BenchmarkCAS(b *testing.B) {
	for _, members := range []int{1, 3} {
		for _, fsync := range []bool{false, true} {
			b.Run(fmt.Sprintf("members=%d/fsync=%v", members, fsync), func(b *testing.B) {
				tc := startCluster(b, members, fsync)
				ctx := context.Background()
				c := tc.dial(b)
				l, err := c.Campaign(ctx, 1)
				if err != nil {
					b.Fatal(err)
				}
				const parts = 64
				assign := map[int32][]int32{}
				init := map[int32]PartitionState{}
				for p := range int32(parts) {
					assign[p] = []int32{1, 2, 3}
					init[p] = PartitionState{ControllerEpoch: l.Epoch(), Leader: 1, ISR: []int32{1, 2, 3}}
				}
				if err := c.CreateTopic(ctx, l, TopicSpec{Name: "bench", Assignment: assign}, init); err != nil {
					b.Fatal(err)
				}
				b.Run("sequential", func(b *testing.B) {
					st, err := c.PartitionState(ctx, "bench", 0)
					if err != nil {
						b.Fatal(err)
					}
					for b.Loop() {
						st.LeaderEpoch++
						vs, err := c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "bench", Partition: 0, State: st, ExpectedVersion: st.Version}})
						if err != nil {
							b.Fatal(err)
						}
						st.Version = vs[0]
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txn/s")
				})
				b.Run("parallel16", func(b *testing.B) {
					var next atomic.Int32
					b.SetParallelism(8) // 2 cores x 8 = 16 writers
					b.RunParallel(func(pb *testing.PB) {
						p := next.Add(1) % parts
						st, err := c.PartitionState(ctx, "bench", p)
						if err != nil {
							b.Error(err)
							return
						}
						for pb.Next() {
							st.LeaderEpoch++
							vs, err := c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "bench", Partition: p, State: st, ExpectedVersion: st.Version}})
							if err != nil {
								b.Error(err)
								return
							}
							st.Version = vs[0]
						}
					})
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txn/s")
				})
			})
		}
	}
}

// BenchmarkLeaderFailover measures, on three in-process members, the time
// from a clean stop of the etcd leader (which hands leadership over before
// shutting down) until a surviving member leads. The restart is not timed.
func BenchmarkLeaderFailover(b *testing.B) {
	tc := startCluster(b, 3, false)
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		old := waitLeader(b, tc, -1)
		b.StartTimer()
		start := time.Now()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			tc.stop(old)
		}()
		waitLeader(b, tc, old)
		d := time.Since(start)
		b.StopTimer()
		total += d
		<-stopped
		if err := tc.start(old); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
}

// waitLeader polls until a member other than not leads, and returns it.
func waitLeader(b *testing.B, tc *testCluster, not int) int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if i := tc.leader(); i >= 0 && i != not {
			return i
		}
		time.Sleep(2 * time.Millisecond) // polling granularity of the measurement
	}
	b.Fatal("no leader within 30s")
	return -1
}

// BenchmarkLeaderKill measures, on three member processes, the time from
// SIGKILLing the etcd leader until a survivor reports a new leader (polled
// every 2 ms through the maintenance Status call). The restart is not timed.
func BenchmarkLeaderKill(b *testing.B) {
	ms := startProcCluster(b, 3)
	clis := make([]*clientv3.Client, len(ms))
	for i, m := range ms {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.cfg.ListenClientURLs}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		clis[i] = cli
	}
	status := func(i int) (leader, self uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		st, err := clis[i].Status(ctx, ms[i].cfg.ListenClientURLs)
		if err != nil {
			return 0, 0
		}
		return st.Leader, st.Header.MemberId
	}
	// findLeader polls until a member in ask reports a leader other than old.
	findLeader := func(old uint64, ask []int) (int, uint64) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, i := range ask {
				lead, _ := status(i)
				if lead != 0 && lead != old {
					for _, j := range ask {
						if _, self := status(j); self == lead {
							return j, lead
						}
					}
				}
			}
			time.Sleep(2 * time.Millisecond) // polling granularity of the measurement
		}
		b.Fatal("no new leader within 30s")
		return -1, 0
	}
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		old, oldID := findLeader(0, []int{0, 1, 2})
		var rest []int
		for i := range ms {
			if i != old {
				rest = append(rest, i)
			}
		}
		b.StartTimer()
		start := time.Now()
		ms[old].kill()
		findLeader(oldID, rest)
		d := time.Since(start)
		b.StopTimer()
		total += d
		ms[old].start(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
}

// BenchmarkSessionExpiry measures how long a crashed broker stays
// registered: from its client closing without revoking (a SIGKILL) until a
// WatchBrokers snapshot no longer lists it, with a 2 s session. etcd
// expires leases on a 500 ms tick, so expect the TTL plus up to that.
func BenchmarkSessionExpiry(b *testing.B) {
	tc := startCluster(b, 1, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := tc.dial(b)
	events := watcher.WatchBrokers(ctx)
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		c, err := Dial(ctx, tc.endpoints())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "h", Port: 1}, 2*time.Second); err != nil {
			b.Fatal(err)
		}
		for ev := range events {
			if len(ev.Brokers) == 1 {
				break
			}
		}
		b.StartTimer()
		start := time.Now()
		c.Close()
		for ev := range events {
			if len(ev.Brokers) == 0 {
				break
			}
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/expiry")
}

// BenchmarkElectionHandover measures the controller hand-over inside the
// coordinator: the leader resigns while another candidate waits, and the
// clock stops when the waiting Campaign returns.
func BenchmarkElectionHandover(b *testing.B) {
	tc := startCluster(b, 1, false)
	ctx := context.Background()
	clients := []*Client{tc.dial(b), tc.dial(b)}
	l, err := clients[0].Campaign(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		next := clients[(i+1)%2]
		won := make(chan *Leadership, 1)
		go func() {
			nl, err := next.Campaign(ctx, int32((i+1)%2))
			if err != nil {
				b.Error(err)
			}
			won <- nl
		}()
		// Start the clock once the candidate waits behind the leader.
		for {
			resp, err := next.Etcd().Get(ctx, controllerPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				b.Fatal(err)
			}
			if resp.Count == 2 {
				break
			}
			time.Sleep(time.Millisecond) // polling granularity of the setup
		}
		b.StartTimer()
		start := time.Now()
		if err := l.Resign(ctx); err != nil {
			b.Fatal(err)
		}
		l = <-won
		total += time.Since(start)
		if l == nil {
			b.FailNow()
		}
		i++
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/handover")
}
