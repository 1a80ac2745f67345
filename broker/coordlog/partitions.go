package coordlog

import (
	"context"
	"sort"
	"sync"
)

// Ownership is one coordinator partition this broker leads, at the
// leader epoch it was elected with; Loading until its replay completes.
type Ownership struct {
	Epoch   int32
	Loading bool
	cancel  context.CancelFunc
}

// Partitions is the set of a coordinator's partitions this broker leads,
// with the goroutines that load them. The coordinator's lock guards it;
// Wait is called without it.
type Partitions struct {
	owned   map[int32]*Ownership
	loaders sync.WaitGroup
}

// Get returns p's ownership; nil when this broker does not lead p.
func (s *Partitions) Get(p int32) *Ownership { return s.owned[p] }

// Start leads p at epoch (p must not be led) and runs load in a goroutine
// with a context that Drop(p) cancels.
func (s *Partitions) Start(p, epoch int32, load func(ctx context.Context, o *Ownership)) {
	if s.owned == nil {
		s.owned = map[int32]*Ownership{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &Ownership{Epoch: epoch, Loading: true, cancel: cancel}
	s.owned[p] = o
	s.loaders.Add(1)
	go func() {
		defer s.loaders.Done()
		defer cancel()
		load(ctx, o)
	}()
}

// Drop stops leading p and cancels its load; false when p was not led.
func (s *Partitions) Drop(p int32) bool {
	o, ok := s.owned[p]
	if !ok {
		return false
	}
	o.cancel()
	delete(s.owned, p)
	return true
}

// List returns the partitions led, in order.
func (s *Partitions) List() []int32 {
	out := make([]int32, 0, len(s.owned))
	for p := range s.owned {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// AnyLoading reports whether a partition is still loading.
func (s *Partitions) AnyLoading() bool {
	for _, o := range s.owned {
		if o.Loading {
			return true
		}
	}
	return false
}

// Wait waits for the loaders that have started.
func (s *Partitions) Wait() { s.loaders.Wait() }

// Status returns the partitions led and whether each is still loading.
func (s *Partitions) Status() map[int32]bool {
	out := map[int32]bool{}
	for p, o := range s.owned {
		out[p] = o.Loading
	}
	return out
}

// Queue is work a coordinator queues while it holds its lock, to run
// once the lock is released: callbacks to waiting requests, appends and
// sends, which must not run under it.
type Queue struct{ out []func() }

// Later queues f.
func (q *Queue) Later(f func()) { q.out = append(q.out, f) }

// Unlock releases mu and runs the queued work in order.
func (q *Queue) Unlock(mu *sync.Mutex) {
	out := q.out
	q.out = nil
	mu.Unlock()
	for _, f := range out {
		f()
	}
}
