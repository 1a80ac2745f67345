package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/units"
)

func init() { rootCmd.AddCommand(newFaultfsCmd()) }

func newFaultfsCmd() *cobra.Command {
	var (
		opts    faultfs.Options
		control string
		pt      string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "faultfs --backing DIR --mount DIR --control SOCKET",
		Short: "Mount a FUSE filesystem that delays, fails, hangs or forgets unsynced writes",
		Long: `faultfs mounts at --mount a FUSE filesystem that mirrors --backing and
serves fault commands on the Unix socket --control until SIGINT or SIGTERM,
then heals and unmounts. A broker whose data dir is the mount point sees:

  latency   each matching operation delayed by latency plus [0, jitter)
  eio       each matching operation fails with EIO with a probability
  hang      matching operations block until unhang (or heal)
  crash     a power loss: every write not fsynced is forgotten; files go back
            to their last-fsynced content, and creates, unlinks and renames
            whose directory was not fsynced since are undone; with "torn" a
            random page-aligned part of each file's unsynced appends stays
  status    active faults and counters; heal removes every fault

Faults apply per operation kind (read, write, fsync, meta, all) and optionally
to paths under a prefix relative to the mount point. The protocol is one JSON
object per line, for example {"cmd":"latency","op":"write","latency":"20ms"};
"isrlab faultfs ctl" sends commands from the shell.

While no fault is active, files opened read-only or with O_APPEND are served
by FUSE passthrough (kernel to backing file, near plain-disk speed); faults
injected later reach their opens, fsyncs and metadata but not their reads and
writes, until every handle of the file is closed. --passthrough=off routes all
I/O through faultfs; --passthrough=all also passes other writable opens
through, and a crash then cannot undo their overwrites of synced bytes (it
still drops everything past the synced size).

The mount's source is faultfs-<run id> (fstype fuse.faultfs), so that
"isrlab clean" can unmount what a killed daemon left. Needs root and /dev/fuse.`,
		Example: `  isrlab faultfs --backing /var/lib/b1.real --mount /var/lib/b1 --control /run/b1-faultfs.sock --run-id r42
  isrlab faultfs ctl --control /run/b1-faultfs.sock latency --op write --latency 20ms
  isrlab faultfs ctl --control /run/b1-faultfs.sock crash`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Backing == "" || opts.Mount == "" || control == "" {
				return usageError("--backing, --mount and --control are required")
			}
			if opts.RunID == "" {
				opts.RunID = faultfs.ManualRunID(os.Getpid())
			}
			if !faultfs.ValidRunID(opts.RunID) {
				return usageError("--run-id %q: use 1-64 of letters, digits, '.', '_', '-'", opts.RunID)
			}
			var err error
			if opts.Passthrough, err = faultfs.ParsePassthroughMode(pt); err != nil {
				return usageError("--passthrough: %v", err)
			}
			if !cmd.Flags().Changed("seed") {
				opts.Seed = time.Now().UnixNano()
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return faultfs.Run(ctx, opts, control)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Backing, "backing", "", "directory whose content the mount shows")
	f.StringVar(&opts.Mount, "mount", "", "mount point (an existing directory)")
	f.StringVar(&control, "control", "", "path of the control Unix socket")
	f.StringVar(&opts.RunID, "run-id", "", "run id tagging the mount (default manual-<pid>)")
	f.Int64Var(&opts.Seed, "seed", 0, "seed of jitter and EIO draws (default: time-based)")
	f.StringVar(&pt, "passthrough", "append", "opens served by FUSE passthrough while no fault is active: off, append (read-only and O_APPEND) or all")
	f.BoolVarP(&verbose, "verbose", "v", false, "log mounts, faults and crashes")
	cmd.AddCommand(newFaultfsCtlCmd())
	return cmd
}

func newFaultfsCtlCmd() *cobra.Command {
	var (
		control string
		req     faultfs.Request
		latency time.Duration
		jitter  time.Duration
		timeout time.Duration
		op      string
	)
	cmd := &cobra.Command{
		Use:   "ctl --control SOCKET COMMAND",
		Short: "Send one command to a running faultfs daemon",
		Long: `ctl sends one command to the faultfs daemon listening on --control and prints
its JSON response. COMMAND is latency, eio, hang, unhang, crash, status or
heal; --op and --prefix select the operations a fault applies to.

COMMAND "-" reads one request in the daemon's protocol (a JSON object) from
standard input and prints the response on one line, even when the daemon
refused it (exit status 1 then): the form the lab runs over SSH on a host
whose broker runs on faultfs.`,
		Example: `  isrlab faultfs ctl --control b1.sock latency --op write --latency 20ms --jitter 5ms
  isrlab faultfs ctl --control b1.sock eio --op fsync --probability 0.1
  isrlab faultfs ctl --control b1.sock hang --prefix topic-0/
  isrlab faultfs ctl --control b1.sock crash --torn
  isrlab faultfs ctl --control b1.sock status
  echo '{"cmd":"latency","op":"fsync","latency":"50ms"}' | isrlab faultfs ctl --control b1.sock -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if control == "" {
				return usageError("--control is required")
			}
			if args[0] == "-" {
				return faultfsCtlStdin(cmd, control, timeout)
			}
			req.Cmd, req.Op = args[0], faultfs.Op(op)
			req.Latency, req.Jitter = units.Duration(latency), units.Duration(jitter)
			switch req.Cmd {
			case faultfs.CmdLatency, faultfs.CmdEIO, faultfs.CmdHang, faultfs.CmdUnhang, faultfs.CmdCrash, faultfs.CmdStatus, faultfs.CmdHeal:
			default:
				return usageError("unknown command %q: want latency, eio, hang, unhang, crash, status or heal", req.Cmd)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			resp, err := faultfs.NewClient(control).Do(ctx, req)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(resp)
		},
	}
	f := cmd.Flags()
	f.StringVar(&control, "control", "", "path of the daemon's control socket")
	f.StringVar(&op, "op", "all", "operation kind: read, write, fsync, meta or all")
	f.StringVar(&req.Prefix, "prefix", "", "only paths under this prefix (relative to the mount point)")
	f.DurationVar(&latency, "latency", 0, "latency: delay per operation")
	f.DurationVar(&jitter, "jitter", 0, "latency: extra random delay in [0, jitter)")
	f.Float64Var(&req.Probability, "probability", 0, "eio: chance in (0, 1] that an operation fails")
	f.BoolVar(&req.Torn, "torn", false, "crash: keep a random page-aligned part of each file's unsynced appends (a torn tail)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

// faultfsCtlStdin sends the request on standard input and prints the
// response as one line; a refusal is exit status 1, an unreachable daemon
// an error.
func faultfsCtlStdin(cmd *cobra.Command, control string, timeout time.Duration) error {
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadBytes('\n')
	if err != nil && (err != io.EOF || len(bytes.TrimSpace(line)) == 0) {
		return usageError("read the request from standard input: %v", err)
	}
	var req faultfs.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return usageError("the request on standard input: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := faultfs.NewClient(control).Do(ctx, req)
	var refused *faultfs.RemoteError
	if err != nil && !errors.As(err, &refused) {
		return err
	}
	if jerr := json.NewEncoder(cmd.OutOrStdout()).Encode(resp); jerr != nil {
		return jerr
	}
	if refused != nil {
		return withCode(exitInvalid, refused)
	}
	return nil
}
