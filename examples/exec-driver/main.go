// Command exec-driver is the reference driver of isrlab's exec client
// (docs/client-protocol.md): it runs the log workload's producers and
// consumers with franz-go's kgo in its own process, reading one operation
// per line on stdin and printing one completion per line on stdout.
//
//	isrlab run my-scenario.yaml     # workload: {client: exec, exec: [/path/to/exec-driver]}
//
// Each workload process is a goroutine with its own client, so one
// process's blocked send does not hold another's poll. A send is ok when
// acknowledged, fail only when the broker refused it for a reason that
// holds on every attempt, and info otherwise: this driver cannot tell
// whether a timed-out request was written, so it says it does not know.
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
)

type hello struct {
	Type       string            `json:"type"`
	Protocol   int               `json:"protocol"`
	Bootstrap  []string          `json:"bootstrap"`
	Topic      string            `json:"topic"`
	Partitions int32             `json:"partitions"`
	Config     map[string]string `json:"config"`
	Client     map[string]string `json:"client.config"`
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
}

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
	o.print(map[string]any{"type": "hello", "client": "franz-go " + kgoVersion(), "pid": os.Getpid()})

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

// process is one workload process: a producer or a consumer.
type process struct {
	h  *hello
	o  *out
	cl *kgo.Client
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
			p.cl, d.Error = p.open(producerOpts(p.h)...)
		case "open-consumer":
			offs := map[int32]kgo.Offset{}
			for _, part := range x.Partitions {
				offs[part] = kgo.NewOffset().AtStart()
			}
			p.cl, d.Error = p.open(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.h.Topic: offs}), kgo.FetchMaxWait(timeout/2))
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
		if d.Error != "" && (x.F == "open-producer" || x.F == "open-consumer") {
			d.Type = "fail"
		}
		p.o.print(d)
	}
}

func (p *process) open(opts ...kgo.Opt) (*kgo.Client, string) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.h.Bootstrap...)}, opts...)...)
	if err != nil {
		return nil, err.Error()
	}
	return cl, ""
}

// producerOpts maps the Kafka-named settings of the hello to kgo's.
func producerOpts(h *hello) []kgo.Opt {
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
	if h.Config["enable.idempotence"] != "true" {
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
	fs := p.cl.PollFetches(ctx)
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
