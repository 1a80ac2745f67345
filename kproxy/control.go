package kproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/isrlab/isrlab/internal/ctlsock"
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

// MaxSocketPath is the longest path a Unix socket address holds on Linux.
const MaxSocketPath = ctlsock.MaxPath

// ServeControl answers control requests on a Unix socket at path (a stale
// socket file there is replaced) until ctx ends, then closes every control
// connection, removes the socket and returns.
func (p *Proxy) ServeControl(ctx context.Context, path string) error {
	ln, err := ctlsock.Listen(path)
	if err != nil {
		return err
	}
	return p.serveControl(ctx, ln, path)
}

// StartControl listens on the control socket at path and serves it in the
// background until ctx ends; the channel gets what serving returned.
func (p *Proxy) StartControl(ctx context.Context, path string) (<-chan error, error) {
	ln, err := ctlsock.Listen(path)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- p.serveControl(ctx, ln, path) }()
	return done, nil
}

func (p *Proxy) serveControl(ctx context.Context, ln net.Listener, path string) error {
	defer os.Remove(path)
	return ctlsock.Serve(ctx, ln, p.Handle, func(err error) Response {
		return Response{Error: fmt.Sprintf("bad request: %v", err)}
	})
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
	resp, err := ctlsock.Call[Request, Response](ctx, c.Socket, req)
	if err != nil {
		return Response{}, fmt.Errorf("kproxy %s: %w", req.Cmd, err)
	}
	if !resp.OK {
		return resp, &RemoteError{Cmd: req.Cmd, Msg: resp.Error}
	}
	return resp, nil
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
	return ctlsock.Await(ctx, "kproxy at "+c.Socket, c.Status)
}
