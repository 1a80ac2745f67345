package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// ErrNoTarget reports a target expression that names no node right now
// (no leader, no follower, an unknown partition).
var ErrNoTarget = errors.New("no such target")

// View is a snapshot of the cluster's live metadata, what targets resolve
// against.
type View struct {
	// Controller is the controller's broker id, -1 if none.
	Controller int32 `json:"controller"`
	// Partitions maps "topic/partition" to its state.
	Partitions map[string]PartitionView `json:"partitions,omitempty"`
	// CoordinatorLeader is the node name of the coordinator (etcd) leader,
	// "" if unknown.
	CoordinatorLeader string `json:"coordinator_leader,omitempty"`
}

// PartitionView is one partition's leadership.
type PartitionView struct {
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
}

// Resolver reads the live View. topics lists the topics the targets name.
type Resolver interface {
	View(ctx context.Context, topics []string) (View, error)
}

// PartitionResolver is a Resolver that can read the View without the
// coordinator leader, which only the coordinator-leader target needs.
type PartitionResolver interface {
	Partitions(ctx context.Context, topics []string) (View, error)
}

// Target expressions.
const (
	TargetController        = "controller"
	TargetCoordinatorLeader = "coordinator-leader"
	TargetBrokers           = "brokers"
	TargetCoordinators      = "coordinators"
	TargetClients           = "clients"
	TargetAll               = "all"
	TargetRandomBroker      = "random-broker"
)

// Partition-scoped target prefixes: leader:topic/0 and so on.
const (
	TargetLeader   = "leader"
	TargetFollower = "follower"
	TargetLastISR  = "last-isr"
	// TargetFollowers is every replica but the leader; TargetNonReplicas
	// every broker outside the partition's replica set.
	TargetFollowers   = "followers"
	TargetNonReplicas = "non-replicas"
)

// needsView reports whether expr reads live metadata, and which topic.
func needsView(expr string) (topic string, ok bool) {
	switch expr {
	case TargetController, TargetCoordinatorLeader:
		return "", true
	}
	kind, tp, found := strings.Cut(expr, ":")
	if !found {
		return "", false
	}
	switch kind {
	case TargetLeader, TargetFollower, TargetLastISR, TargetFollowers, TargetNonReplicas:
		t, _, _ := strings.Cut(tp, "/")
		return t, true
	}
	return "", false
}

// ParseTopicPartition parses "topic/partition".
func ParseTopicPartition(s string) (string, int32, error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: %q is not topic/partition", ErrBadFault, s)
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, fmt.Errorf("%w: %q is not topic/partition", ErrBadFault, s)
	}
	return s[:i], int32(p), nil
}

// CheckTarget validates the syntax of a target expression without a cluster.
func CheckTarget(expr string) error {
	switch expr {
	case TargetController, TargetCoordinatorLeader, TargetBrokers, TargetCoordinators,
		TargetClients, TargetAll, TargetRandomBroker:
		return nil
	}
	if kind, tp, ok := strings.Cut(expr, ":"); ok {
		switch kind {
		case TargetLeader, TargetFollower, TargetLastISR, TargetFollowers, TargetNonReplicas:
			_, _, err := ParseTopicPartition(tp)
			return err
		}
		return fmt.Errorf("%w: unknown target %q", ErrBadFault, expr)
	}
	if !compose.ValidName(expr) {
		return fmt.Errorf("%w: unknown target %q", ErrBadFault, expr)
	}
	return nil
}

// view reads the live view if any of exprs needs one.
func (e *Env) view(ctx context.Context, exprs ...string) (View, error) {
	var topics []string
	need := false
	for _, x := range exprs {
		if t, ok := needsView(x); ok {
			need = true
			if t != "" && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	if !need {
		return View{Controller: -1}, nil
	}
	if e.Resolver == nil {
		return View{}, fmt.Errorf("%w: targets %v need live metadata and no resolver is set", ErrBadFault, exprs)
	}
	// Only coordinator-leader, and in KRaft mode the controller (which
	// the coordinators elect), read the coordinators: a fault aimed at a
	// partition's leader skips asking them (seconds, when one is cut off).
	needCoordinators := slices.Contains(exprs, TargetCoordinatorLeader) || (e.Cluster.KRaft && slices.Contains(exprs, TargetController))
	if pr, ok := e.Resolver.(PartitionResolver); ok && !needCoordinators {
		v, err := pr.Partitions(ctx, topics)
		if err != nil {
			return View{}, fmt.Errorf("read cluster metadata: %w", err)
		}
		return v, nil
	}
	v, err := e.Resolver.View(ctx, topics)
	if err != nil {
		return View{}, fmt.Errorf("read cluster metadata: %w", err)
	}
	return v, nil
}

// ResolveTargets turns target expressions into node names, deduplicated in
// first-seen order, against the live view.
func (e *Env) ResolveTargets(ctx context.Context, exprs []string) ([]string, error) {
	v, err := e.view(ctx, exprs...)
	if err != nil {
		return nil, err
	}
	return resolveAll(e.Cluster, v, e.rng().Intn, exprs)
}

// resolveAll resolves exprs against a view; intn draws random choices.
func resolveAll(c *compose.Cluster, v View, intn func(int) int, exprs []string) ([]string, error) {
	var out []string
	for _, x := range exprs {
		names, err := resolve(c, v, intn, x)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func names(nodes []*compose.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// brokerName returns the node name of broker id.
func brokerName(c *compose.Cluster, id int32) (string, bool) {
	for _, n := range c.Of(compose.RoleBroker) {
		if int32(n.ID) == id {
			return n.Name, true
		}
	}
	return "", false
}

func resolve(c *compose.Cluster, v View, intn func(int) int, x string) ([]string, error) {
	switch x {
	case TargetBrokers:
		return names(c.Of(compose.RoleBroker)), nil
	case TargetCoordinators:
		return names(c.Of(compose.RoleCoordinator)), nil
	case TargetClients:
		return names(c.Of(compose.RoleClient)), nil
	case TargetAll:
		return names(c.Nodes), nil
	case TargetRandomBroker:
		bs := c.Of(compose.RoleBroker)
		if len(bs) == 0 {
			return nil, fmt.Errorf("%w: %s: the cluster has no brokers", ErrNoTarget, x)
		}
		return []string{bs[intn(len(bs))].Name}, nil
	case TargetController:
		n, ok := brokerName(c, v.Controller)
		if c.KRaft {
			n, ok = controllerNode(c, v.Controller)
		}
		if !ok {
			return nil, fmt.Errorf("%w: controller (id %d)", ErrNoTarget, v.Controller)
		}
		return []string{n}, nil
	case TargetCoordinatorLeader:
		if v.CoordinatorLeader == "" || c.Node(v.CoordinatorLeader) == nil {
			return nil, fmt.Errorf("%w: the coordinators have no leader", ErrNoTarget)
		}
		return []string{v.CoordinatorLeader}, nil
	}
	kind, tp, ok := strings.Cut(x, ":")
	if !ok {
		if c.Node(x) == nil {
			return nil, fmt.Errorf("%w: no node %q in cluster %s", ErrNoTarget, x, c.Name)
		}
		return []string{x}, nil
	}
	switch kind {
	case TargetLeader, TargetFollower, TargetLastISR, TargetFollowers, TargetNonReplicas:
	default:
		return nil, fmt.Errorf("%w: unknown target %q", ErrBadFault, x)
	}
	topic, part, err := ParseTopicPartition(tp)
	if err != nil {
		return nil, err
	}
	key := topic + "/" + strconv.Itoa(int(part))
	p, ok := v.Partitions[key]
	if !ok {
		return nil, fmt.Errorf("%w: partition %s is not in the metadata", ErrNoTarget, key)
	}
	switch kind {
	case TargetFollowers, TargetNonReplicas:
		var out []string
		for _, b := range c.Of(compose.RoleBroker) {
			id := int32(b.ID)
			replica := slices.Contains(p.Replicas, id)
			if (kind == TargetFollowers && replica && id != p.Leader) || (kind == TargetNonReplicas && !replica) {
				out = append(out, b.Name)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: %s names no broker now", ErrNoTarget, x)
		}
		return out, nil
	}
	var id int32 = -1
	switch kind {
	case TargetLeader:
		id = p.Leader
	case TargetFollower:
		// A follower: an in-sync one first (the interesting case for the
		// seed 000 scenarios), else any replica that is not the leader.
		var fs []int32
		for _, r := range p.ISR {
			if r != p.Leader {
				fs = append(fs, r)
			}
		}
		if len(fs) == 0 {
			for _, r := range p.Replicas {
				if r != p.Leader {
					fs = append(fs, r)
				}
			}
		}
		if len(fs) > 0 {
			id = fs[intn(len(fs))]
		}
	case TargetLastISR:
		if len(p.ISR) > 0 {
			id = p.ISR[len(p.ISR)-1]
		}
	default:
		return nil, fmt.Errorf("%w: unknown target %q", ErrBadFault, x)
	}
	n, ok := brokerName(c, id)
	if !ok {
		return nil, fmt.Errorf("%w: %s (broker id %d)", ErrNoTarget, x, id)
	}
	return []string{n}, nil
}

// controllerNode is the coordinator node that runs KRaft controller id.
func controllerNode(c *compose.Cluster, id int32) (string, bool) {
	for _, n := range c.Of(compose.RoleCoordinator) {
		if compose.ControllerNodeID(n.ID) == id {
			return n.Name, true
		}
	}
	return "", false
}
