package compat

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// member is one consumer of a group, run by a Go client: it consumes on
// its own goroutine, commits what it read synchronously, and reports its
// current assignment and every record it read.
type member interface {
	state() (assigned []int32, recs []record, err error)
	close() error
}

// memberState is the part of every Go member that records what it saw.
type memberState struct {
	mu       sync.Mutex
	assigned map[int32]bool
	recs     []record
	err      error
}

func (m *memberState) assign(ps ...int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.assigned == nil {
		m.assigned = map[int32]bool{}
	}
	for _, p := range ps {
		m.assigned[p] = true
	}
}

func (m *memberState) revoke(ps ...int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		delete(m.assigned, p)
	}
}

func (m *memberState) revokeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.assigned)
}

func (m *memberState) add(r ...record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r...)
}

func (m *memberState) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
	}
}

func (m *memberState) state() ([]int32, []record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.assigned {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps, slices.Clone(m.recs), m.err
}

// runGroup is the groups job for a Go client: member A alone reads
// j.Records; member B joins; once the partitions are split between them,
// produce sends j.After and both read until together they have it all.
func runGroup(ctx context.Context, j job, start func(ctx context.Context) (member, error), produce func(ctx context.Context, recs []record) error) (result, error) {
	a, err := start(ctx)
	if err != nil {
		return result{}, fmt.Errorf("start member A: %w", err)
	}
	defer a.close()
	if err := waitMembers(ctx, "member A reads the topic", func() (bool, error) {
		_, recs, err := a.state()
		return len(recs) >= len(j.Records), err
	}); err != nil {
		return result{}, err
	}
	_, first, _ := a.state()
	b, err := start(ctx)
	if err != nil {
		return result{}, fmt.Errorf("start member B: %w", err)
	}
	defer b.close()
	var pa, pb []int32
	if err := waitMembers(ctx, "the partitions split between A and B", func() (bool, error) {
		var ea, eb error
		pa, _, ea = a.state()
		pb, _, eb = b.state()
		if ea != nil || eb != nil {
			return false, fmt.Errorf("A: %v, B: %v", ea, eb)
		}
		all := slices.Sorted(slices.Values(append(slices.Clone(pa), pb...)))
		return len(pa) > 0 && len(pb) > 0 && len(all) == int(j.Partitions) && all[len(all)-1] == j.Partitions-1 && !hasDup(all), nil
	}); err != nil {
		return result{}, err
	}
	if err := produce(ctx, j.After); err != nil {
		return result{}, fmt.Errorf("produce after the split: %w", err)
	}
	if err := waitMembers(ctx, "A and B read what was produced after the split", func() (bool, error) {
		_, ra, ea := a.state()
		_, rb, eb := b.state()
		if ea != nil || eb != nil {
			return false, fmt.Errorf("A: %v, B: %v", ea, eb)
		}
		return len(ra)+len(rb) >= len(j.Records)+len(j.After), nil
	}); err != nil {
		return result{}, err
	}
	if err := a.close(); err != nil {
		return result{}, fmt.Errorf("close A: %w", err)
	}
	if err := b.close(); err != nil {
		return result{}, fmt.Errorf("close B: %w", err)
	}
	_, ra, _ := a.state()
	_, rb, _ := b.state()
	return result{First: first, AssignA: pa, AssignB: pb, A: ra[len(first):], B: rb}, nil
}

func hasDup(sorted []int32) bool {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return true
		}
	}
	return false
}

// waitMembers polls cond until it holds, fails, or ctx ends.
func waitMembers(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
