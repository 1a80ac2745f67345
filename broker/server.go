package broker

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// request is one decoded request travelling from a connection's reader to
// a handler goroutine and back. Exactly one of respond or drop is called.
type request struct {
	conn     *conn
	hdr      wire.Header
	req      kmsg.Request
	received time.Time
	done     chan reply
}

type reply struct {
	resp  kmsg.Response // nil: send nothing
	close bool          // close the connection after sending
	bufs  *bufSet       // released once resp is encoded
}

// respond completes the request with resp.
func (r *request) respond(resp kmsg.Response) { r.done <- reply{resp: resp} }

// respondReleasing completes the request with resp, whose record bytes
// live in bufs until the response has been encoded.
func (r *request) respondReleasing(resp kmsg.Response, bufs *bufSet) {
	r.done <- reply{resp: resp, bufs: bufs}
}

// noResponse completes a request that gets no response (acks=0 produce).
func (r *request) noResponse() { r.done <- reply{} }

// closeConn completes the request by closing its connection, as Kafka does
// for an acks=0 produce that failed.
func (r *request) closeConn() { r.done <- reply{close: true} }

// conn is one client connection. Like Kafka's network processor, it mutes
// itself while a request is being handled, so responses leave in request
// order and a connection holds at most one request in the queue.
type conn struct {
	b      *Broker
	nc     net.Conn
	remote string
	log    *slog.Logger
}

// serveConn runs one connection until it closes or ctx ends.
func (b *Broker) serveConn(ctx context.Context, nc net.Conn) {
	c := &conn{b: b, nc: nc, remote: nc.RemoteAddr().String()}
	c.log = b.log.With("remote", c.remote)
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	r := bufio.NewReaderSize(nc, 64*1024)
	maxFrame := int32(b.cfg.Int("socket.request.max.bytes"))
	var buf, out []byte
	done := make(chan reply, 1)
	for {
		frame, err := wire.ReadFrame(r, maxFrame, buf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.log.Warn("closing connection", "err", err)
			}
			return
		}
		busyStart := time.Now()
		// The decoded request aliases the frame, but the connection is
		// muted until the request completes, so the buffer is free again
		// for the next frame; only very large buffers are let go.
		if cap(frame) > 16<<20 {
			buf = nil
		} else {
			buf = frame[:0]
		}
		hdr, req, err := b.served.Decode(frame)
		if err != nil {
			if hdr.Key == wire.ApiVersionsKey && errors.Is(err, wire.ErrUnsupportedVersion) {
				// KIP-511: answer an unknown ApiVersions version at v0.
				out = wire.AppendResponse(out[:0], hdr, b.apiVersions(hdr.Version, nil))
				if _, err := nc.Write(out); err != nil {
					return
				}
				continue
			}
			c.log.Warn("closing connection on bad request", "key", hdr.Key, "version", hdr.Version, "err", err)
			b.metrics.badRequests.Inc()
			return
		}
		b.metrics.bytesIn.Add(float64(len(frame) + 4))
		b.metrics.countRequest(hdr.Key, hdr.Version)
		rq := &request{conn: c, hdr: hdr, req: req, received: time.Now(), done: done}
		b.metrics.networkBusy.Add(time.Since(busyStart).Nanoseconds())
		if b.testHooks != nil && !b.testHooks.admit(ctx, rq) {
			return
		}
		select {
		case b.queue <- rq:
		case <-ctx.Done():
			return
		}
		var rep reply
		select {
		case rep = <-done:
		case <-ctx.Done():
			return
		}
		busyStart = time.Now()
		if rep.resp != nil {
			if hdr.Key != wire.ApiVersionsKey { // an unsupported version is answered at v0
				rep.resp.SetVersion(hdr.Version)
			}
			if hint := sizeHint(rep.resp); cap(out) < hint {
				out = make([]byte, 0, hint)
			}
			out = wire.AppendResponse(out[:0], hdr, rep.resp)
			rep.bufs.release()
			if _, err := nc.Write(out); err != nil {
				return
			}
			b.metrics.bytesOut.Add(float64(len(out)))
			if cap(out) > 32<<20 {
				out = nil
			}
		}
		b.metrics.observeRequest(hdr.Key, req, time.Since(rq.received))
		b.metrics.networkBusy.Add(time.Since(busyStart).Nanoseconds())
		if rep.close {
			return
		}
	}
}

// handlerLoop is one of num.io.threads request handlers.
func (b *Broker) handlerLoop(ctx context.Context, clock *threadClock) {
	for {
		select {
		case <-ctx.Done():
			return
		case rq := <-b.queue:
			clock.begin(time.Now().UnixNano())
			b.dispatch(ctx, rq)
			clock.end(time.Now().UnixNano(), &b.metrics.handlerBusy)
		}
	}
}

// dispatch runs the handler for rq's API; handlers never let a panic out.
func (b *Broker) dispatch(ctx context.Context, rq *request) {
	defer func() {
		if p := recover(); p != nil {
			b.log.Error("handler panic", "api", kmsg.NameForKey(rq.hdr.Key), "panic", p)
			rq.done <- reply{close: true}
		}
	}()
	h, ok := b.handlers[rq.hdr.Key]
	if !ok {
		rq.done <- reply{close: true}
		return
	}
	h(ctx, rq)
}

// acceptLoop accepts connections on ln until ctx ends.
func (b *Broker) acceptLoop(ctx context.Context, ln net.Listener, wg *sync.WaitGroup) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			b.log.Warn("accept", "err", err)
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.serveConn(ctx, nc)
		}()
	}
}

// idleMeter turns accumulated busy nanoseconds into an idle percentage over the last sampling period.
type idleMeter struct {
	last    int64
	lastAt  time.Time
	percent atomic.Int64 // percent * 100
}

func (m *idleMeter) sample(busyTotal int64, now time.Time, threads int) {
	if !m.lastAt.IsZero() {
		elapsed := now.Sub(m.lastAt).Nanoseconds() * int64(threads)
		if elapsed > 0 {
			frac := 1 - float64(busyTotal-m.last)/float64(elapsed)
			if frac < 0 {
				frac = 0
			}
			if frac > 1 {
				frac = 1
			}
			m.percent.Store(int64(frac * 10000))
		}
	}
	m.last, m.lastAt = busyTotal, now
}

// sizeHint estimates an encoded response's size so that a large fetch
// response is encoded into one allocation instead of a doubling series.
func sizeHint(resp kmsg.Response) int {
	fr, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	n := 64
	for _, t := range fr.Topics {
		n += len(t.Topic) + 16
		for _, p := range t.Partitions {
			n += len(p.RecordBatches) + 64
		}
	}
	return n
}
