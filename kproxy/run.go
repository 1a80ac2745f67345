package kproxy

import (
	"context"
	"strconv"

	"golang.org/x/sync/errgroup"
)

// Run is the "isrlab kproxy" daemon: it binds o.Listen, serves the control
// socket at control (replacing a stale one) and proxies to o.Upstream until
// ctx ends; then it closes every connection and removes the socket.
func Run(ctx context.Context, o Options, control string) error {
	p, err := New(o)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.ServeControl(gctx, control) })
	g.Go(func() error { return p.Serve(gctx) })
	return g.Wait()
}

// Args returns the arguments of "isrlab" that run a proxy daemon for o
// serving its control socket at control (for exec, never a shell string).
func Args(o Options, control string) []string {
	return []string{"kproxy", "--listen", o.Listen, "--upstream", o.Upstream, "--control", control, "--run-id", o.RunID,
		"--seed", strconv.FormatInt(o.Seed, 10)}
}
