package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/compose"
)

func init() {
	register(func() Fault { return &Reassign{} })
}

// Reassign moves partition replicas between brokers while the cluster
// runs, through the Kafka API (AlterPartitionReassignments): Jepsen's
// membership-change nemesis for a replicated log. One of three forms:
//
//	{"kind":"reassign","partition":"t/0","replicas":[2,3,4]}  t/0 moves to brokers 2, 3, 4
//	{"kind":"reassign","partition":"t/0","move-from":"leader:t/0"}  the leader's replica moves to a broker outside the set
//	{"kind":"reassign","broker":"b2","topics":["t"]}  every replica of b2 (in t; default every topic) moves away
//
// move-from and broker take a node name or a target expression. A moved
// replica goes to a broker not in the partition's replica set, drawn with
// Env.Rand, in the same position of the list (so a leader's replica is
// replaced by the new preferred one). Resolve records the moves; Inject
// starts them and returns (the controller completes them while the
// workload runs); Heal moves every partition back to the replicas it had,
// and is safe to repeat.
type Reassign struct {
	Partition string   `json:"partition,omitempty"`
	Replicas  []int32  `json:"replicas,omitempty"`
	MoveFrom  string   `json:"move-from,omitempty"`
	Broker    string   `json:"broker,omitempty"`
	Topics    []string `json:"topics,omitempty"`
}

type reassignRun struct {
	Reassign `json:"-"`
	// Moves are the resolved moves (set by Resolve).
	Moves []ReassignMove `json:"moves,omitempty"`
}

// NewRun implements Fault.
func (f *Reassign) NewRun() Run { return &reassignRun{Reassign: *f} }

// ReassignMove is one partition's move.
type ReassignMove struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	From      []int32 `json:"from"`
	To        []int32 `json:"to"`
}

// Kind implements Fault.
func (f *Reassign) Kind() string { return "reassign" }

// targets are the target expressions the fault names.
func (f *Reassign) targets() []string {
	var out []string
	for _, x := range []string{f.MoveFrom, f.Broker} {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Resolve implements Fault: it reads the replica sets and fixes the moves.
func (f *reassignRun) Resolve(ctx context.Context, env *Env) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: reassign: "+format, append([]any{ErrBadFault}, args...)...)
	}
	switch {
	case f.Broker != "" && (f.Partition != "" || len(f.Replicas) > 0 || f.MoveFrom != ""):
		return bad("broker cannot be combined with partition, replicas or move-from")
	case f.Broker == "" && f.Partition == "":
		return bad("needs a partition or a broker")
	case f.Partition != "" && (len(f.Replicas) > 0) == (f.MoveFrom != ""):
		return bad("a partition needs exactly one of replicas and move-from")
	case len(f.Topics) > 0 && f.Broker == "":
		return bad("topics go with broker")
	}
	if env.Resolver == nil {
		return bad("needs live metadata (no resolver)")
	}
	var topics []string
	if f.Partition != "" {
		t, _, err := ParseTopicPartition(f.Partition)
		if err != nil {
			return bad("%v", err)
		}
		topics = []string{t}
	} else {
		topics = f.Topics
	}
	v, err := env.Resolver.View(ctx, topics)
	if err != nil {
		return fmt.Errorf("reassign: %w", err)
	}
	brokerID := func(expr string) (int32, error) {
		ns, err := env.ResolveTargets(ctx, []string{expr})
		if err != nil {
			return 0, err
		}
		if len(ns) != 1 {
			return 0, bad("%q names %d nodes, want one broker", expr, len(ns))
		}
		n, err := env.node(ns[0])
		if err != nil {
			return 0, err
		}
		if n.Role != compose.RoleBroker {
			return 0, bad("%s is not a broker", n.Name)
		}
		return int32(n.ID), nil
	}
	var brokers []int32
	for _, n := range env.Cluster.Of(compose.RoleBroker) {
		brokers = append(brokers, int32(n.ID))
	}
	switch {
	case len(f.Replicas) > 0:
		pv, ok := v.Partitions[f.Partition]
		if !ok {
			return fmt.Errorf("%w: reassign: partition %s", ErrNoTarget, f.Partition)
		}
		t, p, _ := ParseTopicPartition(f.Partition)
		f.Moves = []ReassignMove{{Topic: t, Partition: p, From: slices.Clone(pv.Replicas), To: slices.Clone(f.Replicas)}}
	case f.MoveFrom != "":
		id, err := brokerID(f.MoveFrom)
		if err != nil {
			return err
		}
		f.Moves, err = PlanReassign(v, []string{f.Partition}, id, brokers, env.rng())
		if err != nil {
			return err
		}
	default:
		id, err := brokerID(f.Broker)
		if err != nil {
			return err
		}
		var keys []string
		for k, pv := range v.Partitions {
			t, _, _ := strings.Cut(k, "/")
			if slices.Contains(pv.Replicas, id) && (len(f.Topics) == 0 || slices.Contains(f.Topics, t)) {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return fmt.Errorf("%w: reassign: broker %d holds no replica", ErrNoTarget, id)
		}
		f.Moves, err = PlanReassign(v, keys, id, brokers, env.rng())
		if err != nil {
			return err
		}
	}
	return nil
}

// PlanReassign replaces broker from in the replica set of each of the
// partitions keys ("topic/p") with a broker of brokers outside the set,
// drawn with rng, keeping the position. Partitions come out sorted.
func PlanReassign(v View, keys []string, from int32, brokers []int32, rng *rand.Rand) ([]ReassignMove, error) {
	keys = slices.Clone(keys)
	sort.Slice(keys, func(i, j int) bool {
		ti, pi, _ := ParseTopicPartition(keys[i])
		tj, pj, _ := ParseTopicPartition(keys[j])
		return ti < tj || ti == tj && pi < pj
	})
	brokers = slices.Sorted(slices.Values(brokers))
	var out []ReassignMove
	for _, k := range keys {
		pv, ok := v.Partitions[k]
		if !ok {
			return nil, fmt.Errorf("%w: reassign: partition %s", ErrNoTarget, k)
		}
		i := slices.Index(pv.Replicas, from)
		if i < 0 {
			return nil, fmt.Errorf("%w: reassign: broker %d holds no replica of %s (replicas %v)", ErrNoTarget, from, k, pv.Replicas)
		}
		var free []int32
		for _, b := range brokers {
			if !slices.Contains(pv.Replicas, b) {
				free = append(free, b)
			}
		}
		if len(free) == 0 {
			return nil, fmt.Errorf("%w: reassign: %s is on every broker (replicas %v)", ErrBadFault, k, pv.Replicas)
		}
		to := slices.Clone(pv.Replicas)
		to[i] = free[rng.Intn(len(free))]
		t, p, _ := ParseTopicPartition(k)
		out = append(out, ReassignMove{Topic: t, Partition: p, From: slices.Clone(pv.Replicas), To: to})
	}
	return out, nil
}

// Inject implements Fault: the moves start.
func (f *reassignRun) Inject(ctx context.Context, env *Env) error {
	return f.alter(ctx, env, func(m ReassignMove) []int32 { return m.To })
}

// Heal implements Fault: every partition moves back to the replicas it
// had.
func (f *reassignRun) Heal(ctx context.Context, env *Env) error {
	return f.alter(ctx, env, func(m ReassignMove) []int32 { return m.From })
}

func (f *reassignRun) alter(ctx context.Context, env *Env, target func(ReassignMove) []int32) error {
	if len(f.Moves) == 0 {
		return nil
	}
	var seeds []string
	for _, b := range env.Cluster.Of(compose.RoleBroker) {
		seeds = append(seeds, net.JoinHostPort(b.Addr.String(), strconv.Itoa(compose.BrokerPort)))
	}
	kafka, err := env.Cluster.KafkaOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(2 * time.Second), kgo.RetryTimeout(20 * time.Second)}, kafka...)...)
	if err != nil {
		return fmt.Errorf("reassign: kafka client: %w", err)
	}
	defer cl.Close()
	var req kadm.AlterPartitionAssignmentsReq
	for _, m := range f.Moves {
		req.Assign(m.Topic, m.Partition, target(m))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).AlterPartitionAssignments(ctx, req)
	if err != nil {
		return fmt.Errorf("reassign: %w", err)
	}
	var errs []error
	for _, r := range res.Sorted() {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("reassign %s/%d: %w %s", r.Topic, r.Partition, r.Err, r.ErrMessage))
		}
	}
	for _, m := range f.Moves {
		env.log().Info("reassign", "fault", f.Kind(), "topic", m.Topic, "partition", m.Partition, "replicas", fmt.Sprint(target(m)))
	}
	return errors.Join(errs...)
}
