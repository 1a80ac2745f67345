package workloads

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/history"
)

// Queue is the queue workload: a consumer group whose members poll, process
// and commit, and crash and restart. A polled record is processed only
// when its member marks it done, ProcessingTime (with jitter) after it
// began to work on it; a crash can fall between the poll, the processing
// of each record and the commit.
//
// With auto-commit the client commits, every AutoCommitInterval and when
// partitions are revoked, what it has handed to the application, processed
// or not (librdkafka's default, kgo's GreedyAutoCommit): a crash after a
// commit and before the work is done skips records, one before the commit
// redelivers them. With manual.commit each member commits, after
// processing a poll's records, the offsets after the records it processed:
// nothing is skipped, and a crash between processing and its commit still
// redelivers (at-least-once). The history records every poll, every
// processed record (f "processed") and every commit with its offsets.
// The members are kgo clients, or with NewQueueWith the group consumers
// of a GroupClient driver (sarama's), recorded the same way.
type Queue struct {
	*base
	groupOpts []kgo.Opt // the group protocol of franz-go's members
}

// UseGroupProtocol sets the group protocol of the franz-go members from
// the client's Kafka-named settings (GroupProtocolOpts): group.protocol
// classic (the default) or consumer (KIP-848), and with consumer
// group.remote.assignor uniform (the default) or range. Other keys are
// left to the caller.
func (w *Queue) UseGroupProtocol(clientConfig map[string]string) error {
	opts, err := GroupProtocolOpts(clientConfig)
	if err != nil {
		return err
	}
	w.groupOpts = opts
	return nil
}

// NewQueue returns a Queue workload; see NewLog for seeds and opts.
func NewQueue(cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Queue, error) {
	cfg.Subscribe = true
	b, err := newBase(cfg, rec, seeds, opts)
	if err != nil {
		return nil, err
	}
	return &Queue{base: b}, nil
}

// NewQueueWith is NewQueue whose producers and group consumers are those of
// client c (franz-go when nil), which must then be a GroupClient. The
// final Drain uses franz-go whatever c is.
func NewQueueWith(c Client, cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Queue, error) {
	w, err := NewQueue(cfg, rec, seeds, opts...)
	if err != nil {
		return nil, err
	}
	if c != nil && c.Name() != FranzGo {
		if _, ok := c.(GroupClient); !ok {
			return nil, &CapabilityError{Client: c.Name(), Reason: "the queue workload needs consumer groups, which this client's driver does not run"}
		}
		w.driver = c
	}
	return w, nil
}

// Run runs producers and group consumers until ctx is done or cfg.Sends
// values were sent. A consumer crashes CrashEvery (on average, seeded)
// after its first poll that returned records, so that crashes fall into
// the work and not into joining the group: it is closed without
// committing and restarts as a new process.
func (w *Queue) Run(ctx context.Context) error {
	if c, ok := w.driver.(io.Closer); ok {
		defer c.Close()
	}
	// The producers' client is made before the members start: they read
	// w.driver, which making it writes.
	if _, err := w.clientOrDefault(); err != nil {
		return err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var consumers errgroup.Group
	for i := 0; i < w.cfg.Consumers; i++ {
		rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(i)))
		consumers.Go(func() error { return w.member(cctx, rng) })
	}
	err := w.produce(ctx)
	stop()
	if cerr := consumers.Wait(); err == nil {
		err = cerr
	}
	return err
}

// member is one consumer slot: it runs a process until it crashes, then
// starts the next one.
func (w *Queue) member(ctx context.Context, rng *rand.Rand) error {
	for ctx.Err() == nil {
		var life time.Duration
		if w.cfg.CrashEvery > 0 {
			life = time.Duration(rng.ExpFloat64() * float64(w.cfg.CrashEvery))
		}
		if err := w.process(ctx, w.procs.take(), rng, life); err != nil {
			return err
		}
	}
	return nil
}

// process is one consumer process: it polls, processes and commits until
// ctx is done or, life after its first records (0: never), it crashes.
func (w *Queue) process(ctx context.Context, proc int, rng *rand.Rand, life time.Duration) error {
	m := &queueMember{w: w, proc: proc}
	var c queueClient
	var err error
	if gc, ok := w.driver.(GroupClient); ok {
		c, err = w.openGroupConsumer(ctx, gc, m)
	} else {
		c, err = w.openKgo(ctx, m)
	}
	if err != nil {
		return err
	}
	var crashAt <-chan time.Time // nil until the first records: never fires
	crashed := false
	crash := func() bool {
		select {
		case <-crashAt:
			crashed = true
		default:
		}
		return crashed
	}
	for ctx.Err() == nil && !crash() {
		done, err := c.poll(ctx)
		if err != nil {
			break
		}
		if crashAt == nil && life > 0 && len(done.Reads) > 0 {
			timer := time.NewTimer(life)
			defer timer.Stop()
			crashAt = timer.C
		}
		next := map[int32]int64{}
	work:
		for _, pr := range done.Reads {
			for _, r := range pr.Records {
				if crash() {
					break work
				}
				if d := w.cfg.processingTime(rng); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-ctx.Done():
					case <-crashAt:
						crashed = true
					case <-t.C:
					}
					t.Stop()
					if crashed || ctx.Err() != nil {
						break work
					}
				}
				op := history.NewOp(proc, history.OK, history.FProcessed)
				op.Group, op.Partition, op.Offset, op.Value, op.HasValue = w.cfg.Group, pr.Partition, r.Offset, r.Value, true
				w.rec.Record(op)
				next[pr.Partition] = r.Offset + 1
			}
		}
		if w.cfg.ManualCommit && len(next) > 0 && !crash() {
			c.commit(ctx, next)
		}
	}
	c.end(crashed)
	m.close()
	return nil
}

// queueClient is one consumer process's client as process drives it:
// kgo's (kgoQueue) or a driver's group consumer (groupQueue).
type queueClient interface {
	// poll polls once and records it.
	poll(ctx context.Context) (history.Op, error)
	// commit commits next (partition -> offset after the last record
	// processed) and records the invocation and its outcome.
	commit(ctx context.Context, next map[int32]int64)
	// end records a crash when there was one and closes the client: as a
	// crash (no final commit) or as a member that leaves.
	end(crashed bool)
}

// openKgo joins the group with a kgo client of the process's own.
func (w *Queue) openKgo(ctx context.Context, m *queueMember) (queueClient, error) {
	var opts []kgo.Opt
	var revoked func(context.Context, *kgo.Client)
	if !w.cfg.ManualCommit {
		opts = []kgo.Opt{kgo.GreedyAutoCommit(), kgo.AutoCommitInterval(w.cfg.autoCommitInterval()),
			kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				m.committed(req, resp, err)
			})}
		// A member that leaves the group, not one that crashes, commits
		// what it polled first, as the clients do on a revoke.
		revoked = func(ctx context.Context, cl *kgo.Client) {
			if !m.crashing.Load() {
				if offs := cl.UncommittedOffsets(); len(offs) > 0 {
					m.commit(ctx, cl, offs)
				}
			}
		}
	}
	cl, err := w.subscriberWith(ctx, m.proc, w.cfg.Group, revoked, append(opts, w.groupOpts...)...)
	if err != nil {
		return nil, err
	}
	return &kgoQueue{m: m, cl: cl}, nil
}

// kgoQueue is franz-go's group member.
type kgoQueue struct {
	m  *queueMember
	cl *kgo.Client
}

func (q *kgoQueue) poll(ctx context.Context) (history.Op, error) {
	w := q.m.w
	return pollOnce(ctx, q.cl, w.rec, q.m.proc, w.cfg.PollTimeout, history.FPoll)
}

func (q *kgoQueue) commit(ctx context.Context, next map[int32]int64) {
	offs := map[int32]kgo.EpochOffset{}
	for p, o := range next {
		offs[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	q.m.commit(ctx, q.cl, map[string]map[int32]kgo.EpochOffset{q.m.w.cfg.Topic: offs})
}

func (q *kgoQueue) end(crashed bool) {
	if crashed {
		q.m.crashing.Store(true)
		q.m.w.rec.Record(history.NewOp(q.m.proc, history.Info, history.FCrash))
	}
	q.cl.Close()
}

// openGroupConsumer joins the group through the workload's driver,
// recording the subscribe, the member's assignments and its client's own
// commits as kgo's path does.
func (w *Queue) openGroupConsumer(ctx context.Context, gc GroupClient, m *queueMember) (queueClient, error) {
	var mu sync.Mutex // Assigned and Committed are never concurrent with themselves, maybe with each other
	gm := GroupMember{
		Group:              w.cfg.Group,
		AutoCommit:         !w.cfg.ManualCommit,
		AutoCommitInterval: w.cfg.autoCommitInterval(),
		Assigned: func(parts []int32) {
			mu.Lock()
			defer mu.Unlock()
			w.recordAssignment(m.proc, parts)
		},
		Committed: func(c Committed) {
			mu.Lock()
			defer mu.Unlock()
			m.record(c)
		},
	}
	var c GroupConsumer
	err := w.subscribed(m.proc, w.cfg.Group, func() (err error) {
		c, err = gc.GroupConsumer(ctx, m.proc, gm)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s consumer %d: %w", gc.Name(), m.proc, err)
	}
	return &groupQueue{m: m, c: c}, nil
}

// groupQueue is a driver's group member.
type groupQueue struct {
	m *queueMember
	c GroupConsumer
}

func (q *groupQueue) poll(ctx context.Context) (history.Op, error) {
	w := q.m.w
	return poll(ctx, q.c, w.rec, q.m.proc, w.cfg.PollTimeout, history.FPoll)
}

func (q *groupQueue) commit(ctx context.Context, next map[int32]int64) {
	w := q.m.w
	inv := history.NewOp(q.m.proc, history.Invoke, history.FCommit)
	inv.Group = w.cfg.Group
	w.rec.Record(inv)
	w.rec.Record(commitOp(q.m.proc, w.cfg.Group, q.c.Commit(ctx, next)))
}

func (q *groupQueue) end(crashed bool) {
	if crashed {
		q.m.crashing.Store(true)
		q.m.w.rec.Record(history.NewOp(q.m.proc, history.Info, history.FCrash))
		q.c.Crash()
		return
	}
	q.c.Close()
}

// queueMember records one process's commits, its own and the client's.
type queueMember struct {
	w        *Queue
	proc     int
	crashing atomic.Bool
	// mu orders auto-commit callbacks with close: the client may answer
	// a commit after the process ended, and the history has moved on.
	mu     sync.Mutex
	closed bool
}

func (m *queueMember) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// commit commits offs synchronously and records the invocation and its
// outcome.
func (m *queueMember) commit(ctx context.Context, cl *kgo.Client, offs map[string]map[int32]kgo.EpochOffset) {
	inv := history.NewOp(m.proc, history.Invoke, history.FCommit)
	inv.Group = m.w.cfg.Group
	m.w.rec.Record(inv)
	cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		m.w.rec.Record(commitOutcome(m.proc, m.w.cfg.Group, m.w.cfg.Topic, req, resp, err))
	})
}

// committed records an auto-commit's outcome (a completion alone: the
// client decided when to commit).
func (m *queueMember) committed(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	m.record(CommitOutcome(m.w.cfg.Topic, req, resp, err))
}

// record records a commit the client made on its own, unless the process
// has ended.
func (m *queueMember) record(c Committed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.w.rec.Record(commitOp(m.proc, m.w.cfg.Group, c))
	}
}

// commitOutcome is a commit's completion (CommitOutcome).
func commitOutcome(proc int, group, topic string, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) history.Op {
	return commitOp(proc, group, CommitOutcome(topic, req, resp, err))
}

// commitOp is the completion of a commit of group by proc.
func commitOp(proc int, group string, c Committed) history.Op {
	op := history.NewOp(proc, c.Type, history.FCommit)
	op.Group = group
	op.Committed = c.Offsets
	if op.Committed == nil {
		op.Committed = []history.PartitionOffset{}
	}
	op.Error = c.Error
	return op
}

// CommitOutcome is the outcome of an OffsetCommit request for topic's
// partitions, from the request, the coordinator's response and the
// client's error: ok with the offsets the coordinator accepted; info,
// with every offset asked for, when the request's fate is unknown; fail
// when every partition was refused, or when no request was made (req
// nil).
func CommitOutcome(topic string, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) Committed {
	op := Committed{Type: history.OK, Offsets: []history.PartitionOffset{}}
	if err != nil || resp == nil {
		op.Type = history.Info
		if err != nil {
			op.Error = errString(err)
		}
		if req == nil {
			op.Type = history.Fail // no request was made
		}
		if req != nil {
			for _, t := range req.Topics {
				if t.Topic != topic {
					continue
				}
				for _, p := range t.Partitions {
					op.Offsets = append(op.Offsets, history.PartitionOffset{Partition: p.Partition, Offset: p.Offset})
				}
			}
		}
		sortCommitted(op.Offsets)
		return op
	}
	asked := map[int32]int64{}
	for _, t := range req.Topics {
		if t.Topic == topic {
			for _, p := range t.Partitions {
				asked[p.Partition] = p.Offset
			}
		}
	}
	var errs []string
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				errs = append(errs, errString(perr))
				continue
			}
			if o, ok := asked[p.Partition]; ok {
				op.Offsets = append(op.Offsets, history.PartitionOffset{Partition: p.Partition, Offset: o})
			}
		}
	}
	sortCommitted(op.Offsets)
	if len(errs) > 0 {
		op.Error = strings.Join(errs, ", ")
		if len(op.Offsets) == 0 {
			op.Type = history.Fail
		}
	}
	return op
}

func sortCommitted(cs []history.PartitionOffset) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Partition < cs[j].Partition })
}

// processingTime draws one record's processing time.
func (c Config) processingTime(rng *rand.Rand) time.Duration {
	if c.ProcessingTime <= 0 {
		return 0
	}
	j := c.ProcessingJitter
	if j == 0 {
		j = c.ProcessingTime / 2
	}
	return c.ProcessingTime - j + time.Duration(rng.Int64N(int64(2*j)+1))
}

func (c Config) autoCommitInterval() time.Duration {
	if c.AutoCommitInterval <= 0 {
		return 5 * time.Second
	}
	return c.AutoCommitInterval
}
