package coord

import (
	"context"
	"testing"
	"time"
)

// TestWatchSnapshotsDedup: a reload that finds the same state as the last
// delivered snapshot delivers nothing; a changed state is delivered.
func TestWatchSnapshotsDedup(t *testing.T) {
	tc := startCluster(t, 1, false)
	c := tc.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	values := []int{10, 10, 20} // the second reload finds nothing new
	loaded := make(chan int, len(values))
	release := make(chan struct{})
	calls := 0
	load := func(ctx context.Context) (int, int64, error) {
		resp, err := c.cli.Get(ctx, "/test/")
		if err != nil {
			return 0, 0, err
		}
		v := values[min(calls, len(values)-1)]
		calls++
		loaded <- calls
		if calls == 3 {
			<-release // hold the third reload until the channel is checked
		}
		return v, resp.Header.Revision, nil
	}
	ch := watchSnapshots(c, ctx, "test", []string{"/test/"}, nil, load, func(a, b int) bool { return a == b })

	if v := recv(t, ch, 5*time.Second); v != 10 {
		t.Fatalf("first snapshot %d", v)
	}
	recv(t, loaded, 5*time.Second)
	if _, err := c.cli.Put(ctx, "/test/x", "1"); err != nil {
		t.Fatal(err)
	}
	if n := recv(t, loaded, 5*time.Second); n != 2 {
		t.Fatalf("load call %d, want 2", n)
	}
	if _, err := c.cli.Put(ctx, "/test/y", "1"); err != nil {
		t.Fatal(err)
	}
	if n := recv(t, loaded, 5*time.Second); n != 3 {
		t.Fatalf("load call %d, want 3", n)
	}
	// The second reload is done and its result was judged: nothing new.
	if len(ch) != 0 {
		t.Fatalf("an unchanged snapshot was delivered again: %d", <-ch)
	}
	close(release)
	if v := recv(t, ch, 5*time.Second); v != 20 {
		t.Fatalf("changed snapshot %d, want 20", v)
	}
}
