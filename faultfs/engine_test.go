package faultfs

import (
	"bytes"
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"syscall"
	"testing"
	"time"
)

// The engine tests need no FUSE: they drive check directly.

func TestEngineMatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  Fault
		op     Op
		path   string
		result syscall.Errno
	}{
		{"all matches read", Fault{Kind: KindEIO, Op: OpAll, Probability: 1}, OpRead, "a", syscall.EIO},
		{"op mismatch", Fault{Kind: KindEIO, Op: OpWrite, Probability: 1}, OpRead, "a", 0},
		{"prefix match", Fault{Kind: KindEIO, Op: OpFsync, Prefix: "/t-0/", Probability: 1}, OpFsync, "t-0/seg.log", syscall.EIO},
		{"prefix mismatch", Fault{Kind: KindEIO, Op: OpFsync, Prefix: "t-0/", Probability: 1}, OpFsync, "t-1/seg.log", 0},
		{"default op is all", Fault{Kind: KindEIO, Probability: 1}, OpMeta, "x", syscall.EIO},
		{"latency never fails", Fault{Kind: KindLatency, Latency: 1}, OpWrite, "x", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(1)
			if err := e.add(tc.fault); err != nil {
				t.Fatal(err)
			}
			if got := e.check(context.Background(), tc.op, func() string { return tc.path }); got != tc.result {
				t.Errorf("check(%s, %q) = %v, want %v", tc.op, tc.path, got, tc.result)
			}
			c := e.counters()[tc.op]
			if c.Ops != 1 {
				t.Errorf("ops counter %d, want 1", c.Ops)
			}
			if (tc.result == syscall.EIO) != (c.Failed == 1) {
				t.Errorf("failed counter %d for result %v", c.Failed, tc.result)
			}
		})
	}
}

func TestEngineReplaceAndHeal(t *testing.T) {
	e := newEngine(1)
	for _, p := range []float64{0.1, 0.2} {
		if err := e.add(Fault{Kind: KindEIO, Op: OpRead, Probability: p}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.add(Fault{Kind: KindEIO, Op: OpRead, Prefix: "a/", Probability: 1}); err != nil {
		t.Fatal(err)
	}
	if got := e.list(); len(got) != 2 || got[0].Probability != 0.2 {
		t.Errorf("faults %+v, want the 0.2 one replacing 0.1, plus the prefixed one", got)
	}
	e.removeKind("")
	e.removeKind("")
	if e.active() || len(e.list()) != 0 {
		t.Errorf("still active after heal: %+v", e.list())
	}
}

func TestEngineHangReleasedByHeal(t *testing.T) {
	e := newEngine(1)
	for _, f := range []Fault{{Kind: KindHang, Op: OpWrite}, {Kind: KindEIO, Op: OpWrite, Probability: 1}} {
		if err := e.add(f); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan syscall.Errno, 1)
	go func() { done <- e.check(context.Background(), OpWrite, func() string { return "" }) }()
	proctest.EventuallyTrue(t, 10*time.Second, "the write to hang", func() bool { return e.counters()[OpWrite].Hanging == 1 })
	e.removeKind("")
	select {
	case got := <-done:
		if got != 0 {
			t.Errorf("released write got %v, want success: the EIO fault was healed too", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write still hung after heal")
	}
}

func TestEngineHangInterrupted(t *testing.T) {
	e := newEngine(1)
	if err := e.add(Fault{Kind: KindHang}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan syscall.Errno, 1)
	go func() { done <- e.check(ctx, OpRead, func() string { return "" }) }()
	proctest.EventuallyTrue(t, 10*time.Second, "the read to hang", func() bool { return e.counters()[OpRead].Hanging == 1 })
	cancel()
	if got := <-done; got != syscall.EINTR {
		t.Errorf("interrupted hang returned %v, want EINTR", got)
	}
}

// TestPendingBounds checks that the oldest pending changes become durable
// (their trash freed) once too many are pending or their trash is too big.
func TestPendingBounds(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxOps          int
		maxTrash        int64
		pending, forced int
	}{
		{"within bounds", 10, 1 << 30, 5, 0},
		{"too many", 3, 1 << 30, 3, 2},
		{"too big", 10, 3 * 8192, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trk := newTracker(dir, -1)
			trk.maxOps, trk.maxTrash = tc.maxOps, tc.maxTrash
			for i := range 5 {
				tn := trk.trashName()
				if err := os.WriteFile(tn, bytes.Repeat([]byte{1}, 8192), 0o600); err != nil {
					t.Fatal(err)
				}
				trk.record(&nsOp{kind: opUnlink, path: fmt.Sprint(i), trash: tn})
			}
			_, ops, forced := trk.pending()
			if ops != tc.pending || int(forced) != tc.forced {
				t.Errorf("%d pending, %d forced; want %d, %d", ops, forced, tc.pending, tc.forced)
			}
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != tc.pending {
				t.Errorf("trash holds %d entries (%v), want %d", len(ents), err, tc.pending)
			}
		})
	}
}
