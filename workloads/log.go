package workloads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/history"
)

// base is what Log and Queue share: producers, the value and process
// counters, and the final drain.
type base struct {
	cfg   Config
	rec   *history.Recorder
	seeds []string
	opts  []kgo.Opt
	vals  values
	procs processes

	// driver performs the producers' and assigned consumers' operations
	// (franz-go when nil); see Client.
	driver     Client
	clientOnce sync.Once
	driverErr  error
}

func newBase(cfg Config, rec *history.Recorder, seeds []string, opts []kgo.Opt) (*base, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(seeds) == 0 {
		return nil, errors.New("no seed brokers")
	}
	cfg = cfg.withDefaults()
	b := &base{cfg: cfg, rec: rec, seeds: seeds, opts: opts}
	b.procs.next.Store(int64(cfg.FirstProcess))
	return b, nil
}

func (b *base) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return b.clientFrom(b.seeds, opts...)
}

func (b *base) clientFrom(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)
	all = append(all, b.opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("new kafka client: %w", err)
	}
	return cl, nil
}

// produce runs the producer processes until ctx is done or cfg.Sends values
// were sent, each opened by the workload's client and sending one value
// at a time. It returns the first error of a client that could go no
// further.
func (b *base) produce(ctx context.Context) error {
	cl, err := b.clientOrDefault()
	if err != nil {
		return err
	}
	procs := make([]int, b.cfg.Producers)
	for i := range procs {
		procs[i] = b.procs.take()
	}
	var g errgroup.Group
	for i, proc := range procs {
		g.Go(func() error {
			p, err := cl.Producer(ctx, proc, i)
			if err != nil {
				return fmt.Errorf("%s producer %d: %w", cl.Name(), proc, err)
			}
			defer p.Close()
			for ctx.Err() == nil {
				v := b.vals.take()
				if b.cfg.Sends > 0 && v >= b.cfg.Sends {
					return nil
				}
				if _, err := send(ctx, p, b.rec, proc, &b.cfg, v); err != nil {
					return fmt.Errorf("%s producer %d: %w", cl.Name(), proc, err)
				}
				if b.cfg.SendInterval > 0 {
					pause(ctx, b.cfg.SendInterval)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// clientOrDefault returns the workload's client, franz-go unless one was
// given.
func (b *base) clientOrDefault() (Client, error) {
	b.clientOnce.Do(func() {
		if b.driver == nil {
			b.driver, b.driverErr = newFranzGo(b)
		}
	})
	return b.driver, b.driverErr
}

// pause paces a loop; it returns early when ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Drain reads every partition from its start to the end offsets it finds
// when it begins, as a fresh process, and records every poll (f "drain"); it
// polls at least once, so the history shows that a drain ran even when the
// topic is empty. Call it after the faults healed; ctx bounds it, and if the
// ends are not reached in time it returns ctx's error, having recorded what
// it read.
func (b *base) Drain(ctx context.Context) error {
	cl, err := b.client(kgo.ConsumePartitions(b.allFromStart()), kgo.FetchMaxWait(b.cfg.PollTimeout/2))
	if err != nil {
		return err
	}
	defer cl.Close()
	proc := b.procs.take()
	adm := kadm.NewClient(cl)
	starts, err := listOffsets(ctx, adm, b.cfg.Topic, true)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	ends, err := settledEndOffsets(ctx, adm, b.cfg.Topic)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	assign := history.NewOp(proc, history.Invoke, history.FAssign)
	assign.Partitions = partitionList(b.cfg.Partitions)
	b.rec.Record(assign)
	assign.Type = history.OK
	b.rec.Record(assign)
	next := map[int32]int64{}
	for polled := false; ctx.Err() == nil; polled = true {
		behind := false
		for p, end := range ends {
			if next[p] < end {
				behind = true
			}
		}
		if !behind && polled {
			// Every partition was read from its start to its end: say so,
			// so the checker can tell a value missing from the final log
			// from one merely not read.
			for p, end := range ends {
				op := history.NewOp(proc, history.OK, history.FDrained)
				op.Partition, op.Offset = p, end
				op.Value, op.HasValue = starts[p], true
				b.rec.Record(op)
			}
			return nil
		}
		done, err := pollOnce(ctx, cl, b.rec, proc, b.cfg.PollTimeout, history.FDrain)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		for _, pr := range done.Reads {
			if n := len(pr.Records); n > 0 {
				next[pr.Partition] = max(next[pr.Partition], pr.Records[n-1].Offset+1)
			}
		}
	}
	return fmt.Errorf("drain: %w", ctx.Err())
}

func (b *base) allFromStart() map[string]map[int32]kgo.Offset {
	ps := map[int32]kgo.Offset{}
	for p := int32(0); p < b.cfg.Partitions; p++ {
		ps[p] = kgo.NewOffset().AtStart()
	}
	return map[string]map[int32]kgo.Offset{b.cfg.Topic: ps}
}

func partitionList(n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// settleWait and settleMax bound how long a drain waits for the end
// offsets to stop moving.
const (
	settleWait = 500 * time.Millisecond
	settleMax  = 20 * time.Second
)

// settledEndOffsets lists the topic's end offsets once they have stopped
// moving (two lists settleWait apart agree; at most settleMax). A
// consumer's end is the high watermark: right after a heal, followers
// that were cut off are still catching up and the high watermark climbs
// towards writes a leader acknowledged alone (acks=1). A drain that took
// the first answer as the end would stop below them and the check would
// call them lost. No producer runs during the drain, so the ends settle
// once the followers have caught up or left the ISR.
func settledEndOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	ends, err := endOffsets(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(settleMax)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		pause(ctx, settleWait)
		next, err := endOffsets(ctx, adm, topic)
		if err != nil {
			return nil, err
		}
		if maps.Equal(next, ends) {
			return ends, nil
		}
		ends = next
	}
	return ends, nil
}

// endOffsets lists the topic's end offsets, retrying while the cluster
// recovers.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	return listOffsets(ctx, adm, topic, false)
}

// listOffsets lists the start (or end) offset of every partition of topic,
// retrying until every partition answers or ctx ends.
func listOffsets(ctx context.Context, adm *kadm.Client, topic string, start bool) (map[int32]int64, error) {
	var last error
	for ctx.Err() == nil {
		list := adm.ListEndOffsets
		if start {
			list = adm.ListStartOffsets
		}
		res, err := list(ctx, topic)
		if err == nil {
			out := map[int32]int64{}
			ok := true
			res.Each(func(o kadm.ListedOffset) {
				if o.Err != nil {
					ok, last = false, o.Err
					return
				}
				out[o.Partition] = o.Offset
			})
			if ok && len(out) > 0 {
				return out, nil
			}
		} else {
			last = err
		}
		pause(ctx, 100*time.Millisecond)
	}
	return nil, fmt.Errorf("list offsets of %s: %w (last error: %v)", topic, ctx.Err(), last)
}

// Log is the log workload: producers send unique values, consumers poll
// assigned (or subscribed) partitions, and Drain reads everything at the end.
type Log struct{ *base }

// NewLog returns a Log workload recording to rec. seeds are the bootstrap
// brokers; opts are appended to every client's options (for example
// kgo.Dialer to dial from another network namespace).
func NewLog(cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Log, error) {
	return NewLogWith(nil, cfg, rec, seeds, opts...)
}

// NewLogWith is NewLog whose producers and assigned consumers are those
// of client c (franz-go when nil). Subscribed consumers and the final
// Drain use franz-go with opts whatever c is: the drain is the lab's own
// read of what the brokers hold.
func NewLogWith(c Client, cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Log, error) {
	b, err := newBase(cfg, rec, seeds, opts)
	if err != nil {
		return nil, err
	}
	if c != nil && b.cfg.Subscribe && c.Name() != FranzGo {
		return nil, &CapabilityError{Client: c.Name(), Reason: "subscribe (consumer groups) runs on franz-go only"}
	}
	b.driver = c
	return &Log{b}, nil
}

// Run runs producers and consumers until ctx is done or cfg.Sends values
// were sent; the consumers stop when the producers do. It returns the
// first error of a client that could go no further (an out-of-process
// driver that died), having recorded every operation up to it.
func (w *Log) Run(ctx context.Context) error {
	cl, err := w.clientOrDefault()
	if err != nil {
		return err
	}
	if c, ok := cl.(io.Closer); ok {
		defer c.Close()
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var consumers errgroup.Group
	for i := 0; i < w.cfg.Consumers; i++ {
		var parts []int32
		for p := int32(i); p < w.cfg.Partitions; p += int32(w.cfg.Consumers) {
			parts = append(parts, p)
		}
		if len(parts) == 0 && !w.cfg.Subscribe {
			continue
		}
		proc := w.procs.take()
		consumers.Go(func() error { return w.consume(cctx, cl, proc, parts) })
	}
	err = w.produce(ctx)
	stop()
	if cerr := consumers.Wait(); err == nil {
		err = cerr
	}
	return err
}

func (w *Log) consume(ctx context.Context, cl Client, proc int, parts []int32) error {
	var c Consumer
	var kc *kgo.Client
	var err error
	if w.cfg.Subscribe {
		kc, err = w.subscriber(ctx, proc)
		c = kgoConsumer{kc}
	} else {
		op := history.NewOp(proc, history.Invoke, history.FAssign)
		op.Partitions = parts
		w.rec.Record(op)
		c, err = cl.Consumer(ctx, proc, parts)
		op.Type = history.OK
		if err != nil {
			op.Type, op.Error = history.Fail, err.Error()
		}
		w.rec.Record(op)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	for ctx.Err() == nil {
		done, err := poll(ctx, c, w.rec, proc, w.cfg.PollTimeout, history.FPoll)
		if errors.Is(err, kgo.ErrClientClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s consumer %d: %w", cl.Name(), proc, err)
		}
		if len(done.Reads) > 0 && w.cfg.Subscribe && w.cfg.ManualCommit {
			commit(ctx, kc, w.rec, proc)
		}
	}
	return nil
}

// subscriber joins the consumer group as process proc; rebalances are
// recorded as f "rebalance" with the new assignment.
func (b *base) subscriber(ctx context.Context, proc int) (*kgo.Client, error) {
	return b.subscriberTo(ctx, proc, b.cfg.Group)
}

// subscriberTo is subscriber with another group id; extra options come
// last.
func (b *base) subscriberTo(ctx context.Context, proc int, group string, extra ...kgo.Opt) (*kgo.Client, error) {
	return b.subscriberWith(ctx, proc, group, nil, extra...)
}

// subscriberWith is subscriberTo with a hook that runs when the member's
// partitions are revoked, before the revoke is recorded.
func (b *base) subscriberWith(ctx context.Context, proc int, group string, revoked func(context.Context, *kgo.Client), extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.ConsumeTopics(b.cfg.Topic),
		kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(b.cfg.PollTimeout / 2),
		b.cfg.isolation(ReadUncommitted),
	}, b.rebalances(proc, revoked)...)
	if b.cfg.ManualCommit {
		opts = append(opts, kgo.DisableAutoCommit())
	}
	opts = append(opts, extra...)
	var cl *kgo.Client
	err := b.subscribed(proc, group, func() (err error) {
		cl, err = b.client(opts...)
		return err
	})
	return cl, err
}

// subscribed records process proc's subscribe to group around open, which
// makes its client: ok, or fail with open's error.
func (b *base) subscribed(proc int, group string, open func() error) error {
	op := history.NewOp(proc, history.Invoke, history.FSubscribe)
	op.Group = group
	b.rec.Record(op)
	err := open()
	op.Type = history.OK
	if err != nil {
		op.Type, op.Error = history.Fail, err.Error()
	}
	b.rec.Record(op)
	return err
}

// rebalances are the options that record a group member's rebalances as
// f "rebalance" with its new assignment; revoked, when not nil, runs first
// when partitions are revoked (not when they are lost).
func (b *base) rebalances(proc int, revoked func(context.Context, *kgo.Client)) []kgo.Opt {
	var mu sync.Mutex
	owned := map[int32]bool{}
	note := func(add bool, ps map[string][]int32) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps[b.cfg.Topic] {
			if add {
				owned[p] = true
			} else {
				delete(owned, p)
			}
		}
		parts := []int32{}
		for p := range owned {
			parts = append(parts, p)
		}
		b.recordAssignment(proc, parts)
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { note(true, ps) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			if revoked != nil {
				revoked(ctx, cl)
			}
			note(false, ps)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { note(false, ps) }),
	}
}

// recordAssignment records process proc's partitions (sorted in place) as
// f "rebalance".
func (b *base) recordAssignment(proc int, parts []int32) {
	op := history.NewOp(proc, history.Info, history.FRebalance)
	op.Partitions = parts
	if op.Partitions == nil {
		op.Partitions = []int32{}
	}
	sort.Slice(op.Partitions, func(i, j int) bool { return op.Partitions[i] < op.Partitions[j] })
	b.rec.Record(op)
}

// commit commits what the last poll returned and records the outcome.
func commit(ctx context.Context, cl *kgo.Client, rec *history.Recorder, proc int) {
	rec.Record(history.NewOp(proc, history.Invoke, history.FCommit))
	err := cl.CommitUncommittedOffsets(ctx)
	done := history.NewOp(proc, history.OK, history.FCommit)
	if err != nil {
		done.Type, done.Error = history.Info, errString(err)
	}
	rec.Record(done)
}
