package coord

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Run starts a member, writes one line to w when it is ready, and serves
// until ctx ends (isrlab coordinator cancels it on SIGINT or SIGTERM), then
// stops the member cleanly. A fatal error of the member ends it early.
func Run(ctx context.Context, cfg ServerConfig, w io.Writer) error {
	return RunWith(ctx, cfg, w, nil)
}

// RunWith is Run with a companion: once the member is ready, also calls
// with(ctx) in the background (the KRaft controller of a controller quorum
// node); its error ends the member, and the member's stop ends its ctx.
func RunWith(ctx context.Context, cfg ServerConfig, w io.Writer, with func(ctx context.Context) error) error {
	s, err := StartServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(w, "coordinator %s ready: client %s, data dir %s\n", s.Name(), s.cfg.AdvertiseClientURLs, s.cfg.DataDir)
	withErr := make(chan error, 1)
	if with != nil {
		wctx, cancel := context.WithCancel(ctx)
		defer func() {
			cancel()
			<-withErr
		}()
		go func() { withErr <- with(wctx) }()
	}
	select {
	case err := <-withErr:
		withErr <- err
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("its companion stopped")
		}
		return fmt.Errorf("coordinator %s: %w", s.Name(), err)
	case <-ctx.Done():
		return nil
	case err, ok := <-s.Err():
		if !ok || err == nil {
			return fmt.Errorf("coordinator %s stopped", s.Name())
		}
		return fmt.Errorf("coordinator %s: %w", s.Name(), err)
	}
}
