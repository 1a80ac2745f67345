package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client is one connection to a broker for inter-broker requests (the
// controller's LeaderAndIsr/UpdateMetadata/StopReplica, follower fetches,
// OffsetForLeaderEpoch, AlterPartition). Requests are sent one at a time;
// the connection is re-dialled after any error.
type Client struct {
	addr     string
	clientID string
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)

	mu    sync.Mutex
	conn  net.Conn
	rd    *bufio.Reader
	corr  int32
	buf   []byte
	reuse bool
	frame []byte
}

// ReuseResponseFrames makes the client read every response into the same
// buffer: a response is then valid only until the next Request. Replica
// fetchers use it, since they apply each fetch before sending the next.
func (c *Client) ReuseResponseFrames() {
	c.mu.Lock()
	c.reuse = true
	c.mu.Unlock()
}

// NewClient returns a client for addr (host:port) that identifies itself
// as clientID. dial may be nil.
func NewClient(addr, clientID string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Client {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return &Client{addr: addr, clientID: clientID, dial: dial}
}

// Addr returns the broker address.
func (c *Client) Addr() string { return c.addr }

// ErrClientClosed is returned after Close.
var ErrClientClosed = errors.New("client closed")

// Request sends req at its set version and returns the decoded response.
// The context's deadline bounds the whole round trip.
func (c *Client) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conn.(interface{ Expired() bool }); ok && e.Expired() {
		// Its SASL session is near its end: a new connection
		// authenticates again before the broker would close this one.
		c.conn.Close()
		c.conn = nil
	}
	if c.conn == nil {
		conn, err := c.dial(ctx, "tcp", c.addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", c.addr, err)
		}
		c.conn, c.rd = conn, bufio.NewReaderSize(conn, 64*1024)
	}
	resp, err := c.roundTrip(ctx, req)
	if err != nil {
		c.conn.Close()
		c.conn = nil
		return nil, fmt.Errorf("%s to %s: %w", kmsg.NameForKey(req.Key()), c.addr, err)
	}
	return resp, nil
}

func (c *Client) roundTrip(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	conn.SetDeadline(deadline)
	c.corr++
	b := c.buf[:0]
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(c.corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.clientID)))
	b = append(b, c.clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := c.conn.Write(b); err != nil {
		return nil, err
	}
	if cap(b) <= 1<<20 {
		c.buf = b
	}
	var into []byte
	if c.reuse {
		into = c.frame
	}
	frame, err := ReadFrame(c.rd, 1<<30, into)
	if err != nil {
		return nil, err
	}
	if c.reuse && cap(frame) <= 64<<20 {
		c.frame = frame[:0]
	}
	if len(frame) < 4 || int32(binary.BigEndian.Uint32(frame)) != c.corr {
		return nil, fmt.Errorf("%w: response correlation id mismatch", ErrMalformed)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != ApiVersionsKey {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		if err := r.Complete(); err != nil {
			return nil, fmt.Errorf("%w: response header: %v", ErrMalformed, err)
		}
		body = r.Src
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return resp, nil
}

// Close closes the connection; a later Request dials again.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}
