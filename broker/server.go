package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/security"
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
	l      *listener
	sasl   *security.Session // SASL listeners only
}

// listener is the name of the listener the request came in on.
func (rq *request) listener() string {
	if rq.conn == nil || rq.conn.l == nil {
		return ""
	}
	return rq.conn.l.Name
}

// onListener turns a broker's endpoint into the one clients of the
// request's listener use; nil when that broker has no such listener.
func (rq *request) onListener(e *brokerEndpoint) *brokerEndpoint {
	if e == nil {
		return nil
	}
	on, ok := e.on(rq.listener())
	if !ok {
		return nil
	}
	return &on
}

// serveConn runs one connection until it closes or ctx ends. On a TLS
// listener it first completes the TLS handshake; on a SASL listener the
// connection's SASL session sees every request first (authenticate).
func (b *Broker) serveConn(ctx context.Context, nc net.Conn, l *listener) {
	c := &conn{b: b, nc: nc, remote: nc.RemoteAddr().String(), l: l}
	c.log = b.log.With("remote", c.remote, "listener", l.Name)
	defer func() { nc.Close() }()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if l.tls != nil {
		tc := tls.Server(nc, l.tls)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			// Kafka logs "Failed authentication with <client> (SSL
			// handshake failed)"; the client sees the TLS alert. A
			// connection closed before a byte came is a port check.
			level := slog.LevelInfo
			if errors.Is(err, io.EOF) {
				level = slog.LevelDebug
			}
			c.log.Log(ctx, level, "failed authentication (SSL handshake failed)", "err", err)
			return
		}
		nc, c.nc = tc, tc
	}
	if l.sasl != nil {
		c.sasl = security.NewSession(l.sasl)
	}

	r := bufio.NewReaderSize(nc, 64*1024)
	maxFrame := int32(b.cfg.Int("socket.request.max.bytes"))
	var buf, out []byte
	done := make(chan reply, 1)
	for {
		limit := maxFrame
		if c.sasl != nil && !c.sasl.Authenticated() {
			// Kafka's sasl.server.max.receive.size bounds what an
			// unauthenticated client can make the broker allocate.
			limit = int32(b.cfg.Int("sasl.server.max.receive.size"))
		}
		frame, err := wire.ReadFrame(r, limit, buf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.log.Warn("closing connection", "err", err)
			}
			return
		}
		if c.sasl != nil && c.sasl.Raw() {
			if !c.rawSASL(frame) {
				return
			}
			continue
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
		if c.sasl != nil {
			res, taken := c.sasl.Step(ctx, hdr.Key, hdr.Version, req, func() kmsg.Response {
				avr, _ := req.(*kmsg.ApiVersionsRequest)
				return b.apiVersions(hdr.Version, avr)
			})
			if taken {
				if !c.answerSASL(hdr, res, &out) {
					return
				}
				continue
			}
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

// answerSASL sends what the SASL session answered and reports whether
// the connection stays open.
func (c *conn) answerSASL(hdr wire.Header, res security.Result, out *[]byte) bool {
	if res.Resp != nil {
		if hdr.Key != wire.ApiVersionsKey {
			res.Resp.SetVersion(hdr.Version)
		}
		*out = wire.AppendResponse((*out)[:0], hdr, res.Resp)
		if _, err := c.nc.Write(*out); err != nil {
			return false
		}
	}
	if res.Close {
		c.log.Info("closing connection: SASL authentication failed", "err", res.Err)
		return false
	}
	if c.sasl.Authenticated() && hdr.Key == keySaslAuthenticate {
		c.log.Debug("SASL authenticated", "principal", "User:"+c.sasl.Principal())
	}
	return true
}

// rawSASL handles a raw token after SaslHandshake v0 and reports whether
// the connection stays open.
func (c *conn) rawSASL(frame []byte) bool {
	tok, closeConn, err := c.sasl.RawStep(frame)
	if closeConn {
		c.log.Info("closing connection: SASL authentication failed", "err", err)
		return false
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(tok)))
	_, werr := c.nc.Write(append(msg, tok...))
	return werr == nil
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
func (b *Broker) acceptLoop(ctx context.Context, ln net.Listener, l *listener, wg *sync.WaitGroup) {
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
			b.serveConn(ctx, nc, l)
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
