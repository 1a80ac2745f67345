package controller

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coord"
)

// BenchmarkScaleFailover measures the controller's own work at cluster
// scale: 3 fake brokers (answering at once), 1,000 or 10,000 partitions
// in topics of 10 at replication factor 3, one in-process coordinator
// member (fsync off). The session timeout is not part of any number.
//
//   - init_ms: a controller starts on topics without partition states (a
//     new cluster's topics): states initialized, LeaderAndIsr and
//     UpdateMetadata received by every broker.
//   - ctrlfo_ms: the active controller resigns while a standby campaigns;
//     from the standby's election to the last broker having received its
//     UpdateMetadata of every partition (after the LeaderAndIsr).
//   - brokerfo_ms: a broker's registration goes (its session ended); from
//     then to the last survivor having received the UpdateMetadata that
//     follows the new leaders' LeaderAndIsr. Between iterations the broker
//     comes back and the ISRs are restored by leader-style writes.
//   - *_cpu_ms: the CPU time the process (controller, coordinator member,
//     fake brokers) used over the same intervals, from the old term's end:
//     less stretched by a loaded machine than the wall clock.
//
// Run it with:
//
//	go test ./broker/controller -run '^$' -bench ScaleFailover -benchtime 3x -count 5
func BenchmarkScaleFailover(b *testing.B) {
	for _, parts := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			e := newEnv(b, 1, 2, 3)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const perTopic = 10
			assigns := map[string]map[int32][]int32{}
			for i := range parts / perTopic {
				name := fmt.Sprintf("s%05d", i)
				assign := map[int32][]int32{}
				for p := range int32(perTopic) {
					r := int32(i) + p
					assign[p] = []int32{1 + r%3, 1 + (r+1)%3, 1 + (r+2)%3}
				}
				assigns[name] = assign
				e.createTopic(name, assign, nil)
			}
			pair := newControllerPair(b, e, ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
			cpu0 := cpuTime()
			cur, err := pair.start(0)
			if err != nil {
				b.Fatal(err)
			}
			at := waitFullUM(b, e, cur.l.Epoch(), cur.elected, parts, 0)
			init, initCPU := at.Sub(cur.elected), cpuTime()-cpu0

			var ctrlFO, brokerFO, ctrlCPU, brokerCPU time.Duration
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				b.StopTimer()
				next := pair.standby(i)
				b.StartTimer()
				cpu0 := cpuTime()
				if err := cur.l.Resign(ctx); err != nil {
					b.Fatal(err)
				}
				nt := <-next
				if nt == nil {
					b.FailNow()
				}
				at := waitFullUM(b, e, nt.l.Epoch(), nt.elected, parts, 0)
				ctrlCPU += cpuTime() - cpu0
				b.StopTimer()
				ctrlFO += at.Sub(nt.elected)
				<-cur.done
				cur = nt

				// Broker failover.
				victim := int32(1 + i%3)
				b.StartTimer()
				cpu0 = cpuTime()
				killed := time.Now()
				e.kill(victim)
				at = waitFullUM(b, e, cur.l.Epoch(), killed, parts, victim)
				brokerCPU += cpuTime() - cpu0
				b.StopTimer()
				brokerFO += at.Sub(killed)
				restoreISRs(b, e, victim, assigns)
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(ms(init), "init_ms")
			b.ReportMetric(ms(ctrlFO)/float64(b.N), "ctrlfo_ms")
			b.ReportMetric(ms(brokerFO)/float64(b.N), "brokerfo_ms")
			b.ReportMetric(ms(initCPU), "init_cpu_ms")
			b.ReportMetric(ms(ctrlCPU)/float64(b.N), "ctrlfo_cpu_ms")
			b.ReportMetric(ms(brokerCPU)/float64(b.N), "brokerfo_cpu_ms")
		})
	}
}

// cpuTime is the CPU time (user and system) this process used so far:
// controller, coordinator member and fake brokers together, which a loaded
// machine stretches less than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitFullUM waits until every registered broker but gone has received,
// at or after since, an UpdateMetadata of epoch with parts partitions,
// and returns when the last of them arrived.
func waitFullUM(b *testing.B, e *env, epoch int64, since time.Time, parts int, gone int32) time.Time {
	b.Helper()
	var last time.Time
	for id, fb := range e.brokers {
		if id == gone {
			continue
		}
		proctest.Eventually(b, 2*time.Minute, "condition", func() error {
			for _, r := range fb.requests() {
				um, ok := r.req.(*kmsg.UpdateMetadataRequest)
				if !ok || um.ControllerEpoch != int32(epoch) || r.at.Before(since) {
					continue
				}
				n := 0
				for _, ts := range um.TopicStates {
					n += len(ts.PartitionStates)
				}
				if n == parts {
					last = maxTime(last, r.at)
					return nil
				}
			}
			return fmt.Errorf("broker %d: no full UpdateMetadata of epoch %d yet", id, epoch)
		})
	}
	return last
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// restoreISRs brings a killed broker back and writes full ISRs, as its
// partitions' leaders would after it caught up, then waits until the
// controller has told the broker about its replicas again.
func restoreISRs(b *testing.B, e *env, victim int32, assigns map[string]map[int32][]int32) {
	b.Helper()
	ctx := context.Background()
	mark := time.Now()
	e.start(victim)
	names := make([]string, 0, len(assigns))
	for name := range assigns {
		names = append(names, name)
	}
	proctest.Eventually(b, time.Minute, "condition", func() error {
		var ups []coord.PartitionStateUpdate
		for _, name := range names {
			states, err := e.admin.PartitionStates(ctx, name)
			if err != nil {
				return err
			}
			for p, st := range states {
				if len(st.ISR) != 3 {
					next := st
					next.ISR = assigns[name][p]
					ups = append(ups, coord.PartitionStateUpdate{Topic: name, Partition: p, State: next, ExpectedVersion: st.Version})
				}
			}
		}
		if len(ups) == 0 {
			return nil
		}
		_, err := e.admin.SetPartitionStates(ctx, nil, ups)
		if err == nil {
			err = fmt.Errorf("%d ISRs restored, checking again", len(ups))
		}
		return err
	})
	proctest.Eventually(b, time.Minute, "condition", func() error {
		for _, r := range e.brokers[victim].requests() {
			if _, ok := r.req.(*kmsg.LeaderAndISRRequest); ok && !r.at.Before(mark) {
				return nil
			}
		}
		return fmt.Errorf("broker %d has no LeaderAndIsr since its restart", victim)
	})
	// Drop what the fake brokers recorded so far: the next waits scan less.
	for _, fb := range e.brokers {
		fb.mu.Lock()
		fb.got = nil
		fb.mu.Unlock()
	}
}
