// Package ctlsock is the control socket of the lab's helper daemons (the
// faultfs daemon, the Kafka proxy): a Unix stream socket readable by its
// owner only, on which each line is one JSON request and is answered by
// one JSON response line. The daemons give the request and response
// types and the handler; this package owns the socket.
package ctlsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// MaxPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes with its terminating NUL).
const MaxPath = 107

// Listen creates the control socket at path (replacing a stale socket
// file; one a live daemon answers on is refused), readable by its owner
// only.
func Listen(path string) (net.Listener, error) {
	if len(path) > MaxPath {
		return nil, fmt.Errorf("control socket %s: path longer than %d bytes", path, MaxPath)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: already in use", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod control socket %s: %w", path, err)
	}
	return ln, nil
}

// Serve answers the requests of every connection to ln with handle (a
// line that does not decode is answered with bad) until ctx ends, then
// closes ln and every connection and returns once their goroutines are
// done.
func Serve[Req, Resp any](ctx context.Context, ln net.Listener, handle func(Req) Resp, bad func(error) Resp) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := make(map[net.Conn]struct{})
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept control connection: %w", err)
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			return nil
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			serveConn(c, handle, bad)
		}()
	}
}

func serveConn[Req, Resp any](c net.Conn, handle func(Req) Resp, bad func(error) Resp) {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), 1<<20)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Req
		var resp Resp
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = bad(err)
		} else {
			resp = handle(req)
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

// Call sends req on a new connection to socket and decodes the one
// response line. Its errors say which step failed ("dial SOCKET: ...",
// "send: ...", "read response: ...") and are ctx's own once ctx ended;
// callers add which daemon and command.
func Call[Req, Resp any](ctx context.Context, socket string, req Req) (Resp, error) {
	var resp Resp
	b, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return resp, fmt.Errorf("dial %s: %w", socket, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return resp, fmt.Errorf("send: %w", ctxErr(ctx, err))
	}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		return resp, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	return resp, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Await calls status every 10 ms until it answers, and returns its answer;
// once ctx ends it returns an error naming what (a daemon and its
// socket) with status's last error.
func Await[T any](ctx context.Context, what string, status func(context.Context) (T, error)) (T, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := status(ctx)
		if err == nil {
			return st, nil
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("wait for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}
