package coord

import (
	"context"
	"errors"
	"github.com/isrlab/isrlab/internal/proctest"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestReserveProducerIDsConcurrent: brokers reserving at the same time, each
// on its own connection, get disjoint blocks of ProducerIDBlockSize that
// together cover the ids from 0 without a gap, and the key holds the last.
func TestReserveProducerIDsConcurrent(t *testing.T) {
	tc := startCluster(t, 1, false)
	const brokers, each = 8, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	var blocks []ProducerIDBlock
	errs := make([]error, brokers)
	for b := range int32(brokers) {
		c := tc.dial(t)
		wg.Go(func() {
			for range each {
				blk, err := c.ReserveProducerIDs(context.Background(), b+1)
				if err != nil {
					errs[b] = err
					return
				}
				if blk.Broker != b+1 {
					errs[b] = errors.New("block names another broker")
				}
				mu.Lock()
				blocks = append(blocks, blk)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(blocks, func(a, b ProducerIDBlock) int { return int(a.Start - b.Start) })
	next := int64(0)
	for _, blk := range blocks {
		if blk.Start != next || blk.End != blk.Start+ProducerIDBlockSize-1 {
			t.Fatalf("block %+v after ids up to %d: overlap or gap; all blocks %+v", blk, next-1, blocks)
		}
		next = blk.End + 1
	}
	if len(blocks) != brokers*each {
		t.Fatalf("%d blocks, want %d", len(blocks), brokers*each)
	}
	snap, err := tc.dial(t).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if last := blocks[len(blocks)-1]; snap.LatestProducerIDBlock == nil || *snap.LatestProducerIDBlock != last {
		t.Fatalf("latest block in the coordinator %+v, want %+v", snap.LatestProducerIDBlock, last)
	}
}

// TestReserveProducerIDsAfterRestart: a broker that restarts (a new client)
// and a coordinator that restarts both continue past every block reserved
// before.
func TestReserveProducerIDsAfterRestart(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	reserve := func(c *Client) ProducerIDBlock {
		t.Helper()
		blk, err := c.ReserveProducerIDs(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return blk
	}
	c := tc.dial(t)
	reserve(c)
	first := reserve(c)
	c.Close()

	afterBroker := reserve(tc.dial(t))
	if afterBroker.Start != first.End+1 {
		t.Fatalf("after a broker restart: block %+v, want it to start at %d", afterBroker, first.End+1)
	}

	tc.stop(0)
	if err := tc.start(0); err != nil {
		t.Fatal(err)
	}
	c = tc.dial(t)
	var afterCoord ProducerIDBlock
	proctest.Eventually(t, 20*time.Second, "condition", func() (err error) {
		afterCoord, err = c.ReserveProducerIDs(ctx, 2)
		return err
	})
	if afterCoord.Start != afterBroker.End+1 || afterCoord.Broker != 2 {
		t.Fatalf("after a coordinator restart: block %+v, want broker 2 from %d", afterCoord, afterBroker.End+1)
	}
}

// TestReserveProducerIDsNoQuorum: with the coordinator down the call ends
// within its timeout with ErrNoQuorum, which brokers answer as retriable.
func TestReserveProducerIDsNoQuorum(t *testing.T) {
	tc := startCluster(t, 1, false)
	c := tc.dial(t, WithCallTimeout(500*time.Millisecond))
	tc.stop(0)
	start := time.Now()
	_, err := c.ReserveProducerIDs(context.Background(), 1)
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("with the coordinator down: %v, want ErrNoQuorum", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v with a 500ms call timeout", d)
	}
}
