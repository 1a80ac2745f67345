package clients

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// saramaClient runs the log workload's producers and assigned consumers
// on IBM/sarama in this process: an AsyncProducer sending one record at a
// time (as the franz-go producers do) and a Consumer with one
// PartitionConsumer per assigned partition.
type saramaClient struct {
	cfg   workloads.Config
	own   map[string]string
	seeds []string
	dial  workloads.DialFunc
	sasl  *SASL
}

func newSarama(cfg workloads.Config, own map[string]string, env Env) (*saramaClient, error) {
	if _, err := saramaConfig(cfg, own); err != nil {
		return nil, err
	}
	if env.Dial == nil {
		env.Dial = (&net.Dialer{}).DialContext
	}
	if env.SASL != nil {
		if err := env.SASL.check(); err != nil {
			return nil, err
		}
	}
	return &saramaClient{cfg: cfg.WithDefaults(), own: own, seeds: env.Seeds, dial: env.Dial, sasl: env.SASL}, nil
}

func (*saramaClient) Name() string { return Sarama }

// config returns a fresh sarama config dialing through dial.
func (s *saramaClient) config(dial workloads.DialFunc) *sarama.Config {
	c, _ := saramaConfig(s.cfg, s.own) // checked in newSarama
	if s.sasl != nil {
		s.sasl.sarama(c)
	}
	return withDialer(c, dial)
}

// withDialer makes c dial through dial.
func withDialer(c *sarama.Config, dial workloads.DialFunc) *sarama.Config {
	c.Net.Proxy.Enable = true
	c.Net.Proxy.Dialer = proxyDialer{dial: dial, timeout: c.Net.DialTimeout}
	return c
}

// proxyDialer is the dialer sarama takes (Net.Proxy.Dialer, without a
// context): the lab's dial, bounded by Net.DialTimeout as sarama's own
// dialer is.
type proxyDialer struct {
	dial    workloads.DialFunc
	timeout time.Duration
}

func (d proxyDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.dial(ctx, network, addr)
}

// Producer opens an AsyncProducer whose connections count the Produce
// requests written (workloads.ProduceCounter). sarama asks for an
// idempotent producer's id when it opens, so an error there is an open
// that failed, recorded by nobody: the producer process does not start.
func (s *saramaClient) Producer(ctx context.Context, proc, i int) (workloads.Producer, error) {
	writes := &workloads.ProduceCounter{}
	conf := s.config(writes.Dialer(s.dial))
	var ap sarama.AsyncProducer
	if err := retry(ctx, func() (err error) {
		ap, err = sarama.NewAsyncProducer(s.seeds, conf)
		return err
	}); err != nil {
		return nil, fmt.Errorf("new producer: %w", err)
	}
	return newSaramaProducer(ap, writes, &s.cfg, conf.Producer.Retry.Max > 0), nil
}

// newSaramaProducer routes ap's outcomes to the sends waiting for them.
func newSaramaProducer(ap sarama.AsyncProducer, writes *workloads.ProduceCounter, cfg *workloads.Config, retries bool) *saramaProducer {
	p := &saramaProducer{ap: ap, writes: writes, cfg: cfg, retries: retries}
	p.wg.Add(1)
	go p.route()
	return p
}

// sentResult is a message's outcome as sarama returned it.
type sentResult struct {
	offset int64
	err    error
}

type saramaProducer struct {
	ap      sarama.AsyncProducer
	writes  *workloads.ProduceCounter
	cfg     *workloads.Config
	retries bool
	wg      sync.WaitGroup // route
}

// route hands each outcome to the send waiting for it (a message's
// Metadata is its channel, with room for one).
func (p *saramaProducer) route() {
	defer p.wg.Done()
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			m.Metadata.(chan sentResult) <- sentResult{offset: m.Offset}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			e.Msg.Metadata.(chan sentResult) <- sentResult{offset: -1, err: e.Err}
		}
	}
}

// Send hands the record to sarama and waits for its outcome, at most
// delivery.timeout (sarama has no delivery timeout of its own; its
// retries are counted, not timed): a send still in sarama then is info,
// as it may be written later. An error sarama returned is mapped by
// saramaOutcome; an info outcome is fail when no Produce request began
// to be written on the producer's connections while the record was in
// sarama, since sarama returns a record's error only once every request
// that carried it was written or failed to be.
func (p *saramaProducer) Send(_ context.Context, r workloads.Record) (workloads.Sent, error) {
	done := make(chan sentResult, 1)
	msg := &sarama.ProducerMessage{Topic: p.cfg.Topic, Partition: r.Partition, Key: sarama.StringEncoder(r.Key),
		Value: sarama.StringEncoder(strconv.FormatInt(r.Value, 10)), Metadata: done}
	// The run's end does not cut a send short: it ends within
	// delivery.timeout.
	timer := time.NewTimer(p.cfg.DeliveryTimeout)
	defer timer.Stop()
	before := p.writes.Count()
	select {
	case p.ap.Input() <- msg:
	case <-timer.C:
		return workloads.Sent{Type: history.Fail, Offset: -1, Error: "never sent: sarama did not take the record within delivery.timeout"}, nil
	}
	var res sentResult
	select {
	case res = <-done:
	case <-timer.C:
		return workloads.Sent{Type: history.Info, Offset: -1, Error: fmt.Sprintf("no outcome from sarama within delivery.timeout (%s)", p.cfg.DeliveryTimeout)}, nil
	}
	if res.err == nil {
		s := workloads.Sent{Type: history.OK, Offset: -1}
		if p.cfg.Acks != "0" {
			s.Offset = res.offset
		}
		return s, nil
	}
	t, name := saramaOutcome(res.err, p.retries)
	if t == history.Info && p.writes.Count() == before {
		return workloads.Sent{Type: history.Fail, Offset: -1, Error: "never sent: " + name}, nil
	}
	return workloads.Sent{Type: t, Offset: -1, Error: name}, nil
}

// Close closes the producer, waiting for what it still holds.
func (p *saramaProducer) Close() error {
	p.ap.AsyncClose()
	p.wg.Wait()
	return nil
}

// saramaOutcome maps an error sarama returned for a record (ProducerError's
// Err) to an outcome and the name the history shows (Kafka's code name for
// a broker's error), from sarama v1.61.1's async_producer.go:
//
//   - a KError is the broker's answer to the request that carried the
//     record last: workloads.Classify decides it as for franz-go (fail
//     for refusals that hold on every attempt, and for
//     NOT_ENOUGH_REPLICAS and UNKNOWN_TOPIC_OR_PARTITION only when sarama
//     does not retry, Producer.Retry.Max 0; info for REQUEST_TIMED_OUT,
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, ...);
//   - a ConfigurationError (the record is larger than
//     Producer.MaxMessageBytes, or has headers below Version 0.11) and
//     ErrInvalidPartition are refusals made before the record was queued:
//     fail;
//   - everything else (a network error, ErrOutOfBrokers, ErrNotConnected,
//     ErrShuttingDown, ErrIncompleteResponse, a breaker open on leader
//     lookups, ErrProducerRetryBufferOverflow, ...) is info, which the
//     caller turns into fail when no Produce request was written.
//
// sarama returns ErrDuplicateSequenceNumber as a success.
func saramaOutcome(err error, retries bool) (history.Type, string) {
	var ke sarama.KError
	if errors.As(err, &ke) {
		return kafkaCode(int16(ke), retries)
	}
	var ce sarama.ConfigurationError
	if errors.As(err, &ce) || errors.Is(err, sarama.ErrInvalidPartition) {
		return history.Fail, err.Error()
	}
	return history.Info, err.Error()
}

// Consumer opens a sarama Consumer reading each of parts from its start.
func (s *saramaClient) Consumer(ctx context.Context, _ int, parts []int32) (workloads.Consumer, error) {
	return s.consumer(ctx, s.config(s.dial), parts)
}

// consumer opens a sarama Consumer with conf reading each of parts from
// its start.
func (s *saramaClient) consumer(ctx context.Context, conf *sarama.Config, parts []int32) (*saramaConsumer, error) {
	var cons sarama.Consumer
	if err := retry(ctx, func() (err error) {
		cons, err = sarama.NewConsumer(s.seeds, conf)
		return err
	}); err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	c := &saramaConsumer{merged: newMerged(saramaPollError), cons: cons, stop: make(chan struct{})}
	for _, p := range parts {
		var pc sarama.PartitionConsumer
		if err := retry(ctx, func() (err error) {
			pc, err = cons.ConsumePartition(s.cfg.Topic, p, sarama.OffsetOldest)
			return err
		}); err != nil {
			c.Close()
			return nil, fmt.Errorf("consume %s/%d: %w", s.cfg.Topic, p, err)
		}
		c.pcs = append(c.pcs, pc)
		c.wg.Add(1)
		go c.forward(pc)
	}
	return c, nil
}

// saramaConsumer merges its partition consumers' messages and errors.
type saramaConsumer struct {
	*merged
	cons sarama.Consumer
	pcs  []sarama.PartitionConsumer
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup // forward
}

// saramaPollError names a partition consumer's error.
func saramaPollError(err error) string {
	var ce *sarama.ConsumerError
	if errors.As(err, &ce) {
		_, name := saramaOutcome(ce.Err, false)
		return name
	}
	return err.Error()
}

// forward passes pc's messages and errors on until Close; then it drains
// them until pc has closed its channels, as sarama asks of AsyncClose.
func (c *saramaConsumer) forward(pc sarama.PartitionConsumer) {
	defer c.wg.Done()
	msgs, errs := pc.Messages(), pc.Errors()
	stop := c.stop
	for msgs != nil || errs != nil {
		select {
		case <-stop:
			stop = nil
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			if stop == nil {
				continue
			}
			select {
			case c.msgs <- fetched{partition: m.Partition, offset: m.Offset, value: m.Value}:
			case <-stop:
				stop = nil
			}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			c.fail(e)
		}
	}
}

func (c *saramaConsumer) Close() error {
	c.once.Do(func() {
		close(c.stop)
		for _, pc := range c.pcs {
			pc.AsyncClose()
		}
		c.wg.Wait()
		c.cons.Close()
	})
	return nil
}

// retry calls f until it succeeds or ctx ends, 100 ms apart: a broker
// the client asks (for metadata, an offset, a producer id) may be moving.
// It returns f's last error and ctx's.
func retry(ctx context.Context, f func() error) error {
	var err error
	for ctx.Err() == nil {
		if err = f(); err == nil {
			return nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return errors.Join(err, ctx.Err())
}

// kafkaCode maps a Kafka error code a client returned for a record to an
// outcome as workloads.Classify decides it for franz-go, and the code's
// name (NOT_ENOUGH_REPLICAS); retried says whether the client may have
// sent the record more than once.
func kafkaCode(code int16, retried bool) (history.Type, string) {
	err := kerr.ErrorForCode(code)
	if err == nil {
		return history.OK, ""
	}
	name := err.Error()
	var k *kerr.Error
	if errors.As(err, &k) {
		name = k.Message
	}
	return workloads.Classify(err, retried), name
}
