package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/results"
)

func init() { rootCmd.AddCommand(newServeCmd()) }

func newServeCmd() *cobra.Command {
	var addr, dir string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Browse stored runs and matrices in a web browser",
		Long: `serve answers HTTP on --addr (loopback by default) with a read-only view of
the results directory: the runs, newest first, coloured by outcome and
filterable by scenario and outcome; the matrices; each run's and matrix's
report (built on demand, not written, when report.html is missing); and a
file browser for everything in the directory (histories, verdicts, node
logs, porcupine's visualization).

Nothing outside the results directory is served: paths with '.' or '..'
segments, encoded slashes or backslashes are refused (400), and a symbolic
link that leads out of the directory is refused (403). Every answer carries
a Content-Type, X-Content-Type-Options: nosniff and a Content-Security-Policy
without scripts (porcupine's page excepted). Bind another address than
loopback only on a network you trust: there is no authentication.

It runs until interrupted (SIGINT or SIGTERM). Exit status: 0 after an
interrupt, 254 bad arguments, 255 the address or directory cannot be used.`,
		Example: `  isrlab serve
  isrlab serve --results /var/lib/isrlab/results --addr 127.0.0.1:9000
  isrlab serve --addr 127.0.0.1:0     # any free port; the address is printed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return usageError("--addr %q: %v", addr, err)
			}
			srv, err := results.NewServer(dir)
			if err != nil {
				return withCode(exitBadArgs, fmt.Errorf("--results %s: %w", dir, err))
			}
			defer srv.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return withCode(exitInternal, err)
			}
			out := cmd.OutOrStdout()
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				fmt.Fprintf(cmd.ErrOrStderr(), "isrlab serve: warning: %s is not a loopback address; anyone who reaches it can read the results\n", addr)
			}
			fmt.Fprintf(out, "serving %s on http://%s/\n", dir, ln.Addr())
			ctx, stop := runContext(cmd.Context())
			defer stop()
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case err := <-errc:
				return withCode(exitInternal, err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return withCode(exitInternal, err)
			}
			<-errc
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	cmd.Flags().StringVar(&dir, "results", "results", "results directory to serve")
	return cmd
}
