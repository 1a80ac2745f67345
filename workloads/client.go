package workloads

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/history"
)

// Client is the client library a workload drives: it opens producer and
// consumer processes and performs each operation the workload asks for
// with a real client, reporting the outcome as the client let it know it.
// The workload decides the operations and records them; a client never
// writes the history.
//
// A Client that is also an io.Closer is closed when the workload's Run
// returns (an out-of-process driver ends its process there).
type Client interface {
	// Name is the client as a scenario names it (franz-go, sarama, exec).
	Name() string
	// Producer opens producer process proc, the workload's i-th producer.
	Producer(ctx context.Context, proc, i int) (Producer, error)
	// Consumer opens consumer process proc, assigned parts of the topic
	// and reading each from its start.
	Consumer(ctx context.Context, proc int, parts []int32) (Consumer, error)
}

// Producer sends one record at a time.
type Producer interface {
	// Send writes r and reports its outcome: ok when the brokers
	// acknowledged it, fail only when it was definitely not written, info
	// when that is unknown (a timeout, or a connection broken after the
	// request may have been written). A non-nil error means the client
	// can do nothing more (its process died, or the client is closed):
	// the outcome is still recorded, and the producer stops.
	Send(ctx context.Context, r Record) (Sent, error)
	Close() error
}

// Consumer polls the partitions it was assigned.
type Consumer interface {
	// Poll waits up to timeout for records and returns what the client
	// delivered. A non-nil error means the client can do nothing more;
	// kgo.ErrClientClosed is the quiet end of a closed client.
	Poll(ctx context.Context, timeout time.Duration) (Polled, error)
	Close() error
}

// GroupClient is a Client whose consumers can be members of a consumer
// group, as the queue workload's are (franz-go's are kgo's own, in
// queue.go; a driver's come through this interface).
type GroupClient interface {
	Client
	// GroupConsumer opens consumer process proc as a member of m.Group
	// subscribed to the workload's topic: it reads each partition it is
	// assigned from the group's committed offset, or from the start
	// without one, and tells m of its assignments and of the commits it
	// makes on its own. Joining happens in the background, as a client's
	// subscribe does.
	GroupConsumer(ctx context.Context, proc int, m GroupMember) (GroupConsumer, error)
}

// GroupMember is how a group consumer commits and whom it tells.
type GroupMember struct {
	Group string
	// AutoCommit makes the client commit on its own, every
	// AutoCommitInterval, when its partitions are revoked and when it is
	// closed (never when it crashes), the offsets after the records it
	// has delivered, processed or not (kgo's GreedyAutoCommit,
	// librdkafka's default). Without it the client commits only in
	// Commit.
	AutoCommit         bool
	AutoCommitInterval time.Duration
	// Assigned is told the member's partitions each time they change
	// (an empty list when they are revoked), never concurrently.
	Assigned func(parts []int32)
	// Committed is told the outcome of each commit the client made on
	// its own (auto-commit), never concurrently.
	Committed func(Committed)
}

// GroupConsumer is a consumer group member.
type GroupConsumer interface {
	// Poll is Consumer's: the records delivered, with their partitions
	// and offsets.
	Poll(ctx context.Context, timeout time.Duration) (Polled, error)
	// Commit commits offs (partition -> the offset after the last record
	// processed) for the partitions the member holds and waits for the
	// outcome.
	Commit(ctx context.Context, offs map[int32]int64) Committed
	// Close leaves the group as an application that stops does (with
	// auto-commit, after a last commit of what was delivered).
	Close() error
	// Crash ends the member as a process that dies mid-work: no commit
	// reaches the coordinator from it any more (what was delivered or
	// marked and not yet committed stays uncommitted), and the client
	// is closed.
	Crash() error
}

// TxnClient is a Client that runs the txn workload: transactional
// producers and read_committed consumers (franz-go's are kgo's own, in
// txn.go; a driver's come through this interface). The final markers and
// drain are franz-go's whatever the client: the lab's own read.
type TxnClient interface {
	Client
	// Transactor opens transactional producer process proc.
	Transactor(ctx context.Context, proc int, t TxnProducer) (Transactor, error)
	// ReadCommitted opens consumer process proc reading parts
	// read_committed, each from its start.
	ReadCommitted(ctx context.Context, proc int, parts []int32) (Consumer, error)
}

// TxnProducer is what a transactional producer process is opened with.
type TxnProducer struct {
	ID      string        // transactional.id, the process's own
	Timeout time.Duration // transaction.timeout.ms
	// Polls makes the producer also read every partition read_committed
	// from its start, for read-process-write transactions (Poll).
	Polls bool
}

// Transactor is a transactional producer process: one transaction at a
// time, Begin, then Poll and Produce, then End.
type Transactor interface {
	// Begin begins a transaction; an error means none began and nothing
	// was sent.
	Begin() error
	// Poll polls the producer's own read_committed consumer, as
	// Consumer's Poll does.
	Poll(ctx context.Context, timeout time.Duration) (Polled, error)
	// Produce sends recs in the transaction and waits for their
	// outcomes, ctx bounding the wait: offs[i] is recs[i]'s offset when
	// the brokers acknowledged it, -1 otherwise; err is the first error.
	Produce(ctx context.Context, recs []Record) (offs []int64, err error)
	// End commits (or aborts) the transaction and reports how it ended
	// as the client let it know; ctx bounds the wait.
	End(ctx context.Context, commit bool) TxnEnd
	Close() error
}

// TxnEnd is how a transaction ended: ok when a commit was confirmed;
// fail when it definitely did not commit (an abort confirmed, or a
// commit the client refused before any EndTxn request was written);
// info when that is unknown (a timeout, a connection broken after an
// EndTxn was written, an abort that failed). Error says why when it is
// not ok; Done says the producer can run no more transactions (fenced,
// a fatal error): its process ends, and the next is a new one.
type TxnEnd struct {
	Type  history.Type
	Error string
	Done  bool
}

// Committed is a commit's outcome: ok with the offsets the coordinator
// accepted (Error names the partitions' refusals, if some were refused);
// info, with every offset asked for, when the request's fate is unknown;
// fail when nothing was committed (every partition refused, or no
// request made).
type Committed struct {
	Type    history.Type
	Offsets []history.PartitionOffset
	Error   string
}

// Record is one send: Value (a unique int64, sent as its decimal string)
// with Key to Partition.
type Record struct {
	Partition int32
	Key       string
	Value     int64
}

// Sent is a send's outcome. Offset is the record's offset when the client
// reported one (-1 otherwise); Error names the error, Kafka's code name
// when there is one.
type Sent struct {
	Type   history.Type
	Offset int64
	Error  string
}

// Polled is a poll's outcome: the records per partition in the order the
// client returned them, and the error the client reported. Type is ok, or
// info when the poll returned an error and no records.
type Polled struct {
	Type  history.Type
	Reads []history.PartitionRecords
	Error string
}

// CapabilityError is a client that cannot do what a configuration asks
// (checked when a scenario loads, so that it is never found mid-run).
type CapabilityError struct {
	Client string
	Reason string
}

func (e *CapabilityError) Error() string { return "client " + e.Client + ": " + e.Reason }

// FranzGo is the default client, franz-go's kgo, in this process.
const FranzGo = "franz-go"

// ClientSpec picks the client a workload drives: Client names it
// (franz-go, the default; sarama; exec), Config holds settings in the
// client's own names, applied after the workload's Kafka-named ones
// (acks, enable.idempotence, retries, ...), and Exec is the command of an
// out-of-process driver (docs/client-protocol.md).
type ClientSpec struct {
	Client string            `yaml:"client,omitempty" json:"client,omitempty"`
	Config map[string]string `yaml:"client.config,omitempty" json:"client.config,omitempty"`
	Exec   []string          `yaml:"exec,omitempty" json:"exec,omitempty"`
}

// Name returns the client's name, franz-go when none is given.
func (s ClientSpec) Name() string {
	if s.Client == "" {
		return FranzGo
	}
	return s.Client
}

// franzGo is the franz-go Client: what every workload ran before clients
// were an axis, with its counting dialer (attempts) and seeds.
type franzGo struct {
	b *base
	// dial is the caller's dialer, which the producers' counting dialer
	// wraps.
	dial dialFunc
}

func newFranzGo(b *base) (*franzGo, error) {
	dial, err := dialOf(append([]kgo.Opt{kgo.SeedBrokers(b.seeds...)}, b.opts...))
	if err != nil {
		return nil, err
	}
	return &franzGo{b: b, dial: dial}, nil
}

func (*franzGo) Name() string { return FranzGo }

// Producer has a kgo client of its own, as separate producer processes
// do, so idempotent producers have producer ids of their own; the i-th
// asks seed i (mod the seeds) for it: two brokers handing out the same id
// would show up as lost writes.
func (f *franzGo) Producer(ctx context.Context, proc, i int) (Producer, error) {
	b := f.b
	seeds := b.seeds
	if b.cfg.Idempotent {
		// kgo sends InitProducerId to a random seed until it has
		// metadata, then to a random broker: with one seed and the id
		// loaded first, the id comes from that seed.
		seeds = []string{b.seeds[i%len(b.seeds)]}
	}
	writes := &attempts{}
	// The counting dialer comes last, so that it wraps the one the
	// caller's options chose instead of being replaced by it.
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, b.cfg.producerOpts()...), b.opts...)
	cl, err := kgo.NewClient(append(opts, kgo.Dialer(writes.dialer(f.dial)))...)
	if err != nil {
		return nil, fmt.Errorf("new kafka client: %w", err)
	}
	if b.cfg.Idempotent {
		// A failure costs nothing: kgo asks again, any broker, on the
		// first send.
		ictx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
		cl.ProducerID(ictx)
		cancel()
		if err := cl.UpdateSeedBrokers(b.seeds...); err != nil {
			cl.Close()
			return nil, fmt.Errorf("seed brokers: %w", err)
		}
	}
	return &kgoProducer{cl: cl, writes: writes, cfg: &b.cfg}, nil
}

func (f *franzGo) Consumer(_ context.Context, _ int, parts []int32) (Consumer, error) {
	offs := map[int32]kgo.Offset{}
	for _, p := range parts {
		offs[p] = kgo.NewOffset().AtStart()
	}
	cl, err := f.b.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{f.b.cfg.Topic: offs}), kgo.FetchMaxWait(f.b.cfg.PollTimeout/2),
		f.b.cfg.isolation(ReadUncommitted))
	if err != nil {
		return nil, err
	}
	return kgoConsumer{cl}, nil
}

// kgoProducer is a franz-go producer process.
type kgoProducer struct {
	cl     *kgo.Client
	writes *attempts
	cfg    *Config
}

// Send produces synchronously. A failed send is fail when Classify says
// so, or when no Produce request that could carry the record began to be
// written (attempts.neverSent); otherwise, and whenever that cannot be
// told in time, info.
func (p *kgoProducer) Send(ctx context.Context, r Record) (Sent, error) {
	kr := &kgo.Record{Key: []byte(r.Key), Value: encodeValue(r.Value), Partition: r.Partition}
	before := p.writes.n.Load()
	err := p.cl.ProduceSync(ctx, kr).FirstErr()
	s := Sent{Type: Classify(err, p.cfg.Retries >= 0), Offset: -1, Error: errString(err)}
	if s.Type == history.Info {
		// The run's end must not cut the wait short.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), barrierTimeout(p.cfg))
		if p.writes.neverSent(bctx, p.cl, before) {
			s.Type = history.Fail
			s.Error = "never sent: " + s.Error
		}
		cancel()
	}
	if s.Type == history.OK && kr.Offset >= 0 && p.cfg.Acks != "0" {
		s.Offset = kr.Offset
	}
	return s, nil
}

func (p *kgoProducer) Close() error {
	p.cl.Close()
	return nil
}

// kgoConsumer is a franz-go consumer: assigned, subscribed or draining.
type kgoConsumer struct{ cl *kgo.Client }

func (c kgoConsumer) Poll(ctx context.Context, timeout time.Duration) (Polled, error) {
	return pollKgo(ctx, c.cl, timeout)
}

// pollKgo polls cl once: a Consumer's Poll of a kgo client or transact
// session.
func pollKgo(ctx context.Context, cl poller, timeout time.Duration) (Polled, error) {
	reads, n, firstErr := pollFetches(ctx, cl, timeout)
	p := Polled{Type: history.OK, Reads: reads}
	if firstErr != nil {
		p.Error = errString(firstErr)
		if n == 0 {
			p.Type = history.Info
		}
	}
	if errors.Is(firstErr, kgo.ErrClientClosed) {
		return p, firstErr
	}
	return p, nil
}

func (c kgoConsumer) Close() error {
	c.cl.Close()
	return nil
}

// keyOf is the key of value v under keys: "k<v mod keys>".
func keyOf(v int64, keys int) string {
	return "k" + strconv.FormatInt(v%int64(keys), 10)
}

// send sends value v through p and records its invocation and outcome.
func send(ctx context.Context, p Producer, rec *history.Recorder, proc int, cfg *Config, v int64) (history.Type, error) {
	key := keyOf(v, cfg.Keys)
	part := PartitionOf(key, cfg.Partitions)
	inv := history.NewOp(proc, history.Invoke, history.FSend)
	inv.Value, inv.HasValue, inv.Partition, inv.Key = v, true, part, key
	rec.Record(inv)
	s, err := p.Send(ctx, Record{Partition: part, Key: key, Value: v})
	done := inv
	done.Type, done.Error = s.Type, s.Error
	if s.Type == history.OK && s.Offset >= 0 {
		done.Offset = s.Offset
	}
	rec.Record(done)
	return done.Type, err
}

// poll polls c once and records the invocation and what it returned; it
// returns the recorded completion, and the client's error when it can do
// nothing more.
func poll(ctx context.Context, c Consumer, rec *history.Recorder, proc int, timeout time.Duration, f string) (history.Op, error) {
	rec.Record(history.NewOp(proc, history.Invoke, f))
	p, err := c.Poll(ctx, timeout)
	if p.Type == history.TypeNone {
		p.Type = history.Info
	}
	done := history.NewOp(proc, p.Type, f)
	done.Reads, done.Error = p.Reads, p.Error
	if done.Reads == nil {
		done.Reads = []history.PartitionRecords{}
	}
	return rec.Record(done), err
}
