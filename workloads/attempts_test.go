package workloads

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

// frame is a Kafka request frame of the given key with n body bytes after
// the key.
func frame(key int16, n int) []byte {
	b := make([]byte, 6+n)
	binary.BigEndian.PutUint32(b, uint32(2+n))
	binary.BigEndian.PutUint16(b[4:], uint16(key))
	return b
}

type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

func TestCountingConnCountsProduceFrames(t *testing.T) {
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	produce, metadata := frame(0, 40), frame(3, 20)
	tests := []struct {
		name   string
		writes [][]byte
		want   []int64 // the count after each write
	}{
		{"one produce", [][]byte{produce}, []int64{1}},
		{"metadata", [][]byte{metadata}, []int64{0}},
		{"two frames in one write", [][]byte{cat(metadata, produce, metadata)}, []int64{1}},
		{"produce, header split", [][]byte{produce[:3], produce[3:]}, []int64{1, 1}},
		{"produce, body split", [][]byte{produce[:10], produce[10:]}, []int64{1, 1}},
		{"metadata, header split: counted while unknown", [][]byte{metadata[:3], metadata[3:], produce}, []int64{1, 1, 2}},
		{"after a frame ends mid-write", [][]byte{cat(metadata, produce[:8]), produce[8:], produce}, []int64{1, 1, 2}},
		{"framing lost: every write counts", [][]byte{{0, 0, 0, 0, 0, 3}, metadata, metadata}, []int64{1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a attempts
			c := &countingConn{Conn: discardConn{}, attempts: &a.n}
			for i, w := range tc.writes {
				if _, err := c.Write(w); err != nil {
					t.Fatal(err)
				}
				if got := a.n.Load(); got != tc.want[i] {
					t.Fatalf("after write %d: %d produce requests, want %d", i, got, tc.want[i])
				}
			}
		})
	}
}

// stallingConn holds the first Produce request written through any of its
// connections: either half of it reaches the broker, which then stops
// reading (the write blocks, as on a full socket), or all of it does and the
// write does not return (kgo has not yet run its write hook). release lets
// the write go on. Close waits for a held write, so that a client closing
// does not cut it.
type stallingConn struct {
	net.Conn
	s *stall
}

type stall struct {
	half     bool
	once     sync.Once
	held     chan struct{} // closed when a write is held
	release  chan struct{}
	released sync.Once
	writing  sync.WaitGroup
}

func (s *stall) free() { s.released.Do(func() { close(s.release) }) }

func (c *stallingConn) Write(b []byte) (int, error) {
	hold := false
	if len(b) >= 6 && binary.BigEndian.Uint16(b[4:]) == 0 {
		c.s.once.Do(func() { hold = true })
	}
	if !hold {
		return c.Conn.Write(b)
	}
	c.s.writing.Add(1)
	defer c.s.writing.Done()
	first := b
	if c.s.half {
		first = b[:len(b)/2]
	}
	n, err := c.Conn.Write(first)
	close(c.s.held)
	<-c.s.release
	if err != nil || len(first) == len(b) {
		return n, err
	}
	m, err := c.Conn.Write(b[len(first):])
	return n + m, err
}

func (c *stallingConn) Close() error {
	c.s.writing.Wait()
	return c.Conn.Close()
}

// sendSink records the history and says when the first send completed.
type sendSink struct {
	history.Memory
	once sync.Once
	done chan struct{}
}

func (s *sendSink) Write(op *history.Op) error {
	if op.F == history.FSend && op.Type != history.Invoke {
		s.once.Do(func() { close(s.done) })
	}
	return s.Memory.Write(op)
}

// TestSendEndingMidWriteIsNotFail forces the race in which kgo gives up a
// record while the Produce request that carries it is being written: while
// the write is held, metadata from another broker says the topic has no
// leader, and the record has timed out (or its context was cancelled), so
// kgo fails it; then the write completes and the broker appends the record.
// The send must not be recorded as fail ("never sent"), which would make the
// drain's read of it a false aborted-read.
//
// The held write blocks the leader's request queue in kgo, so only a
// metadata request that kgo sends to another broker can end the send; kgo
// picks brokers at random, so an attempt where it picked the leader first
// is given up and tried again, and the test fails if none forced the race.
func TestSendEndingMidWriteIsNotFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters")
	}
	tests := []struct {
		name   string
		half   bool // the broker stops reading mid-request
		cancel bool // the send's context is cancelled, instead of timing out
	}{
		{"broker stalls mid-read, record times out", true, false},
		{"request written, hook not run, context cancelled", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for attempt := range 8 {
				if raceOnce(t, tc.half, tc.cancel) {
					return
				}
				t.Logf("attempt %d: kgo sent its metadata request to the held broker first; again", attempt)
			}
			t.Fatal("the race was never forced")
		})
	}
}

// raceOnce runs one attempt; it reports whether the race was forced, and
// then checks the outcome.
func raceOnce(t *testing.T, half, cancelSend bool) bool {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(7), kfake.SeedTopics(1, "mid"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mctx, mcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer mcancel()
	probe, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(mctx, probe)
	probe.Close()
	if err != nil {
		t.Fatal(err)
	}

	s := &stall{half: half, held: make(chan struct{}), release: make(chan struct{})}
	defer s.free()
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &stallingConn{Conn: conn, s: s}, nil
	}
	var leaderGone atomic.Bool
	c.ControlKey(kmsg.Metadata.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !leaderGone.Load() {
			return nil, nil, false
		}
		resp := kreq.(*kmsg.MetadataRequest).ResponseKind().(*kmsg.MetadataResponse)
		resp.Brokers, resp.ControllerID = meta.Brokers, meta.ControllerID
		tp := kmsg.NewMetadataResponseTopic()
		tp.Topic, tp.ErrorCode = kmsg.StringPtr("mid"), kerr.LeaderNotAvailable.Code
		resp.Topics = append(resp.Topics, tp)
		return resp, nil, true
	})

	sink := &sendSink{done: make(chan struct{})}
	start := time.Now()
	rec := history.NewRecorder(sink, func() time.Duration { return time.Since(start) })
	cfg := Config{Topic: "mid", Partitions: 1, Producers: 1, Consumers: 1, Sends: 1, PollTimeout: 100 * time.Millisecond}
	age := 20 * time.Millisecond
	if !cancelSend {
		// kgo's shortest delivery timeout is 1 s: the refresh that fails
		// the record must come after it.
		cfg.DeliveryTimeout, age = time.Second, 1100*time.Millisecond
	}
	w, err := NewLog(cfg, rec, c.ListenAddrs(), kgo.Dialer(dial), kgo.MetadataMinAge(age), kgo.MetadataMaxAge(age))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-s.held:
	case err := <-ran:
		t.Fatalf("the run ended (%v) before a Produce request was written", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no Produce request was written")
	}
	leaderGone.Store(true)
	if cancelSend {
		cancel()
	}
	forced := false
	select {
	case <-sink.done:
		forced = true
	case <-time.After(4 * time.Second):
	}
	leaderGone.Store(false)
	s.free()
	s.writing.Wait() // before a cancellation could cut the held write
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if !forced {
		return false
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	if err := w.Drain(dctx); err != nil {
		t.Fatal(err)
	}

	var outcome history.Op
	for _, op := range sink.Ops {
		if op.F == history.FSend && op.Type != history.Invoke {
			outcome = op
		}
	}
	v := checker.CheckOps(sink.Ops, checker.Options{Linearizable: checker.LinOn})
	if v.Stats.ReadValues != 1 {
		t.Fatalf("the drain read %d values: the held write did not append the record, so the race did not matter", v.Stats.ReadValues)
	}
	if outcome.Type != history.Info {
		t.Errorf("send ended %s (%s), want info", outcome.Type, outcome.Error)
	}
	if v.Valid != checker.Valid {
		t.Errorf("verdict %s, anomalies %v", v.Valid, v.Anomalies)
	}
	t.Logf("send ended %s (%s) while its request was held; the drain read it", outcome.Type, outcome.Error)
	return true
}
