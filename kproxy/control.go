package kproxy

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

// Commands of the control protocol.
const (
	CmdSet      = "set"
	CmdClear    = "clear"
	CmdClearAll = "clear-all"
	CmdStatus   = "status"
)

// Request is one control command; the package documentation describes the
// protocol.
type Request struct {
	Cmd  string `json:"cmd"`
	Rule *Rule  `json:"rule,omitempty"`
	ID   string `json:"id,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
}

// Handle runs one control request against p.
func (p *Proxy) Handle(req Request) Response {
	switch req.Cmd {
	case CmdSet:
		if req.Rule == nil {
			return Response{Error: "set: rule required"}
		}
		if err := p.Set(*req.Rule); err != nil {
			return Response{Error: err.Error()}
		}
	case CmdClear:
		if req.ID == "" {
			return Response{Error: "clear: id required"}
		}
		if !p.Clear(req.ID) {
			return Response{Error: fmt.Sprintf("clear: no rule %q", req.ID)}
		}
	case CmdClearAll:
		p.ClearAll()
	case CmdStatus:
		st := p.Status()
		return Response{OK: true, Status: &st}
	default:
		return Response{Error: fmt.Sprintf("unknown command %q (want set, clear, clear-all or status)", req.Cmd)}
	}
	return Response{OK: true}
}

// MaxSocketPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes with its terminating NUL).
const MaxSocketPath = 107

// listenControl creates the control socket at path, replacing a stale
// socket file, readable by its owner only.
func listenControl(path string) (net.Listener, error) {
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("control socket %s: path longer than %d bytes", path, MaxSocketPath)
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

// ServeControl answers control requests on a Unix socket at path (a stale
// socket file there is replaced) until ctx ends, then closes every control
// connection, removes the socket and returns.
func (p *Proxy) ServeControl(ctx context.Context, path string) error {
	ln, err := listenControl(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
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
			ln.Close()
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
			p.serveControlConn(c)
		}()
	}
}

func (p *Proxy) serveControlConn(c net.Conn) {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), 1<<20)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = Response{Error: fmt.Sprintf("bad request: %v", err)}
		} else {
			resp = p.Handle(req)
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

// Client talks to a proxy over its control socket. Each call uses its own
// connection, so a Client is safe for concurrent use.
type Client struct {
	Socket string
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client { return &Client{Socket: path} }

// RemoteError is an error the proxy reported.
type RemoteError struct {
	Cmd string
	Msg string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("kproxy %s: %s", e.Cmd, e.Msg) }

// Do sends one request and waits for its response.
func (c *Client) Do(ctx context.Context, req Request) (Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return Response{}, fmt.Errorf("kproxy %s: dial %s: %w", req.Cmd, c.Socket, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("kproxy %s: %w", req.Cmd, err)
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return Response{}, fmt.Errorf("kproxy %s: send: %w", req.Cmd, ctxErr(ctx, err))
	}
	var resp Response
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("kproxy %s: read response: %w", req.Cmd, ctxErr(ctx, err))
	}
	if !resp.OK {
		return resp, &RemoteError{Cmd: req.Cmd, Msg: resp.Error}
	}
	return resp, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Set adds or replaces a rule.
func (c *Client) Set(ctx context.Context, r Rule) error {
	_, err := c.Do(ctx, Request{Cmd: CmdSet, Rule: &r})
	return err
}

// Clear removes the rule id; removing a rule that is not there is an error.
func (c *Client) Clear(ctx context.Context, id string) error {
	_, err := c.Do(ctx, Request{Cmd: CmdClear, ID: id})
	return err
}

// ClearAll removes every rule.
func (c *Client) ClearAll(ctx context.Context) error {
	_, err := c.Do(ctx, Request{Cmd: CmdClearAll})
	return err
}

// Status returns the proxy's counters and rules.
func (c *Client) Status(ctx context.Context) (Status, error) {
	resp, err := c.Do(ctx, Request{Cmd: CmdStatus})
	if err != nil {
		return Status{}, err
	}
	if resp.Status == nil {
		return Status{}, errors.New("kproxy status: response without status")
	}
	return *resp.Status, nil
}

// WaitReady waits until the proxy answers on its control socket and
// returns its status.
func (c *Client) WaitReady(ctx context.Context) (Status, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := c.Status(ctx)
		if err == nil {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return Status{}, fmt.Errorf("wait for kproxy at %s: %w (last: %v)", c.Socket, ctx.Err(), err)
		case <-t.C:
		}
	}
}
