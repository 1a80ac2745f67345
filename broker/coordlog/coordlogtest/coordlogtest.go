// Package coordlogtest has the fakes the coordinators' tests drive them
// with: a clock that moves only when told and an in-memory log.
package coordlogtest

import (
	"context"
	"encoding/binary"
	"sort"
	"sync"
	"time"

	"github.com/isrlab/isrlab/broker/coordlog"
)

// Clock fires timers only when a test advances it.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	c       *Clock
	at      time.Time
	f       func()
	stopped bool
}

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Unix(1_800_000_000, 0)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) coordlog.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves time on, firing due timers in deadline order, each on
// the caller's goroutine.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var due *timer
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.stopped {
				continue
			}
			live = append(live, t)
			if due == nil && !t.at.After(end) {
				due = t
			}
		}
		c.timers = live
		if due == nil {
			break
		}
		due.stopped = true
		if due.at.After(c.now) {
			c.now = due.at
		}
		c.mu.Unlock()
		due.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// Log is an in-memory partitioned log: appends get consecutive offsets.
type Log struct {
	mu      sync.Mutex
	parts   map[int32][][]byte
	next    map[int32]int64
	failErr error         // the next appends fail with it
	gate    chan struct{} // when set, Read waits for it
	hold    chan struct{} // when set, submitted appends wait for it
	probe   func()        // when set, called by every Submit
}

// NewLog returns an empty Log.
func NewLog() *Log { return &Log{parts: map[int32][][]byte{}, next: map[int32]int64{}} }

// Append stores batch at the partition's end and returns its first offset.
func (l *Log) Append(_ context.Context, p int32, batch []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failErr != nil {
		return 0, l.failErr
	}
	b := append([]byte(nil), batch...)
	base := l.next[p]
	binary.BigEndian.PutUint64(b[0:8], uint64(base))
	n := int64(binary.BigEndian.Uint32(b[57:61]))
	l.next[p] = base + n
	l.parts[p] = append(l.parts[p], b)
	return base, nil
}

// Submit appends batch at once; its Pending waits while commits are held.
func (l *Log) Submit(p int32, batch []byte) coordlog.Pending {
	l.mu.Lock()
	probe := l.probe
	l.mu.Unlock()
	if probe != nil {
		probe()
	}
	base, err := l.Append(context.Background(), p, batch)
	l.mu.Lock()
	hold := l.hold
	l.mu.Unlock()
	return func(ctx context.Context) (int64, error) {
		if hold != nil {
			select {
			case <-hold:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return base, err
	}
}

// ProbeSubmits makes every Submit call probe first (a test checks the
// caller's locks there).
func (l *Log) ProbeSubmits(probe func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.probe = probe
}

// HoldCommits makes the appends submitted from now on wait to report
// their commit until release is called, as a slow follower would.
func (l *Log) HoldCommits() (release func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.hold = ch
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		if l.hold == ch {
			l.hold = nil
		}
		l.mu.Unlock()
		close(ch)
	}
}

// Read returns the batches from offset from on.
func (l *Log) Read(ctx context.Context, p int32, from int64) ([]byte, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []byte
	for _, b := range l.parts[p] {
		if int64(binary.BigEndian.Uint64(b[0:8])) >= from {
			out = append(out, b...)
		}
	}
	return out, nil
}

// SetFail makes the next appends fail with err (nil: succeed again).
func (l *Log) SetFail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failErr = err
}

// SetGate makes Read wait until gate is closed (nil: do not wait).
func (l *Log) SetGate(gate chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate = gate
}
