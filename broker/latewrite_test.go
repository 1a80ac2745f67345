package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/kproxy"
	"github.com/isrlab/isrlab/units"
)

// produceTap records the Produce frames written to the broker through a
// connection, and when.
type produceTap struct {
	mu     sync.Mutex
	frames [][]byte
	at     []time.Time
}

type tappedConn struct {
	net.Conn
	tap *produceTap
}

// Write sees whole frames: the proxy writes each request in one call.
func (c tappedConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && int16(binary.BigEndian.Uint16(b[4:6])) == int16(kmsg.Produce) {
		c.tap.mu.Lock()
		c.tap.frames = append(c.tap.frames, slices.Clone(b))
		c.tap.at = append(c.tap.at, time.Now())
		c.tap.mu.Unlock()
	}
	return c.Conn.Write(b)
}

// TestLateProduceOfFranzGo is txn/late-write's story in process: the
// first Produce request of a franz-go transaction is held by a Kafka
// proxy past the client's request timeout; the transaction is aborted,
// the next one begins, and only then does the held request reach the
// broker. franz-go never abandons a batch it wrote without an answer: it
// sent the batch again, with the same producer id, epoch and sequence, on
// a new connection, and ended the transaction only once that was
// answered. Under transaction.version 0 the late copy is a duplicate of
// that batch (the broker answers with the retry's offsets and appends
// nothing); under 2 the abort bumped the epoch and fences it. Either way
// read_committed sees only the second transaction's record, and the log
// holds the aborted record once. TestLateWriteAfterAbort is the same late
// write from a client that abandoned its sequence: accepted under 0.
func TestLateProduceOfFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a held request")
	}
	for _, tc := range []struct {
		name      string
		overrides []string
		late      int16 // the broker's answer to the late copy, replayed
	}{
		{"transaction.version=0", nil, 0},
		{"transaction.version=2", []string{"transaction.version=2"}, kerr.InvalidProducerEpoch.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), tc.overrides...)
			topic := "late"
			createTopic(t, b.client(t), topic, 1, nil)

			p := kproxy.NewInline(kproxy.Options{Seed: 1})
			t.Cleanup(p.Close)
			hold := 3 * time.Second
			if err := p.Set(kproxy.Rule{ID: "late", API: "Produce", Direction: kproxy.DirRequest, Action: kproxy.ActDelay, Delay: units.Duration(hold), Count: 1}); err != nil {
				t.Fatal(err)
			}
			tap := &produceTap{}
			var d net.Dialer
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return tappedConn{c, tap}, nil
			}
			cl := b.client(t,
				kgo.TransactionalID("late-1"),
				kgo.TransactionTimeout(30*time.Second),
				kgo.DefaultProduceTopic(topic),
				kgo.ProduceRequestTimeout(500*time.Millisecond),
				kgo.RequestTimeoutOverhead(500*time.Millisecond),
				kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
					return p.DialVia(ctx, network, host, dial)
				}),
			)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// Transaction 1: its first Produce is held; franz-go gives up
			// on it after 1 s and sends the batch again.
			sent := time.Now()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.AbortBufferedRecords(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			aborted := time.Now()
			if aborted.Sub(sent) >= hold {
				t.Fatalf("transaction 1 ended %v after its first send, not before the held request (%v)", aborted.Sub(sent), hold)
			}
			// Transaction 2 runs while the request is still held.
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("committed")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			var late []byte
			proctest.Eventually(t, 10*time.Second, "the held produce delivered", func() error {
				tap.mu.Lock()
				defer tap.mu.Unlock()
				for i, at := range tap.at {
					if at.After(aborted) && at.Sub(sent) >= hold {
						late = tap.frames[i]
						return nil
					}
				}
				return errors.New("not yet")
			})
			// What the broker answers the late copy, replayed on a
			// connection of our own while transaction 2 is still open.
			// Whether the forwarded copy is handled before or after the
			// replay, both carry the sequence of the batch sent again: a
			// broker that appended either would answer another offset
			// here or show "aborted" twice in the read below.
			rc := dialRaw(t, b.Addrs()[0])
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(int16(binary.BigEndian.Uint16(late[6:8])))
			hdr := 4 + 2 + 2 + 4
			clientID := int(int16(binary.BigEndian.Uint16(late[hdr:])))
			hdr += 2 + max(clientID, 0)
			if req.IsFlexible() {
				hdr++ // no tagged fields
			}
			if err := req.ReadFrom(late[hdr:]); err != nil {
				t.Fatalf("the late produce does not decode: %v", err)
			}
			got := rc.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
			if got.ErrorCode != tc.late {
				t.Errorf("the late copy replayed: %s, want %s", kerr.ErrorForCode(got.ErrorCode), kerr.ErrorForCode(tc.late))
			}
			if tc.late == 0 && got.BaseOffset != 0 {
				t.Errorf("the late copy replayed: at offset %d, want 0 (the duplicate of the batch sent again)", got.BaseOffset)
			}

			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}

			for _, iso := range []struct {
				level kgo.IsolationLevel
				want  []string
			}{
				{kgo.ReadCommitted(), []string{"committed"}},
				{kgo.ReadUncommitted(), []string{"aborted", "committed"}},
			} {
				consumer := b.client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso.level), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				var read []string
				proctest.Eventually(t, 30*time.Second, "read", func() error {
					pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
					defer pcancel()
					consumer.PollFetches(pctx).EachRecord(func(r *kgo.Record) { read = append(read, string(r.Value)) })
					if !slices.Contains(read, "committed") {
						return errors.New("not yet")
					}
					return nil
				})
				if !slices.Equal(read, iso.want) {
					t.Errorf("read %v, want %v", read, iso.want)
				}
			}
		})
	}
}
