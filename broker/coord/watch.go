package coord

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchSnapshots runs one goroutine (owned by the client: Close waits for
// it) that loads a snapshot, delivers it, and reloads it whenever a watched
// prefix changes in a way relevant reports (nil: every change). Watch errors
// (compaction, lost leader) restart the cycle with a fresh snapshot after a
// short backoff, so a consumer never misses the latest state. Delivery is
// latest-wins: an unread snapshot is replaced by a newer one, and a
// snapshot the same as the last one delivered (same reports; after a watch
// restart, say) is not delivered again.
func watchSnapshots[T any](c *Client, ctx context.Context, op string, prefixes []string,
	relevant func(*clientv3.Event) bool, load func(context.Context) (T, int64, error), same func(a, b T) bool) <-chan T {
	out := make(chan T, 1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	started := c.spawn(func() {
		defer close(out)
		defer stop()
		defer cancel()
		backoff := newBackoff()
		var last T
		delivered := false
		for ctx.Err() == nil {
			snap, rev, err := load(ctx)
			if err != nil {
				c.log.Debug("coordinator watch reload failed", "op", op, "err", err)
				if !backoff.wait(ctx) {
					return
				}
				continue
			}
			if !delivered || !same(last, snap) {
				deliver(out, snap)
				last, delivered = snap, true
			}
			if err := c.waitChange(ctx, prefixes, rev+1, relevant); err != nil {
				c.log.Debug("coordinator watch restarted", "op", op, "err", err)
				if !backoff.wait(ctx) {
					return
				}
				continue
			}
			backoff.reset()
		}
	})
	if !started { // the client is closing
		stop()
		cancel()
		close(out)
	}
	return out
}

// deliver replaces an unread value in a 1-buffered channel with v. Only the
// owning goroutine sends, so the send never blocks.
func deliver[T any](ch chan T, v T) {
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// waitChange watches prefixes from rev and returns nil at the first relevant
// event, ctx.Err() when ctx ends, or the watch error.
func (c *Client) waitChange(ctx context.Context, prefixes []string, rev int64, relevant func(*clientv3.Event) bool) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	type result struct{ err error }
	results := make(chan result, len(prefixes))
	var wg sync.WaitGroup
	for _, p := range prefixes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wch := c.cli.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithRev(rev))
			for resp := range wch {
				if err := resp.Err(); err != nil {
					results <- result{err}
					return
				}
				for _, ev := range resp.Events {
					if relevant == nil || relevant(ev) {
						results <- result{nil}
						return
					}
				}
			}
			results <- result{wctx.Err()}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	select {
	case r := <-results:
		if r.err == nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if r.err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff doubles from 50 ms to 2 s between retries of background work.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Millisecond} }

func (b *backoff) reset() { b.d = 50 * time.Millisecond }

// wait sleeps for the current backoff or until ctx ends; false means ctx ended.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, 2*time.Second)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
