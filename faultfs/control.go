package faultfs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/isrlab/isrlab/internal/ctlsock"
)

// Commands of the control protocol.
const (
	CmdLatency = "latency"
	CmdEIO     = "eio"
	CmdHang    = "hang"
	CmdUnhang  = "unhang"
	CmdCrash   = "crash"
	CmdStatus  = "status"
	CmdHeal    = "heal"
)

// Request is one control command; the package documentation describes the
// protocol.
type Request struct {
	Cmd         string   `json:"cmd"`
	Op          Op       `json:"op,omitempty"`
	Prefix      string   `json:"prefix,omitempty"`
	Latency     Duration `json:"latency,omitempty"`
	Jitter      Duration `json:"jitter,omitempty"`
	Probability float64  `json:"probability,omitempty"`
	// Torn makes a crash keep a random part of unsynced appends (see Torn).
	Torn bool `json:"torn,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK     bool         `json:"ok"`
	Error  string       `json:"error,omitempty"`
	Status *Status      `json:"status,omitempty"`
	Crash  *CrashReport `json:"crash,omitempty"`
}

// Handle runs one control request against f.
func (f *FS) Handle(req Request) Response {
	fault := Fault{Op: req.Op, Prefix: req.Prefix, Latency: req.Latency, Jitter: req.Jitter, Probability: req.Probability}
	var err error
	switch req.Cmd {
	case CmdLatency:
		fault.Kind = KindLatency
		err = f.Inject(fault)
	case CmdEIO:
		fault.Kind = KindEIO
		err = f.Inject(fault)
	case CmdHang:
		fault.Kind = KindHang
		err = f.Inject(fault)
	case CmdUnhang:
		f.Unhang()
	case CmdHeal:
		f.Heal()
	case CmdCrash:
		var opts []CrashOpt
		if req.Torn {
			opts = append(opts, Torn())
		}
		rep := f.Crash(opts...)
		return Response{OK: true, Crash: &rep}
	case CmdStatus:
		st := f.Status()
		return Response{OK: true, Status: &st}
	default:
		err = fmt.Errorf("unknown command %q", req.Cmd)
	}
	if err != nil {
		return Response{Error: err.Error()}
	}
	return Response{OK: true}
}

// MaxSocketPath is the longest path a Unix socket address holds on Linux.
const MaxSocketPath = ctlsock.MaxPath

// Listen creates the control socket at path (replacing a stale socket
// file), readable by its owner only.
func Listen(path string) (net.Listener, error) { return ctlsock.Listen(path) }

// Serve answers control requests on ln until ctx ends, then closes ln and
// every connection and returns once their goroutines are done.
func (f *FS) Serve(ctx context.Context, ln net.Listener) error {
	return ctlsock.Serve(ctx, ln, f.Handle, func(err error) Response {
		return Response{Error: fmt.Sprintf("bad request: %v", err)}
	})
}

// Client talks to a faultfs daemon over its control socket. The zero
// timeout means only the context bounds a call. A Client is safe for
// concurrent use: each call uses its own connection.
type Client struct {
	Socket string
	// Exchange, if set, carries one request line to the daemon and returns
	// its response line, instead of dialling Socket from this process: for
	// a daemon on another host, it runs `isrlab faultfs ctl --control
	// Socket -` there. Its output is read even when it also returns an
	// error (the command exits non-zero when the daemon refused).
	Exchange func(ctx context.Context, request []byte) (response []byte, err error)
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client { return &Client{Socket: path} }

// RemoteError is an error the daemon reported.
type RemoteError struct {
	Cmd string
	Msg string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("faultfs %s: %s", e.Cmd, e.Msg) }

// Do sends one request and waits for its response.
func (c *Client) Do(ctx context.Context, req Request) (Response, error) {
	if c.Exchange != nil {
		return c.exchange(ctx, req)
	}
	resp, err := ctlsock.Call[Request, Response](ctx, c.Socket, req)
	if err != nil {
		return Response{}, fmt.Errorf("faultfs %s: %w", req.Cmd, err)
	}
	if !resp.OK {
		return resp, &RemoteError{Cmd: req.Cmd, Msg: resp.Error}
	}
	return resp, nil
}

// exchange is Do through c.Exchange.
func (c *Client) exchange(ctx context.Context, req Request) (Response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("faultfs %s: %w", req.Cmd, err)
	}
	out, xerr := c.Exchange(ctx, append(b, '\n'))
	var resp Response
	if derr := json.Unmarshal(bytes.TrimSpace(out), &resp); derr != nil {
		if xerr != nil {
			return Response{}, fmt.Errorf("faultfs %s on %s: %w", req.Cmd, c.Socket, xerr)
		}
		return Response{}, fmt.Errorf("faultfs %s on %s: read response %q: %w", req.Cmd, c.Socket, out, derr)
	}
	if !resp.OK {
		return resp, &RemoteError{Cmd: req.Cmd, Msg: resp.Error}
	}
	return resp, nil
}

// Latency delays matching operations by latency plus up to jitter.
func (c *Client) Latency(ctx context.Context, op Op, prefix string, latency, jitter time.Duration) error {
	_, err := c.Do(ctx, Request{Cmd: CmdLatency, Op: op, Prefix: prefix, Latency: Duration(latency), Jitter: Duration(jitter)})
	return err
}

// EIO fails matching operations with probability p.
func (c *Client) EIO(ctx context.Context, op Op, prefix string, p float64) error {
	_, err := c.Do(ctx, Request{Cmd: CmdEIO, Op: op, Prefix: prefix, Probability: p})
	return err
}

// Hang blocks matching operations until Unhang or Heal.
func (c *Client) Hang(ctx context.Context, op Op, prefix string) error {
	_, err := c.Do(ctx, Request{Cmd: CmdHang, Op: op, Prefix: prefix})
	return err
}

// Unhang lifts every hang fault.
func (c *Client) Unhang(ctx context.Context) error {
	_, err := c.Do(ctx, Request{Cmd: CmdUnhang})
	return err
}

// Heal removes every fault; it is idempotent.
func (c *Client) Heal(ctx context.Context) error {
	_, err := c.Do(ctx, Request{Cmd: CmdHeal})
	return err
}

// Crash forgets every write not fsynced (see FS.Crash and Torn).
func (c *Client) Crash(ctx context.Context, opts ...CrashOpt) (CrashReport, error) {
	var cfg crashConfig
	for _, o := range opts {
		o.apply(&cfg)
	}
	resp, err := c.Do(ctx, Request{Cmd: CmdCrash, Torn: cfg.torn})
	if err != nil {
		return CrashReport{}, err
	}
	if resp.Crash == nil {
		return CrashReport{}, fmt.Errorf("faultfs crash: response without report")
	}
	return *resp.Crash, nil
}

// Status reports active faults and counters.
func (c *Client) Status(ctx context.Context) (Status, error) {
	resp, err := c.Do(ctx, Request{Cmd: CmdStatus})
	if err != nil {
		return Status{}, err
	}
	if resp.Status == nil {
		return Status{}, fmt.Errorf("faultfs status: response without status")
	}
	return *resp.Status, nil
}
