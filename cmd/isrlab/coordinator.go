package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(newCoordinatorCmd()) }

func newCoordinatorCmd() *cobra.Command {
	var (
		cfg           coord.ServerConfig
		ctrlID        int32
		ctrlListen    string
		ctrlOverrides []string
	)
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run one coordinator member (embedded etcd; the ZooKeeper role)",
		Long: `Run one member of isrlab's coordinator cluster: an embedded etcd server
that holds broker sessions, the controller election, topic assignments and
partition state, as ZooKeeper does for Kafka.

The command prints one line when the member has joined the cluster and a
leader exists, then serves until SIGINT or SIGTERM and stops cleanly (a
second signal ends it at once). etcd's own log goes to --log-file (default
<data-dir>/etcd.log), not the terminal. A second member on the same
--data-dir is refused at once.

With only --data-dir it runs a single-member cluster on 127.0.0.1:2379
(clients) and 127.0.0.1:2380 (peers). For a cluster, start every member with
the same --initial-cluster listing all of them by name and peer URL. A
restarted member keeps its data and ignores --initial-cluster.

The client URL also serves /health and Prometheus /metrics over HTTP.
'isrlab coordinator dump' prints what the cluster holds; 'isrlab coordinator
member' lists, adds and removes members (to replace one that lost its disk).`,
		Example: `  # single member on 127.0.0.1:2379
  isrlab coordinator --data-dir /tmp/c1

  # three members (run each in its own shell or namespace)
  isrlab coordinator --name c1 --data-dir /var/lib/isrlab/c1 \
    --listen-client-urls http://10.0.0.1:2379 --listen-peer-urls http://10.0.0.1:2380 \
    --initial-cluster c1=http://10.0.0.1:2380,c2=http://10.0.0.2:2380,c3=http://10.0.0.3:2380`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DataDir == "" {
				return usageError("--data-dir is required")
			}
			switch cfg.InitialClusterState {
			case "new", "existing":
			default:
				return usageError("--initial-cluster-state must be new or existing, not %q", cfg.InitialClusterState)
			}
			for flag, v := range map[string]string{
				"--listen-client-urls": cfg.ListenClientURLs, "--listen-peer-urls": cfg.ListenPeerURLs,
				"--advertise-client-urls": cfg.AdvertiseClientURLs, "--advertise-peer-urls": cfg.AdvertisePeerURLs,
			} {
				for _, u := range strings.Split(v, ",") {
					if v != "" && !strings.HasPrefix(u, "http://") {
						return usageError("%s: %q is not an http://host:port URL", flag, u)
					}
				}
			}
			if cfg.HeartbeatInterval < time.Millisecond || cfg.ElectionTimeout < 5*cfg.HeartbeatInterval {
				return usageError("--election-timeout (%v) must be at least 5 times --heartbeat-interval (%v), which must be at least 1ms", cfg.ElectionTimeout, cfg.HeartbeatInterval)
			}
			if cfg.InitialCluster != "" {
				for _, m := range strings.Split(cfg.InitialCluster, ",") {
					if name, u, ok := strings.Cut(m, "="); !ok || name == "" || !strings.HasPrefix(u, "http://") {
						return usageError("--initial-cluster: %q is not name=http://host:port", m)
					}
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// A clean stop can wait up to ~7 s handing etcd leadership to a peer
			// that is going away too; after the first signal a second one
			// kills the process at once (the default action).
			context.AfterFunc(ctx, stop)
			if ctrlID < 0 && ctrlListen == "" && len(ctrlOverrides) == 0 {
				return coord.Run(ctx, cfg, cmd.OutOrStdout())
			}
			q, err := quorumNode(cfg, ctrlID, ctrlListen, ctrlOverrides)
			if err != nil {
				return err
			}
			return coord.RunWith(ctx, cfg, cmd.OutOrStdout(), func(ctx context.Context) error {
				return controller.RunQuorumNode(ctx, q)
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&ctrlID, "controller-id", -1, "KRaft mode: also run a controller with this node id (distinct from every broker.id) on --controller-listener")
	f.StringVar(&ctrlListen, "controller-listener", "", "KRaft mode: the controller listener, host:port, which brokers list in controller.quorum.voters as ID@host:port")
	f.StringArrayVar(&ctrlOverrides, "controller-override", nil, "KRaft mode: a cluster broker setting the controller reads, key=value (unclean.leader.election.enable, min.insync.replicas, broker.session.timeout.ms, ...); may be repeated")
	f.StringVar(&cfg.Name, "name", coord.DefaultName, "member name, as used in --initial-cluster")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the member's data (required; created 0700)")
	f.StringVar(&cfg.ListenClientURLs, "listen-client-urls", coord.DefaultListenClientURLs, "comma-separated URLs to serve clients on")
	f.StringVar(&cfg.AdvertiseClientURLs, "advertise-client-urls", "", "client URLs to advertise (default: the listen URLs)")
	f.StringVar(&cfg.ListenPeerURLs, "listen-peer-urls", coord.DefaultListenPeerURLs, "comma-separated URLs to serve peers on")
	f.StringVar(&cfg.AdvertisePeerURLs, "advertise-peer-urls", "", "peer URLs to advertise (default: the listen URLs)")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "all members as name=peerURL,... (default: this member alone)")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", "new", "new, or existing to join a running cluster that already lists this member")
	f.StringVar(&cfg.LogFile, "log-file", "", "file for etcd's own log (default <data-dir>/etcd.log)")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", coord.DefaultReadyTimeout, "give up if the member has not joined a cluster with a leader by then")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 100*time.Millisecond, "raft heartbeat interval (the same on every member)")
	f.DurationVar(&cfg.ElectionTimeout, "election-timeout", time.Second, "raft election timeout, at least 5 heartbeats (the same on every member)")
	cmd.AddCommand(newCoordinatorDumpCmd(), newCoordinatorMemberCmd())
	return cmd
}

// coordinatorClientFlags are the flags of subcommands that talk to a
// running coordinator cluster.
type coordinatorClientFlags struct {
	endpoints string
	timeout   time.Duration
}

func (f *coordinatorClientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoints, "endpoints", coord.DefaultListenClientURLs, "comma-separated client URLs of the coordinator members")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "give up after this long")
}

// dial checks the flags and connects; the caller closes the client and
// calls cancel.
func (f *coordinatorClientFlags) dial(cmd *cobra.Command, opts ...coord.Option) (*coord.Client, context.Context, context.CancelFunc, error) {
	eps := strings.Split(f.endpoints, ",")
	for _, e := range eps {
		if !strings.HasPrefix(e, "http://") {
			return nil, nil, nil, usageError("--endpoints: %q is not an http://host:port URL", e)
		}
	}
	if f.timeout <= 0 {
		return nil, nil, nil, usageError("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	c, err := coord.Dial(ctx, eps, append(opts, coord.WithCallTimeout(f.timeout))...)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return c, ctx, cancel, nil
}

func newCoordinatorMemberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List, add or remove coordinator members",
		Long: `Change the membership of a running coordinator cluster, e.g. to replace a
member that lost its disk: remove it, add it again (the command prints the
flags to start it with), then start it on an empty --data-dir.`,
		Example: `  isrlab coordinator member list --endpoints http://10.0.0.1:2379
  isrlab coordinator member remove c3 --endpoints http://10.0.0.1:2379
  isrlab coordinator member add c3 --peer-urls http://10.0.0.3:2380 --endpoints http://10.0.0.1:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("missing subcommand: list, add or remove")
		},
	}

	var lf coordinatorClientFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the coordinator members",
		Long:  "Print every member's name, id, peer URLs and client URLs (empty until it has started).",
		Example: `  isrlab coordinator member list
  isrlab coordinator member list --endpoints http://10.0.0.1:2379,http://10.0.0.2:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := lf.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			ms, err := c.Members(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "name\tid\tpeer urls\tclient urls\n")
			for _, m := range ms {
				name := m.Name
				if name == "" {
					name = "(not started)"
				}
				fmt.Fprintf(tw, "%s\t%x\t%s\t%s\n", name, m.ID, strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
			}
			return tw.Flush()
		},
	}
	lf.add(list)

	var af coordinatorClientFlags
	var peerURLs string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Announce a new member, then print how to start it",
		Long: `Announce a new member NAME with its peer URLs and print the isrlab
coordinator flags it must start with (--initial-cluster with every member and
--initial-cluster-state existing). Start it promptly on an empty data dir:
the cluster counts it in its quorum from now on. etcd refuses ("unhealthy
cluster") until its leader has been connected to every member for 5 s; run
the command again then.`,
		Example: `  isrlab coordinator member add c3 --peer-urls http://10.0.0.3:2380 --endpoints http://10.0.0.1:2379`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if peerURLs == "" {
				return usageError("--peer-urls is required")
			}
			urls := strings.Split(peerURLs, ",")
			for _, u := range urls {
				if !strings.HasPrefix(u, "http://") {
					return usageError("--peer-urls: %q is not an http://host:port URL", u)
				}
			}
			c, ctx, cancel, err := af.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			initial, err := c.AddMember(ctx, args[0], urls)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "--name %s --listen-peer-urls %s --initial-cluster %s --initial-cluster-state existing\n", args[0], peerURLs, initial)
			return nil
		},
	}
	af.add(add)
	add.Flags().StringVar(&peerURLs, "peer-urls", "", "comma-separated peer URLs of the new member (required)")

	var rf coordinatorClientFlags
	remove := &cobra.Command{
		Use:     "remove NAME",
		Short:   "Remove a member from the cluster",
		Long:    "Remove member NAME; it stops serving. Exit status 255 if there is no such member.",
		Example: `  isrlab coordinator member remove c3 --endpoints http://10.0.0.1:2379`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := rf.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			return c.RemoveMember(ctx, args[0])
		},
	}
	rf.add(remove)

	cmd.AddCommand(list, add, remove)
	return cmd
}

func newCoordinatorDumpCmd() *cobra.Command {
	var (
		cf     coordinatorClientFlags
		chroot string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Print the coordinator's state: controller, brokers, topics, partition states",
		Long: `Print everything isrlab keeps in the coordinator, read at one revision: the
controller and its epoch, the live brokers with their epochs, every topic with
its configs, replica assignment and partition state (leader, leader epoch,
ISR, version), pending topic deletions and unprocessed ISR change
notifications. With --json the same as one JSON object.

Exit status 255 if the coordinator does not answer within --timeout (for
example without a quorum).`,
		Example: `  isrlab coordinator dump
  isrlab coordinator dump --endpoints http://10.0.0.1:2379,http://10.0.0.2:2379 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := cf.dial(cmd, coord.WithChroot(chroot))
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			snap, err := c.Snapshot(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(snap)
			}
			printSnapshot(out, snap)
			return nil
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&chroot, "chroot", coord.DefaultChroot, "key prefix isrlab's data lives under")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printSnapshot writes the snapshot as aligned text.
func printSnapshot(w io.Writer, s coord.Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "revision\t%d\n", s.Revision)
	if s.Controller != nil {
		fmt.Fprintf(tw, "controller\tbroker %d, epoch %d\n", s.Controller.BrokerID, s.Controller.Epoch)
	} else {
		fmt.Fprintf(tw, "controller\tnone\n")
	}
	fmt.Fprintf(tw, "\nbroker\tepoch\thost:port\track\n")
	for _, b := range s.Brokers {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", b.ID, b.Epoch, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), b.Rack)
	}
	for _, t := range s.Topics {
		fmt.Fprintf(tw, "\ntopic %s", t.Name)
		if t.MarkedForDeletion {
			fmt.Fprint(tw, " (marked for deletion)")
		}
		keys := make([]string, 0, len(t.Configs))
		for k := range t.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, " %s=%s", k, t.Configs[k])
		}
		fmt.Fprintf(tw, "\npartition\treplicas\tleader\tleader epoch\tisr\tversion\tcontroller epoch\n")
		for _, p := range t.Partitions {
			if p.State == nil {
				fmt.Fprintf(tw, "%d\t%v\t-\t-\t-\t-\t-\n", p.Partition, p.Replicas)
				continue
			}
			fmt.Fprintf(tw, "%d\t%v\t%d\t%d\t%v\t%d\t%d\n", p.Partition, p.Replicas, p.State.Leader, p.State.LeaderEpoch, p.State.ISR, p.State.Version, p.State.ControllerEpoch)
		}
	}
	fmt.Fprintf(tw, "\nisr change notifications\t%d pending\n", len(s.ISRChangeNotifications))
	tw.Flush()
}

// quorumNode checks the KRaft controller flags of a coordinator member.
func quorumNode(cfg coord.ServerConfig, id int32, listen string, overrides []string) (controller.QuorumNode, error) {
	if id < 0 || listen == "" {
		return controller.QuorumNode{}, usageError("KRaft mode needs both --controller-id and --controller-listener")
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return controller.QuorumNode{}, usageError("--controller-listener: %q is not host:port", listen)
	}
	for _, kv := range overrides {
		if !strings.Contains(kv, "=") {
			return controller.QuorumNode{}, usageError("--controller-override: %q is not key=value", kv)
		}
	}
	// The controller reads broker settings; a broker config needs a log
	// directory and, in KRaft mode, a quorum to register with, which are
	// this node's own.
	keys := append([]string{"log.dirs=" + cfg.DataDir, fmt.Sprintf("controller.quorum.voters=%d@%s", id, listen)}, overrides...)
	bcfg, _, err := kafkaconfig.Load("", keys)
	if err != nil {
		return controller.QuorumNode{}, usageError("--controller-override: %v", err)
	}
	client := cfg.AdvertiseClientURLs
	if client == "" {
		client = cfg.ListenClientURLs
	}
	return controller.QuorumNode{
		ID: id, Listen: listen, Endpoints: strings.Split(client, ","), Broker: bcfg,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, nil
}
