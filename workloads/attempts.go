package workloads

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// dialFunc dials like net.Dialer.DialContext, as kgo.Dialer takes it.
type dialFunc = func(ctx context.Context, network, host string) (net.Conn, error)

// DialFunc dials like net.Dialer.DialContext, as kgo.Dialer takes it.
type DialFunc = dialFunc

// ProduceCounter counts the Produce requests a client began to write on
// the connections its dialer made, before their first byte goes out: what
// the franz-go producers count their writes with, for the other
// in-process clients. A send during which the count did not move, and
// after which the client can no longer write the record, never reached a
// broker.
type ProduceCounter struct{ a attempts }

// Dialer wraps dial so that its connections count.
func (c *ProduceCounter) Dialer(dial DialFunc) DialFunc { return c.a.dialer(dial) }

// Count is how many Produce requests began to be written so far.
func (c *ProduceCounter) Count() int64 { return c.a.n.Load() }

// DialOf returns the dial function that opts give kgo (kgo's default
// dialer when they name none), for clients other than kgo that must dial
// the same way (from the client host's network namespace).
func DialOf(opts []kgo.Opt) (DialFunc, error) { return dialOf(opts) }

// attempts counts the Produce requests a producer client began to write,
// on any of its connections. The count moves before the request's first
// byte reaches the connection, so a request still being written (a broker
// that stopped reading, a write a cancellation interrupts) is counted; a
// kgo.HookBrokerWrite only fires once the write is over.
//
// A producer sends one record at a time, so a Produce request written
// while a record is in the client may carry it, and no other request can:
// a send during which the count does not move, and after which none of the
// client's queued requests can still be written (settled), never reached a
// broker.
type attempts struct{ n atomic.Int64 }

// dialer wraps dial so that the client's connections count its Produce
// requests.
func (a *attempts) dialer(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, attempts: &a.n}, nil
	}
}

// neverSent reports whether no Produce request that could carry a record
// was written since the count stood at before, nor can be any more. A
// request kgo had already built with the record when it failed the record
// is queued to its broker, and kgo writes a broker's requests one at a time
// in order: once a request queued after it is answered, it was written (or
// given up) and counted. ctx bounds the wait; when it ends first, or a
// broker cannot be asked, the answer is false: in doubt, the send is info.
func (a *attempts) neverSent(ctx context.Context, cl *kgo.Client, before int64) bool {
	if a.n.Load() != before {
		return false
	}
	return settled(ctx, cl) && a.n.Load() == before
}

// settled reports whether every request cl had queued to the brokers it
// knows has been handled: a request queued behind them on each broker came
// back. kgo sends produce requests to brokers it learned from metadata
// (DiscoveredBrokers), never to the seeds.
func settled(ctx context.Context, cl *kgo.Client) bool {
	brokers := cl.DiscoveredBrokers()
	ok := make([]bool, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Request(ctx, kmsg.NewPtrApiVersionsRequest())
			ok[i] = handled(ctx, err)
		}()
	}
	wg.Wait()
	for _, o := range ok {
		if !o {
			return false
		}
	}
	return true
}

// handled reports whether a barrier request's outcome shows that the
// broker's request queue reached it: an answer, a Kafka error or a
// connection error from the broker's request loop. The wait's own end, a
// closed client, or a broker kgo no longer knows say nothing.
func handled(ctx context.Context, err error) bool {
	if err == nil {
		return true
	}
	if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) {
		return false
	}
	var ke *kerr.Error
	var ne *net.OpError
	return errors.As(err, &ke) || errors.As(err, &ne)
}

// barrierTimeout bounds the wait of neverSent: a send that cannot tell by
// then is info.
func barrierTimeout(cfg *Config) time.Duration {
	return min(cfg.RequestTimeout, 5*time.Second)
}

// countingConn follows the Kafka request frames written to a connection (a
// 4-byte size, then the 2-byte API key) and counts each Produce request (key
// 0) before its first byte is written. A frame whose key is not yet known
// when its first bytes go out counts as one; if the framing cannot be
// followed, every write counts.
type countingConn struct {
	net.Conn
	attempts *atomic.Int64

	mu      sync.Mutex
	left    int64  // bytes of the current frame not written yet
	head    []byte // the start of a frame, until its key is known
	counted bool   // the frame in head was counted
	lost    bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	if n := c.produceFrames(b); n > 0 {
		c.attempts.Add(n)
	}
	return c.Conn.Write(b)
}

// produceFrames returns how many Produce requests begin in b.
func (c *countingConn) produceFrames(b []byte) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return 1
	}
	var n int64
	for len(b) > 0 {
		if c.left > 0 {
			k := min(c.left, int64(len(b)))
			c.left -= k
			b = b[k:]
			continue
		}
		k := min(6-len(c.head), len(b))
		c.head = append(c.head, b[:k]...)
		b = b[k:]
		if len(c.head) < 6 {
			if !c.counted {
				n++ // its key is still unknown
				c.counted = true
			}
			break
		}
		size := int32(binary.BigEndian.Uint32(c.head))
		key := int16(binary.BigEndian.Uint16(c.head[4:]))
		if size < 2 {
			c.lost = true
			return n + 1
		}
		if key == 0 && !c.counted {
			n++
		}
		c.left = int64(size) - 2
		c.head, c.counted = c.head[:0], false
	}
	return n
}

// dialOf returns the dial function that opts give kgo (kgo's default dialer,
// TLS included, when they name none). It reads it from a client that is
// closed at once: a producer's connections must count its writes, and only
// a dialer that wraps the caller's can do that.
func dialOf(opts []kgo.Opt) (dialFunc, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new kafka client: %w", err)
	}
	defer cl.Close()
	dial, ok := cl.OptValue(kgo.Dialer).(dialFunc)
	if !ok || dial == nil {
		return nil, errors.New("kafka client has no dialer")
	}
	return dial, nil
}
