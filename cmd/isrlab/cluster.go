package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/backends"
	"github.com/isrlab/isrlab/compose/docker"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/nemesis"
)

func init() { rootCmd.AddCommand(newClusterCmd()) }

const defaultClusterName = "isrlab"

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Bring a lab cluster up, inspect it, run commands in it, take it down",
		Long: `Manage a lab cluster: coordinators (embedded etcd), brokers (isrlab broker)
and client hosts, each in its own network namespace, joined by a bridge in a
dedicated switch namespace (never the root namespace).

"cluster up" returns while the cluster keeps running; the other subcommands
find it by name through its state file (/run/isrlab/<name>/state.json for
root). Everything a run creates carries its run id, and "isrlab clean" removes
whatever dead runs left.

As a non-root user, isrlab re-executes itself inside a new user, network and
mount namespace and runs the same backend there (rootless); later commands
enter that namespace through nsenter(1).`,
		Example: `  isrlab cluster up --brokers 3 --config min.insync.replicas=2
  isrlab cluster exec -- kcat -L -b 10.213.0.4:9092
  isrlab cluster status
  isrlab cluster down`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("missing subcommand: up, status, exec, list or down\nRun 'isrlab cluster --help' for usage.")
		},
	}
	cmd.AddCommand(newClusterUpCmd(), newClusterDownCmd(), newClusterStatusCmd(), newClusterExecCmd(), newClusterListCmd(), newClusterIdleCmd())
	return cmd
}

// signalContext is cancelled by SIGINT or SIGTERM, so that a command tears
// down what it created.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// reexecRootless re-runs this command inside a fresh user namespace when the
// caller is not root. handled reports that the re-execution ran.
func reexecRootless(ctx context.Context) (handled bool, err error) {
	if !netns.NeedUserNS() {
		return false, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return true, fmt.Errorf("find isrlab binary: %w", err)
	}
	code, err := netns.ReexecInUserNS(ctx, exe, os.Args[1:])
	if err != nil {
		return true, err
	}
	if code != 0 {
		return true, withCode(code, nil)
	}
	return true, nil
}

// enterRootless re-runs this command inside the user and mount namespaces of
// a rootless run found in st, if this process is outside them.
func enterRootless(ctx context.Context, st *compose.State) (handled bool, err error) {
	if !st.Rootless || netns.InUserNS() {
		return false, nil
	}
	holder := netns.Holder(st)
	if holder == 0 {
		return false, nil // every process is gone; what is left is files
	}
	exe, err := os.Executable()
	if err != nil {
		return true, fmt.Errorf("find isrlab binary: %w", err)
	}
	code, err := netns.EnterUserNS(ctx, holder, exe, os.Args[1:])
	if err != nil {
		return true, err
	}
	if code != 0 {
		return true, withCode(code, nil)
	}
	return true, nil
}

func defaultRunDir(name, run string) string {
	base := filepath.Join("/var/tmp", "isrlab")
	if os.Geteuid() != 0 || netns.InUserNS() {
		base = filepath.Join(os.TempDir(), "isrlab-"+strconv.Itoa(os.Getuid()))
		if netns.InUserNS() {
			// Inside the user namespace we are uid 0; keep the outer name.
			base = filepath.Join(filepath.Dir(compose.StateDir()), filepath.Base(compose.StateDir())+"-runs")
		}
	}
	return filepath.Join(base, name+"-"+run)
}

func newClusterUpCmd() *cobra.Command {
	var (
		o          compose.Options
		backend    string
		configs    []string
		subnet     string
		timeout    time.Duration
		keepData   bool
		plan       bool
		verbose    bool
		system     string
		kafkaImage string
		hosts      string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring a cluster up and return while it keeps running",
		Long: `Create the network (switch namespace, bridge, one namespace per node), start
the coordinators and brokers inside their namespaces, wait until every
coordinator answers etcd's status and every broker answers ApiVersions and
lists every broker in Metadata, print the nodes and return. The node
processes keep running, detached, until "isrlab cluster down".

Addresses come from --subnet in node order c1..cN, b1..bN, client1..clientN.
Each node has its own data directory and log file under --run-dir. Broker
settings given with --config go to every broker's server.properties.

On error, Ctrl-C or SIGTERM before the cluster is ready, everything created
so far is removed.

--faultfs b1,b2 (or all) puts those brokers' log.dirs on faultfs mounts: a
daemon per broker ("isrlab faultfs", started before the broker, stopped
after it, kept across its restarts) mirrors <node dir>/disk-backing at the
broker's data dir. "isrlab fault inject slow-disk|disk-error|disk-hang|
power-loss" then finds the control sockets in the cluster's state. Needs
root and /dev/fuse; the backing data stays after "cluster down" only with
--keep-data, like all node data.

--backend docker runs each node as containers instead: an image imported from
this isrlab binary (no registry), a labelled network on --subnet, and per node
a sandbox container holding its address and network namespace plus a process
container joining it (so a restarted node keeps its namespace). --system kafka
runs apache/kafka in KRaft mode on the broker nodes (no coordinators).

--plan checks the layout and prints what up would create (the netns nodes
and their commands; the Docker network and every container with its
image, command, environment and mounts) or touch (--backend ssh: the plan
of docs/external.md), and exits: no daemon is contacted, nothing is
created, and a layout the backend would refuse is an argument error.

--backend ssh --hosts FILE takes your own hosts instead (docs/external.md):
it connects to each over SSH, starts the nodes that do not run, waits until
they answer and records the run, so that "isrlab fault inject", "cluster
status" and "cluster down" work on it from any shell; "cluster down" puts
the hosts back as they were found.`,
		Example: `  isrlab cluster up
  isrlab cluster up --name lab2 --coordinators 1 --brokers 5 --subnet 10.99.0.0/24
  isrlab cluster up --backend docker --name dock --subnet 10.214.0.0/24
  isrlab cluster up --backend docker --system kafka --kafka-image apache/kafka:3.9.1
  isrlab cluster up --backend docker --system kafka --plan
  isrlab cluster up --config min.insync.replicas=2 --config unclean.leader.election.enable=false
  isrlab cluster up --faultfs all
  isrlab cluster up --secured`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch backend {
			case netns.Name:
				if system != docker.SystemIsrlab {
					return usageError("--system %s needs --backend docker", system)
				}
			case docker.Name:
				if os.Geteuid() != 0 && !plan {
					return usageError("--backend docker needs root (to reach the containers' namespaces)")
				}
				if system != docker.SystemIsrlab && system != docker.SystemKafka {
					return usageError("--system must be isrlab or kafka, not %q", system)
				}
			case ssh.Name:
				if hosts == "" {
					return usageError("--backend ssh needs --hosts FILE (the cluster file)")
				}
			default:
				return usageError("--backend must be netns, docker or ssh, not %q", backend)
			}
			if hosts != "" && backend != ssh.Name {
				return usageError("--hosts needs --backend ssh")
			}
			if caps, _ := compose.CapabilitiesOf(backend); o.Secured && !caps.Secured {
				return usageError("--secured: backend %s lays out no secured cluster (netns and docker do; docs/security.md)", backend)
			}
			if o.Secured && system != docker.SystemIsrlab {
				return usageError("--secured: system %s: the lab lays out a secured cluster for isrlab brokers only (docs/security.md)", system)
			}
			if o.Coordinators < 0 || o.Brokers < 0 || o.Clients < 1 {
				return usageError("--coordinators and --brokers must be at least 0, --clients at least 1")
			}
			o.NoDefaults = true // the flags carry the defaults
			if !compose.ValidName(o.Name) {
				return usageError("--name %q: use 1-24 characters of a-z, 0-9 and -", o.Name)
			}
			for _, c := range configs {
				kv, err := compose.ParseKV(c)
				if err != nil {
					return usageError("--config: %v", err)
				}
				o.BrokerConfig = append(o.BrokerConfig, kv)
			}
			if subnet != "" {
				p, err := netip.ParsePrefix(subnet)
				if err != nil {
					return usageError("--subnet: %v", err)
				}
				o.Subnet = p
			}
			ctx, stop := signalContext()
			defer stop()
			if backend == netns.Name && !plan {
				if handled, err := reexecRootless(ctx); handled {
					return err
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find isrlab binary: %w", err)
			}
			o.Binary = exe
			o.RunID = compose.NewRunID()
			if o.RunDir == "" {
				o.RunDir = defaultRunDir(o.Name, o.RunID)
			}
			var top compose.Topology
			var sshc *ssh.Config
			if backend == ssh.Name {
				if sshc, err = ssh.Load(hosts); err != nil {
					return usageError("--hosts: %v", err)
				}
				top, err = sshc.Topology(o.Name, o.RunID, o.RunDir)
			} else {
				top, err = compose.Build(o)
			}
			if err != nil {
				return usageError("%v", err)
			}
			if plan {
				return writeClusterPlan(cmd.OutOrStdout(), backend, top, sshc, &docker.Backend{System: system, KafkaImage: kafkaImage, KafkaConf: o.BrokerConfig})
			}
			b, err := backends.New(backend, backends.Options{Detach: true, KeepData: keepData, ReadyTimeout: timeout,
				Log: cliLogger(cmd, verbose), System: system, KafkaImage: kafkaImage, KafkaConf: o.BrokerConfig, SSH: sshc, CleanFaults: nemesis.CleanFaults})
			if err != nil {
				return usageError("%v", err)
			}
			begin := time.Now()
			c, err := b.Up(ctx, top)
			if errors.Is(err, compose.ErrRunning) {
				return withCode(exitBadArgs, fmt.Errorf("%w: take it down first (isrlab cluster down --name %s) or pick another --name", err, o.Name))
			}
			if err != nil {
				// Node logs may say "unknown command": not a usage error of ours.
				return withCode(exitInternal, err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "cluster %s (run %s, backend %s) is up after %.2fs\n", c.Name, c.RunID, c.Backend, time.Since(begin).Seconds())
			var props string
			if c.Security != nil {
				if props, err = writeClientProperties(c.Security); err != nil {
					return withCode(exitInternal, err)
				}
			}
			printNodes(w, c, nil)
			printEndpoints(w, c.Topology, c.StateFile)
			bs := c.Bootstrap()
			if len(bs) == 0 {
				return nil
			}
			if c.Security == nil {
				fmt.Fprintf(w, "try:               isrlab cluster exec --name %s -- kcat -L -b %s\n", c.Name, strings.Join(bs, ","))
				return nil
			}
			fmt.Fprintf(w, "try:               isrlab cluster exec --name %s -- isrlab topics describe --bootstrap-server %s --command-config %s\n", c.Name, strings.Join(bs, ","), props)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&backend, "backend", netns.Name, "netns (network namespaces), docker, or ssh (your hosts, with --hosts)")
	f.StringVar(&hosts, "hosts", "", "the ssh backend's cluster file: your hosts and how to control their nodes")
	f.StringVar(&system, "system", docker.SystemIsrlab, "what the brokers run: isrlab, or kafka (apache/kafka KRaft image; docker backend only)")
	f.StringVar(&kafkaImage, "kafka-image", docker.DefaultKafkaImage, "image for --system kafka (must already be present: no registry is used)")
	f.StringVar(&o.Name, "name", defaultClusterName, "cluster name")
	f.IntVar(&o.Coordinators, "coordinators", 3, "number of coordinators (etcd members)")
	f.IntVar(&o.Brokers, "brokers", 3, "number of brokers")
	f.IntVar(&o.Clients, "clients", 1, "number of client hosts")
	f.StringArrayVar(&configs, "config", nil, "broker setting key=value (repeatable), e.g. min.insync.replicas=2")
	f.StringVar(&subnet, "subnet", compose.DefaultSubnet.String(), "IPv4 subnet of the lab network")
	f.StringVar(&o.RunDir, "run-dir", "", "directory for node data and logs (default /var/tmp/isrlab/<name>-<run>)")
	f.DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait for every node to be ready")
	f.BoolVar(&keepData, "keep-data", false, "keep the run directory when the cluster goes down")
	f.BoolVarP(&verbose, "verbose", "v", false, "log each step with its duration to stderr")
	f.StringSliceVar(&o.FaultFS, "faultfs", nil, "brokers whose log.dirs live on faultfs (disk faults, power loss): b1,b2 or all")
	f.BoolVar(&o.Secured, "secured", false, "TLS and SASL: one SASL_SSL listener per broker (SCRAM-SHA-512), a CA and certificates made for the run, the users created at bring-up (netns and docker backends; docs/security.md)")
	f.BoolVar(&o.KafkaProxy, "kafka-proxy", false, "put a Kafka-protocol proxy in front of every broker, for kind: kafka faults (netns backend, plaintext)")
	f.BoolVar(&plan, "plan", false, "check the layout and print what up would create or touch, without doing it")
	return cmd
}

// writeClusterPlan prints what cluster up would create (netns, docker)
// or touch (ssh) for top, touching nothing; a layout the backend would
// refuse is a usage error.
func writeClusterPlan(w io.Writer, backend string, top compose.Topology, sshc *ssh.Config, d *docker.Backend) error {
	var err error
	switch backend {
	case docker.Name:
		err = d.Plan(w, top)
	case ssh.Name:
		err = sshc.Plan(w, top)
	default:
		fmt.Fprintf(w, "netns cluster %s: run %s, network namespaces and a bridge on %s named after the run\n", top.Name, top.RunID, top.Subnet)
		if s := top.Security; s != nil {
			fmt.Fprintf(w, "  %s\n", s.Summary())
		}
		for _, n := range top.Nodes {
			fmt.Fprintf(w, "  %s  %s at %s", n.Name, n.Role, n.Addr)
			if len(n.Argv) > 0 {
				fmt.Fprintf(w, ": %s", strings.Join(n.Argv, " "))
			}
			fmt.Fprintln(w)
		}
	}
	if err != nil {
		return usageError("%v", err)
	}
	return nil
}

// clientPropertiesFile is a secured cluster's client config, in its
// secrets directory.
const clientPropertiesFile = "client.properties"

// writeClientProperties writes the client config of a secured cluster's
// client user, in Kafka's names, for --command-config and other tools: it
// names the password file, never the password.
func writeClientProperties(s *compose.Security) (string, error) {
	var body strings.Builder
	for _, p := range s.Client().Properties() {
		fmt.Fprintf(&body, "%s=%s\n", p.Key, p.Value)
	}
	path := filepath.Join(s.SecretsDir, clientPropertiesFile)
	if err := os.WriteFile(path, []byte(body.String()), 0o600); err != nil {
		return "", fmt.Errorf("client config: %w", err)
	}
	return path, nil
}

// cliLogger logs to stderr at debug level when verbose, else only errors.
func cliLogger(cmd *cobra.Command, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
}

func printEndpoints(w io.Writer, t compose.Topology, stateFile string) {
	if bs := t.Bootstrap(); len(bs) > 0 {
		fmt.Fprintf(w, "bootstrap servers: %s\n", strings.Join(bs, ","))
	}
	if cs := t.CoordinatorEndpoints(); len(cs) > 0 {
		fmt.Fprintf(w, "coordinators:      %s\n", strings.Join(cs, ","))
	}
	if disks := t.Disks(); len(disks) > 0 {
		var pairs []string
		for _, n := range t.Role(compose.RoleBroker) {
			if s, ok := disks[n.Name]; ok {
				pairs = append(pairs, n.Name+"="+s)
			}
		}
		fmt.Fprintf(w, "faultfs controls:  %s\n", strings.Join(pairs, " "))
	}
	if proxies := t.Proxies(); len(proxies) > 0 {
		var pairs []string
		for _, n := range t.Role(compose.RoleBroker) {
			if s, ok := proxies[n.Name]; ok {
				pairs = append(pairs, n.Name+"="+s)
			}
		}
		fmt.Fprintf(w, "Kafka proxies:     %s\n", strings.Join(pairs, " "))
	}
	if s := t.Security; s != nil {
		c := s.Client()
		fmt.Fprintf(w, "client config:     %s (%s, %s as %s; the password stays in %s)\n",
			filepath.Join(s.SecretsDir, clientPropertiesFile), c.Protocol, c.Mechanism, c.Username, c.PasswordFile)
	}
	fmt.Fprintf(w, "run dir:           %s\n", t.RunDir)
	if stateFile != "" {
		fmt.Fprintf(w, "state:             %s\n", stateFile)
	}
}

// printNodes writes one line per node; up, if not nil, overrides liveness.
func printNodes(w io.Writer, c *compose.Cluster, up map[string]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tADDRESS\tPID\tSTATE\tNETNS\tLOG")
	for _, n := range c.Nodes {
		pid, state := "-", "-"
		if n.Proc != nil {
			pid = strconv.Itoa(n.PID())
			state = "down"
			if n.Proc.Running() {
				state = "up"
			}
		}
		if s, ok := up[n.Name]; ok {
			state = s
		}
		logf := n.LogFile
		if n.Proc == nil {
			logf = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, n.Addr, pid, state, n.NetNS, logf)
	}
	tw.Flush()
}

// loadCluster finds cluster name and attaches to it; other subcommands
// (faults) use it too. The handle lives until the process exits.
func loadCluster(name string) (*compose.State, *compose.Cluster, error) {
	st, c, _, err := backends.Open(context.Background(), "", name, nemesis.CleanFaults)
	if errors.Is(err, compose.ErrNotFound) {
		return nil, nil, withCode(exitBadArgs, fmt.Errorf("%w (is it up? see isrlab cluster list)", err))
	}
	return st, c, err
}

func newClusterDownCmd() *cobra.Command {
	var name string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every node and remove everything the cluster created",
		Long: `Stop every node process (SIGTERM, then SIGKILL after --grace), kill anything
else running in the cluster's namespaces, remove the namespaces (their links
go with them), the run directory (unless the cluster was started with
--keep-data) and the state file.`,
		Example: `  isrlab cluster down
  isrlab cluster down --name lab2 --grace 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			st, err := compose.ReadState(compose.StateDir(), name)
			if errors.Is(err, compose.ErrNotFound) {
				return withCode(exitBadArgs, err)
			}
			if err != nil {
				return err
			}
			if handled, err := enterRootless(ctx, st); handled {
				return err
			}
			begin := time.Now()
			if err := backends.Down(ctx, "", name, grace, nemesis.CleanFaults); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster %s (run %s) is down after %.2fs\n", name, st.RunID, time.Since(begin).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", defaultClusterName, "cluster name")
	cmd.Flags().DurationVar(&grace, "grace", 3*time.Second, "how long a node may take to exit after SIGTERM")
	return cmd
}

func newClusterExecCmd() *cobra.Command {
	var name, node string
	cmd := &cobra.Command{
		Use:   "exec [--name N] [--node client1] -- CMD [ARG...]",
		Short: "Run a command inside a node's network namespace (default: the client host)",
		Long: `Run CMD with its arguments (no shell) inside the network namespace of a node
of the cluster, by default the first client host, with this terminal's
standard input and output. The exit code is CMD's.`,
		Example: `  isrlab cluster exec -- kcat -L -b 10.213.0.4:9092
  isrlab cluster exec --node b1 -- ip addr
  isrlab cluster exec -- sh -c 'echo hi | kcat -P -b 10.213.0.4:9092 -t t'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("missing command: isrlab cluster exec -- CMD [ARG...]")
			}
			ctx, stop := signalContext()
			defer stop()
			st, c, err := loadCluster(name)
			if err != nil {
				return err
			}
			if handled, err := enterRootless(ctx, st); handled {
				return err
			}
			if node == "" {
				if cl := c.Client(); cl != nil {
					node = cl.Name
				}
			}
			n := c.Node(node)
			if n == nil {
				return usageError("--node %q: cluster %s has nodes %s", node, name, strings.Join(c.NodeNames(), ", "))
			}
			x := exec.Command(args[0], args[1:]...)
			x.Stdin, x.Stdout, x.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := compose.InNetNS(n.NetNS, x.Start); err != nil {
				return withCode(127, fmt.Errorf("run %s in %s: %w", args[0], node, err))
			}
			// The command gets Ctrl-C from the terminal itself; wait for it.
			err = x.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return withCode(ee.ExitCode(), nil)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", defaultClusterName, "cluster name")
	cmd.Flags().StringVar(&node, "node", "", "node whose namespace to use (default: the first client host)")
	// Everything after CMD belongs to CMD, even without "--".
	cmd.Flags().SetInterspersed(false)
	return cmd
}

func newClusterStatusCmd() *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show nodes, pids, addresses, up/down and the leader of every partition",
		Long: `Show each node with its process id and whether the process runs, then ask the
brokers (from the client host's namespace) for metadata and list every
partition with its leader, replicas and in-sync replicas. --json prints the
cluster's state file instead.`,
		Example: `  isrlab cluster status
  isrlab cluster status --name lab2 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			st, c, err := loadCluster(name)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			if handled, err := enterRootless(ctx, st); handled {
				return err
			}
			fmt.Fprintf(w, "cluster %s (run %s, backend %s) %s since %s\n", c.Name, c.RunID, c.Backend, st.Status, st.Created.Format(time.RFC3339))
			printNodes(w, c, nil)
			printEndpoints(w, c.Topology, "")
			fmt.Fprintln(w)
			return printPartitions(ctx, w, c)
		},
	}
	cmd.Flags().StringVar(&name, "name", defaultClusterName, "cluster name")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state file as JSON")
	return cmd
}

// printPartitions lists leaders from a metadata request through the client
// namespace; an unreachable cluster is reported, not an error.
func printPartitions(ctx context.Context, w io.Writer, c *compose.Cluster) error {
	if len(c.Bootstrap()) == 0 {
		return nil
	}
	kafka, err := c.KafkaOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...), kgo.RequestRetries(1)}, kafka...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(mctx)
	if err != nil {
		fmt.Fprintf(w, "partitions: metadata unavailable: %v\n", err)
		return nil
	}
	fmt.Fprintf(w, "controller: broker %d\n", md.Controller)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tEPOCH\tREPLICAS\tISR")
	topics := md.Topics.Names()
	slices.Sort(topics)
	for _, t := range topics {
		td := md.Topics[t]
		for _, p := range td.Partitions.Sorted() {
			leader := strconv.Itoa(int(p.Leader))
			if p.Err != nil {
				leader += " (" + p.Err.Error() + ")"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\n", t, p.Partition, leader, p.LeaderEpoch, p.Replicas, p.ISR)
		}
	}
	tw.Flush()
	if len(topics) == 0 {
		fmt.Fprintln(w, "no topics")
	}
	return nil
}

func newClusterListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List clusters known on this machine (for this user)",
		Long:    `List every cluster with a state file, its run id, backend, status and whether it is live (dead runs are removed by isrlab clean).`,
		Example: `  isrlab cluster list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			states, errs := compose.ListStates(compose.StateDir())
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRUN\tBACKEND\tSTATUS\tLIVE\tNODES\tCREATED")
			for _, s := range states {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%d\t%s\n", s.Name, s.RunID, s.Backend, s.Status, s.Live(), len(s.Nodes), s.Created.Format(time.RFC3339))
			}
			tw.Flush()
			return errors.Join(errs...)
		},
	}
}

func newClusterIdleCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "idle",
		Short:  "Block until SIGTERM or SIGINT (what a Docker node's sandbox container runs)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
}
