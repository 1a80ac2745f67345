package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// KafkaGo is segmentio/kafka-go.
const KafkaGo = "kafka-go"

// kafkagoOwned are the Writer and ReaderConfig fields the driver sets.
var kafkagoOwned = []string{
	"Writer.Addr", "Writer.Topic", "Writer.Balancer", "Writer.Async", "Writer.Completion", "Writer.Transport",
	"Writer.BatchSize", "Writer.BatchTimeout", "Writer.Logger", "Writer.ErrorLogger",
	"Reader.Brokers", "Reader.Topic", "Reader.Partition", "Reader.Dialer", "Reader.GroupID", "Reader.GroupTopics",
	"Reader.StartOffset", "Reader.CommitInterval", "Reader.Logger", "Reader.ErrorLogger",
}

// kafkagoConfig is the kafka-go Writer and ReaderConfig of a workload: the
// workload's Kafka-named keys mapped to kafka-go's fields, then own
// (Writer.FIELD and Reader.FIELD, kafka-go's names), then what the driver
// needs.
//
//	acks                                    Writer.RequiredAcks
//	enable.idempotence                      refused: kafka-go has no idempotent producer
//	retries                                 Writer.MaxAttempts (-1: 1; n: n+1; 0, until delivery.timeout: delivery.timeout / Writer.WriteBackoffMax)
//	max.in.flight.requests.per.connection   1 only: the Writer sends one batch at a time per partition
//	request.timeout                         Writer.WriteTimeout, Writer.ReadTimeout
//	linger                                  refused above 0: each record is its own batch (Writer.BatchSize 1)
//	delivery.timeout                        (none in kafka-go: the driver waits this long for a send's outcome)
func kafkagoConfig(cfg workloads.Config, own map[string]string) (*kafka.Writer, *kafka.ReaderConfig, error) {
	cfg = cfg.WithDefaults()
	cannot := func(reason string) error { return &workloads.CapabilityError{Client: KafkaGo, Reason: reason} }
	switch {
	case cfg.Idempotent:
		return nil, nil, cannot("kafka-go has no idempotent producer (enable.idempotence)")
	case cfg.MaxInFlight > 1:
		return nil, nil, cannot("max.in.flight.requests.per.connection: kafka-go's Writer sends one request at a time per partition")
	case cfg.Linger > 0:
		return nil, nil, cannot("linger: the log workload's kafka-go Writer sends each record as its own batch")
	}
	w := &kafka.Writer{WriteBackoffMin: 100 * time.Millisecond, WriteBackoffMax: time.Second,
		WriteTimeout: cfg.RequestTimeout, ReadTimeout: cfg.RequestTimeout}
	switch cfg.Acks {
	case "1":
		w.RequiredAcks = kafka.RequireOne
	case "0":
		w.RequiredAcks = kafka.RequireNone
	default:
		w.RequiredAcks = kafka.RequireAll
	}
	switch {
	case cfg.Retries < 0:
		w.MaxAttempts = 1
	case cfg.Retries > 0:
		w.MaxAttempts = cfg.Retries + 1
	default:
		w.MaxAttempts = max(2, int(cfg.DeliveryTimeout/w.WriteBackoffMax))
	}
	r := &kafka.ReaderConfig{MaxWait: max(cfg.PollTimeout/2, 10*time.Millisecond), MinBytes: 1, MaxBytes: 10 << 20}
	for _, k := range slices.Sorted(maps.Keys(own)) {
		var err error
		switch {
		case strings.HasPrefix(k, "Writer."):
			err = setOwn(reflect.ValueOf(w).Elem(), "kafka.Writer", strings.TrimPrefix(k, "Writer."), own[k], trimAll(kafkagoOwned, "Writer."))
		case strings.HasPrefix(k, "Reader."):
			err = setOwn(reflect.ValueOf(r).Elem(), "kafka.ReaderConfig", strings.TrimPrefix(k, "Reader."), own[k], trimAll(kafkagoOwned, "Reader."))
		default:
			err = errors.New("kafka-go's settings are Writer.FIELD (kafka.Writer) or Reader.FIELD (kafka.ReaderConfig)")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("client kafka-go: client.config.%s: %w", k, err)
		}
	}
	if w.MaxAttempts < 1 {
		return nil, nil, fmt.Errorf("client kafka-go: Writer.MaxAttempts %d: at least 1", w.MaxAttempts)
	}
	return w, r, nil
}

func trimAll(paths []string, prefix string) []string {
	var out []string
	for _, p := range paths {
		if s, ok := strings.CutPrefix(p, prefix); ok {
			out = append(out, s)
		}
	}
	return out
}

// kafkagoClient runs the log workload's producers (a synchronous Writer
// sending one record at a time) and assigned consumers (a Reader per
// partition) on kafka-go in this process.
type kafkagoClient struct {
	cfg   workloads.Config
	own   map[string]string
	seeds []string
	dial  workloads.DialFunc
	// mech authenticates to a secured cluster (nil: plaintext).
	mech sasl.Mechanism
}

func newKafkaGo(cfg workloads.Config, own map[string]string, env Env) (*kafkagoClient, error) {
	if _, _, err := kafkagoConfig(cfg, own); err != nil {
		return nil, err
	}
	if env.Dial == nil {
		env.Dial = (&net.Dialer{}).DialContext
	}
	k := &kafkagoClient{cfg: cfg.WithDefaults(), own: own, seeds: env.Seeds, dial: env.Dial}
	if env.SASL != nil {
		if err := env.SASL.check(); err != nil {
			return nil, err
		}
		m, err := env.SASL.kafkaGo()
		if err != nil {
			return nil, err
		}
		k.mech = m
	}
	return k, nil
}

func (*kafkagoClient) Name() string { return KafkaGo }

// Producer opens a Writer whose Transport dials through a Produce counter.
func (k *kafkagoClient) Producer(_ context.Context, proc, _ int) (workloads.Producer, error) {
	w, _, _ := kafkagoConfig(k.cfg, k.own) // checked in newKafkaGo
	writes := &workloads.ProduceCounter{}
	p := &kafkagoProducer{w: w, writes: writes, cfg: &k.cfg, retries: w.MaxAttempts > 1, offsets: map[string]int64{}}
	w.Addr, w.Topic = kafka.TCP(k.seeds...), k.cfg.Topic
	w.Balancer = kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition })
	w.BatchSize, w.BatchTimeout = 1, time.Millisecond
	w.Transport = &kafka.Transport{Dial: writes.Dialer(k.dial), DialTimeout: k.cfg.RequestTimeout, ClientID: "isrlab-" + strconv.Itoa(proc), SASL: k.mech}
	w.Completion = p.completed
	return p, nil
}

type kafkagoProducer struct {
	w       *kafka.Writer
	writes  *workloads.ProduceCounter
	cfg     *workloads.Config
	retries bool

	mu      sync.Mutex
	offsets map[string]int64 // by value, from Completion
	wg      sync.WaitGroup   // abandoned writes
}

// completed keeps the offsets the Writer learned (WriteMessages returns
// none).
func (p *kafkagoProducer) completed(msgs []kafka.Message, err error) {
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.offsets[string(m.Value)] = m.Offset
	}
}

// Send writes the record with a context that never ends, so that
// WriteMessages returns only once the Writer is done with the record
// (with a cancelled context it returns while the batch may still be
// written), and waits at most delivery.timeout for it: kafka-go has no
// delivery timeout, its attempts are counted. kafkagoOutcome maps the
// error; an info outcome is fail when no Produce request began to be
// written on the producer's connections while the record was in the
// Writer.
func (p *kafkagoProducer) Send(_ context.Context, r workloads.Record) (workloads.Sent, error) {
	value := strconv.FormatInt(r.Value, 10)
	before := p.writes.Count()
	done := make(chan error, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		done <- p.w.WriteMessages(context.Background(), kafka.Message{Partition: int(r.Partition), Key: []byte(r.Key), Value: []byte(value)})
	}()
	t := time.NewTimer(p.cfg.DeliveryTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		return workloads.Sent{Type: history.Info, Offset: -1, Error: fmt.Sprintf("no outcome from kafka-go within delivery.timeout (%s)", p.cfg.DeliveryTimeout)}, nil
	}
	if err == nil {
		s := workloads.Sent{Type: history.OK, Offset: -1}
		p.mu.Lock()
		if o, ok := p.offsets[value]; ok && p.cfg.Acks != "0" {
			s.Offset = o
		}
		delete(p.offsets, value)
		p.mu.Unlock()
		return s, nil
	}
	t2, name := kafkagoOutcome(err, p.retries)
	if t2 == history.Info && p.writes.Count() == before {
		return workloads.Sent{Type: history.Fail, Offset: -1, Error: "never sent: " + name}, nil
	}
	return workloads.Sent{Type: t2, Offset: -1, Error: name}, nil
}

func (p *kafkagoProducer) Close() error {
	err := p.w.Close()
	p.wg.Wait()
	return err
}

// kafkagoOutcome maps an error of kafka-go v0.4.51's Writer.WriteMessages
// (writer.go) to an outcome and the name the history shows:
//
//   - WriteErrors holds each message's error: the one message's is mapped;
//   - a kafka.Error is the broker's answer to the last attempt (or to the
//     metadata request before any): workloads.Classify decides it as for
//     franz-go, retried when Writer.MaxAttempts > 1;
//   - MessageTooLargeError is refused before any request: fail;
//   - everything else (a timeout, io.EOF, io.ErrUnexpectedEOF, a refused or
//     reset connection, io.ErrClosedPipe of a closed Writer) is info, which
//     the caller turns into fail when no Produce request was written.
func kafkagoOutcome(err error, retried bool) (history.Type, string) {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil {
				err = e
				break
			}
		}
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return kafkaCode(int16(ke), retried)
	}
	var mtl kafka.MessageTooLargeError
	if errors.As(err, &mtl) {
		return history.Fail, err.Error()
	}
	if errors.Is(err, io.EOF) {
		return history.Info, "EOF"
	}
	return history.Info, err.Error()
}

// Consumer opens a Reader per partition, each reading from its start.
func (k *kafkagoClient) Consumer(_ context.Context, _ int, parts []int32) (workloads.Consumer, error) {
	c := &kafkagoConsumer{merged: newMerged(func(err error) string { _, name := kafkagoOutcome(err, false); return name })}
	c.ctx, c.stop = context.WithCancel(context.Background())
	for _, p := range parts {
		_, rc, _ := kafkagoConfig(k.cfg, k.own)
		rc.Brokers, rc.Topic, rc.Partition = k.seeds, k.cfg.Topic, int(p)
		rc.Dialer = &kafka.Dialer{DialFunc: k.dial, Timeout: k.cfg.RequestTimeout, SASLMechanism: k.mech}
		rc.StartOffset = kafka.FirstOffset
		r := kafka.NewReader(*rc)
		c.readers = append(c.readers, r)
		c.wg.Add(1)
		go c.forward(r)
	}
	return c, nil
}

// kafkagoConsumer merges its Readers' messages and errors.
type kafkagoConsumer struct {
	*merged
	readers []*kafka.Reader
	ctx     context.Context // ends at Close
	stop    context.CancelFunc
	once    sync.Once
	wg      sync.WaitGroup // forward
}

func (c *kafkagoConsumer) forward(r *kafka.Reader) {
	defer c.wg.Done()
	for {
		m, err := r.FetchMessage(c.ctx)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.fail(err)
			if errors.Is(err, io.EOF) { // the Reader was closed
				return
			}
			continue
		}
		select {
		case c.msgs <- fetched{partition: int32(m.Partition), offset: m.Offset, value: m.Value}:
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *kafkagoConsumer) Close() error {
	c.once.Do(func() {
		c.stop()
		c.wg.Wait()
		for _, r := range c.readers {
			r.Close()
		}
	})
	return nil
}
