package nemesis

import (
	"context"
	"fmt"
	"math/rand"
	"slices"

	"github.com/google/nftables"

	"github.com/isrlab/isrlab/compose"
)

// Partition topologies. The Seed* names are seed 000's partition scenarios
// 1–8 around the partition named by Partition.Partition.
const (
	TopoIsolate        = "isolate"         // Targets against every other node (clients included)
	TopoHalves         = "halves"          // Nodes split in two, in order
	TopoRandomHalves   = "random-halves"   // Nodes shuffled by Seed, split in two
	TopoMajoritiesRing = "majorities-ring" // each node sees a different majority
	TopoBridge         = "bridge"          // two halves joined by one node
	TopoGrudge         = "grudge"          // Grudge as given
	TopoCut            = "cut"             // Targets against Others, two ways

	SeedFollowerLeader         = "follower-leader"         // 1: a follower from the leader
	SeedFollowerCoordinators   = "follower-coordinators"   // 2: a follower from the coordinators
	SeedLeaderFollowers        = "leader-followers"        // 3: the leader from its followers
	SeedLeaderCoordinators     = "leader-coordinators"     // 4: the leader from the coordinators
	SeedLeaderBrokers          = "leader-brokers"          // 5: the leader from every other broker
	SeedLeaderAllButClients    = "leader-all-but-clients"  // 6: the leader from brokers and coordinators
	SeedControllerBrokers      = "controller-brokers"      // 7: the controller from the other brokers
	SeedControllerCoordinators = "controller-coordinators" // 8: the controller from the coordinators
)

// Topologies lists the partition topologies, seed 000's scenarios last.
func Topologies() []string {
	return []string{TopoIsolate, TopoHalves, TopoRandomHalves, TopoMajoritiesRing, TopoBridge, TopoGrudge, TopoCut,
		SeedFollowerLeader, SeedFollowerCoordinators, SeedLeaderFollowers, SeedLeaderCoordinators,
		SeedLeaderBrokers, SeedLeaderAllButClients, SeedControllerBrokers, SeedControllerCoordinators}
}

// Partition cuts links between nodes with drop rules in the switch
// namespace's bridge, matching the nodes' bridge ports.
type Partition struct {
	Topology string `json:"topology"`
	// Targets are target expressions: the isolated side (isolate, cut).
	Targets []string `json:"targets,omitempty"`
	// Others is the other side of a cut (default: every other node).
	Others []string `json:"others,omitempty"`
	// Nodes are the nodes a halves, random-halves, majorities-ring or
	// bridge topology divides (default: coordinators and brokers).
	Nodes []string `json:"nodes,omitempty"`
	// Partition ("topic/0") is the partition of a seed 000 scenario.
	Partition string `json:"partition,omitempty"`
	// OneWay drops only the packets going into the isolated side (isolate,
	// cut) or into the first component of the other topologies.
	OneWay bool  `json:"one_way,omitempty"`
	Seed   int64 `json:"seed,omitempty"`
	// Grudge is the input of TopoGrudge (node -> nodes whose packets it
	// drops, as target expressions).
	Grudge Grudge `json:"grudge,omitempty"`
}

type partitionRun struct {
	Partition `json:"-"`
	nftRun
	// Cut is the links cut (node -> nodes whose packets it drops).
	Cut Grudge `json:"cut,omitempty"`
}

// NewRun implements Fault.
func (f *Partition) NewRun() Run { return &partitionRun{Partition: *f} }

func (*Partition) Kind() string { return "partition" }

func init() {
	register(func() Fault { return &Partition{} })
	register(func() Fault { return &Loss{} })
}

// nftRun is the run of a fault played by nftables rules: the nodes it
// resolved to, the table holding its rules and where that table is.
type nftRun struct {
	// The nodes the fault acts on (resolved); for a partition, the
	// cut-off side (the targets of isolate and cut, the first node group
	// of a seed 000 topology, the first half): the nodes a condition means
	// by the fault's name.
	nodesRun
	// Table is the nftables table holding the rules.
	Table string `json:"table,omitempty"`
	// Side is where the rules are: "switch" or "node".
	Side string `json:"side,omitempty"`
}

func servers(c *compose.Cluster) []string {
	return append(names(c.Of(compose.RoleCoordinator)), names(c.Of(compose.RoleBroker))...)
}

func except(all []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(drop, n) })
}

// Resolve fixes the cut from the live metadata.
func (p *partitionRun) Resolve(ctx context.Context, env *Env) error {
	c := env.Cluster
	var g Grudge
	first := []string(nil) // the side OneWay protects
	if p.Seed == 0 && (p.Topology == TopoRandomHalves || p.Topology == TopoMajoritiesRing || p.Topology == TopoBridge) {
		p.Seed = env.rng().Int63() // kept in the fault, so the shuffle is on record
	}
	rng := rand.New(rand.NewSource(p.Seed))
	nodes := func() ([]string, error) {
		if len(p.Nodes) == 0 {
			return servers(c), nil
		}
		return env.ResolveTargets(ctx, p.Nodes)
	}
	switch p.Topology {
	case TopoIsolate, TopoCut:
		if len(p.Targets) == 0 {
			return fmt.Errorf("%w: partition %s needs targets", ErrBadFault, p.Topology)
		}
		ts, err := env.ResolveTargets(ctx, p.Targets)
		if err != nil {
			return err
		}
		others := except(names(c.Nodes), ts...)
		if len(p.Others) > 0 {
			if others, err = env.ResolveTargets(ctx, p.Others); err != nil {
				return err
			}
		}
		g, first = Cut(ts, except(others, ts...)), ts
	case TopoHalves, TopoRandomHalves, TopoMajoritiesRing, TopoBridge:
		ns, err := nodes()
		if err != nil {
			return err
		}
		if len(ns) < 2 {
			return fmt.Errorf("%w: partition %s needs at least 2 nodes, have %v", ErrBadFault, p.Topology, ns)
		}
		switch p.Topology {
		case TopoHalves:
			g, first = Halves(ns), ns[:len(ns)/2]
		case TopoRandomHalves:
			s := shuffled(rng, ns)
			g, first = Halves(s), s[:len(s)/2]
		case TopoMajoritiesRing:
			g = MajoritiesRing(rng, ns)
		case TopoBridge:
			g = Bridge(rng, ns)
		}
	case TopoGrudge:
		if len(p.Grudge) == 0 {
			return fmt.Errorf("%w: partition grudge needs a grudge", ErrBadFault)
		}
		g = Grudge{}
		for to, froms := range p.Grudge {
			tos, err := env.ResolveTargets(ctx, []string{to})
			if err != nil {
				return err
			}
			fs, err := env.ResolveTargets(ctx, froms)
			if err != nil {
				return err
			}
			for _, t := range tos {
				for _, f := range fs {
					g.add(t, f)
				}
			}
		}
	default:
		a, b, err := p.scenario(ctx, env)
		if err != nil {
			return err
		}
		g, first = Cut(a, except(b, a...)), a
	}
	if p.OneWay && first != nil {
		g = g.OneWay(first)
	}
	if len(g) == 0 {
		return fmt.Errorf("%w: partition %s cuts no link", ErrBadFault, p.Topology)
	}
	side, err := env.side()
	if err != nil {
		return err
	}
	p.Side = side
	p.Cut = g
	p.Resolved = first
	p.Table = tableName(env.runID(), env.id)
	return nil
}

// scenario resolves one of seed 000's scenarios into the two sides cut.
func (p *Partition) scenario(ctx context.Context, env *Env) (a, b []string, err error) {
	c := env.Cluster
	coords := names(c.Of(compose.RoleCoordinator))
	brokers := names(c.Of(compose.RoleBroker))
	one := func(expr string) ([]string, error) { return env.ResolveTargets(ctx, []string{expr}) }
	needPart := func() error {
		if p.Partition == "" {
			return fmt.Errorf("%w: partition %s needs a partition (topic/0)", ErrBadFault, p.Topology)
		}
		_, _, err := ParseTopicPartition(p.Partition)
		return err
	}
	switch p.Topology {
	case SeedControllerBrokers, SeedControllerCoordinators:
		ctl, err := one(TargetController)
		if err != nil {
			return nil, nil, err
		}
		if p.Topology == SeedControllerBrokers {
			return ctl, brokers, nil
		}
		return ctl, coords, nil
	case SeedFollowerLeader, SeedFollowerCoordinators, SeedLeaderFollowers, SeedLeaderCoordinators,
		SeedLeaderBrokers, SeedLeaderAllButClients:
	default:
		return nil, nil, fmt.Errorf("%w: unknown partition topology %q (known: %v)", ErrBadFault, p.Topology, Topologies())
	}
	if err := needPart(); err != nil {
		return nil, nil, err
	}
	// One view for both ends, so that leader and follower are consistent.
	v, err := env.view(ctx, TargetLeader+":"+p.Partition)
	if err != nil {
		return nil, nil, err
	}
	at := func(expr string) ([]string, error) { return resolveAll(c, v, env.rng().Intn, []string{expr}) }
	leader, err := at(TargetLeader + ":" + p.Partition)
	if err != nil {
		return nil, nil, err
	}
	switch p.Topology {
	case SeedFollowerLeader, SeedFollowerCoordinators:
		f, err := at(TargetFollower + ":" + p.Partition)
		if err != nil {
			return nil, nil, err
		}
		if p.Topology == SeedFollowerLeader {
			return f, leader, nil
		}
		return f, coords, nil
	case SeedLeaderFollowers:
		t, part, _ := ParseTopicPartition(p.Partition)
		pv := v.Partitions[fmt.Sprintf("%s/%d", t, part)]
		var fs []string
		for _, id := range pv.Replicas {
			if n, ok := brokerName(c, id); ok && n != leader[0] {
				fs = append(fs, n)
			}
		}
		if len(fs) == 0 {
			return nil, nil, fmt.Errorf("%w: %s has no followers", ErrNoTarget, p.Partition)
		}
		return leader, fs, nil
	case SeedLeaderCoordinators:
		return leader, coords, nil
	case SeedLeaderBrokers:
		return leader, brokers, nil
	default: // SeedLeaderAllButClients
		return leader, append(slices.Clone(coords), brokers...), nil
	}
}

// Inject adds one drop rule per cut link in the fault's own table.
func (p *partitionRun) Inject(ctx context.Context, env *Env) error {
	if p.Table == "" || len(p.Cut) == 0 {
		return fmt.Errorf("%w: partition not resolved", ErrBadFault)
	}
	if p.Side == SideNode {
		return p.injectNodes(ctx, env)
	}
	nft, done, err := env.nft()
	if err != nil {
		return err
	}
	defer done()
	t, ch := bridgeTable(nft, p.Table)
	for _, l := range p.Cut.Pairs() {
		from, err := env.node(l[0])
		if err != nil {
			return err
		}
		to, err := env.node(l[1])
		if err != nil {
			return err
		}
		nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: dropLink(from.SwitchPort, to.SwitchPort)})
	}
	if err := nft.Flush(); err != nil {
		return fmt.Errorf("partition: add nftables rules: %w", err)
	}
	return nil
}

// Heal deletes the fault's table.
func (p *partitionRun) Heal(ctx context.Context, env *Env) error {
	if p.Side == SideNode {
		var tos []string
		for to := range p.Cut {
			tos = append(tos, to)
		}
		return healNodeTables(ctx, env, tos, p.Table)
	}
	return healTable(env, nftables.TableFamilyBridge, p.Table)
}

func healTable(env *Env, fam nftables.TableFamily, table string) error {
	if table == "" {
		return nil
	}
	nft, done, err := env.nft()
	if err != nil {
		return err
	}
	defer done()
	return delTableOf(nft, fam, table)
}

// Loss drops a random share of the packets entering or leaving nodes: a
// flaky link (nftables numgen in the switch namespace's bridge).
type Loss struct {
	Nodes   []string `json:"nodes"`
	Percent float64  `json:"percent"`
	// Direction is "both" (default), "in" (to the nodes) or "out".
	Direction string `json:"direction,omitempty"`
}

type lossRun struct {
	Loss `json:"-"`
	nftRun
}

// NewRun implements Fault.
func (f *Loss) NewRun() Run { return &lossRun{Loss: *f} }

func (*Loss) Kind() string { return "loss" }

func checkDirection(d string) error {
	switch d {
	case "", "both", "in", "out":
		return nil
	}
	return fmt.Errorf("%w: direction %q: want both, in or out", ErrBadFault, d)
}

// Resolve implements Run.
func (l *lossRun) Resolve(ctx context.Context, env *Env) error {
	if l.Percent <= 0 || l.Percent > 100 {
		return fmt.Errorf("%w: loss percent %v: want (0, 100]", ErrBadFault, l.Percent)
	}
	if err := checkDirection(l.Direction); err != nil {
		return err
	}
	ns, err := env.ResolveTargets(ctx, l.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: loss needs nodes", ErrBadFault)
	}
	side, err := env.side()
	if err != nil {
		return err
	}
	l.Side = side
	l.Resolved, l.Table = ns, tableName(env.runID(), env.id)
	return nil
}

// Inject implements Run.
func (l *lossRun) Inject(ctx context.Context, env *Env) error {
	if l.Side == SideNode {
		return l.injectNodes(ctx, env)
	}
	nft, done, err := env.nft()
	if err != nil {
		return err
	}
	defer done()
	t, ch := bridgeTable(nft, l.Table)
	for _, name := range l.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if l.Direction != "out" {
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: randomDrop(matchPort(oif, n.SwitchPort), l.Percent)})
		}
		if l.Direction != "in" {
			nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: randomDrop(matchPort(iif, n.SwitchPort), l.Percent)})
		}
	}
	if err := nft.Flush(); err != nil {
		return fmt.Errorf("loss: add nftables rules: %w", err)
	}
	return nil
}

// Heal implements Run.
func (l *lossRun) Heal(ctx context.Context, env *Env) error {
	if l.Side == SideNode {
		return healNodeTables(ctx, env, l.Resolved, l.Table)
	}
	return healTable(env, nftables.TableFamilyBridge, l.Table)
}
