package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"sync"
	"testing"
	"time"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// TestCoordinatorLogKeepsSubmissionOrder: batches submitted to a
// coordinator's partition reach its log in the order they were submitted,
// even when submitted from many goroutines at once and waited on in any
// order: a coordinator submits under its lock and relies on it.
func TestCoordinatorLogKeepsSubmissionOrder(t *testing.T) {
	b := startBroker(t, t.TempDir())
	createTopic(t, b.client(t), "coord", 1, nil)
	proctest.Eventually(t, 10*time.Second, "partition led", func() error {
		if b.partition("coord", 0) == nil {
			return fmt.Errorf("no partition yet")
		}
		return nil
	})
	l := newCoordinatorLog(b.Broker, "coord")
	const n = 200
	var mu sync.Mutex // stands for the coordinator's lock
	pending := make([]coordlog.Pending, n)
	var wg sync.WaitGroup
	next := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				if i == n {
					mu.Unlock()
					return
				}
				next++
				rec := coordlog.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}
				pending[i] = l.Submit(0, coordlog.Encode([]coordlog.Record{rec}, time.Now().UnixMilli(), coordlog.NoProducer))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := n - 1; i >= 0; i-- { // waited on last first
		off, err := pending[i](ctx)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if off != int64(i) {
			t.Fatalf("batch %d, submitted %dth, is at offset %d", i, i, off)
		}
	}
	var got []string
	data, err := l.Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coordlog.Decode(data, func(_ coordlog.Batch, off int64, r coordlog.Record) error {
		if string(r.Value) != fmt.Sprint(off) {
			got = append(got, fmt.Sprintf("offset %d holds %s", off, r.Value))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Fatalf("out of order: %v", got)
	}
}
