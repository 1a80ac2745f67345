package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/units"
)

func init() { rootCmd.AddCommand(newFaultCmd()) }

const targetHelp = `Targets are node names (b2, c1, client1), groups (brokers, coordinators,
clients, all, random-broker) or Kafka-aware expressions resolved from live
metadata at injection time: leader:TOPIC/P, follower:TOPIC/P,
last-isr:TOPIC/P, followers:TOPIC/P (every replica but the leader),
non-replicas:TOPIC/P (every broker outside its replicas), controller,
coordinator-leader.`

func newFaultCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fault",
		Short: "Inject, list and heal faults in a running isrlab cluster",
		Long: `Inject faults into a cluster started with 'isrlab cluster up', list the active
ones and heal them. Active faults are kept in the cluster's state directory
(faults.json next to state.json), so any process can list or heal them.

Network faults are nftables rules and qdiscs in the cluster's switch
namespace (named after the run id); process faults signal the node
processes; disk faults talk to faultfs control sockets.

` + targetHelp,
		Example: `  isrlab fault inject partition --isolate leader:orders/0
  isrlab fault inject kill --node b2
  isrlab fault inject slow-net --node b3 --rate 1mbit
  isrlab fault inject loss --node b2 --percent 20
  isrlab fault list
  isrlab fault heal f1
  isrlab fault heal --all
  isrlab fault run --schedule chaos.json --history faults.jsonl`,
	}
	cmd.AddCommand(newFaultInjectCmd(), newFaultListCmd(), newFaultHealCmd(), newFaultRunCmd(), newFaultDelayerCmd())
	return cmd
}

// faultOpts are the flags every inject subcommand shares.
type faultOpts struct {
	name     string
	nodes    []string
	controls []string
	seed     int64
	asJSON   bool
}

func (o *faultOpts) register(cmd *cobra.Command, nodes bool) {
	f := cmd.Flags()
	f.StringVar(&o.name, "name", defaultClusterName, "cluster name")
	f.Int64Var(&o.seed, "seed", 0, "seed for random choices (random-broker, follower; default: the time)")
	f.BoolVar(&o.asJSON, "json", false, "print the active fault as JSON")
	if nodes {
		f.StringSliceVarP(&o.nodes, "node", "n", nil, "target (repeat or comma-separate; see 'isrlab fault --help')")
		f.StringSliceVar(&o.nodes, "nodes", nil, "same as --node")
	}
}

func controlFlag(c *cobra.Command, o *faultOpts) {
	c.Flags().StringSliceVar(&o.controls, "control", nil,
		"NODE=SOCKET: faultfs control socket of a node (repeatable; default: the cluster's faultfs brokers, from its state)")
}

// parseControls parses NODE=SOCKET pairs.
func parseControls(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		n, s, ok := strings.Cut(p, "=")
		if !ok || n == "" || s == "" {
			return nil, usageError("--control %q: want NODE=SOCKET", p)
		}
		out[n] = s
	}
	return out, nil
}

// openNemesis attaches to the cluster and its fault store.
func openNemesis(ctx context.Context, o *faultOpts) (*nemesis.Nemesis, bool, error) {
	disks, err := parseControls(o.controls)
	if err != nil {
		return nil, false, err
	}
	st, c, err := loadCluster(o.name)
	if err != nil {
		return nil, false, err
	}
	if handled, err := enterRootless(ctx, st); handled {
		return nil, true, err
	}
	// Brokers the cluster runs on faultfs (cluster up --faultfs) need no
	// --control; one given names or replaces a node's socket.
	for node, sock := range c.Disks() {
		if _, ok := disks[node]; !ok {
			disks[node] = sock
		}
	}
	seed := o.seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	env := &nemesis.Env{Cluster: c, Resolver: &nemesis.LiveResolver{Cluster: c}, Disks: disks, Proxies: c.Proxies(),
		Rand: rand.New(rand.NewSource(seed))}
	return &nemesis.Nemesis{Env: env, Store: &nemesis.Store{Path: nemesis.FaultsFile(compose.StateDir(), o.name)}}, false, nil
}

// faultError maps nemesis errors to exit codes: a bad description is a
// usage error.
func faultError(err error) error {
	if errors.Is(err, nemesis.ErrBadFault) {
		return withCode(exitBadArgs, err)
	}
	return err
}

func newFaultInjectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inject KIND [flags]",
		Short: "Inject one fault (partition, kill, pause, slow-net, loss, slow-disk, power-loss, ...)",
		Long: `Inject one fault. Each kind is a subcommand with its own flags; --spec takes
the fault's JSON form instead ({"kind":"kill","nodes":["b2"]}).

The targets are resolved once, now; the resolved nodes are stored with the
fault, so healing acts on the nodes that were hit even if leadership has
moved since. The command prints the fault's id for 'isrlab fault heal'.

` + targetHelp,
		Example: `  isrlab fault inject partition --isolate leader:orders/0
  isrlab fault inject partition --scenario leader-coordinators --partition orders/0
  isrlab fault inject kill --node b2
  isrlab fault inject slow-net --node b3 --rate 1mbit --delay 50ms
  isrlab fault inject loss --node b2 --percent 20
  isrlab fault inject slow-disk --node b2 --latency 20ms --control b2=/run/isrlab/b2.sock
  isrlab fault inject power-loss --nodes b1,b2
  isrlab fault inject --spec '{"kind":"pause","nodes":["controller"]}'`,
		Args: cobra.NoArgs,
	}
	var o faultOpts
	var spec string
	o.register(cmd, false)
	cmd.Flags().StringVar(&spec, "spec", "", "the fault as JSON, with its kind")
	controlFlag(cmd, &o)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if spec == "" {
			return usageError("name a fault kind (see --help) or give --spec")
		}
		f, err := nemesis.ParseUserSpec([]byte(spec))
		if err != nil {
			return withCode(exitBadArgs, fmt.Errorf("--spec: %w", err))
		}
		return runInject(cmd, &o, f)
	}
	for _, k := range injectKinds() {
		cmd.AddCommand(k)
	}
	return cmd
}

func runInject(cmd *cobra.Command, o *faultOpts, f nemesis.Fault) error {
	ctx, stop := signalContext()
	defer stop()
	n, handled, err := openNemesis(ctx, o)
	if handled || err != nil {
		return err
	}
	a, err := n.Inject(ctx, f)
	if err != nil {
		return faultError(err)
	}
	w := cmd.OutOrStdout()
	if o.asJSON {
		b, _ := json.MarshalIndent(a, "", "  ")
		fmt.Fprintln(w, string(b))
		return nil
	}
	b, _ := json.Marshal(a.Fault)
	fmt.Fprintf(w, "injected %s: %s\n", a.ID, b)
	return nil
}

// kindCmd builds one inject subcommand; build turns the flags into a fault.
func kindCmd(use, short, long, example string, nodes bool, flags func(*cobra.Command, *faultOpts), build func(o *faultOpts) (nemesis.Fault, error)) *cobra.Command {
	var o faultOpts
	cmd := &cobra.Command{Use: use, Short: short, Long: long + "\n\n" + targetHelp, Example: example, Args: cobra.NoArgs}
	o.register(cmd, nodes)
	if flags != nil {
		flags(cmd, &o)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if nodes && len(o.nodes) == 0 {
			return usageError("give the target nodes with --node")
		}
		for _, x := range o.nodes {
			if err := nemesis.CheckTarget(x); err != nil {
				return withCode(exitBadArgs, fmt.Errorf("--node: %w", err))
			}
		}
		f, err := build(&o)
		if err != nil {
			return err
		}
		return runInject(cmd, &o, f)
	}
	return cmd
}

func injectKinds() []*cobra.Command {
	proc := func(kind, short, long, example string) *cobra.Command {
		return kindCmd(kind+" --node TARGET", short, long, example, true, nil, func(o *faultOpts) (nemesis.Fault, error) {
			f, _ := nemesis.New(kind)
			b, _ := json.Marshal(map[string]any{"nodes": o.nodes})
			return f, json.Unmarshal(b, f)
		})
	}
	cmds := []*cobra.Command{
		proc("kill", "SIGKILL the nodes at the same instant (heal: start them)",
			"Send SIGKILL to every target at once and wait until they are gone. Heal starts them again.",
			"  isrlab fault inject kill --node b2\n  isrlab fault inject kill --node leader:orders/0"),
		proc("stop", "Stop the nodes gracefully with SIGTERM (heal: start them)",
			"Send SIGTERM (a broker's controlled shutdown), SIGKILL after the backend's grace. Heal starts them again.",
			"  isrlab fault inject stop --node controller"),
		proc("pause", "Freeze the nodes with SIGSTOP (heal: SIGCONT)",
			"Freeze every target with SIGSTOP; its sockets stay open and its sessions expire. Heal resumes it.",
			"  isrlab fault inject pause --node coordinator-leader"),
		proc("restart", "Stop the nodes gracefully and start them again",
			"Stop (SIGTERM) and start every target. Heal starts any that did not come back.",
			"  isrlab fault inject restart --nodes b1,b2"),
	}
	var torn bool
	cmds = append(cmds, kindCmd("power-loss --nodes TARGETS", "Cut the power of nodes at the same instant (SIGKILL + faultfs crash)",
		`SIGKILL every target at the same instant, then make every faultfs behind
them (brokers of a cluster up --faultfs, or --control NODE=SOCKET) forget
the writes that were not fsynced. Nodes without a faultfs only lose their
processes. Heal starts them again.`,
		"  isrlab fault inject power-loss --nodes b1,b2 --control b1=/tmp/b1.sock --control b2=/tmp/b2.sock",
		true, func(c *cobra.Command, o *faultOpts) {
			controlFlag(c, o)
			c.Flags().BoolVar(&torn, "torn", false, "keep a random prefix of each file's unsynced tail (torn writes)")
		}, func(o *faultOpts) (nemesis.Fault, error) {
			f := &nemesis.PowerLoss{Torn: torn}
			f.Nodes = o.nodes
			return f, nil
		}))
	cmds = append(cmds, partitionCmd(), slowNetCmd(), lossCmd())
	cmds = append(cmds, diskCmds()...)
	return cmds
}

func partitionCmd() *cobra.Command {
	var (
		isolate, targets, others, nodes  []string
		topology, scenario, part, grudge string
		oneWay                           bool
	)
	return kindCmd("partition", "Cut network links (nftables in the switch namespace)",
		`Drop packets between nodes at the lab bridge. Choose one of:
  --isolate TARGETS             cut the targets off from every other node (clients too)
  --topology cut --targets A --others B
  --topology halves|random-halves|majorities-ring|bridge [--nodes ...]
                                divide the nodes (default: coordinators and brokers)
  --grudge 'b1=b2,b3;b2=b1'     NODE=NODES it drops packets from
  --scenario NAME --partition TOPIC/P
                                the classic ISR partition stories (each
                                a library scenario): follower-leader,
                                follower-coordinators, leader-followers,
                                leader-coordinators, leader-brokers,
                                leader-all-but-clients, controller-brokers,
                                controller-coordinators
--one-way keeps only the packets into the isolated side dropped.`,
		`  isrlab fault inject partition --isolate leader:orders/0
  isrlab fault inject partition --isolate b1 --one-way
  isrlab fault inject partition --topology random-halves --seed 7
  isrlab fault inject partition --topology cut --targets clients --others brokers
  isrlab fault inject partition --scenario controller-coordinators`,
		false, func(c *cobra.Command, o *faultOpts) {
			f := c.Flags()
			f.StringSliceVar(&isolate, "isolate", nil, "targets to cut off from every other node")
			f.StringVar(&topology, "topology", "", "isolate, cut, halves, random-halves, majorities-ring, bridge, grudge")
			f.StringSliceVar(&targets, "targets", nil, "one side (isolate, cut)")
			f.StringSliceVar(&others, "others", nil, "the other side of a cut (default: every other node)")
			f.StringSliceVar(&nodes, "nodes", nil, "the nodes a halves/ring/bridge topology divides")
			f.StringVar(&scenario, "scenario", "", "one of the classic ISR partition stories (see above)")
			f.StringVar(&part, "partition", "", "TOPIC/P the scenario is about")
			f.StringVar(&grudge, "grudge", "", "custom grudge: NODE=FROM,FROM;NODE=FROM")
			f.BoolVar(&oneWay, "one-way", false, "drop only packets into the isolated side")
		}, func(o *faultOpts) (nemesis.Fault, error) {
			p := &nemesis.Partition{Topology: topology, Targets: targets, Others: others, Nodes: nodes,
				Partition: part, OneWay: oneWay, Seed: o.seed}
			set := 0
			if len(isolate) > 0 {
				p.Topology, p.Targets = nemesis.TopoIsolate, isolate
				set++
			}
			if scenario != "" {
				p.Topology = scenario
				set++
			}
			if grudge != "" {
				g, err := parseGrudge(grudge)
				if err != nil {
					return nil, err
				}
				p.Topology, p.Grudge = nemesis.TopoGrudge, g
				set++
			}
			if topology != "" {
				set++
			}
			if set != 1 {
				return nil, usageError("give exactly one of --isolate, --topology, --scenario, --grudge")
			}
			for _, x := range concat(p.Targets, p.Others, p.Nodes) {
				if err := nemesis.CheckTarget(x); err != nil {
					return nil, withCode(exitBadArgs, err)
				}
			}
			return p, nil
		})
}

func concat(xs ...[]string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

func parseGrudge(s string) (nemesis.Grudge, error) {
	g := nemesis.Grudge{}
	for _, part := range strings.Split(s, ";") {
		to, froms, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || to == "" || froms == "" {
			return nil, usageError("--grudge %q: want NODE=FROM,FROM;NODE=FROM", s)
		}
		g[to] = append(g[to], strings.Split(froms, ",")...)
	}
	return g, nil
}

func slowNetCmd() *cobra.Command {
	var rate, direction string
	var delay, jitter time.Duration
	return kindCmd("slow-net --node TARGET [--rate R] [--delay D [--jitter J]]",
		"Limit bandwidth (TBF) and delay packets (netem or the NFQUEUE delayer)",
		`Shape the targets' links: --rate limits the bandwidth with a token bucket
(TBF), --delay/--jitter delay every packet (netem where the kernel has it,
else a userspace NFQUEUE delayer in the switch namespace). --direction in
shapes traffic to the node (its bridge port), out traffic from it (its own
interface), both (default) both. Rates are tc-style: 1mbit, 500kbit, 2mbps.`,
		"  isrlab fault inject slow-net --node b3 --rate 1mbit\n  isrlab fault inject slow-net --node leader:orders/0 --delay 50ms --jitter 10ms",
		true, func(c *cobra.Command, o *faultOpts) {
			c.Flags().StringVar(&rate, "rate", "", "bandwidth limit, e.g. 1mbit")
			c.Flags().DurationVar(&delay, "delay", 0, "added delay per packet")
			c.Flags().DurationVar(&jitter, "jitter", 0, "random extra delay up to this")
			c.Flags().StringVar(&direction, "direction", "both", "in, out or both")
		}, func(o *faultOpts) (nemesis.Fault, error) {
			if rate == "" && delay == 0 && jitter == 0 {
				return nil, usageError("give --rate or --delay")
			}
			return &nemesis.SlowNet{Nodes: o.nodes, Rate: rate, Delay: units.Duration(delay),
				Jitter: units.Duration(jitter), Direction: direction}, nil
		})
}

func lossCmd() *cobra.Command {
	var pct float64
	var direction string
	return kindCmd("loss --node TARGET --percent P", "Drop a random share of the nodes' packets (a flaky link)",
		`Drop each packet to (in) or from (out) the targets, or both (default), with
probability --percent/100, with an nftables random-number rule at the bridge.`,
		"  isrlab fault inject loss --node b2 --percent 20\n  isrlab fault inject loss --node clients --percent 5 --direction out",
		true, func(c *cobra.Command, o *faultOpts) {
			c.Flags().Float64Var(&pct, "percent", 0, "share of packets dropped, in (0, 100]")
			c.Flags().StringVar(&direction, "direction", "both", "in, out or both")
		}, func(o *faultOpts) (nemesis.Fault, error) {
			if pct <= 0 || pct > 100 {
				return nil, usageError("--percent %v: want a value in (0, 100]", pct)
			}
			return &nemesis.Loss{Nodes: o.nodes, Percent: pct, Direction: direction}, nil
		})
}

func diskCmds() []*cobra.Command {
	var (
		op, prefix      string
		latency, jitter time.Duration
		prob            float64
	)
	common := func(c *cobra.Command, o *faultOpts) {
		controlFlag(c, o)
		c.Flags().StringVar(&op, "op", "all", "operations: read, write, fsync, meta or all")
		c.Flags().StringVar(&prefix, "prefix", "", "only paths under this prefix (relative to the mount)")
	}
	const controlNote = `
A broker of a cluster brought up with --faultfs needs nothing more; any
other node's faultfs control socket is given with --control NODE=SOCKET
(isrlab faultfs --control SOCKET). Heal lifts every fault of that faultfs.`
	cmds := []*cobra.Command{
		kindCmd("slow-disk --node TARGET --latency D", "Delay the nodes' filesystem operations (faultfs)",
			"Delay matching filesystem operations by --latency plus up to --jitter."+controlNote,
			"  isrlab fault inject slow-disk --node b2 --latency 20ms   # cluster up --faultfs b2\n  isrlab fault inject slow-disk --node b2 --latency 20ms --control b2=/tmp/b2.sock",
			true, func(c *cobra.Command, o *faultOpts) {
				common(c, o)
				c.Flags().DurationVar(&latency, "latency", 0, "delay per operation")
				c.Flags().DurationVar(&jitter, "jitter", 0, "random extra delay up to this")
			}, func(o *faultOpts) (nemesis.Fault, error) {
				f := &nemesis.SlowDisk{Latency: units.Duration(latency), Jitter: units.Duration(jitter)}
				f.Nodes, f.Op, f.Prefix = o.nodes, faultfs.Op(op), prefix
				return f, nil
			}),
		kindCmd("disk-error --node TARGET --probability P", "Fail the nodes' filesystem operations with EIO (faultfs)",
			"Fail matching filesystem operations with EIO with probability --probability."+controlNote,
			"  isrlab fault inject disk-error --node b2 --op fsync --probability 1 --control b2=/tmp/b2.sock",
			true, func(c *cobra.Command, o *faultOpts) {
				common(c, o)
				c.Flags().Float64Var(&prob, "probability", 1, "chance in (0, 1] that an operation fails")
			}, func(o *faultOpts) (nemesis.Fault, error) {
				f := &nemesis.DiskError{Probability: prob}
				f.Nodes, f.Op, f.Prefix = o.nodes, faultfs.Op(op), prefix
				return f, nil
			}),
		kindCmd("disk-hang --node TARGET", "Block the nodes' filesystem operations until healed (faultfs)",
			"Block matching filesystem operations until the fault is healed."+controlNote,
			"  isrlab fault inject disk-hang --node b2 --op fsync --control b2=/tmp/b2.sock",
			true, common, func(o *faultOpts) (nemesis.Fault, error) {
				f := &nemesis.DiskHang{}
				f.Nodes, f.Op, f.Prefix = o.nodes, faultfs.Op(op), prefix
				return f, nil
			}),
	}
	return cmds
}

func newFaultListCmd() *cobra.Command {
	var o faultOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the active faults of a cluster",
		Long: `List the faults injected and not yet healed, with their ids, kinds, start
times and resolved targets (from the cluster's faults.json).`,
		Example: "  isrlab fault list\n  isrlab fault list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			n, handled, err := openNemesis(ctx, &o)
			if handled || err != nil {
				return err
			}
			as, err := n.Active()
			if err != nil {
				return err
			}
			return printActive(cmd.OutOrStdout(), as, o.asJSON)
		},
	}
	cmd.Flags().StringVar(&o.name, "name", defaultClusterName, "cluster name")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print JSON")
	return cmd
}

func printActive(w io.Writer, as []nemesis.Active, asJSON bool) error {
	if asJSON {
		if as == nil {
			as = []nemesis.Active{}
		}
		b, err := json.MarshalIndent(as, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	if len(as) == 0 {
		fmt.Fprintln(w, "no active faults")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTARTED\tFAULT")
	for _, a := range as {
		b, _ := json.Marshal(a.Fault)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.ID, a.Fault.Fault.Kind(), a.Started.Format(time.RFC3339), b)
	}
	return tw.Flush()
}

func newFaultHealCmd() *cobra.Command {
	var o faultOpts
	var all bool
	cmd := &cobra.Command{
		Use:   "heal [ID...] [--all]",
		Short: "Heal active faults by id, or all of them",
		Long: `Heal the named active faults, or with --all every active fault (newest
first) and then anything a fault of this run left that no store knows
(nftables tables and qdiscs). Healing is idempotent.`,
		Example: "  isrlab fault heal f2\n  isrlab fault heal --all",
		RunE: func(cmd *cobra.Command, ids []string) error {
			if all == (len(ids) > 0) {
				return usageError("give fault ids or --all")
			}
			ctx, stop := signalContext()
			defer stop()
			n, handled, err := openNemesis(ctx, &o)
			if handled || err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if all {
				as, _ := n.Active()
				err := n.HealAll(ctx)
				c := n.Env.Cluster
				var paths []string
				for _, node := range c.Nodes {
					paths = append(paths, node.NetNS)
				}
				err = errors.Join(err, nemesis.Clean(ctx, c.SwitchNS, c.RunID, paths), nemesis.CleanRemote(ctx, c))
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "healed %d fault(s)\n", len(as))
				return nil
			}
			for _, id := range ids {
				if err := n.Heal(ctx, id); err != nil {
					if errors.Is(err, nemesis.ErrNotActive) {
						return withCode(exitBadArgs, err)
					}
					return err
				}
				fmt.Fprintf(w, "healed %s\n", id)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.name, "name", defaultClusterName, "cluster name")
	cmd.Flags().BoolVar(&all, "all", false, "heal every active fault and clean leftovers")
	return cmd
}

// newFaultDelayerCmd is the nemesis's helper process: the packet delayer
// slow-net starts where the kernel has no netem, and the clock strober of
// clock-strobe; users do not run it.
func newFaultDelayerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delayer --netns PATH --queue N --delay D [--jitter J] --run RUN",
		Short: "Serve an NFQUEUE that delays packets (started by slow-net), or strobe brokers' clocks",
		Long: `Bind NFQUEUE N in the namespace at PATH and accept each queued packet after D ± J. Started and stopped by 'isrlab fault inject slow-net' and its heal.

With 'strobe' first, switch each target broker's clock skew between --offset and 0 every --period until stopped, then set it to 0 (started by clock-strobe).`,
		Example: `  isrlab fault delayer --netns /run/netns/isrlab-RUN-sw --queue 3 --delay 50ms --run RUN
  isrlab fault delayer strobe --offset 200ms --period 50ms --target /run/netns/isrlab-RUN-b2=http://10.0.0.12:9404 --run RUN`,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext()
			defer stop()
			return faultError(nemesis.DelayerMain(ctx, args, cmd.OutOrStdout()))
		},
	}
}

func newFaultRunCmd() *cobra.Command {
	var o faultOpts
	var schedule, histPath string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "run --schedule FILE",
		Short: "Play a fault schedule against a running cluster",
		Long: `Play a schedule (JSON) against a running cluster with the real clock and
heal every fault it started when it ends, is interrupted (Ctrl-C) or fails.
The schedule is generated from its seed before anything runs; --dry-run
prints the events and exits.

  {"type":"every","seed":7,"interval":"10s","hold":"4s","duration":"1m",
   "mix":[{"weight":3,"fault":{"kind":"kill","nodes":["leader:t/0"]}},
          {"weight":1,"fault":{"kind":"partition","topology":"random-halves"}}]}
  {"type":"once","at":"5s","hold":"10s","fault":{"kind":"pause","nodes":["controller"]}}
  {"type":"fixed","events":[{"at":"2s","action":"start","key":1,"fault":{...}},
                            {"at":"8s","action":"stop","key":1}]}

--history writes the nemesis operations (start-<kind>, stop-<kind>, heal)
as an isrlab history (JSON Lines) for the report and replay. Exit 255 if
any fault failed to inject or heal.`,
		Example: "  isrlab fault run --schedule chaos.json\n  isrlab fault run --schedule chaos.json --dry-run",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if schedule == "" {
				return usageError("--schedule is required")
			}
			b, err := os.ReadFile(schedule)
			if err != nil {
				return withCode(exitBadArgs, err)
			}
			events, err := nemesis.ParseSchedule(b)
			if err != nil {
				return faultError(err)
			}
			w := cmd.OutOrStdout()
			if dryRun {
				for _, e := range events {
					f := ""
					if e.Fault.Fault != nil {
						fb, _ := json.Marshal(e.Fault)
						f = " " + string(fb)
					}
					fmt.Fprintf(w, "%8s %-8s %d%s\n", e.At, e.Action, e.Key, f)
				}
				return nil
			}
			ctx, stop := signalContext()
			defer stop()
			n, handled, err := openNemesis(ctx, &o)
			if handled || err != nil {
				return err
			}
			begin := time.Now()
			var hw *history.Writer
			if histPath != "" {
				f, err := os.Create(histPath)
				if err != nil {
					return err
				}
				defer f.Close()
				hw, err = history.NewWriter(f, history.Header{Run: n.Env.Cluster.RunID, Seed: o.seed,
					Start: begin.UTC().Format(time.RFC3339Nano)})
				if err != nil {
					return err
				}
				n.Recorder = history.NewRecorder(hw, func() time.Duration { return time.Since(begin) })
			}
			n.Env.Log = cliLogger(cmd, true)
			err = nemesis.Play(ctx, n, events, nemesis.PlayOptions{})
			if n.Recorder != nil {
				err = errors.Join(err, n.Recorder.Flush())
			}
			return err
		},
	}
	cmd.Flags().StringVar(&o.name, "name", defaultClusterName, "cluster name")
	cmd.Flags().StringVar(&schedule, "schedule", "", "schedule file (JSON)")
	cmd.Flags().StringVar(&histPath, "history", "", "write the nemesis operations to this history file")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the events and exit")
	cmd.Flags().Int64Var(&o.seed, "seed", 0, "seed for random target choices (default: the time)")
	controlFlag(cmd, &o)
	return cmd
}
