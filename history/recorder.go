package history

import (
	"sync"
	"time"
)

// Sink receives ops in history order. Writer is a Sink.
type Sink interface {
	Write(op *Op) error
}

// Memory is a Sink that keeps copies of the ops, for tests and small runs.
type Memory struct {
	Ops []Op
}

// Write appends a copy of op.
func (m *Memory) Write(op *Op) error {
	m.Ops = append(m.Ops, op.Clone())
	return nil
}

// Recorder stamps ops with their index and time and writes them to a Sink;
// it is safe for concurrent use by the workload's processes, the nemesis and
// the cluster observer. The clock is injected: it returns the time since the
// run's monotonic start.
type Recorder struct {
	mu    sync.Mutex
	sink  Sink
	since func() time.Duration
	next  int64
	err   error
}

// NewRecorder returns a Recorder writing to sink. since returns the time
// elapsed since the run started (for example a closure over time.Since with
// a monotonic start).
func NewRecorder(sink Sink, since func() time.Duration) *Recorder {
	return &Recorder{sink: sink, since: since}
}

// Record stamps op with the next index and the current time, writes it and
// returns the stamped op. A write error is kept and returned by Err; later
// ops are still stamped so callers need not check each call.
func (r *Recorder) Record(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = r.next
	op.Time = int64(r.since())
	r.next++
	if r.err == nil {
		r.err = r.sink.Write(&op)
	}
	return op
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Flush flushes the sink when it buffers (a Writer does): call it at the
// end of a run, and periodically if a crash should lose little.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.sink.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil && r.err == nil {
			r.err = err
		}
	}
	return r.err
}

// Count returns the number of ops recorded.
func (r *Recorder) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Now returns the current time on the history's clock, for fields such as
// a transaction's commit_at.
func (r *Recorder) Now() int64 { return int64(r.since()) }
