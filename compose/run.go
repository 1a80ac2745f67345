package compose

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DownTimeout bounds the teardown Run performs after fn.
var DownTimeout = 60 * time.Second

// Run brings t up on b, calls fn with the cluster and takes the cluster down
// whatever happens: fn returning, fn panicking (the panic goes on after the
// teardown), or ctx ending. Signals are the caller's to turn into a
// cancelled ctx (the isrlab commands do, with signal.NotifyContext): a
// library installs no handlers of its own.
func Run(ctx context.Context, b Backend, t Topology, fn func(context.Context, *Cluster) error) (err error) {
	c, err := b.Up(ctx, t)
	if err != nil {
		return err
	}
	defer func() {
		p := recover()
		dctx, cancel := context.WithTimeout(context.Background(), DownTimeout)
		derr := c.Down(dctx)
		cancel()
		if p != nil {
			panic(p)
		}
		if derr != nil {
			err = errors.Join(err, fmt.Errorf("down: %w", derr))
		}
	}()
	return fn(ctx, c)
}
