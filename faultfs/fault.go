package faultfs

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/isrlab/isrlab/units"
)

// Op is the kind of filesystem operation a fault applies to.
type Op string

// Operation kinds. OpMeta covers lookups, opens, creates, renames, unlinks,
// directory listings and attribute changes; OpAll matches every kind.
const (
	OpRead  Op = "read"
	OpWrite Op = "write"
	OpFsync Op = "fsync"
	OpMeta  Op = "meta"
	OpAll   Op = "all"
)

// ops lists the concrete kinds, in the order status reports them.
var ops = []Op{OpRead, OpWrite, OpFsync, OpMeta}

func (o Op) valid() bool {
	switch o {
	case OpRead, OpWrite, OpFsync, OpMeta, OpAll:
		return true
	}
	return false
}

func (o Op) index() int {
	switch o {
	case OpRead:
		return 0
	case OpWrite:
		return 1
	case OpFsync:
		return 2
	}
	return 3
}

// Duration is the specs' duration type (units.Duration).
type Duration = units.Duration

// Kind names a fault type.
type Kind string

// Fault kinds.
const (
	KindLatency Kind = "latency"
	KindEIO     Kind = "eio"
	KindHang    Kind = "hang"
)

// Fault is one active fault. Its JSON form is what status reports and what
// the latency, eio and hang commands carry.
type Fault struct {
	Kind Kind `json:"kind"`
	// Op is the operation kind the fault applies to; empty means all.
	Op Op `json:"op"`
	// Prefix restricts the fault to paths (relative to the mount point,
	// no leading slash) that start with it; empty means every path.
	Prefix string `json:"prefix,omitempty"`
	// Latency is the delay added to each matching operation; a uniformly
	// random extra in [0, Jitter) is added on top, so an operation is
	// never delayed by less than Latency.
	Latency Duration `json:"latency,omitempty"`
	Jitter  Duration `json:"jitter,omitempty"`
	// Probability is the chance in [0, 1] that a matching operation
	// fails with EIO.
	Probability float64 `json:"probability,omitempty"`
}

// key identifies the slot a fault occupies: a new fault of the same kind,
// op and prefix replaces the old one.
func (f Fault) key() string { return string(f.Kind) + "|" + string(f.Op) + "|" + f.Prefix }

func (f *Fault) normalize() error {
	if f.Op == "" {
		f.Op = OpAll
	}
	if !f.Op.valid() {
		return fmt.Errorf("op %q: want read, write, fsync, meta or all", f.Op)
	}
	f.Prefix = strings.TrimLeft(f.Prefix, "/")
	switch f.Kind {
	case KindLatency:
		if f.Latency < 0 || f.Jitter < 0 {
			return fmt.Errorf("latency %v jitter %v: must not be negative", time.Duration(f.Latency), time.Duration(f.Jitter))
		}
		if f.Latency == 0 && f.Jitter == 0 {
			return fmt.Errorf("latency: both latency and jitter are zero")
		}
		f.Probability = 0
	case KindEIO:
		if f.Probability <= 0 || f.Probability > 1 {
			return fmt.Errorf("eio probability %v: want (0, 1]", f.Probability)
		}
		f.Latency, f.Jitter = 0, 0
	case KindHang:
		f.Latency, f.Jitter, f.Probability = 0, 0, 0
	default:
		return fmt.Errorf("fault kind %q: want latency, eio or hang", f.Kind)
	}
	return nil
}

func (f Fault) matches(op Op, path func() string) bool {
	if f.Op != OpAll && f.Op != op {
		return false
	}
	return f.Prefix == "" || strings.HasPrefix(path(), f.Prefix)
}

// ruleSet is an immutable snapshot of the active faults. Operations load it
// with one atomic read; nil means no fault is active (the fast path).
type ruleSet struct {
	faults    []Fault
	hasPrefix bool
	// unhang is closed when the hang faults of this generation are lifted.
	unhang chan struct{}
}

// Counters count operations since the filesystem was mounted.
type Counters struct {
	Ops     uint64 `json:"ops"`
	Delayed uint64 `json:"delayed"`
	Failed  uint64 `json:"failed"`
	Hung    uint64 `json:"hung"`
	// Hanging is the number of operations blocked right now.
	Hanging int64 `json:"hanging"`
}

type counters struct {
	ops, delayed, failed, hung atomic.Uint64
	hanging                    atomic.Int64
}

// engine decides, per operation, whether to delay, fail or block it.
type engine struct {
	rules atomic.Pointer[ruleSet]

	mu     sync.Mutex // serializes changes to rules and guards rng
	rng    *rand.Rand
	unhang chan struct{}

	count [4]counters
}

func newEngine(seed int64) *engine {
	return &engine{rng: rand.New(rand.NewSource(seed)), unhang: make(chan struct{})}
}

// add installs f, replacing a fault with the same kind, op and prefix.
func (e *engine) add(f Fault) error {
	if err := f.normalize(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var cur []Fault
	if rs := e.rules.Load(); rs != nil {
		cur = rs.faults
	}
	next := make([]Fault, 0, len(cur)+1)
	for _, g := range cur {
		if g.key() != f.key() {
			next = append(next, g)
		}
	}
	next = append(next, f)
	e.store(next)
	return nil
}

// removeKind lifts every fault of kind k (all kinds if k is empty) and
// releases operations blocked by a hang.
func (e *engine) removeKind(k Kind) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var next []Fault
	if rs := e.rules.Load(); rs != nil {
		for _, g := range rs.faults {
			if k != "" && g.Kind != k {
				next = append(next, g)
			}
		}
	}
	if k == "" || k == KindHang {
		// Publish the new rules before waking the hung operations, which
		// reload them.
		old := e.unhang
		e.unhang = make(chan struct{})
		e.store(next)
		close(old)
		return
	}
	e.store(next)
}

// store must hold e.mu.
func (e *engine) store(faults []Fault) {
	if len(faults) == 0 {
		e.rules.Store(nil)
		return
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].key() < faults[j].key() })
	rs := &ruleSet{faults: faults, unhang: e.unhang}
	for _, f := range faults {
		if f.Prefix != "" {
			rs.hasPrefix = true
		}
	}
	e.rules.Store(rs)
}

func (e *engine) active() bool { return e.rules.Load() != nil }

func (e *engine) list() []Fault {
	rs := e.rules.Load()
	if rs == nil {
		return []Fault{}
	}
	return append([]Fault(nil), rs.faults...)
}

// check applies the active faults to one operation of kind op on the file
// whose mount-relative path path returns (called only if a fault has a
// prefix). It returns 0 to go on, EIO for an injected error, or EINTR if
// the caller gave up while delayed or hung.
func (e *engine) check(ctx context.Context, op Op, path func() string) syscall.Errno {
	c := &e.count[op.index()]
	c.ops.Add(1)
	rs := e.rules.Load()
	if rs == nil {
		return 0
	}
	if rs.hasPrefix {
		// Resolve the path once: it walks the inode tree.
		var p string
		var done bool
		orig := path
		path = func() string {
			if !done {
				p, done = orig(), true
			}
			return p
		}
	}
	for _, f := range rs.faults {
		if f.Kind != KindHang || !f.matches(op, path) {
			continue
		}
		c.hung.Add(1)
		c.hanging.Add(1)
		select {
		case <-rs.unhang:
		case <-ctx.Done():
			c.hanging.Add(-1)
			return syscall.EINTR
		}
		c.hanging.Add(-1)
		// Released: apply the faults active now, not those of before.
		if rs = e.rules.Load(); rs == nil {
			return 0
		}
		break
	}
	var delay time.Duration
	fail := false
	for _, f := range rs.faults {
		if f.Kind == KindHang || !f.matches(op, path) {
			continue
		}
		switch f.Kind {
		case KindLatency:
			delay += time.Duration(f.Latency)
			if f.Jitter > 0 {
				e.mu.Lock()
				delay += time.Duration(e.rng.Int63n(int64(f.Jitter)))
				e.mu.Unlock()
			}
		case KindEIO:
			e.mu.Lock()
			fail = fail || e.rng.Float64() < f.Probability
			e.mu.Unlock()
		}
	}
	if delay > 0 {
		c.delayed.Add(1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		}
	}
	if fail {
		c.failed.Add(1)
		return syscall.EIO
	}
	return 0
}

func (e *engine) counters() map[Op]Counters {
	out := make(map[Op]Counters, len(ops))
	for _, op := range ops {
		c := &e.count[op.index()]
		out[op] = Counters{
			Ops: c.ops.Load(), Delayed: c.delayed.Load(), Failed: c.failed.Load(),
			Hung: c.hung.Load(), Hanging: c.hanging.Load(),
		}
	}
	return out
}

// pageSize is the granularity at which a torn crash keeps appended bytes.
const pageSize = 4096

// tornCut draws how many of the n bytes appended after synced survive a
// torn crash: up to a page boundary, or all of them.
func (e *engine) tornCut(synced, n int64) int64 {
	e.mu.Lock()
	r := e.rng.Int63n(n + 1)
	e.mu.Unlock()
	if r == n {
		return n
	}
	end := (synced + r) / pageSize * pageSize
	return max(end, synced) - synced
}
