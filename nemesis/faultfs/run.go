package faultfs

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sync/errgroup"
)

// Run mounts a faultfs, serves its control socket at control and blocks
// until ctx ends; then it heals, unmounts and removes the socket.
func Run(ctx context.Context, opts Options, control string) error {
	ln, err := Listen(control)
	if err != nil {
		return err
	}
	defer os.Remove(control)
	f, err := Mount(opts)
	if err != nil {
		ln.Close()
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Serve(gctx, ln) })
	<-gctx.Done()
	err = g.Wait()
	return errors.Join(err, f.Close())
}
