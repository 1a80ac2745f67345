package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/backends"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/workloads/clients"
)

func init() { rootCmd.AddCommand(newCleanCmd()) }

func newCleanCmd() *cobra.Command {
	var all bool
	var backend string
	cmd := &cobra.Command{
		Use:   "clean",
		Short: "Remove what dead runs left: processes, namespaces, links, mounts, state",
		Long: `Remove every leftover of runs that are no longer alive: their node processes
(and anything else running in their namespaces), network namespaces with their
links and bind mounts, Docker containers and networks labelled with a run id,
run directories and state files, the cgroups of their cpu-throttle and
memory-pressure faults, and the Python client drivers' scripts they wrote
to the temporary directory. A run is alive while
the process that owns it runs, or, for "isrlab cluster up", until "isrlab
cluster down". Live runs are left alone, so clean is safe to run at any time,
including next to a running test. --all also takes down live clusters and
removes unused isrlab lab images from Docker.

For runs on your own hosts (the ssh backend) clean connects to them again
with the connection details recorded in the local state: it heals the
run's recorded faults, removes every nftables table and iptables chain
named after the run and undoes marked clock skews, resumes paused nodes,
starts again the nodes that ran before the run and stops the ones it
started. --backend limits clean to one backend.`,
		Example: `  isrlab clean
  isrlab clean --backend ssh
  isrlab clean --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if !slices.Contains(append(backends.Names(), ""), backend) {
				return usageError("--backend %q: use one of %v", backend, backends.Names())
			}
			caps, _ := compose.CapabilitiesOf(backend) // "" (every backend) counts as netns
			if !caps.UserHosts {
				if handled, err := reexecRootless(ctx); handled {
					return err
				}
			}
			rep, err := backends.CleanBackend(ctx, "", backend, all, nemesis.CleanFaults)
			var killed []int
			var cleanedOther int
			// faultfs mounts of runs that are gone (their daemon died with
			// the run) are detached too; a run still alive keeps its mounts.
			if !caps.UserHosts {
				alive := func(run string) bool {
					st, _, ok := compose.LookupRun(run)
					return ok && st.Live() && !all
				}
				if ferr := faultfs.CleanStale(alive); ferr != nil {
					err = errors.Join(err, ferr)
				}
				var ferr error
				killed, ferr = faultfs.KillUnmounted(alive)
				err = errors.Join(err, ferr)
				for _, pid := range killed {
					fmt.Fprintf(cmd.OutOrStdout(), "stopped orphan faultfs daemon %d\n", pid)
				}
				// cgroup faults' cgroups of the dead runs, empty now that
				// their processes are gone.
				cgs, cerr := nemesis.CleanCgroups(ctx, alive)
				err = errors.Join(err, cerr)
				for _, cg := range cgs {
					fmt.Fprintf(cmd.OutOrStdout(), "removed leftover cgroup %s\n", cg)
				}
				cleanedOther = len(cgs)
				// Python client drivers' scripts of the dead runs.
				drv, derr := clients.CleanStaleDrivers(alive)
				err = errors.Join(err, derr)
				for _, d := range drv {
					fmt.Fprintf(cmd.OutOrStdout(), "removed leftover client drivers %s\n", d)
				}
				cleanedOther += len(drv)
			}
			// Control sockets of proxies and faultfs daemons that died
			// with their run (the lab's own proxies, on any backend).
			socks, serr := compose.CleanStaleSockets(func(run string) bool {
				st, _, ok := compose.LookupRun(run)
				return ok && st.Live() && !all
			})
			err = errors.Join(err, serr)
			for _, s := range socks {
				fmt.Fprintf(cmd.OutOrStdout(), "removed leftover control socket %s\n", s)
			}
			cleanedOther += len(socks)
			w := cmd.OutOrStdout()
			for _, r := range rep.Runs {
				fmt.Fprintf(w, "removed run %s\n", r)
			}
			for _, n := range rep.Namespaces {
				fmt.Fprintf(w, "removed orphan namespace %s\n", n)
			}
			if rep.Containers+rep.Networks > 0 {
				fmt.Fprintf(w, "removed %d orphan containers and %d orphan networks\n", rep.Containers, rep.Networks)
			}
			if rep.Images > 0 {
				fmt.Fprintf(w, "removed %d unused lab images\n", rep.Images)
			}
			for _, r := range rep.Live {
				fmt.Fprintf(w, "left live run %s alone\n", r)
			}
			if rep.Removed() == 0 && len(killed) == 0 && cleanedOther == 0 && err == nil {
				fmt.Fprintln(w, "nothing to clean")
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also take down live clusters and remove unused lab images")
	cmd.Flags().StringVar(&backend, "backend", "", "clean only this backend's runs: netns, docker or ssh (default: all)")
	return cmd
}
