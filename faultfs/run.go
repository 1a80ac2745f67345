package faultfs

import (
	"context"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sync/errgroup"

	"github.com/isrlab/isrlab/internal/ctlsock"
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

// Args returns the arguments of "isrlab" that run a daemon for opts serving
// its control socket at control (for exec, never a shell string).
func Args(opts Options, control string) []string {
	args := []string{"faultfs", "--backing", opts.Backing, "--mount", opts.Mount, "--control", control, "--run-id", opts.RunID,
		"--seed", strconv.FormatInt(opts.Seed, 10)}
	if opts.Passthrough != "" {
		args = append(args, "--passthrough", string(opts.Passthrough))
	}
	return args
}

// WaitReady waits until the daemon answers on its control socket, which it
// does only once mounted, and returns its status.
func (c *Client) WaitReady(ctx context.Context) (Status, error) {
	return ctlsock.Await(ctx, "faultfs at "+c.Socket, c.Status)
}
