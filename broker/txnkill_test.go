package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestTransactionStateAfterSIGKILL: a broker process holding a committed,
// an aborted and an open transaction is SIGKILLed and restarted. Its log
// recovery must bring back the producer state, the aborted-transaction
// index and the open transaction: read_committed still sees only the
// committed values, the open transaction still holds the last stable
// offset back (DescribeProducers lists it), and once the restarted
// coordinator aborts it on its timeout (30 s), the LSO moves past it.
func TestTransactionStateAfterSIGKILL(t *testing.T) {
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, Overrides: []string{
		"transaction.state.log.num.partitions=1",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
	}})
	const topic = "txn-kill"
	c.CreateTopic(topic, 1, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cl := c.Client(kgo.TransactionalID("kill-me"), kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(30*time.Second))
	defer cl.Close()
	txn := func(values []string, end bool, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
		if end {
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("end: %v", err)
			}
		}
	}
	txn([]string{"c1", "c2"}, true, true)
	txn([]string{"a1", "a2"}, true, false)
	txn([]string{"open1"}, false, false)

	// Offsets: c1 0, c2 1, commit 2, a1 3, a2 4, abort 5, open1 6.
	const openAt, logEnd = 6, 7
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	state := func() (lso, end int64, ongoing []int64, err error) {
		lsos, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return 0, 0, nil, err
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0, 0, nil, err
		}
		dps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			return 0, 0, nil, err
		}
		dps.EachProducer(func(p kadm.DescribedProducer) {
			if p.CurrentTxnStartOffset >= 0 {
				ongoing = append(ongoing, p.CurrentTxnStartOffset)
			}
		})
		lo, _ := lsos.Lookup(topic, 0)
		eo, _ := ends.Lookup(topic, 0)
		return lo.Offset, eo.Offset, ongoing, nil
	}
	expect := func(what string, wantLSO int64, wantOngoing []int64) {
		t.Helper()
		proctest.Eventually(t, 60*time.Second, what, func() error {
			lso, end, ongoing, err := state()
			if err != nil {
				return err
			}
			if lso != wantLSO || end < logEnd || !slices.Equal(ongoing, wantOngoing) {
				return fmt.Errorf("LSO %d, log end %d, open transactions at %v; want LSO %d, end >= %d, open at %v", lso, end, ongoing, wantLSO, logEnd, wantOngoing)
			}
			return nil
		})
	}
	expect("the open transaction holds the LSO before the kill", openAt, []int64{openAt})

	c.Brokers[1].Kill()
	c.Brokers[1].Restart()
	c.WaitTopic(topic, 1, 1)
	// The coordinator, restarted too, aborts the open transaction once its
	// 30 s timeout has passed; until then the recovered state holds it.
	lso, _, ongoing, err := func() (int64, int64, []int64, error) {
		var lso, end int64
		var ongoing []int64
		var err error
		proctest.Eventually(t, 60*time.Second, "the restarted broker answers", func() error {
			lso, end, ongoing, err = state()
			return err
		})
		return lso, end, ongoing, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	if lso != openAt || !slices.Equal(ongoing, []int64{openAt}) {
		t.Fatalf("after the restart: LSO %d, open at %v; want the open transaction recovered at %d", lso, ongoing, openAt)
	}
	t.Logf("after the restart: LSO %d, open transactions at %v", lso, ongoing)

	values := func(isolation kgo.IsolationLevel, n int) []string {
		t.Helper()
		rd := c.Client(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(isolation), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer rd.Close()
		var got []string
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		for len(got) < n && rctx.Err() == nil {
			rd.PollFetches(rctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		// Then a while longer for anything beyond them.
		more, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		for more.Err() == nil {
			rd.PollFetches(more).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		return got
	}
	if got := values(kgo.ReadUncommitted(), 5); !slices.Equal(got, []string{"c1", "c2", "a1", "a2", "open1"}) {
		t.Fatalf("read_uncommitted after the restart: %v", got)
	}
	expect("the coordinator aborts the open transaction on its timeout", logEnd+1, nil)
	if got := values(kgo.ReadCommitted(), 2); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("read_committed after the restart: %v, want [c1 c2]: the aborted transactions' values must stay hidden", got)
	}
}
