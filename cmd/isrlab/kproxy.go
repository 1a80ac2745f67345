package main

import (
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/kproxy"
)

func init() { rootCmd.AddCommand(newKproxyCmd()) }

func newKproxyCmd() *cobra.Command {
	var (
		opts    kproxy.Options
		control string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "kproxy --listen ADDR --upstream ADDR --control SOCKET",
		Short: "Proxy Kafka connections to one broker, dropping, delaying, duplicating or failing chosen requests and responses",
		Long: `kproxy listens on --listen, forwards every connection to the broker at
--upstream and serves fault rules on the Unix socket --control until SIGINT or
SIGTERM. The broker's advertised listener must be the proxy's address, so that
clients and followers come back through it. The control protocol is one JSON
object per line, for example
{"cmd":"set","rule":{"id":"r1","api":"Produce","action":"drop","count":1}}.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Listen == "" || opts.Upstream == "" || control == "" {
				return usageError("--listen, --upstream and --control are required")
			}
			if len(control) > kproxy.MaxSocketPath {
				return usageError("--control %s: longer than %d bytes", control, kproxy.MaxSocketPath)
			}
			if !cmd.Flags().Changed("seed") {
				opts.Seed = time.Now().UnixNano()
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			opts.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if opts.RunID == "" {
				opts.RunID = "manual-" + strconv.Itoa(os.Getpid())
			}
			ctx, stop := signalContext()
			defer stop()
			return kproxy.Run(ctx, opts, control)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "", "address clients connect to (host:port)")
	f.StringVar(&opts.Upstream, "upstream", "", "the broker's address (host:port)")
	f.StringVar(&control, "control", "", "path of the control Unix socket")
	f.StringVar(&opts.RunID, "run-id", "", "run id shown in status (default manual-<pid>)")
	f.Int64Var(&opts.Seed, "seed", 0, "seed of the rules' probability draws (default: time-based)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log connections and every fault acted on")
	return cmd
}
