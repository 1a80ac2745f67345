package workloads

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// rateRun runs a rate workload for d against seeds and returns its
// samples after the first skip seconds (clients connecting, groups
// joining).
func rateRun(b *testing.B, cfg Config, seeds []string, d time.Duration, skip int) []map[string]float64 {
	b.Helper()
	sink := &samples{}
	w, err := NewRate(cfg, nil, sink, seeds)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		b.Fatal(err)
	}
	all := sink.all()
	if len(all) <= skip {
		b.Fatalf("%d samples in %v", len(all), d)
	}
	return all[skip:]
}

// cpuSeconds is the CPU time (user + system) a process has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after the
	// command; clock ticks of 1/100 s on Linux.
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// BenchmarkRateHeld is the rate workload's rate control: two producers on
// fixed schedules against one unloaded broker (its own process). It
// reports the mean acknowledged rate over the target ("held", 1.0 is
// exact) and the worst one-second interval's ("worst"), after the first
// two seconds.
//
//	go test ./workloads -run '^$' -bench RateHeld -benchtime 1x
func BenchmarkRateHeld(b *testing.B) {
	for _, rate := range []float64{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("records_per_s=%.0f", rate), func(b *testing.B) {
			c := proctest.StartCluster(b, proctest.ClusterOptions{Brokers: 1})
			c.CreateTopic("held", 3, 1, nil)
			cfg := Config{Topic: "held", Partitions: 3, Producers: 2, Rate: rate / 2, RecordSize: 100, Acks: "1",
				Linger: 5 * time.Millisecond, ConsumerGroups: -1, Seed: 1}
			var held, worst float64
			for i := 0; i < b.N; i++ {
				ss := rateRun(b, cfg, c.Bootstrap(), 8*time.Second, 2)
				sum, low := 0.0, ss[0]["acked_per_s"]
				for _, s := range ss {
					sum += s["acked_per_s"]
					low = min(low, s["acked_per_s"])
				}
				held, worst = sum/float64(len(ss))/rate, low/rate
			}
			b.ReportMetric(held, "held")
			b.ReportMetric(worst, "worst")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRateMax finds the rate workload's highest sustained rate into
// three brokers (one coordinator, every node its own process on loopback,
// sharing the machine with the client): 100-byte records, acks=1, linger
// 5 ms, kgo's default batching, 8 producers, 24 partitions at replication
// factor 3, and one consumer group reading everything. Each rate runs for
// 10 s; the last 7 are measured. "sustained" is 1 when the producers kept
// their schedule (acknowledged at least 97% of what was offered, and less
// than a second of records left in a backlog or the clients' buffers at
// the end). The CPU columns are the cores the client process and the
// brokers together used: where the two cores went.
//
//	go test ./workloads -run '^$' -bench RateMax -benchtime 1x
func BenchmarkRateMax(b *testing.B) {
	rates := []float64{100000, 200000, 300000, 400000, 500000}
	if s := os.Getenv("ISRLAB_RATES"); s != "" {
		rates = nil
		for _, f := range strings.Split(s, ",") {
			r, err := strconv.ParseFloat(f, 64)
			if err != nil {
				b.Fatalf("ISRLAB_RATES: %v", err)
			}
			rates = append(rates, r)
		}
	}
	for _, rate := range rates {
		b.Run(fmt.Sprintf("records_per_s=%.0f", rate), func(b *testing.B) {
			c := proctest.StartCluster(b, proctest.ClusterOptions{Brokers: 3})
			c.CreateTopic("max", 24, 3, nil)
			cfg := Config{Topic: "max", Partitions: 24, Producers: 8, Rate: rate / 8, RecordSize: 100, Acks: "1",
				Linger: 5 * time.Millisecond, ConsumerGroups: 1, Seed: 1}
			var acked, p99, consumed, sustained, clientCPU, brokerCPU float64
			for i := 0; i < b.N; i++ {
				brokersBefore := 0.0
				for _, p := range c.Brokers {
					brokersBefore += cpuSeconds(p.Pid())
				}
				selfBefore := cpuSeconds(os.Getpid())
				start := time.Now()
				ss := rateRun(b, cfg, c.Bootstrap(), 10*time.Second, 3)
				wall := time.Since(start).Seconds()
				clientCPU = (cpuSeconds(os.Getpid()) - selfBefore) / wall
				brokerCPU = -brokersBefore / wall
				for _, p := range c.Brokers {
					brokerCPU += cpuSeconds(p.Pid()) / wall
				}
				var offered float64
				acked, p99, consumed = 0, 0, 0
				for _, s := range ss {
					offered += s["offered_per_s"]
					acked += s["acked_per_s"]
					consumed += s["consumed_per_s"]
					p99 = max(p99, s["produce_p99_ms"])
				}
				n := float64(len(ss))
				offered, acked, consumed = offered/n, acked/n, consumed/n
				last := ss[len(ss)-1]
				sustained = 0
				if acked >= 0.97*offered && last["backlog"]+last["buffered"] < rate {
					sustained = 1
				}
			}
			b.ReportMetric(acked, "acked/s")
			b.ReportMetric(consumed, "consumed/s")
			b.ReportMetric(p99, "p99-ms")
			b.ReportMetric(sustained, "sustained")
			b.ReportMetric(clientCPU, "client-cores")
			b.ReportMetric(brokerCPU, "broker-cores")
			b.ReportMetric(0, "ns/op")
		})
	}
}
