package coord

import (
	"context"
	"fmt"
	"io"
)

// Run starts a member, writes one line to w when it is ready, and serves
// until ctx ends (isrlab coordinator cancels it on SIGINT or SIGTERM), then
// stops the member cleanly. A fatal error of the member ends it early.
func Run(ctx context.Context, cfg ServerConfig, w io.Writer) error {
	s, err := StartServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(w, "coordinator %s ready: client %s, data dir %s\n", s.Name(), s.cfg.AdvertiseClientURLs, s.cfg.DataDir)
	select {
	case <-ctx.Done():
		return nil
	case err, ok := <-s.Err():
		if !ok || err == nil {
			return fmt.Errorf("coordinator %s stopped", s.Name())
		}
		return fmt.Errorf("coordinator %s: %w", s.Name(), err)
	}
}
