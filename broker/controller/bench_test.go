package controller

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/coord/coordtest"
)

// benchTerm is one controller term of the failover benchmarks.
type benchTerm struct {
	l       *coord.Leadership
	elected time.Time // when its Campaign returned
	done    chan error
}

// controllerPair is two controllers, each on its own coordinator client,
// taking turns: term i runs on client i%2 as broker 100+i%2.
type controllerPair struct {
	b       *testing.B
	e       *env
	ctx     context.Context
	clients [2]*coord.Client
	logger  *slog.Logger
}

func newControllerPair(b *testing.B, e *env, ctx context.Context, logger *slog.Logger) *controllerPair {
	return &controllerPair{b: b, e: e, ctx: ctx, clients: [2]*coord.Client{coordtest.Dial(b, e.srv), coordtest.Dial(b, e.srv)}, logger: logger}
}

// start campaigns for term i and runs its controller once elected.
func (cp *controllerPair) start(i int) (*benchTerm, error) {
	cl := cp.clients[i%2]
	l, err := cl.Campaign(cp.ctx, int32(100+i%2))
	if err != nil {
		return nil, err
	}
	ctrl := New(Config{BrokerID: int32(100 + i%2), Coord: cl, RetryBackoff: 20 * time.Millisecond, Logger: cp.logger})
	t := &benchTerm{l: l, elected: time.Now(), done: make(chan error, 1)}
	go func() { t.done <- ctrl.Run(cp.ctx, l) }()
	return t, nil
}

// standby starts term i campaigning behind the active one and returns
// once its election key is there; the channel delivers the term when it
// is elected (nil if the campaign failed).
func (cp *controllerPair) standby(i int) <-chan *benchTerm {
	next := make(chan *benchTerm, 1)
	go func() {
		t, err := cp.start(i)
		if err != nil {
			cp.b.Error(err)
		}
		next <- t
	}()
	proctest.Eventually(cp.b, 30*time.Second, "condition", func() error {
		resp, err := cp.e.admin.Etcd().Get(cp.ctx, "/controller/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count != 2 {
			return fmt.Errorf("%d candidates", resp.Count)
		}
		return nil
	})
	return next
}

// firstLAIFrom returns when broker fb first received a LeaderAndIsr from
// the controller epoch, or false.
func (fb *fakeBroker) firstLAIFrom(epoch int64) (time.Time, bool) {
	for _, r := range fb.requests() {
		if lai, ok := r.req.(*kmsg.LeaderAndISRRequest); ok && lai.ControllerEpoch == int32(epoch) {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// BenchmarkControllerFailover measures controller failover: from the moment
// the active controller's leadership ends (Resign, as on a clean shutdown
// or a deleted election key) until every broker has received LeaderAndIsr
// from the new controller, which campaigned in the meantime. 3 brokers,
// 100 partitions with 3 replicas. ms/failover is that interval; session
// expiry (coordinator.session.timeout.ms) comes on top when the old
// controller's broker dies instead. ms/election is the part until the
// standby's Campaign returns (etcd election hand-over), ms/resend the
// controller's own part: watches, state read, requests delivered.
func BenchmarkControllerFailover(b *testing.B) {
	for _, partitions := range []int32{10, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			e := newEnv(b, 1, 2, 3)
			assign := map[int32][]int32{}
			for p := range partitions {
				assign[p] = []int32{1 + p%3, 1 + (p+1)%3, 1 + (p+2)%3}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pair := newControllerPair(b, e, ctx, nil)
			cur, err := pair.start(0)
			if err != nil {
				b.Fatal(err)
			}
			e.createTopic("t", assign, nil)
			e.waitLAI(3, tp("t", 0), 1, ids(1, 2, 3), 0)
			var total, electing time.Duration
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				b.StopTimer()
				next := pair.standby(i)
				b.StartTimer()
				ended := time.Now()
				if err := cur.l.Resign(ctx); err != nil {
					b.Fatal(err)
				}
				nt := <-next
				if nt == nil {
					b.FailNow()
				}
				var latest time.Time
				tick := time.NewTicker(time.Millisecond)
				for _, fb := range e.brokers {
					for {
						at, ok := fb.firstLAIFrom(nt.l.Epoch())
						if ok {
							if at.After(latest) {
								latest = at
							}
							break
						}
						<-tick.C
					}
				}
				tick.Stop()
				b.StopTimer()
				total += latest.Sub(ended)
				electing += nt.elected.Sub(ended)
				<-cur.done
				cur = nt
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/failover")
			b.ReportMetric(float64(electing.Microseconds())/1000/float64(b.N), "ms/election")
			b.ReportMetric(float64((total-electing).Microseconds())/1000/float64(b.N), "ms/resend")
		})
	}
}

// BenchmarkBrokerFailover measures the controller's reaction to a broker
// death: from the moment the broker's session ends (its registration is
// revoked, as when coordinator.session.timeout.ms runs out) until the new
// leader of every partition it led has received LeaderAndIsr naming it.
// 3 brokers, 100 partitions with 3 replicas, a third led by each broker.
// Between iterations the broker re-registers and the ISRs are restored by
// a leader-style compare-and-swap (which the controller then meets as a
// version mismatch, re-reads and retries).
func BenchmarkBrokerFailover(b *testing.B) {
	const partitions = 100
	e := newEnv(b, 1, 2, 3)
	e.startController(100, nil)
	assign := map[int32][]int32{}
	for p := range int32(partitions) {
		assign[p] = []int32{1 + p%3, 1 + (p+1)%3, 1 + (p+2)%3}
	}
	e.createTopic("t", assign, nil)
	e.waitLAI(3, tp("t", partitions-1), assign[partitions-1][0], assign[partitions-1], 0)
	ctx := context.Background()
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		victim := int32(1 + i%3)
		states, err := e.admin.PartitionStates(ctx, "t")
		if err != nil {
			b.Fatal(err)
		}
		moved := map[int32]coord.PartitionState{}
		for p, st := range states {
			if st.Leader == victim {
				moved[p] = st
			}
		}
		b.StartTimer()
		killed := time.Now()
		e.kill(victim)
		var latest time.Time
		tick := time.NewTicker(time.Millisecond)
		for p, old := range moved {
			for done := false; !done; {
				for _, fb := range e.brokers {
					if fb.id == victim {
						continue
					}
					for _, r := range fb.requests() {
						lai, ok := r.req.(*kmsg.LeaderAndISRRequest)
						if !ok {
							continue
						}
						for _, ts := range lai.TopicStates {
							for _, ps := range ts.PartitionStates {
								if ps.Partition == p && ps.Leader == fb.id && ps.LeaderEpoch > old.LeaderEpoch {
									done = true
									if r.at.After(latest) {
										latest = r.at
									}
								}
							}
						}
					}
				}
				if !done {
					<-tick.C
				}
			}
		}
		tick.Stop()
		b.StopTimer()
		total += latest.Sub(killed)
		// Restore: the broker comes back and catches up.
		e.start(victim)
		proctest.Eventually(b, 10*time.Second, "condition", func() error {
			states, err := e.admin.PartitionStates(ctx, "t")
			if err != nil {
				return err
			}
			var ups []coord.PartitionStateUpdate
			for p, st := range states {
				if len(st.ISR) != 3 {
					next := st
					next.ISR = assign[p]
					ups = append(ups, coord.PartitionStateUpdate{Topic: "t", Partition: p, State: next, ExpectedVersion: st.Version})
				}
			}
			if len(ups) == 0 {
				return nil
			}
			_, err = e.admin.SetPartitionStates(ctx, nil, ups)
			if err == nil {
				err = fmt.Errorf("%d ISRs restored, checking again", len(ups))
			}
			return err
		})
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/failover")
}
