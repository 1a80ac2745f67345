package series

import (
	"strings"
	"testing"
)

// TestStalledFollowerPartitions: the brokers' stalled-follower gauge is
// scraped and the run's summary keeps the most any broker reported, so a
// wedged system under test shows in outcome.json next to the verdict.
func TestStalledFollowerPartitions(t *testing.T) {
	snap, err := ParseMetrics(strings.NewReader("# TYPE kafka_server_StalledFollowerPartitions gauge\nkafka_server_StalledFollowerPartitions 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := Convert(nil, snap, 1)
	if v["StalledFollowerPartitions"] != 2 {
		t.Fatalf("scraped %v", v)
	}
	var samples []Sample
	for i := 0; i < 10; i++ {
		stalled := 0.0
		if i == 7 {
			stalled = 2
		}
		samples = append(samples, Sample{T: float64(i), Src: "b1", Values: map[string]float64{"up": 1, "StalledFollowerPartitions": stalled}})
	}
	sum := Summarize(samples, []Window{{Name: "kill", Start: 5, End: 6}}, Options{Warmup: 1})
	if got := sum.AfterHeal.StalledFollowerPartitions; got != 2 {
		t.Fatalf("after heal: %v stalled, want 2", got)
	}
	if got := sum.Baseline.StalledFollowerPartitions; got != 0 {
		t.Fatalf("baseline: %v stalled, want 0", got)
	}
}
