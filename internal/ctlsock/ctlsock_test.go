package ctlsock

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type req struct{ N int }
type resp struct {
	Twice int
	Error string
}

// TestServeAndCall: a request goes out as one line and its answer comes
// back; a line that does not decode is answered by bad; a live socket
// cannot be taken over, a path too long for a socket address is refused;
// when ctx ends Serve returns and a call fails.
func TestServeAndCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, func(r req) resp { return resp{Twice: 2 * r.N} }, func(err error) resp { return resp{Error: err.Error()} })
	}()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	got, err := Await(cctx, "the test socket", func(ctx context.Context) (resp, error) { return Call[req, resp](ctx, path, req{N: 21}) })
	if err != nil || got.Twice != 42 {
		t.Fatalf("call: %+v %v", got, err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("not json\n"))
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	c.Close()
	if !strings.Contains(string(buf[:n]), `"Error":"invalid character`) {
		t.Errorf("a bad line answered %q", buf[:n])
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("a live socket taken over: %v", err)
	}
	if _, err := Listen("/" + strings.Repeat("x", MaxPath)); err == nil || !strings.Contains(err.Error(), "path longer than") {
		t.Errorf("a too long path: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if _, err := Call[req, resp](cctx, path, req{N: 1}); err == nil || !strings.HasPrefix(err.Error(), "dial ") {
		t.Errorf("a call after the end: %v", err)
	}
}
