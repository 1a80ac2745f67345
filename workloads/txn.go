package workloads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/history"
)

// TxnConfig holds the txn workload's keys (Kafka's names where Kafka has
// one). Zero values take the defaults listed.
type TxnConfig struct {
	// TransactionalIDPrefix prefixes every producer's transactional.id:
	// "<prefix>-<process>" (default "isrlab-txn-<topic>"). Each process has
	// its own id; a producer whose transaction ended unknown, or that was
	// fenced, goes on as a new process with a new id, as Jepsen's workload
	// does.
	TransactionalIDPrefix string `yaml:"transactional.id.prefix" json:"transactional.id.prefix"`
	// TransactionTimeout is transaction.timeout.ms (default 10 s): how long
	// the coordinator waits for an open transaction before aborting it.
	TransactionTimeout time.Duration `yaml:"transaction.timeout" json:"transaction.timeout"`
	// TxnAbortRatio is the fraction of transactions the workload aborts on
	// purpose (default 0.1; negative: none).
	TxnAbortRatio float64 `yaml:"txn.abort.ratio" json:"txn.abort.ratio"`
	// TxnPollRatio is the fraction of transactions that first poll the
	// producer's own read_committed consumer (read-process-write; default
	// 0.5; negative: none).
	TxnPollRatio float64 `yaml:"txn.poll.ratio" json:"txn.poll.ratio"`
	// TxnMaxSends is the most values one transaction sends, each to a
	// random partition (1 to TxnMaxSends; default 4).
	TxnMaxSends int `yaml:"txn.max.sends" json:"txn.max.sends"`
	// TxnGroup, when set, makes the producers members of this consumer
	// group (kgo.GroupTransactSession): a read-process-write transaction
	// reads what the group assigned it and commits its consumed offsets in
	// the transaction (recorded as a send-offsets micro-op). Unset, each
	// producer reads every partition from its start.
	TxnGroup string `yaml:"txn.group.id" json:"txn.group.id"`
}

// TxnKeys lists the txn workload's keys that c sets, for a scenario that
// sets them on another workload.
func (c Config) TxnKeys() []string {
	var out []string
	t := c.TxnConfig
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"transactional.id.prefix", t.TransactionalIDPrefix != ""},
		{"transaction.timeout", t.TransactionTimeout != 0},
		{"txn.abort.ratio", t.TxnAbortRatio != 0},
		{"txn.poll.ratio", t.TxnPollRatio != 0},
		{"txn.max.sends", t.TxnMaxSends != 0},
		{"txn.group.id", t.TxnGroup != ""},
	} {
		if k.set {
			out = append(out, k.name)
		}
	}
	return out
}

func (c Config) txnDefaults() Config {
	c = c.withDefaults()
	t := &c.TxnConfig
	if t.TransactionalIDPrefix == "" {
		t.TransactionalIDPrefix = "isrlab-txn-" + c.Topic
	}
	if t.TransactionTimeout <= 0 {
		t.TransactionTimeout = 10 * time.Second
	}
	if t.TxnAbortRatio == 0 {
		t.TxnAbortRatio = 0.1
	}
	if t.TxnPollRatio == 0 {
		t.TxnPollRatio = 0.5
	}
	if t.TxnMaxSends <= 0 {
		t.TxnMaxSends = 4
	}
	return c
}

// ValidateTxn reports a txn workload configuration that kgo or the
// workload would refuse, or that sets another workload's keys.
func (c Config) ValidateTxn() error {
	if err := c.ValidateFor("log"); err != nil {
		return errors.New(strings.Replace(err.Error(), "the log workload", "the txn workload", 1))
	}
	if c.Acks != "" && c.Acks != "all" && c.Acks != "-1" {
		return fmt.Errorf("acks %q: transactions need acks=all", c.Acks)
	}
	t := c.TxnConfig
	switch {
	case t.TxnAbortRatio > 1:
		return fmt.Errorf("txn.abort.ratio %v: a fraction, 0 to 1 (negative: none)", t.TxnAbortRatio)
	case t.TxnPollRatio > 1:
		return fmt.Errorf("txn.poll.ratio %v: a fraction, 0 to 1 (negative: none)", t.TxnPollRatio)
	case t.TxnMaxSends < 0 || t.TxnMaxSends > 64:
		return fmt.Errorf("txn.max.sends %d: 1 to 64", t.TxnMaxSends)
	case t.TransactionTimeout < 0:
		return fmt.Errorf("transaction.timeout %v is negative", t.TransactionTimeout)
	case c.Subscribe || c.ManualCommit || c.CrashEvery != 0 || c.MaxInFlight != 0:
		return errors.New("subscribe, manual.commit, crash.every and max.in.flight.requests.per.connection are not keys of the txn workload")
	}
	return nil
}

// Txn is the transactional workload: transactional producers (each
// transaction sends 1 to txn.max.sends values to random partitions, some
// first poll, and it commits or, at txn.abort.ratio, aborts), and
// read_committed consumers that poll every partition from its start. Every
// operation is a history op f "txn" (see package history); Drain reads the
// topic to its end at the end. The producers and consumers are franz-go's,
// or with NewTxnWith those of a TxnClient driver, recorded the same way.
type Txn struct {
	*base
	groupOpts []kgo.Opt // the group protocol of the txn.group.id sessions
}

// NewTxn returns a Txn workload; see NewLog for seeds and opts.
func NewTxn(cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Txn, error) {
	return NewTxnWith(nil, cfg, rec, seeds, opts...)
}

// NewTxnWith is NewTxn whose transactional producers and read_committed
// consumers are those of client c (franz-go when nil), which must then be
// a TxnClient. The drain's markers and the final Drain use franz-go
// whatever c is: they are the lab's own read of what the brokers hold.
// Reading in a consumer group (txn.group.id) is franz-go's
// GroupTransactSession and runs on franz-go only.
func NewTxnWith(c Client, cfg Config, rec *history.Recorder, seeds []string, opts ...kgo.Opt) (*Txn, error) {
	if err := cfg.ValidateTxn(); err != nil {
		return nil, err
	}
	b, err := newBase(cfg, rec, seeds, opts)
	if err != nil {
		return nil, err
	}
	b.cfg = cfg.txnDefaults()
	if c != nil && c.Name() != FranzGo {
		if _, ok := c.(TxnClient); !ok {
			return nil, &CapabilityError{Client: c.Name(), Reason: "the txn workload needs transactions, which this client's driver does not run"}
		}
		if b.cfg.TxnGroup != "" {
			return nil, &CapabilityError{Client: c.Name(), Reason: "txn.group.id (reading in a consumer group, its offsets committed in the transaction) runs on franz-go only"}
		}
		b.driver = c
	}
	return &Txn{base: b}, nil
}

// UseGroupProtocol sets the group protocol of the franz-go group sessions
// (txn.group.id) from the client's Kafka-named settings, as the queue
// workload's (GroupProtocolOpts): group.protocol classic (the default) or
// consumer (KIP-848), which needs txn.group.id, and with consumer
// group.remote.assignor uniform (the default) or range. Other keys are
// left to the caller.
func (w *Txn) UseGroupProtocol(clientConfig map[string]string) error {
	opts, err := w.cfg.TxnGroupProtocolOpts(clientConfig)
	if err != nil {
		return err
	}
	w.groupOpts = opts
	return nil
}

func (w *Txn) key(p int32) string { return history.TxnKey(w.cfg.Topic, p) }

// Run runs the producers and consumers until ctx is done or cfg.Sends
// values were sent; the consumers stop when the producers do. A
// transaction under way when ctx ends is finished first.
func (w *Txn) Run(ctx context.Context) error {
	if c, ok := w.driver.(io.Closer); ok {
		defer c.Close()
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var consumers errgroup.Group
	for range w.cfg.Consumers {
		proc := w.procs.take()
		consumers.Go(func() error { return w.consume(cctx, proc) })
	}
	var producers errgroup.Group
	for i := range w.cfg.Producers {
		rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(i)+1))
		producers.Go(func() error { return w.producer(ctx, rng) })
	}
	err := producers.Wait()
	stop()
	if cerr := consumers.Wait(); err == nil {
		err = cerr
	}
	return err
}

// readCommitted are a read_committed consumer's options, reading every
// partition from its start.
func (w *Txn) readCommitted() []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumePartitions(w.allFromStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(w.cfg.PollTimeout / 2),
	}
}

// readCommittedConsumer opens consumer process proc, reading every
// partition read_committed from its start: a kgo client, or the driver's
// consumer.
func (w *Txn) readCommittedConsumer(ctx context.Context, proc int) (Consumer, error) {
	if tc, ok := w.driver.(TxnClient); ok {
		parts := make([]int32, w.cfg.Partitions)
		for p := range parts {
			parts[p] = int32(p)
		}
		return tc.ReadCommitted(ctx, proc, parts)
	}
	// isolation.level read_uncommitted reads what read_committed hides:
	// the records of open and aborted transactions (the producers' own
	// polls and the drain stay read_committed).
	cl, err := w.client(append(w.readCommitted(), w.cfg.isolation(ReadCommitted))...)
	if err != nil {
		return nil, err
	}
	return kgoConsumer{cl}, nil
}

func (w *Txn) consume(ctx context.Context, proc int) error {
	c, err := w.readCommittedConsumer(ctx, proc)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer c.Close()
	for ctx.Err() == nil {
		if _, err := w.poll(ctx, c, proc, history.FTxn); err != nil {
			return nil
		}
	}
	return nil
}

// poll records one poll of c as a txn op with a single poll micro-op. It
// returns the client's error when it can do nothing more (a closed
// client); the poll is then recorded with what it read and no error.
func (w *Txn) poll(ctx context.Context, c Consumer, proc int, f string) (history.Op, error) {
	inv := history.NewOp(proc, history.Invoke, f)
	inv.Txn = []history.MicroOp{{F: history.MPoll, Offset: -1}}
	w.rec.Record(inv)
	p, err := c.Poll(ctx, w.cfg.PollTimeout)
	done := history.NewOp(proc, history.OK, f)
	done.Txn = []history.MicroOp{w.pollOp(p.Reads)}
	if err == nil {
		done.Error = p.Error
		if p.Type == history.Info {
			done.Type = history.Info
		}
	}
	return w.rec.Record(done), err
}

// pollOp is the completed poll micro-op of a poll that read reads.
func (w *Txn) pollOp(reads []history.PartitionRecords) history.MicroOp {
	m := history.MicroOp{F: history.MPoll, Offset: -1, Reads: make([]history.KeyRecords, len(reads))}
	for i, pr := range reads {
		m.Reads[i] = history.KeyRecords{Key: w.key(pr.Partition), Records: pr.Records}
	}
	return m
}

// txnID is the transactional.id of producing process proc.
func (w *Txn) txnID(proc int) string {
	return w.cfg.TransactionalIDPrefix + "-" + strconv.Itoa(proc)
}

// txnOpts are a transactional producer's options for process proc.
func (w *Txn) txnOpts(proc int) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.TransactionalID(w.txnID(proc)),
		kgo.TransactionTimeout(w.cfg.TransactionTimeout),
		kgo.DefaultProduceTopic(w.cfg.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(w.cfg.RequestTimeout),
		kgo.RecordDeliveryTimeout(w.cfg.DeliveryTimeout),
		kgo.ProducerLinger(w.cfg.Linger),
	}
	if w.cfg.RequestTimeoutOverhead > 0 {
		opts = append(opts, kgo.RequestTimeoutOverhead(w.cfg.RequestTimeoutOverhead))
	}
	return opts
}

// txnClient is a transactional producer for process proc that also
// consumes read_committed, for read-process-write transactions.
func (w *Txn) txnClient(proc int) (*kgo.Client, error) {
	opts := w.txnOpts(proc)
	if w.cfg.TxnPollRatio > 0 {
		opts = append(opts, w.readCommitted()...)
	}
	return w.client(opts...)
}

// groupTransactor is a Transactor that reads in a consumer group and
// commits the offsets it consumed in the transaction (franz-go's
// transact session).
type groupTransactor interface {
	// offsets is the send-offsets micro-op of what a commit commits, if
	// anything.
	offsets() *history.MicroOp
	// ended records what follows the transaction's completion.
	ended()
}

// plainTransactor is a franz-go transactional client, which also reads
// read_committed for read-process-write transactions.
type plainTransactor struct{ cl *kgo.Client }

func (p plainTransactor) Begin() error { return p.cl.BeginTransaction() }
func (p plainTransactor) Poll(ctx context.Context, timeout time.Duration) (Polled, error) {
	return pollKgo(ctx, p.cl, timeout)
}
func (p plainTransactor) Produce(ctx context.Context, recs []Record) ([]int64, error) {
	return produceKgo(ctx, p.cl, recs)
}
func (p plainTransactor) End(ctx context.Context, commit bool) TxnEnd {
	if !commit {
		p.cl.AbortBufferedRecords(ctx)
	}
	err := p.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	return kgoTxnEnd(commit, commit && err == nil, err)
}
func (p plainTransactor) Close() error {
	p.cl.Close()
	return nil
}

// kgoTxnEnd is how a franz-go transaction ended: any error of
// EndTransaction (or of a transact session's End) leaves the outcome
// unknown; a session that aborted instead of committing (its group
// rebalanced) confirmed the abort.
func kgoTxnEnd(commit, committed bool, err error) TxnEnd {
	switch {
	case err != nil:
		return TxnEnd{Type: history.Info, Error: err.Error()}
	case committed:
		return TxnEnd{Type: history.OK}
	case commit:
		return TxnEnd{Type: history.Fail, Error: "aborted by the transact session: the group rebalanced"}
	}
	return TxnEnd{Type: history.Fail}
}

// syncProducer is a kgo client or transact session.
type syncProducer interface {
	ProduceSync(context.Context, ...*kgo.Record) kgo.ProduceResults
}

// produceKgo sends recs through cl and waits for them: each record's
// offset when acknowledged (-1 otherwise) and the first error in the
// order the records completed.
func produceKgo(ctx context.Context, cl syncProducer, recs []Record) ([]int64, error) {
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Partition: r.Partition, Value: encodeValue(r.Value)}
		if r.Key != "" {
			krs[i].Key = []byte(r.Key)
		}
	}
	res := cl.ProduceSync(ctx, krs...)
	acked := map[*kgo.Record]bool{}
	for _, r := range res {
		if r.Err == nil && r.Record != nil {
			acked[r.Record] = true
		}
	}
	offs := make([]int64, len(krs))
	for i, kr := range krs {
		offs[i] = -1
		if acked[kr] {
			offs[i] = kr.Offset
		}
	}
	return offs, res.FirstErr()
}

// sessionTransactor reads in consumer group txn.group.id and commits the
// offsets it consumed in the transaction (kgo.GroupTransactSession).
type sessionTransactor struct {
	w    *Txn
	s    *kgo.GroupTransactSession
	proc int
	next map[int32]int64 // the offsets a commit commits: after the last read
	// rewound is set when the last end aborted.
	rewound bool
}

func (w *Txn) session(proc int) (*sessionTransactor, error) {
	opts := append(w.txnOpts(proc), kgo.SeedBrokers(w.seeds...),
		kgo.ConsumerGroup(w.cfg.TxnGroup), kgo.ConsumeTopics(w.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(w.cfg.PollTimeout/2))
	opts = append(opts, w.rebalances(proc, nil)...)
	opts = append(opts, w.groupOpts...)
	s, err := kgo.NewGroupTransactSession(append(opts, w.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("new transact session: %w", err)
	}
	return &sessionTransactor{w: w, s: s, proc: proc, next: map[int32]int64{}}, nil
}

func (s *sessionTransactor) Begin() error {
	clear(s.next)
	return s.s.Begin()
}
func (s *sessionTransactor) Poll(ctx context.Context, timeout time.Duration) (Polled, error) {
	p, err := pollKgo(ctx, s.s, timeout)
	for _, pr := range p.Reads {
		if n := len(pr.Records); n > 0 {
			s.next[pr.Partition] = max(s.next[pr.Partition], pr.Records[n-1].Offset+1)
		}
	}
	return p, err
}
func (s *sessionTransactor) Produce(ctx context.Context, recs []Record) ([]int64, error) {
	return produceKgo(ctx, s.s, recs)
}
func (s *sessionTransactor) End(ctx context.Context, commit bool) TxnEnd {
	committed, err := s.s.End(ctx, kgo.TransactionEndTry(commit))
	s.rewound = !committed && err == nil
	return kgoTxnEnd(commit, committed, err)
}

// ended records, after the transaction's completion, that an abort took
// the session back to the group's committed offsets: what it read in the
// transaction comes again.
func (s *sessionTransactor) ended() {
	if s.rewound {
		s.w.rec.Record(history.NewOp(s.proc, history.Info, history.FSeek))
	}
}
func (s *sessionTransactor) offsets() *history.MicroOp {
	if len(s.next) == 0 {
		return nil
	}
	m := &history.MicroOp{F: history.MSendOffsets, Offset: -1, Group: s.w.cfg.TxnGroup}
	for p := range s.w.cfg.Partitions {
		if off, ok := s.next[p]; ok {
			m.Offsets = append(m.Offsets, history.KeyOffset{Key: s.w.key(p), Offset: off})
		}
	}
	return m
}
func (s *sessionTransactor) Close() error {
	s.s.Close()
	return nil
}

// transactor opens producing process proc: the driver's transactor, or
// franz-go's (a transact session with txn.group.id).
func (w *Txn) transactor(ctx context.Context, proc int) (Transactor, error) {
	if tc, ok := w.driver.(TxnClient); ok {
		return tc.Transactor(ctx, proc, TxnProducer{ID: w.txnID(proc), Timeout: w.cfg.TransactionTimeout, Polls: w.cfg.TxnPollRatio > 0})
	}
	if w.cfg.TxnGroup != "" {
		return w.session(proc)
	}
	cl, err := w.txnClient(proc)
	if err != nil {
		return nil, err
	}
	return plainTransactor{cl: cl}, nil
}

// producer runs transactions, one process after another: a process ends
// when a transaction's outcome is unknown or its producer cannot go on.
func (w *Txn) producer(ctx context.Context, rng *rand.Rand) error {
	for ctx.Err() == nil && !w.sentAll() {
		proc := w.procs.take()
		tr, err := w.transactor(ctx, proc)
		if err != nil {
			if ctx.Err() != nil {
				// A driver opening the process was cut short by the
				// run's end.
				return nil
			}
			return err
		}
		ran := 0
		for ctx.Err() == nil && !w.sentAll() {
			ran++
			if !w.txn(ctx, tr, proc, rng) {
				break
			}
			if w.cfg.SendInterval > 0 {
				pause(ctx, w.cfg.SendInterval)
			}
		}
		tr.Close()
		if ran <= 1 {
			// The first transaction of the process ended it: a cluster
			// that refuses transactions should not get a process a
			// millisecond.
			pause(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

func (w *Txn) sentAll() bool { return w.cfg.Sends > 0 && w.vals.next.Load() >= w.cfg.Sends }

// txn runs and records one transaction; it reports whether the process
// can go on with another.
func (w *Txn) txn(ctx context.Context, tr Transactor, proc int, rng *rand.Rand) bool {
	n := 1 + rng.IntN(w.cfg.TxnMaxSends)
	polls := rng.Float64() < w.cfg.TxnPollRatio
	abort := rng.Float64() < w.cfg.TxnAbortRatio
	var recs []Record
	inv := history.NewOp(proc, history.Invoke, history.FTxn)
	if polls {
		inv.Txn = append(inv.Txn, history.MicroOp{F: history.MPoll, Offset: -1})
	}
	for range n {
		v := w.vals.take()
		if w.cfg.Sends > 0 && v >= w.cfg.Sends {
			break
		}
		p := rng.Int32N(w.cfg.Partitions)
		recs = append(recs, Record{Partition: p, Value: v})
		inv.Txn = append(inv.Txn, history.Send(w.key(p), v))
	}
	if len(recs) == 0 {
		return false
	}
	// The run's end does not cut a transaction short: its outcome would
	// be unknown for no reason.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.TransactionTimeout+w.cfg.DeliveryTimeout)
	defer cancel()
	w.rec.Record(inv)
	done := inv
	done.Txn = nil
	goOn := true
	finish := func(t history.Type, err error) {
		done.Type = t
		if err != nil {
			done.Error = errString(err)
		}
		if t == history.Info {
			goOn = false
		}
	}
	if err := tr.Begin(); err != nil {
		// Nothing was sent: the transaction never began.
		done.Txn = sendsDone(inv.Txn, nil)
		finish(history.Fail, fmt.Errorf("begin: %w", err))
		w.rec.Record(done)
		return false
	}
	if polls {
		p, _ := tr.Poll(tctx, w.cfg.PollTimeout)
		done.Txn = append(done.Txn, w.pollOp(p.Reads))
	}
	offs, perr := tr.Produce(tctx, recs)
	done.Txn = append(done.Txn, sendsDone(inv.Txn, offs)...)
	end := func(commit bool) TxnEnd {
		e := tr.End(tctx, commit)
		if e.Done {
			goOn = false
		}
		return e
	}
	switch {
	case perr != nil:
		// A failed send dooms the transaction: abort it.
		if e := end(false); e.Type == history.Info {
			finish(history.Info, fmt.Errorf("send: %v; abort: %s", perr, e.Error))
		} else {
			finish(history.Fail, fmt.Errorf("send (aborted): %w", perr))
		}
	case abort:
		if e := end(false); e.Type == history.Info {
			finish(history.Info, fmt.Errorf("abort: %s", e.Error))
		} else {
			finish(history.Fail, errors.New("aborted by the workload"))
		}
	default:
		g, grouped := tr.(groupTransactor)
		if grouped {
			if m := g.offsets(); m != nil {
				done.Txn = append(done.Txn, *m)
			}
		}
		done.CommitAt = w.rec.Now()
		switch e := end(true); e.Type {
		case history.Info:
			finish(history.Info, fmt.Errorf("commit: %s", e.Error))
		case history.OK:
			finish(history.OK, nil)
		default:
			// Aborted instead: a transact session whose group
			// rebalanced, a commit the client refused.
			if e.Error == "" {
				e.Error = "aborted instead of committed"
			}
			finish(history.Fail, errors.New(e.Error))
		}
	}
	w.rec.Record(done)
	if g, ok := tr.(groupTransactor); ok {
		g.ended()
	}
	return goOn
}

// sendsDone returns the send micro-ops of inv in completion form, with
// the offsets their records were acknowledged at (offs, in the order of
// the sends; -1 or none: not acknowledged).
func sendsDone(inv []history.MicroOp, offs []int64) []history.MicroOp {
	var out []history.MicroOp
	i := 0
	for _, m := range inv {
		if m.F != history.MSend {
			continue
		}
		m.Done = true
		m.Offset = -1
		if i < len(offs) && offs[i] >= 0 {
			m.Offset = offs[i]
		}
		i++
		out = append(out, m)
	}
	return out
}

// Drain makes sure the topic's transactional log is complete, then reads
// it: a fresh transactional process commits one marker value to every
// partition (which read_committed consumers see only after every earlier
// transaction there was decided), and a fresh read_committed consumer
// polls (f "txn-drain") until it has read every marker. A partition read to
// its marker is recorded as f "drained" with its key, the offset after the
// marker and the partition's start offset. ctx bounds it; if the markers
// are not all read in time it returns ctx's error, having recorded what it
// read.
func (w *Txn) Drain(ctx context.Context) error {
	var markers map[int32]int64
	var last error
	for ctx.Err() == nil && markers == nil {
		if markers, last = w.markers(ctx); markers == nil {
			pause(ctx, 500*time.Millisecond)
		}
	}
	if markers == nil {
		return fmt.Errorf("drain: commit the markers: %w (last error: %v)", ctx.Err(), last)
	}
	rc, err := w.client(w.readCommitted()...)
	if err != nil {
		return err
	}
	defer rc.Close()
	starts, err := listOffsets(ctx, kadm.NewClient(rc), w.cfg.Topic, true)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	reader := w.procs.take()
	seen := map[int32]bool{}
	for ctx.Err() == nil && len(seen) < len(markers) {
		done, err := w.poll(ctx, kgoConsumer{rc}, reader, history.FTxnDrain)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		for _, kr := range done.Txn[0].Reads {
			_, p, _ := history.ParseTxnKey(kr.Key)
			for _, r := range kr.Records {
				if r.Offset >= markers[p] {
					seen[p] = true
				}
			}
		}
	}
	if len(seen) < len(markers) {
		return fmt.Errorf("drain: read %d of %d partitions to their marker: %w", len(seen), len(markers), ctx.Err())
	}
	for p := range w.cfg.Partitions {
		op := history.NewOp(reader, history.OK, history.FDrained)
		op.Key, op.Offset = w.key(p), markers[p]+1
		op.Value, op.HasValue = starts[p], true
		w.rec.Record(op)
	}
	return nil
}

// markers commits, as a fresh process, a transaction of one new value per
// partition and returns each partition's marker offset; nil and the error
// when it did not commit.
func (w *Txn) markers(ctx context.Context) (map[int32]int64, error) {
	proc := w.procs.take()
	cl, err := w.txnClient(proc)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []Record
	inv := history.NewOp(proc, history.Invoke, history.FTxn)
	for p := range w.cfg.Partitions {
		v := w.vals.take()
		recs = append(recs, Record{Partition: p, Value: v})
		inv.Txn = append(inv.Txn, history.Send(w.key(p), v))
	}
	w.rec.Record(inv)
	done := inv
	done.Type = history.Info
	defer func() { w.rec.Record(done) }()
	if err := cl.BeginTransaction(); err != nil {
		done.Type, done.Error = history.Fail, errString(err)
		done.Txn = sendsDone(inv.Txn, nil)
		return nil, err
	}
	// Ending is not cut short by ctx: its outcome would be unknown.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.TransactionTimeout+w.cfg.RequestTimeout)
	defer cancel()
	offs, err := produceKgo(ctx, cl, recs)
	done.Txn = sendsDone(inv.Txn, offs)
	if err != nil {
		done.Error = errString(err)
		cl.AbortBufferedRecords(ectx)
		if aerr := cl.EndTransaction(ectx, kgo.TryAbort); aerr == nil {
			done.Type = history.Fail
		}
		return nil, err
	}
	done.CommitAt = w.rec.Now()
	if err := cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		done.Error = errString(err)
		return nil, err
	}
	done.Type = history.OK
	out := map[int32]int64{}
	for i, r := range recs {
		out[r.Partition] = offs[i]
	}
	return out, nil
}

// TxnIDPrefix is the transactional.id prefix the txn workload of c uses on
// topic: c's transactional.id.prefix, else its default for the topic.
// A producing process's transactional.id is the prefix, "-" and its number.
func TxnIDPrefix(c Config, topic string) string {
	c.Topic = topic
	return c.txnDefaults().TransactionalIDPrefix
}

// TxnTimeout is the transaction.timeout.ms of c's txn workload: c's
// transaction.timeout, else its default.
func TxnTimeout(c Config) time.Duration {
	return c.txnDefaults().TransactionTimeout
}
