package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestSaramaOutcome: sarama's errors map to Jepsen's outcomes as
// docs/clients-under-faults.md says.
func TestSaramaOutcome(t *testing.T) {
	tests := []struct {
		err     error
		retries bool
		want    history.Type
		name    string
	}{
		{sarama.ErrMessageSizeTooLarge, true, history.Fail, "MESSAGE_TOO_LARGE"},
		{sarama.ErrInvalidRequiredAcks, true, history.Fail, "INVALID_REQUIRED_ACKS"},
		{sarama.ErrNotEnoughReplicas, false, history.Fail, "NOT_ENOUGH_REPLICAS"},
		{sarama.ErrNotEnoughReplicas, true, history.Info, "NOT_ENOUGH_REPLICAS"},
		{sarama.ErrNotEnoughReplicasAfterAppend, false, history.Info, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"},
		{sarama.ErrRequestTimedOut, false, history.Info, "REQUEST_TIMED_OUT"},
		{sarama.ErrNotLeaderForPartition, false, history.Info, "NOT_LEADER_FOR_PARTITION"},
		{sarama.ErrOutOfOrderSequenceNumber, false, history.Info, "OUT_OF_ORDER_SEQUENCE_NUMBER"},
		{sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes"), true, history.Fail, ""},
		{sarama.ErrInvalidPartition, true, history.Fail, ""},
		{sarama.ErrOutOfBrokers, true, history.Info, ""},
		{sarama.ErrShuttingDown, true, history.Info, ""},
		{sarama.ErrIncompleteResponse, true, history.Info, ""},
		{&net.OpError{Op: "read", Err: errors.New("i/o timeout")}, false, history.Info, ""},
		{io.EOF, false, history.Info, ""},
	}
	for _, tc := range tests {
		got, name := saramaOutcome(tc.err, tc.retries)
		if got != tc.want || (tc.name != "" && name != tc.name) {
			t.Errorf("%v (retries %v): %s %q, want %s %q", tc.err, tc.retries, got, name, tc.want, tc.name)
		}
	}
}

// TestSaramaConfig: the workload's Kafka-named keys map to sarama's
// fields, and client.config (sarama's own names) comes after them.
func TestSaramaConfig(t *testing.T) {
	c, err := saramaConfig(workloads.Config{Acks: "1", Retries: -1, MaxInFlight: 3, RequestTimeout: 4 * time.Second, Linger: 5 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Producer.RequiredAcks != sarama.WaitForLocal || c.Producer.Retry.Max != 0 || c.Net.MaxOpenRequests != 3 ||
		c.Producer.Timeout != 4*time.Second || c.Net.ReadTimeout != 4*time.Second || c.Producer.Flush.Frequency != 5*time.Millisecond {
		t.Errorf("acks=1, retries -1, in flight 3, request.timeout 4s, linger 5ms: %+v %+v", c.Producer, c.Net)
	}
	c, err = saramaConfig(workloads.Config{Idempotent: true, DeliveryTimeout: 10 * time.Second},
		map[string]string{"Producer.Retry.Backoff": "50ms", "Version": "3.7.0", "Producer.Compression": "zstd", "Producer.RequiredAcks": "all"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Producer.Idempotent || c.Net.MaxOpenRequests != 1 || c.Producer.RequiredAcks != sarama.WaitForAll ||
		c.Producer.Retry.Backoff != 50*time.Millisecond || c.Version != sarama.V3_7_0_0 || c.Producer.Compression != sarama.CompressionZSTD {
		t.Errorf("idempotent with sarama's own settings: %+v %+v %v", c.Producer, c.Net, c.Version)
	}
	// retries 0 is "until delivery.timeout": the retries that take it at
	// sarama's default backoff.
	if c.Producer.Retry.Max != 100 {
		t.Errorf("Producer.Retry.Max %d, want 10s / 100ms", c.Producer.Retry.Max)
	}
}

// logRun runs a Log workload of one send through client c (franz-go when
// nil) and drains the topic; it returns the history.
func logRun(t *testing.T, c workloads.Client, cfg workloads.Config, seeds []string, release func()) []history.Op {
	t.Helper()
	var mem history.Memory
	start := time.Now()
	rec := history.NewRecorder(&mem, func() time.Duration { return time.Since(start) })
	w, err := workloads.NewLogWith(c, cfg, rec, seeds)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	release()
	if err := w.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	return mem.Ops
}

func sendOutcome(t *testing.T, ops []history.Op) history.Op {
	t.Helper()
	for _, op := range ops {
		if op.F == history.FSend && op.Type != history.Invoke {
			return op
		}
	}
	t.Fatal("no send completed")
	return history.Op{}
}

// TestHeldProduceIsInfo: for each client, a send whose Produce request
// the leader holds (a broker test hook) until the client gives up on it
// is info, never fail: the request was written, and once the hold ends
// the broker appends the record, which the drain reads.
func TestHeldProduceIsInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1, TestHooks: true})
	driver := proctest.Build(t, "./examples/exec-driver")
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			if _, ok := pythonDrivers[name]; ok {
				needPython(t, name)
			}
			topic := "held-" + name
			c.CreateTopic(topic, 1, 1, nil)
			// A short request timeout, sent once: the client gives up on
			// the held request itself.
			cfg := workloads.Config{Topic: topic, Partitions: 1, Producers: 1, Consumers: 1, Sends: 1, Retries: -1,
				RequestTimeout: 2 * time.Second, DeliveryTimeout: 20 * time.Second, PollTimeout: 200 * time.Millisecond}
			spec := workloads.ClientSpec{Client: name}
			if name == Exec {
				spec.Exec = []string{driver}
				// kgo in the driver waits for the held request up to its
				// request timeout and overhead.
				cfg.DeliveryTimeout = 3 * time.Second
			}
			if name == Librdkafka {
				// librdkafka reports the held message at message.timeout.ms
				// (_MSG_TIMED_OUT).
				cfg.DeliveryTimeout = 5 * time.Second
			}
			cl, err := New(spec, cfg, Env{Seeds: c.Bootstrap(), HangGrace: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			rule := c.Hook(1, proctest.HookRule{API: "Produce", Topic: topic})
			released := false
			release := func() {
				if !released {
					c.Unhook(1, rule)
					released = true
				}
			}
			t.Cleanup(release)
			ops := logRun(t, cl, cfg, c.Bootstrap(), release)
			st, err := c.HookState(1, rule)
			if err == nil && st.Matched == 0 {
				t.Fatal("the hook held no Produce request")
			}
			sent := sendOutcome(t, ops)
			if sent.Type != history.Info {
				t.Fatalf("the held send ended %s (%s), want info", sent.Type, sent.Error)
			}
			v := checker.CheckOps(ops, checker.Options{})
			if v.Stats.ReadValues != 1 {
				t.Fatalf("the drain read %d values, want the held record", v.Stats.ReadValues)
			}
			if v.Valid != checker.Valid {
				t.Errorf("verdict %s, anomalies %v", v.Valid, v.Anomalies)
			}
			t.Logf("%s: the held send ended info (%s); the drain read it", name, sent.Error)
		})
	}
}

// TestNeverSentIsFail: a send that fails before any Produce request was
// written is fail: sarama with every connection after the bootstrap's
// refused, kafka-go with every connection refused (its Writer looks the
// topic up first); and one that sarama refuses itself (a partition the
// topic does not have) is fail too.
func TestNeverSentIsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1})
	c.CreateTopic("unsent", 1, 1, nil)
	for _, tc := range []struct {
		client string
		allow  int64 // connections allowed
	}{{Sarama, 1}, {KafkaGo, 0}} {
		t.Run(tc.client, func(t *testing.T) {
			var dials atomic.Int64
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) > tc.allow {
					return nil, fmt.Errorf("dial %s: refused by the test", addr)
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			cfg := workloads.Config{Topic: "unsent", Partitions: 1, Retries: 1, RequestTimeout: 2 * time.Second, DeliveryTimeout: 20 * time.Second}
			cl, err := New(workloads.ClientSpec{Client: tc.client}, cfg, Env{Seeds: c.Bootstrap(), Dial: dial})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			p, err := cl.Producer(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			s, err := p.Send(ctx, workloads.Record{Partition: 0, Key: "k0", Value: 0})
			if err != nil || s.Type != history.Fail {
				t.Errorf("send with the broker connections refused: %s (%s), %v; want fail", s.Type, s.Error, err)
			}
			t.Logf("refused connections: %s (%s)", s.Type, s.Error)
			if tc.client != Sarama {
				return
			}
			s, err = p.Send(ctx, workloads.Record{Partition: 7, Key: "k0", Value: 1})
			if err != nil || s.Type != history.Fail {
				t.Errorf("send to partition 7 of 1: %s (%s), %v; want fail", s.Type, s.Error, err)
			}
		})
	}
}

// TestPythonNeverSent: through the Python drivers, a send that their
// client refuses before writing it is fail: a partition the topic does
// not have (librdkafka's _UNKNOWN_PARTITION delivery report,
// kafka-python's assertion in send()), and for kafka-python a topic whose
// metadata never comes (no broker answers within max_block_ms).
func TestPythonNeverSent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1})
	c.CreateTopic("unsent", 1, 1, nil)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		client, name string
		seeds        []string
		part         int32
	}{
		{Librdkafka, "partition-7-of-1", c.Bootstrap(), 7},
		{KafkaPython, "partition-7-of-1", c.Bootstrap(), 7},
		{KafkaPython, "no-broker", []string{nobody}, 0},
	} {
		t.Run(tc.client+"/"+tc.name, func(t *testing.T) {
			needPython(t, tc.client)
			cfg := workloads.Config{Topic: "unsent", Partitions: 1, Retries: 1, RequestTimeout: 2 * time.Second, DeliveryTimeout: 5 * time.Second}
			cl, err := New(workloads.ClientSpec{Client: tc.client}, cfg, Env{Seeds: tc.seeds})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.(io.Closer).Close()
			ctx := context.Background()
			p, err := cl.Producer(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			s, err := p.Send(ctx, workloads.Record{Partition: tc.part, Key: "k0", Value: 1})
			if err != nil || s.Type != history.Fail {
				t.Errorf("send: %s (%s), %v; want fail", s.Type, s.Error, err)
			}
			t.Logf("%s (%s)", s.Type, s.Error)
		})
	}
}

// TestKafkaGoOutcome: kafka-go's errors map as docs/clients-under-faults.md
// says, and its settings are refused where kafka-go has none.
func TestKafkaGoOutcome(t *testing.T) {
	tests := []struct {
		err     error
		retried bool
		want    history.Type
		name    string
	}{
		{kafka.MessageSizeTooLarge, true, history.Fail, "MESSAGE_TOO_LARGE"},
		{kafka.WriteErrors{kafka.NotEnoughReplicas}, false, history.Fail, "NOT_ENOUGH_REPLICAS"},
		{kafka.WriteErrors{kafka.NotEnoughReplicas}, true, history.Info, "NOT_ENOUGH_REPLICAS"},
		{kafka.RequestTimedOut, false, history.Info, "REQUEST_TIMED_OUT"},
		{kafka.NotEnoughReplicasAfterAppend, false, history.Info, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"},
		{kafka.MessageTooLargeError{}, false, history.Fail, ""},
		{context.DeadlineExceeded, false, history.Info, ""},
		{io.ErrUnexpectedEOF, false, history.Info, ""},
		{io.EOF, false, history.Info, "EOF"},
	}
	for _, tc := range tests {
		got, name := kafkagoOutcome(tc.err, tc.retried)
		if got != tc.want || (tc.name != "" && name != tc.name) {
			t.Errorf("%v (retried %v): %s %q, want %s %q", tc.err, tc.retried, got, name, tc.want, tc.name)
		}
	}
	w, r, err := kafkagoConfig(workloads.Config{Acks: "1", Retries: 2, RequestTimeout: 3 * time.Second},
		map[string]string{"Writer.Compression": "4", "Reader.MaxWait": "50ms"})
	if err != nil {
		t.Fatal(err)
	}
	if w.RequiredAcks != kafka.RequireOne || w.MaxAttempts != 3 || w.WriteTimeout != 3*time.Second || w.Compression != kafka.Zstd || r.MaxWait != 50*time.Millisecond {
		t.Errorf("acks=1, retries 2, request.timeout 3s, zstd, MaxWait 50ms: %+v %+v", w, r)
	}
	for _, tc := range []struct {
		cfg  workloads.Config
		own  map[string]string
		want string
	}{
		{workloads.Config{Idempotent: true}, nil, "client kafka-go: kafka-go has no idempotent producer"},
		{workloads.Config{MaxInFlight: 5}, nil, "one request at a time per partition"},
		{workloads.Config{}, map[string]string{"Writer.Balancer": "x"}, "client.config.Writer.Balancer: set by the driver"},
		{workloads.Config{}, map[string]string{"MaxAttempts": "3"}, "Writer.FIELD (kafka.Writer) or Reader.FIELD"},
		{workloads.Config{}, map[string]string{"Writer.MaxAttempt": "3"}, "kafka.Writer has no MaxAttempt (did you mean MaxAttempts?)"},
	} {
		if _, _, err := kafkagoConfig(tc.cfg, tc.own); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %v: %v, want %q", tc.cfg, tc.own, err, tc.want)
		}
	}
}
