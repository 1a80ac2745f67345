package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestISRRejoinManyPartitions: a follower of many partitions comes back
// and every leader's ISR expansion (AlterPartition, queued and sent in
// batches to the controller) is committed: every partition's ISR is full
// again, as the metadata and each leader's own state show.
func TestISRRejoinManyPartitions(t *testing.T) {
	tc := startCluster(t, 2, "isr.update=async-alter-partition")
	const parts = 150
	adm := kadm.NewClient(tc.client())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, parts, 2, nil, "rejoin"); err != nil {
		t.Fatal(err)
	}
	isrs := func(want []int32) func() error {
		return func() error {
			_, got, err := tc.describe("rejoin")
			if err != nil {
				return err
			}
			if len(got) != parts {
				return fmt.Errorf("%d partitions", len(got))
			}
			for p, isr := range got {
				if !slices.Equal(isr, want) {
					return fmt.Errorf("partition %d: ISR %v, want %v", p, isr, want)
				}
			}
			return nil
		}
	}
	proctest.Eventually(t, time.Minute, "full ISRs", isrs([]int32{1, 2}))
	tc.stop(2)
	proctest.Eventually(t, time.Minute, "ISRs without broker 2", isrs([]int32{1}))
	tc.start(2)
	proctest.Eventually(t, 2*time.Minute, "broker 2 back in every ISR", isrs([]int32{1, 2}))
	proctest.Eventually(t, 30*time.Second, "leaders' own ISRs full", func() error {
		for p := range int32(parts) {
			for _, tb := range tc.brokers {
				rp := tb.partition("rejoin", p)
				if rp == nil {
					continue
				}
				if st := rp.State(); st.Leader == tb.id && !slices.Equal(slices.Sorted(slices.Values(st.ISR)), []int32{1, 2}) {
					return fmt.Errorf("leader %d of rejoin-%d: ISR %v", tb.id, p, st.ISR)
				}
			}
		}
		return nil
	})
}
