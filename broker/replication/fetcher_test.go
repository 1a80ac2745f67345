package replication

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestHoldOutlastsBackoff: a failed fetch's backoff does not end a Hold
// (the stalled-follower test holds a partition while its first fetch may
// still fail), and releasing the hold leaves only the backoff.
func TestHoldOutlastsBackoff(t *testing.T) {
	fs := &Fetchers{cfg: Config{FetchBackoff: time.Millisecond, LagTimeMax: time.Second}, log: slog.New(slog.DiscardHandler), all: map[fetcherKey]*fetcher{}}
	fp := &fetchPart{}
	f := &fetcher{f: fs, parts: map[tp]*fetchPart{{"t", 0}: fp}, wake: make(chan struct{}, 1)}
	fs.all[fetcherKey{}] = f
	if fs.Hold("t", 1, time.Now().Add(time.Hour)) {
		t.Fatal("Hold of a partition no fetcher has reported true")
	}
	if !fs.Hold("t", 0, time.Now().Add(time.Hour)) {
		t.Fatal("Hold of a fetched partition reported false")
	}
	f.fail(tp{"t", 0}, fp, errors.New("NOT_LEADER_OR_FOLLOWER"), "a LeaderAndIsr")
	f.failAll(f.snapshot(), errors.New("EOF"), "a Fetch answer")
	later := time.Now().Add(time.Minute) // past the backoff, inside the hold
	if !fp.waiting(later) {
		t.Fatal("a failed fetch ended the hold")
	}
	fs.Hold("t", 0, time.Time{})
	if fp.waiting(later) {
		t.Fatal("still waiting after the hold was released and the backoff ended")
	}
	if !fp.waiting(time.Now().Add(-time.Second)) {
		t.Fatal("the backoff of the failed fetch is gone")
	}
}
