package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// ErrBadFault reports a fault description that cannot be applied.
var ErrBadFault = errors.New("bad fault")

// ErrUnsupported reports a fault this cluster or kernel cannot apply.
var ErrUnsupported = errors.New("unsupported fault")

// Fault is one kind of fault as a user writes it: its exported fields,
// with their JSON tags, are its schema, and nothing that happens when it
// fires changes them, so one Fault may fire any number of times (a
// schedule's events share theirs). NewRun returns the record of one firing.
type Fault interface {
	Kind() string
	NewRun() Run
}

// Run is one firing of a fault: a copy of its spec and what firing it
// learned (the nodes its targets resolved to, the rule tables and
// processes it made, what it did), in the JSON fields of the run's own,
// never the spec's. Resolve fills them from live state, after which Inject
// and Heal act only on those; Heal is safe to call twice and on a run
// whose Inject failed half way. A run decoded from its record (Fired) can
// be healed by another process, as `isrlab fault heal` does.
type Run interface {
	Kind() string
	Resolve(ctx context.Context, env *Env) error
	Inject(ctx context.Context, env *Env) error
	Heal(ctx context.Context, env *Env) error
}

// Env is what faults act on: a cluster and how to read its live state.
type Env struct {
	Cluster *compose.Cluster
	// Resolver reads live Kafka and coordinator metadata for targets such
	// as leader:topic/0; nil allows node names and groups only.
	Resolver Resolver
	// NodeSide applies network faults inside the nodes' own namespaces
	// (IPv4 rules on their input and output hooks) instead of at the
	// switch. It is forced on the Docker backend, whose bridge is in the
	// host's namespace, which faults must not touch.
	NodeSide bool
	// Disks maps a broker name to its faultfs control socket.
	Disks map[string]string
	// Proxies maps a broker name to its Kafka proxy's control socket.
	Proxies map[string]string
	// Rand draws random targets; nil uses a fixed seed.
	Rand *rand.Rand
	// DelayerCommand returns the command running a packet delayer with
	// args (see DelayerMain); nil runs this binary's `fault delayer`.
	DelayerCommand func(args []string) *exec.Cmd
	// Log receives one line per injection and heal; nil discards.
	Log *slog.Logger
	// id is the id of the fault being applied (names its nftables table,
	// cgroups and queue): set only on the copy forFault makes for one
	// injection or heal, never on a shared Env.
	id string
}

// forFault is a copy of e for applying the fault with id: faults see
// their id without anyone mutating a shared Env. Lazily made state (the
// random source) is made first, so that every copy draws from one.
func (e *Env) forFault(id string) *Env {
	e.rng()
	c := *e
	c.id = id
	return &c
}

func (e *Env) rng() *rand.Rand {
	if e.Rand == nil {
		e.Rand = rand.New(rand.NewSource(1))
	}
	return e.Rand
}

func (e *Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// runID is the cluster's run id, the prefix of everything faults create.
func (e *Env) runID() string { return e.Cluster.RunID }

// node returns the cluster's node called name.
func (e *Env) node(name string) (*compose.Node, error) {
	n := e.Cluster.Node(name)
	if n == nil {
		return nil, fmt.Errorf("%w: no node %q in cluster %s", ErrBadFault, name, e.Cluster.Name)
	}
	return n, nil
}

// kinds maps a Kind to a constructor of its zero fault.
var kinds = map[string]func() Fault{}

func register(f func() Fault) { kinds[f().Kind()] = f }

// Kinds lists the registered fault kinds, sorted.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// New returns the zero fault of kind.
func New(kind string) (Fault, error) {
	f, ok := kinds[kind]
	if !ok {
		return nil, fmt.Errorf("%w: unknown kind %q (known: %v)", ErrBadFault, kind, Kinds())
	}
	return f(), nil
}

// Spec is a fault with its kind, the form faults take in JSON documents
// (schedules, the active-fault store): {"kind":"kill","nodes":["b2"]}.
type Spec struct {
	Fault Fault
}

// MarshalJSON writes the fault's fields with "kind" added.
func (s Spec) MarshalJSON() ([]byte, error) {
	if s.Fault == nil {
		return []byte("null"), nil
	}
	b, err := json.Marshal(s.Fault)
	if err != nil {
		return nil, err
	}
	kind, _ := json.Marshal(s.Fault.Kind())
	if string(b) == "{}" {
		return []byte(`{"kind":` + string(kind) + `}`), nil
	}
	return slices.Concat([]byte(`{"kind":`), kind, []byte(","), b[1:]), nil
}

// UnmarshalJSON reads a fault by its "kind" field.
func (s *Spec) UnmarshalJSON(b []byte) error {
	var k struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFault, err)
	}
	f, err := New(k.Kind)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadFault, k.Kind, err)
	}
	s.Fault = f
	return nil
}

// Fired is a fault as it fired, the form the history and the active-fault
// store keep: the spec's fields and the run's in one JSON object, with
// "kind" ({"kind":"kill","nodes":["leader:t/0"],"resolved":["b2"]}). The
// spec written is the run's copy, with what firing chose for it (a
// partition's seed, a default user). No kind has a field in both.
type Fired struct {
	Fault Fault
	Run   Run
}

// fired is the record of r.
func fired(r Run) Fired { return Fired{Fault: SpecOf(r), Run: r} }

// SpecOf is the spec r fired from: the copy it holds.
func SpecOf(r Run) Fault {
	v := reflect.ValueOf(r).Elem().Field(0)
	return v.Addr().Interface().(Fault)
}

// MarshalJSON writes the spec's fields, then the run's.
func (f Fired) MarshalJSON() ([]byte, error) {
	spec := f.Fault
	if f.Run != nil {
		spec = SpecOf(f.Run)
	}
	b, err := json.Marshal(Spec{spec})
	if err != nil || f.Run == nil || spec == nil {
		return b, err
	}
	run, err := json.Marshal(f.Run)
	if err != nil {
		return nil, err
	}
	if string(run) == "{}" {
		return b, nil
	}
	return slices.Concat(b[:len(b)-1], []byte(","), run[1:]), nil
}

// UnmarshalJSON reads the spec by its "kind" and the run from the same
// object.
func (f *Fired) UnmarshalJSON(b []byte) error {
	var s Spec
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	r := s.Fault.NewRun()
	if err := json.Unmarshal(b, r); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadFault, s.Fault.Kind(), err)
	}
	f.Fault, f.Run = SpecOf(r), r
	return nil
}

// jsonFields lists the JSON fields of struct type t, those of the structs
// it embeds included, but none tagged "-": for a run, its own fields, not
// those of the spec it embeds.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
		case sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(sf.Type)...)
		case !sf.IsExported():
		case name != "":
			out = append(out, name)
		default:
			out = append(out, sf.Name)
		}
	}
	return out
}
