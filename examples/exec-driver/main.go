// Command exec-driver is the reference driver of isrlab's exec client
// (docs/client-protocol.md): it runs the log workload's producers and
// consumers with franz-go's kgo in its own process, reading one operation
// per line on stdin and printing one completion per line on stdout.
//
//	isrlab run my-scenario.yaml     # workload: {client: exec, exec: [/path/to/exec-driver]}
//
// Each workload process is a goroutine with its own client, so one
// process's blocked send does not hold another's poll. It runs the
// protocol's "txn" feature too (the txn workload): a transactional
// producer process is a kgo client with the process's transactional.id
// that also reads read_committed when the lab asks for its polls, and
// any error ending a commit leaves its outcome unknown (info). And it runs
// the "queue" feature (the queue workload): a group member is a kgo
// client in the group, whose assignments and auto-commits, which kgo
// reports on goroutines of its own, go with the member's next completion. A send is ok when
// acknowledged, fail only when the broker refused it for a reason that
// holds on every attempt, and info otherwise: this driver cannot tell
// whether a timed-out request was written, so it says it does not know.
// On a secured cluster (the "security" feature) every client connects
// with the hello's TLS and SASL settings, as kafkaconfig turns them into
// kgo options.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/kafkaconfig"
)

type hello struct {
	Type       string            `json:"type"`
	Protocol   int               `json:"protocol"`
	Bootstrap  []string          `json:"bootstrap"`
	Topic      string            `json:"topic"`
	Partitions int32             `json:"partitions"`
	Config     map[string]string `json:"config"`
	Client     map[string]string `json:"client.config"`
	Features   []string          `json:"features"`
	// Security is there on a secured cluster only (the "security"
	// feature): Kafka's client config names, sasl.password the password
	// itself.
	Security map[string]string `json:"security"`

	// secOpts connect every client with Security's TLS and SASL.
	secOpts []kgo.Opt
}

type op struct {
	ID         int64   `json:"id"`
	Process    int     `json:"process"`
	F          string  `json:"f"`
	TimeoutMs  int64   `json:"timeout_ms"`
	Partitions []int32 `json:"partitions"`
	Partition  int32   `json:"partition"`
	Key        string  `json:"key"`
	Value      string  `json:"value"`
	// The txn feature's.
	Isolation            string `json:"isolation"`
	TransactionalID      string `json:"transactional_id"`
	TransactionTimeoutMs int64  `json:"transaction_timeout_ms"`
	Records              []struct {
		Partition int32  `json:"partition"`
		Key       string `json:"key"`
		Value     string `json:"value"`
	} `json:"records"`
	Commit bool `json:"commit"`
	// The queue feature's.
	Group                string   `json:"group"`
	AutoCommit           bool     `json:"auto_commit"`
	AutoCommitIntervalMs int64    `json:"auto_commit_interval_ms"`
	Offsets              []offset `json:"offsets"`
}

type offset struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// event is what happened to a group member: {"event": "assigned",
// "partitions": its whole assignment, [] when revoked} or {"event":
// "committed", "type", "committed", "error"}: an auto-commit's outcome.
type event map[string]any

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
}

type done struct {
	ID      int64    `json:"id"`
	Process int      `json:"process"`
	Type    string   `json:"type"`
	Offset  *int64   `json:"offset,omitempty"`
	Error   string   `json:"error,omitempty"`
	Records []record `json:"records,omitempty"`
	Offsets []int64  `json:"offsets,omitempty"`
	Done    bool     `json:"done,omitempty"`
	// The queue feature's.
	Committed []offset `json:"committed,omitempty"`
	Events    []event  `json:"events,omitempty"`
}

// out prints whole lines, one goroutine at a time.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) print(v any) {
	b, _ := json.Marshal(v)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 64<<20)
	o := &out{w: bufio.NewWriter(os.Stdout)}
	if !in.Scan() {
		return
	}
	var h hello
	if err := json.Unmarshal(in.Bytes(), &h); err != nil || h.Type != "hello" {
		fmt.Fprintf(os.Stderr, "exec-driver: the first line is not a hello: %q\n", in.Text())
		os.Exit(2)
	}
	if h.Protocol != 1 {
		o.print(map[string]any{"type": "refused", "error": fmt.Sprintf("protocol %d: this driver speaks 1", h.Protocol)})
		return
	}
	for k := range h.Client {
		o.print(map[string]any{"type": "refused", "error": "client.config." + k + ": this driver takes no client settings"})
		return
	}
	for _, f := range h.Features {
		if f != "txn" && f != "queue" && f != "security" {
			o.print(map[string]any{"type": "refused", "error": fmt.Sprintf("this driver does not run the protocol's %q feature", f)})
			return
		}
	}
	if h.Security != nil {
		// kafkaconfig takes the same names; its errors never quote the
		// password.
		sec, err := kafkaconfig.ParseClientSecurity(h.Security)
		if err == nil {
			h.secOpts, err = sec.KgoOpts(nil)
		}
		if err != nil {
			o.print(map[string]any{"type": "refused", "error": "security: " + err.Error()})
			return
		}
	}
	o.print(map[string]any{"type": "hello", "client": "franz-go " + kgoVersion(), "pid": os.Getpid(), "features": []string{"txn", "queue", "security"}})

	procs := map[int]chan op{}
	var wg sync.WaitGroup
	for in.Scan() {
		var x op
		if err := json.Unmarshal(in.Bytes(), &x); err != nil {
			fmt.Fprintf(os.Stderr, "exec-driver: not an operation: %q\n", in.Text())
			os.Exit(2)
		}
		ch, ok := procs[x.Process]
		if !ok {
			ch = make(chan op, 1)
			procs[x.Process] = ch
			wg.Add(1)
			go func() {
				defer wg.Done()
				(&process{h: &h, o: o}).run(ch)
			}()
		}
		ch <- x
		if x.F == "close" {
			close(ch)
			delete(procs, x.Process)
		}
	}
	// The lab closed stdin: the run is over.
	for _, ch := range procs {
		close(ch)
	}
	wg.Wait()
}

func kgoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

// process is one workload process: a producer, a consumer or a group
// member (g set).
type process struct {
	h  *hello
	o  *out
	cl *kgo.Client
	g  *member
}

func (p *process) run(ops <-chan op) {
	defer func() {
		if p.cl != nil {
			p.cl.Close()
		}
	}()
	for x := range ops {
		d := done{ID: x.ID, Process: x.Process, Type: "ok"}
		timeout := time.Duration(x.TimeoutMs) * time.Millisecond
		switch x.F {
		case "open-producer":
			p.cl, d.Error = p.open(producerOpts(p.h, false)...)
		case "open-consumer":
			opts := p.consumeOpts(x.Partitions, timeout)
			if x.Isolation == "read_committed" {
				opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			}
			p.cl, d.Error = p.open(opts...)
		case "open-transactional-producer":
			d.Error = p.openTransactional(x, timeout)
		case "begin":
			if p.cl == nil {
				d.Type, d.Error = "fail", "begin before open-transactional-producer"
			} else if err := p.cl.BeginTransaction(); err != nil {
				d.Type, d.Error = "fail", err.Error()
			}
		case "produce":
			d = p.produce(x, timeout)
		case "end":
			d = p.end(x, timeout)
		case "open-group-consumer":
			p.g = &member{topic: p.h.Topic, auto: x.AutoCommit}
			p.cl, d.Error = p.open(p.g.opts(x, p.h)...)
		case "commit":
			d = p.commit(x, timeout)
		case "crash":
			if p.g != nil {
				p.g.crash()
			}
			if p.cl != nil {
				p.cl.Close()
				p.cl = nil
			}
		case "send":
			d = p.send(x, timeout)
		case "poll":
			d = p.poll(x, timeout)
		case "close":
			if p.cl != nil {
				p.cl.Close()
				p.cl = nil
			}
		default:
			d.Type, d.Error = "fail", "unknown operation "+x.F
		}
		if d.Error != "" && (x.F == "open-producer" || x.F == "open-consumer" || x.F == "open-transactional-producer" || x.F == "open-group-consumer") {
			d.Type = "fail"
		}
		if p.g != nil && x.F != "crash" {
			d.Events = p.g.take()
		}
		p.o.print(d)
	}
}

func (p *process) open(opts ...kgo.Opt) (*kgo.Client, string) {
	base := append([]kgo.Opt{kgo.SeedBrokers(p.h.Bootstrap...)}, p.h.secOpts...)
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, err.Error()
	}
	return cl, ""
}

// consumeOpts read each of parts from its start.
func (p *process) consumeOpts(parts []int32, timeout time.Duration) []kgo.Opt {
	offs := map[int32]kgo.Offset{}
	for _, part := range parts {
		offs[part] = kgo.NewOffset().AtStart()
	}
	return []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.h.Topic: offs}), kgo.FetchMaxWait(timeout / 2)}
}

// openTransactional opens a transactional producer and initializes its
// producer id within timeout; with partitions it also reads them
// read_committed, for the process's polls.
func (p *process) openTransactional(x op, timeout time.Duration) string {
	opts := append(producerOpts(p.h, true), kgo.TransactionalID(x.TransactionalID),
		kgo.TransactionTimeout(time.Duration(x.TransactionTimeoutMs)*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()))
	if len(x.Partitions) > 0 {
		opts = append(opts, p.consumeOpts(x.Partitions, 500*time.Millisecond)...)
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, errText := p.open(opts...)
	if errText != "" {
		return errText
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return "init producer id: " + err.Error()
	}
	p.cl = cl
	return ""
}

// produce sends the transaction's records and waits for them: each
// one's offset, -1 when not acknowledged; ok only when all were (the
// lab aborts the transaction otherwise).
func (p *process) produce(x op, timeout time.Duration) done {
	d := done{ID: x.ID, Process: x.Process, Type: "ok", Offsets: make([]int64, len(x.Records))}
	if p.cl == nil {
		d.Type, d.Error = "fail", "produce before open-transactional-producer"
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	krs := make([]*kgo.Record, len(x.Records))
	for i, r := range x.Records {
		krs[i] = &kgo.Record{Partition: r.Partition, Value: []byte(r.Value)}
		if r.Key != "" {
			krs[i].Key = []byte(r.Key)
		}
	}
	res := p.cl.ProduceSync(ctx, krs...)
	acked := map[*kgo.Record]bool{}
	for _, r := range res {
		if r.Err == nil {
			acked[r.Record] = true
		}
	}
	for i, kr := range krs {
		d.Offsets[i] = -1
		if acked[kr] {
			d.Offsets[i] = kr.Offset
		}
	}
	if err := res.FirstErr(); err != nil {
		d.Type, d.Error = "info", err.Error()
	}
	return d
}

// end commits or aborts. A commit is ok only when EndTransaction
// returned nil; an abort that returned nil is fail (it did not commit);
// any error leaves the outcome unknown, and the producer is done.
func (p *process) end(x op, timeout time.Duration) done {
	d := done{ID: x.ID, Process: x.Process, Type: "ok"}
	if p.cl == nil {
		d.Type, d.Error = "fail", "end before open-transactional-producer"
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !x.Commit {
		p.cl.AbortBufferedRecords(ctx)
	}
	switch err := p.cl.EndTransaction(ctx, kgo.TransactionEndTry(x.Commit)); {
	case err != nil:
		d.Type, d.Error, d.Done = "info", err.Error(), true
	case !x.Commit:
		d.Type = "fail"
	}
	return d
}

// member is a group member's state that kgo's goroutines report to.
type member struct {
	topic string
	auto  bool

	mu      sync.Mutex
	events  []event
	crashed bool
}

// opts are the member's kgo options: in the group, reading from its
// committed offsets or the start; with auto-commit kgo commits what
// polls returned (GreedyAutoCommit) every interval, and the revoke hook
// commits what was polled first, as an application that stops does,
// unless the member crashed.
func (m *member) opts(x op, h *hello) []kgo.Opt {
	opts := []kgo.Opt{kgo.ConsumeTopics(h.Topic), kgo.ConsumerGroup(x.Group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { m.assigned(ps[h.Topic]) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
			if m.auto && !m.isCrashed() {
				if offs := cl.UncommittedOffsets(); len(offs) > 0 {
					cl.CommitOffsetsSync(ctx, offs, m.autoCommitted)
				}
			}
			m.assigned([]int32{})
		}),
		kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { m.assigned([]int32{}) }),
	}
	if !x.AutoCommit {
		return append(opts, kgo.DisableAutoCommit())
	}
	return append(opts, kgo.GreedyAutoCommit(), kgo.AutoCommitInterval(time.Duration(x.AutoCommitIntervalMs)*time.Millisecond),
		kgo.AutoCommitCallback(m.autoCommitted))
}

func (m *member) assigned(parts []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if parts == nil {
		parts = []int32{}
	}
	m.events = append(m.events, event{"event": "assigned", "partitions": parts})
}

// autoCommitted reports a commit kgo made on its own.
func (m *member) autoCommitted(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	typ, offs, text := commitOutcome(m.topic, req, resp, err)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.crashed {
		m.events = append(m.events, event{"event": "committed", "type": typ, "committed": offs, "error": text})
	}
}

func (m *member) crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashed = true
}

func (m *member) isCrashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// take hands over the events since the last completion.
func (m *member) take() []event {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := m.events
	m.events = nil
	return evs
}

// commitOutcome is an OffsetCommit's outcome: ok with the offsets the
// coordinator accepted (the refusals named), info with every offset
// asked for when the request's answer is unknown (an error, no
// response), fail when every partition was refused or no request was
// made.
func commitOutcome(topic string, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) (string, []offset, string) {
	var asked []offset
	if req != nil {
		for _, t := range req.Topics {
			if t.Topic == topic {
				for _, p := range t.Partitions {
					asked = append(asked, offset{Partition: p.Partition, Offset: p.Offset})
				}
			}
		}
	}
	switch {
	case req == nil:
		return "fail", nil, fmt.Sprintf("no request made: %v", err)
	case err != nil || resp == nil:
		return "info", asked, fmt.Sprint(err)
	}
	var ok []offset
	var refused string
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				refused = perr.Error()
				continue
			}
			for _, a := range asked {
				if a.Partition == p.Partition {
					ok = append(ok, a)
				}
			}
		}
	}
	if len(ok) == 0 && refused != "" {
		return "fail", nil, refused
	}
	return "ok", ok, refused
}

// commit commits the offsets given and waits for the outcome.
func (p *process) commit(x op, timeout time.Duration) done {
	d := done{ID: x.ID, Process: x.Process}
	if p.cl == nil || p.g == nil {
		d.Type, d.Error = "fail", "commit before open-group-consumer"
		return d
	}
	offs := map[int32]kgo.EpochOffset{}
	for _, o := range x.Offsets {
		offs[o.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d.Type, d.Error = "fail", "no commit made"
	p.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{p.h.Topic: offs},
		func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			d.Type, d.Committed, d.Error = commitOutcome(p.h.Topic, req, resp, err)
		})
	return d
}

// producerOpts maps the Kafka-named settings of the hello to kgo's; a
// transactional producer is idempotent whatever the hello says.
func producerOpts(h *hello, transactional bool) []kgo.Opt {
	ms := func(k string) time.Duration {
		n, _ := strconv.ParseInt(h.Config[k], 10, 64)
		return time.Duration(n) * time.Millisecond
	}
	opts := []kgo.Opt{kgo.DefaultProduceTopic(h.Topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProduceRequestTimeout(ms("request.timeout.ms")), kgo.RecordDeliveryTimeout(ms("delivery.timeout.ms")),
		kgo.ProducerLinger(ms("linger.ms"))}
	switch h.Config["acks"] {
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if h.Config["enable.idempotence"] != "true" && !transactional {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if r, err := strconv.Atoi(h.Config["retries"]); err == nil && r < 1<<30 {
		opts = append(opts, kgo.RecordRetries(r))
	}
	if n, err := strconv.Atoi(h.Config["max.in.flight.requests.per.connection"]); err == nil && n > 0 {
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(n))
	}
	return opts
}

// refusals are the broker's answers that hold on every attempt: the
// record was not written.
var refusals = []error{kerr.InvalidRequiredAcks, kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
	kerr.CorruptMessage, kerr.InvalidTopicException, kerr.TopicAuthorizationFailed, kerr.UnsupportedForMessageFormat}

func (p *process) send(x op, timeout time.Duration) done {
	d := done{ID: x.ID, Process: x.Process, Type: "ok"}
	if p.cl == nil {
		d.Type, d.Error = "fail", "send before open-producer"
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := &kgo.Record{Key: []byte(x.Key), Value: []byte(x.Value), Partition: x.Partition}
	err := p.cl.ProduceSync(ctx, r).FirstErr()
	if err == nil {
		if p.h.Config["acks"] != "0" {
			d.Offset = &r.Offset
		}
		return d
	}
	d.Type, d.Error = "info", err.Error()
	if errors.Is(err, kgo.ErrMaxBuffered) {
		d.Type = "fail"
	}
	for _, e := range refusals {
		if errors.Is(err, e) && !errors.Is(err, kgo.ErrRecordRetries) && !errors.Is(err, kgo.ErrRecordTimeout) {
			d.Type = "fail"
		}
	}
	return d
}

func (p *process) poll(x op, timeout time.Duration) done {
	d := done{ID: x.ID, Process: x.Process, Type: "ok"}
	if p.cl == nil {
		d.Type, d.Error = "info", "poll before open-consumer"
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var fs kgo.Fetches
	if p.g != nil {
		// A group member's poll is a batch of work: at most 256 records,
		// as the lab's other group drivers hand over.
		fs = p.cl.PollRecords(ctx, 256)
	} else {
		fs = p.cl.PollFetches(ctx)
	}
	cancel()
	fs.EachRecord(func(r *kgo.Record) {
		d.Records = append(d.Records, record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
	})
	fs.EachError(func(_ string, _ int32, err error) {
		if d.Error == "" && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			d.Error = err.Error()
		}
	})
	if d.Error != "" && len(d.Records) == 0 {
		d.Type = "info"
	}
	return d
}
