package clients

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// wireConn is a connection whose reads come from a script and whose
// writes are kept.
type wireConn struct {
	net.Conn
	reads   [][]byte
	readErr error
	written [][]byte
}

func (c *wireConn) Write(b []byte) (int, error) {
	c.written = append(c.written, slices.Clone(b))
	return len(b), nil
}

func (c *wireConn) Read(p []byte) (int, error) {
	if len(c.reads) == 0 {
		if c.readErr != nil {
			return 0, c.readErr
		}
		return 0, errors.New("script over")
	}
	n := copy(p, c.reads[0])
	if c.reads[0] = c.reads[0][n:]; len(c.reads[0]) == 0 {
		c.reads = c.reads[1:]
	}
	return n, nil
}

func (c *wireConn) Close() error { return nil }

// requestFrame is req as a client writes it, correlation id corr.
func requestFrame(req kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("isrlab")).AppendRequest(nil, req, corr)
}

// responseFrame is resp as a broker answers correlation id corr.
func responseFrame(resp kmsg.Response, corr int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	if resp.IsFlexible() {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func commitRequest(version int16, offs map[int32]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.Generation, req.MemberID = version, "g", 3, "m"
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "isrlab"
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range offs {
			if !yield(p) {
				return
			}
		}
	}) {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, offs[p], -1
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	return req
}

func commitResponse(version int16, codes map[int32]int16) *kmsg.OffsetCommitResponse {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = version
	t := kmsg.NewOffsetCommitResponseTopic()
	t.Topic = "isrlab"
	for p, code := range codes {
		rp := kmsg.NewOffsetCommitResponseTopicPartition()
		rp.Partition, rp.ErrorCode = p, code
		t.Partitions = append(t.Partitions, rp)
	}
	resp.Topics = append(resp.Topics, t)
	return resp
}

// chop splits b into pieces of n bytes.
func chop(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// TestSaramaCommitOutcome: the sarama group driver reads each
// OffsetCommit request sarama writes and the coordinator's answer on the
// wire and maps them as franz-go's path maps kgo's commit callback
// (workloads.CommitOutcome): ok with the offsets accepted, fail when
// every partition was refused, info with the offsets asked for when the
// connection broke before the answer; responses split across reads,
// behind other responses and in flexible versions are followed; after a
// crash no OffsetCommit is written and nothing reported.
func TestSaramaCommitOutcome(t *testing.T) {
	heartbeat := kmsg.NewPtrHeartbeatResponse()
	heartbeat.Version = 2
	illegal := kerr.IllegalGeneration.Code
	tests := []struct {
		name    string
		version int16
		offs    map[int32]int64
		codes   map[int32]int16 // nil: no answer
		readErr error
		piece   int // read the answer this many bytes at a time (0: whole)
		want    workloads.Committed
	}{
		{"ok", 6, map[int32]int64{0: 10, 2: 7}, map[int32]int16{0: 0, 2: 0}, nil, 0,
			workloads.Committed{Type: history.OK, Offsets: []history.PartitionOffset{{Partition: 0, Offset: 10}, {Partition: 2, Offset: 7}}}},
		{"ok-flexible-byte-by-byte", 8, map[int32]int64{1: 5}, map[int32]int16{1: 0}, nil, 1,
			workloads.Committed{Type: history.OK, Offsets: []history.PartitionOffset{{Partition: 1, Offset: 5}}}},
		{"one-refused", 6, map[int32]int64{0: 10, 1: 4}, map[int32]int16{0: 0, 1: illegal}, nil, 3,
			workloads.Committed{Type: history.OK, Offsets: []history.PartitionOffset{{Partition: 0, Offset: 10}}, Error: "ILLEGAL_GENERATION"}},
		{"all-refused", 6, map[int32]int64{0: 10}, map[int32]int16{0: illegal}, nil, 0,
			workloads.Committed{Type: history.Fail, Offsets: []history.PartitionOffset{}, Error: "ILLEGAL_GENERATION"}},
		{"no-answer", 6, map[int32]int64{0: 10, 1: 4}, nil, errors.New("read tcp: i/o timeout"), 0,
			workloads.Committed{Type: history.Info, Offsets: []history.PartitionOffset{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 4}}, Error: "read tcp: i/o timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []workloads.Committed
			w := &commitWatch{report: func(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				got = append(got, workloads.CommitOutcome("isrlab", req, resp, err))
			}}
			raw := &wireConn{readErr: tc.readErr}
			c := &watchedConn{Conn: raw, w: w, pending: map[int32]*kmsg.OffsetCommitRequest{}}
			// A heartbeat answered first, then the commit.
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.Version = 2
			if _, err := c.Write(requestFrame(hb, 41)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(requestFrame(commitRequest(tc.version, tc.offs), 42)); err != nil {
				t.Fatal(err)
			}
			raw.reads = append(raw.reads, responseFrame(heartbeat, 41))
			if tc.codes != nil {
				frame := responseFrame(commitResponse(tc.version, tc.codes), 42)
				if tc.piece > 0 {
					raw.reads = append(raw.reads, chop(frame, tc.piece)...)
				} else {
					raw.reads = append(raw.reads, frame)
				}
			}
			buf := make([]byte, 5)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			if len(got) != 1 {
				t.Fatalf("%d commits reported, want 1: %+v", len(got), got)
			}
			if g := got[0]; g.Type != tc.want.Type || !slices.Equal(g.Offsets, tc.want.Offsets) || !strings.Contains(g.Error, tc.want.Error) {
				t.Errorf("got %+v, want %+v", g, tc.want)
			}
		})
	}
	t.Run("crashed", func(t *testing.T) {
		reported := 0
		w := &commitWatch{report: func(*kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) { reported++ }}
		raw := &wireConn{}
		c := &watchedConn{Conn: raw, w: w, pending: map[int32]*kmsg.OffsetCommitRequest{}}
		if _, err := c.Write(requestFrame(commitRequest(6, map[int32]int64{0: 1}), 7)); err != nil {
			t.Fatal(err)
		}
		w.crash()
		if _, err := c.Write(requestFrame(commitRequest(6, map[int32]int64{0: 2}), 8)); !errors.Is(err, errCrashed) {
			t.Errorf("a crashed member's commit was written: %v", err)
		}
		c.Close()
		if len(raw.written) != 1 || reported != 0 {
			t.Errorf("after the crash: %d requests written (want the one before it), %d commits reported (want none)", len(raw.written), reported)
		}
	})
	// A Commit during which sarama wrote no request is fail.
	if c := mergeCommits(nil); c.Type != history.Fail {
		t.Errorf("no request: %+v, want fail", c)
	}
}

// TestSaramaHeldCommitIsInfo: a manual commit whose OffsetCommit request
// the coordinator holds (a broker test hook) until sarama gives up on it
// (Net.ReadTimeout, request.timeout) is info, not fail: once released
// the coordinator applies it, and the group's committed offset is the
// one asked for.
func TestSaramaHeldCommitIsInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, TestHooks: true})
	c.CreateTopic("held-commit", 1, 1, nil)
	cfg := workloads.Config{Topic: "held-commit", Partitions: 1, RequestTimeout: 2 * time.Second, ManualCommit: true}
	cl, err := New(workloads.ClientSpec{Client: Sarama}, cfg, Env{Seeds: c.Bootstrap()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One record to read.
	p, err := cl.Producer(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := p.Send(ctx, workloads.Record{Partition: 0, Key: "k0", Value: 1}); err != nil || s.Type != history.OK {
		t.Fatalf("send: %+v %v", s, err)
	}
	p.Close()
	assigned := make(chan []int32, 16)
	gc, err := cl.(workloads.GroupClient).GroupConsumer(ctx, 1, workloads.GroupMember{Group: "held", Assigned: func(ps []int32) { assigned <- ps },
		Committed: func(c workloads.Committed) { t.Errorf("manual commit: the client committed on its own: %+v", c) }})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for ps := range assigned {
		if slices.Equal(ps, []int32{0}) {
			break
		}
	}
	var polled workloads.Polled
	for ctx.Err() == nil && len(polled.Reads) == 0 {
		if polled, err = gc.Poll(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	rule := c.Hook(1, proctest.HookRule{API: "OffsetCommit"})
	got := gc.Commit(ctx, map[int32]int64{0: 1})
	if st, err := c.HookState(1, rule); err == nil && st.Matched == 0 {
		t.Fatal("the hook held no OffsetCommit request")
	}
	c.Unhook(1, rule)
	if got.Type != history.Info || !slices.Equal(got.Offsets, []history.PartitionOffset{{Partition: 0, Offset: 1}}) {
		t.Fatalf("the held commit ended %+v, want info with partition 0 at 1", got)
	}
	t.Logf("held commit: %s (%s)", got.Type, got.Error)
	// The released request was applied: fail would have been wrong.
	// The coordinator applies it when the hook lets it through, on a
	// connection of its own: ask until it shows.
	adm := kadm.NewClient(mustClient(t, c.Bootstrap()))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		offs, err := adm.FetchOffsets(ctx, "held")
		if o, ok := offs.Lookup("held-commit", 0); err == nil && ok && o.At == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the released commit never showed in the group's offsets")
		case <-tick.C:
		}
	}
}

func mustClient(t *testing.T, seeds []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestSaramaQueueWithCrashes: the queue workload through sarama with
// both commit modes, members crashing (queueWithCrashes).
func TestSaramaQueueWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	queueWithCrashes(t, workloads.ClientSpec{Client: Sarama})
}

// queueWithCrashes runs the queue workload through spec's client with both
// commit modes, members crashing, and checks the history is valid,
// crashes, rebalances and ok commits are recorded, no process commits
// after its crash, and manual commit skips nothing.
func queueWithCrashes(t *testing.T, spec workloads.ClientSpec) {
	t.Helper()
	// Members crash every half second on average: with the coordinator's
	// initial rebalance delay (3 s by default) each emptied group would
	// wait that long before its next members get records, and a manual
	// commit (after a whole poll's records) would come only after a few
	// such rounds, or not at all within the run on a loaded machine.
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, Overrides: []string{"group.initial.rebalance.delay.ms=0"}})
	for _, manual := range []bool{false, true} {
		name := map[bool]string{false: "auto-commit", true: "manual-commit"}[manual]
		t.Run(name, func(t *testing.T) {
			topic := "queue-" + name
			c.CreateTopic(topic, 2, 1, nil)
			// The group's first join takes seconds (the coordinator's
			// initial rebalance delay): the workload runs for a while
			// rather than for a number of sends.
			cfg := workloads.Config{Topic: topic, Partitions: 2, Producers: 2, Consumers: 2, SendInterval: 4 * time.Millisecond,
				ManualCommit: manual, CrashEvery: 500 * time.Millisecond, PollTimeout: 100 * time.Millisecond, Seed: 3,
				ProcessingTime: time.Millisecond, AutoCommitInterval: 100 * time.Millisecond}
			if err := Check(spec, "queue", cfg); err != nil {
				t.Fatal(err)
			}
			cl, err := New(spec, cfg, Env{Seeds: c.Bootstrap()})
			if err != nil {
				t.Fatal(err)
			}
			// The run lasts until it has crashed, rebalanced and
			// committed a few times (a few seconds), at most 30 s
			// (kafka-go's first join alone can take several seconds,
			// more on a loaded machine).
			enough := func(n map[string]int) bool {
				return n["crash/info"] >= 3 && n["rebalance/info"] >= 2 && n["commit/ok"] >= 3
			}
			ops, v := runCheckedUntil(t, 30*time.Second, enough, func(rec *history.Recorder) (runner, error) {
				return workloads.NewQueueWith(cl, cfg, rec, c.Bootstrap())
			})
			counts := map[string]int{}
			crashed := map[int]bool{}
			for _, op := range ops {
				if op.Type != history.Invoke {
					counts[op.F+"/"+op.Type.String()]++
				}
				switch {
				case op.F == history.FCrash:
					crashed[op.Process] = true
				case op.F == history.FCommit && crashed[op.Process]:
					t.Errorf("process %d committed after its crash: %+v", op.Process, op)
				}
			}
			if counts["crash/info"] == 0 || counts["rebalance/info"] == 0 || counts["commit/ok"] == 0 {
				t.Errorf("ops %v: want crashes, rebalances and ok commits", counts)
			}
			if v.Delivery == nil || len(v.Delivery.Groups) != 1 {
				t.Fatalf("delivery %+v", v.Delivery)
			}
			g := v.Delivery.Groups[0]
			t.Logf("processed %d (%d records), redelivered %d, skipped %d, %d commits; ops %v", g.Processed, g.Records, g.Redelivered, g.Skipped, g.Commits, counts)
			if manual && g.Skipped != 0 {
				t.Errorf("manual commit skipped %d records", g.Skipped)
			}
		})
	}
}
