// Package lab runs scenarios: it brings a cluster up (compose), drives the
// workload, plays the scenario's faults through nemesis, records every
// operation, fault and cluster-state change in a history, checks it against
// the scenario's expectations, and writes the run directory
// (results/<scenario>/<start>-<run id>/).
package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/ssh"
	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/units"
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// Scenario is what one run does. Its YAML form is the file format of
// scenarios/ and `isrlab run FILE`.
type Scenario struct {
	Name string `yaml:"name"`
	// Description is the one line `isrlab scenarios` shows: what happens
	// and what the source documents say the outcome is.
	Description string `yaml:"description,omitempty"`
	// Aliases are the other names a library scenario answers to: the
	// names it had before the library was renamed after what happens
	// (seed000/partition-4-acks1 for zombie-leader/acks1). isrlab run,
	// isrlab scenarios verify and show, and matrices' from: take them,
	// and an alias's directory (seed000/) names every scenario with an
	// alias under it. Only the library reads them.
	Aliases Names `yaml:"aliases,omitempty"`
	// Presets are applied in order under the scenario's own keys
	// (scenarios/presets/NAME.yaml); a single name may be given as a string.
	Presets Names `yaml:"preset,omitempty"`
	// Seed drives the workload, random targets and generated schedules; 0
	// picks one, which is written to the resolved scenario so the run can
	// be replayed.
	Seed     int64    `yaml:"seed"`
	Cluster  Cluster  `yaml:"cluster"`
	Topic    Topic    `yaml:"topic"`
	Workload Workload `yaml:"workload"`
	// Duration is how long the workload runs before the final drain.
	Duration time.Duration `yaml:"duration"`
	// Faults are fixed faults on the timeline.
	Faults []Fault `yaml:"faults,omitempty"`
	// Schedule is a generated fault schedule (nemesis.ScheduleSpec).
	Schedule *Schedule `yaml:"schedule,omitempty"`
	// Expect is what the run must show; empty means a valid history.
	Expect Expect `yaml:"expect,omitempty"`

	file string     // where it was loaded from, for errors
	root *yaml.Node // its document, for line numbers
}

// Names is a list of names that YAML may also give as one string.
type Names []string

// UnmarshalYAML accepts a string or a list of strings.
func (n *Names) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind == yaml.ScalarNode {
		*n = Names{v.Value}
		return nil
	}
	var l []string
	if err := v.Decode(&l); err != nil {
		return err
	}
	*n = l
	return nil
}

// Cluster sizes the system under test.
type Cluster struct {
	Backend      string            `yaml:"backend,omitempty"` // netns (default), docker or ssh
	Coordinators int               `yaml:"coordinators"`
	Brokers      int               `yaml:"brokers"`
	Config       map[string]string `yaml:"config,omitempty"` // broker config, Kafka's names
	// Disk "faultfs" runs every broker's log dirs on a faultfs mount (a
	// list of broker names runs only those), so that power-loss drops
	// unsynced writes and the disk faults apply.
	Disk Names `yaml:"disk,omitempty"`
	// SSH lists the hosts of backend ssh (see compose/ssh.Config); the
	// node counts come from it.
	SSH *ssh.Config `yaml:"ssh,omitempty"`
	// Secured runs the cluster with TLS and SASL: one SASL_SSL listener
	// per broker, SCRAM-SHA-512 for the clients and between brokers, a CA
	// and certificates made for the run (compose.Security; the preset
	// secured). netns and docker backends (isrlab brokers).
	Secured bool `yaml:"secured,omitempty"`
}

// Topic is the topic the workload uses.
type Topic struct {
	Name              string            `yaml:"name"`
	Partitions        int32             `yaml:"partitions"`
	ReplicationFactor int16             `yaml:"replication.factor"`
	Config            map[string]string `yaml:"config,omitempty"`
	// Replicas is a manual assignment, as kafka-topics --replica-assignment
	// gives one: partition -> broker ids, the first its preferred (and
	// first) leader. Empty: the controller assigns. A replay sets the
	// original run's, so that the same brokers lead first.
	Replicas map[int32][]int32 `yaml:"replicas,omitempty"`
	// Leader places the preferred leaders where the story needs them
	// instead of where the controller's random placement puts them. One
	// value: "transaction-coordinator", the broker that coordinates the
	// txn workload's transactions (the leader of __transaction_state/0;
	// the cluster needs transaction.state.log.num.partitions: 1 so that
	// one broker coordinates every producer) leads partition 0, the other
	// replicas and partitions following in broker order. A story in which
	// a partition leader cut off from its followers keeps committing
	// transactions alone needs it: a coordinator on a follower is cut off
	// too, its commit markers never reach the leader, and nothing commits.
	Leader string `yaml:"leader,omitempty"`
}

// LeaderTxnCoordinator is Topic.Leader's one value.
const LeaderTxnCoordinator = "transaction-coordinator"

// Workload is the client workload: the log workload (producers and
// assigned or subscribed consumers), the queue workload (consumer groups
// that crash and rejoin), the rate workload (producers at fixed rates and
// consumer groups, sampled per second into metrics.jsonl) or the txn
// workload (transactional producers and read_committed consumers).
// ClientSpec picks the client that runs it (client, client.config, exec).
type Workload struct {
	Type                 string `yaml:"type,omitempty"` // log (default), queue, rate or txn
	workloads.ClientSpec `yaml:",inline"`
	workloads.Config     `yaml:",inline"`
}

// Fault is one fault on the timeline: its nemesis spec (the same fields as
// `isrlab fault inject --spec`), injected At after the workload starts and
// healed HealAfter later (at the end of the run if 0). With When it waits,
// from At on, for a state of the cluster (nemesis.Condition), and
// HealAfter counts from when it really went in; Name lets other faults'
// conditions refer to it.
type Fault struct {
	Spec      nemesis.Spec
	At        time.Duration
	HealAfter time.Duration
	Name      string
	When      *nemesis.Condition
	// Line is the fault's line in its file.
	Line int
}

// UnmarshalYAML reads the spec's fields and the timing keys.
func (f *Fault) UnmarshalYAML(v *yaml.Node) error {
	f.Line = v.Line
	var m map[string]any
	if err := v.Decode(&m); err != nil {
		return err
	}
	var err error
	if f.At, err = durationKey(m, "at"); err != nil {
		return fmt.Errorf("line %d: fault: %w", v.Line, err)
	}
	if f.HealAfter, err = durationKey(m, "heal.after"); err != nil {
		return fmt.Errorf("line %d: fault: %w", v.Line, err)
	}
	if name, ok := m["name"]; ok {
		delete(m, "name")
		s, ok := name.(string)
		if !ok || s == "" || strings.ContainsAny(s, " /:") {
			return fmt.Errorf("line %d: fault: name %v: a word without spaces, / or :", v.Line, name)
		}
		f.Name = s
	}
	if when, ok := m["when"]; ok {
		delete(m, "when")
		b, err := json.Marshal(when)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var c nemesis.Condition
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("line %d: fault: when: %v (keys: partition, isr-size, in-isr, not-in-isr, leader-changed, after, after-heal, delay, within)", v.Line, strings.TrimPrefix(err.Error(), "json: "))
		}
		f.When = &c
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	spec, err := nemesis.ParseUserSpec(b)
	if err != nil {
		return fmt.Errorf("line %d: fault: %w", v.Line, err)
	}
	f.Spec = nemesis.Spec{Fault: spec}
	return nil
}

// MarshalYAML writes the spec's fields and the timing keys.
func (f Fault) MarshalYAML() (any, error) {
	m, err := jsonMap(f.Spec)
	if err != nil {
		return nil, err
	}
	m["at"] = f.At.String()
	if f.HealAfter > 0 {
		m["heal.after"] = f.HealAfter.String()
	}
	if f.Name != "" {
		m["name"] = f.Name
	}
	if f.When != nil {
		w, err := jsonMap(f.When)
		if err != nil {
			return nil, err
		}
		m["when"] = w
	}
	return m, nil
}

func durationKey(m map[string]any, key string) (time.Duration, error) {
	v, ok := m[key]
	if !ok {
		return 0, nil
	}
	delete(m, key)
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%s: %v is not a duration like 8s", key, v)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", key, err)
	}
	return d, nil
}

func jsonMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// Schedule is a generated fault schedule: the YAML form of
// nemesis.ScheduleSpec ("every D one fault drawn from a mix, healed after
// H", "once", "fixed"). Its seed defaults to the scenario's and its
// duration to the scenario's.
type Schedule struct {
	nemesis.ScheduleSpec
	Line int
}

// UnmarshalYAML reads the schedule strictly.
func (s *Schedule) UnmarshalYAML(v *yaml.Node) error {
	s.Line = v.Line
	var m map[string]any
	if err := v.Decode(&m); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.ScheduleSpec); err != nil {
		return fmt.Errorf("line %d: schedule: %v", v.Line, strings.TrimPrefix(err.Error(), "json: "))
	}
	// Each fault of the mix is held to the same strict schema as a fixed one.
	for i, w := range s.Mix {
		fb, _ := json.Marshal(w.Fault)
		f, err := nemesis.ParseUserSpec(fb)
		if err != nil {
			return fmt.Errorf("line %d: schedule: mix %d: %w", v.Line, i+1, err)
		}
		s.Mix[i].Fault = nemesis.Spec{Fault: f}
	}
	return nil
}

// MarshalYAML writes the schedule's JSON fields.
func (s Schedule) MarshalYAML() (any, error) { return jsonMap(s.ScheduleSpec) }

// ErrScenario marks an invalid scenario.
var ErrScenario = errors.New("invalid scenario")

// DefaultName is the scenario `isrlab run` runs without arguments.
const DefaultName = "leader-kill"

// Default is the embedded default scenario (scenarios/leader-kill.yaml): 3
// coordinators, 3 brokers, acks=all with min.insync.replicas=2, and the
// leader of partition 0 killed and restarted mid-run. Nothing
// acknowledged may be lost.
func Default() Scenario {
	s, err := Lookup(DefaultName)
	if err != nil {
		panic(fmt.Sprintf("the embedded default scenario is broken: %v", err))
	}
	return s
}

// Load reads a scenario file: unknown keys, unknown broker or topic config
// keys and impossible fault targets are errors naming the file and line.
func Load(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return Parse(path, name, data)
}

// Parse reads a scenario document; file names it in errors and name is the
// scenario's name when the document gives none.
func Parse(file, name string, data []byte) (Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Scenario{}, yamlError(file, err)
	}
	if len(doc.Content) == 0 {
		return Scenario{}, fmt.Errorf("%w: %s: empty scenario", ErrScenario, file)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Scenario{}, fmt.Errorf("%w: %s:%d: a scenario is a mapping of keys (name, cluster, topic, workload, faults, ...)", ErrScenario, file, root.Line)
	}
	// The file alone first, strictly, so that errors carry its own lines.
	var own Scenario
	if err := decodeStrict(data, &own); err != nil {
		return Scenario{}, yamlError(file, err)
	}
	// Then its presets under its own keys.
	merged := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range own.Presets {
		pn, err := presetNode(p)
		if err != nil {
			return Scenario{}, fmt.Errorf("%w: %s:%d: preset: %v", ErrScenario, file, lineOf(root, "preset"), err)
		}
		merged = mergeNodes(merged, pn)
	}
	merged = mergeNodes(merged, root)
	b, err := yaml.Marshal(merged)
	if err != nil {
		return Scenario{}, err
	}
	var s Scenario
	if err := decodeStrict(b, &s); err != nil {
		return Scenario{}, yamlError(file+" with presets "+strings.Join(own.Presets, ","), err)
	}
	s.Presets = own.Presets
	s.file, s.root = file, root
	if s.Name == "" {
		s.Name = name
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, err
	}
	return s, nil
}

// WithPresets returns the scenario with more presets applied after its
// own, under its own keys (isrlab run --preset): as if its file listed
// them after the presets it names.
func (s Scenario) WithPresets(names ...string) (Scenario, error) {
	if len(names) == 0 {
		return s, nil
	}
	if s.root == nil {
		return s, fmt.Errorf("%w: scenario %s has no document to apply presets to", ErrScenario, s.Name)
	}
	root := *s.root
	root.Content = nil
	for i := 0; i+1 < len(s.root.Content); i += 2 {
		if s.root.Content[i].Value != "preset" {
			root.Content = append(root.Content, s.root.Content[i], s.root.Content[i+1])
		}
	}
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, n := range append(slices.Clone([]string(s.Presets)), names...) {
		list.Content = append(list.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: n})
	}
	root.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "preset"}, list}, root.Content...)
	data, err := yaml.Marshal(&root)
	if err != nil {
		return s, err
	}
	return Parse(s.file, s.Name, data)
}

// decodeStrict decodes a YAML document into v rejecting unknown keys.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlError turns a YAML error into ErrScenario with file:line in front of
// each message.
func yamlError(file string, err error) error {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for i, m := range msgs {
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			msgs[i] = file + ":" + g[1] + ": " + m[len(g[0]):]
		} else {
			msgs[i] = file + ": " + strings.TrimPrefix(m, "yaml: ")
		}
	}
	return fmt.Errorf("%w: %s", ErrScenario, strings.Join(msgs, "; "))
}

// mergeNodes lays over on base: mappings merge key by key, anything else
// (sequences, scalars, and the expectations as a whole) is replaced.
func mergeNodes(base, over *yaml.Node) *yaml.Node {
	if base == nil || base.Kind != yaml.MappingNode || over.Kind != yaml.MappingNode {
		return over
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: over.Line, Column: over.Column}
	out.Content = append(out.Content, base.Content...)
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		if k.Value == "preset" {
			continue
		}
		j := slices.IndexFunc(out.Content, func(n *yaml.Node) bool { return n.Value == k.Value })
		// Only even positions are keys.
		for j >= 0 && j%2 == 1 {
			next := slices.IndexFunc(out.Content[j+1:], func(n *yaml.Node) bool { return n.Value == k.Value })
			if next < 0 {
				j = -1
				break
			}
			j += 1 + next
		}
		if j < 0 {
			out.Content = append(out.Content, k, v)
			continue
		}
		if k.Value == "expect" {
			out.Content[j+1] = v
		} else {
			out.Content[j+1] = mergeNodes(out.Content[j+1], v)
		}
	}
	return out
}

// lineOf returns the line of the key at path in a mapping tree (0 if absent).
func lineOf(n *yaml.Node, path ...string) int {
	line := 0
	for _, key := range path {
		if n == nil {
			return line
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(key); err == nil && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// validReplicas checks a manual assignment: every partition, each with
// replication.factor distinct brokers of 1..brokers.
func (t *Topic) validReplicas(brokers int) error {
	if len(t.Replicas) == 0 {
		return nil
	}
	for p := range t.Replicas {
		if p < 0 || p >= t.Partitions {
			return fmt.Errorf("partition %d: the topic has partitions 0..%d", p, t.Partitions-1)
		}
	}
	for p := int32(0); p < t.Partitions; p++ {
		rs, ok := t.Replicas[p]
		switch {
		case !ok:
			return fmt.Errorf("partition %d has no replicas: give every partition's", p)
		case len(rs) != int(t.ReplicationFactor):
			return fmt.Errorf("partition %d: %d replicas, replication.factor is %d", p, len(rs), t.ReplicationFactor)
		}
		for i, id := range rs {
			if id < 1 || int(id) > brokers {
				return fmt.Errorf("partition %d: broker %d: the brokers are 1..%d", p, id, brokers)
			}
			if slices.Contains(rs[:i], id) {
				return fmt.Errorf("partition %d: broker %d twice", p, id)
			}
		}
	}
	return nil
}

// Validate checks a scenario and fills defaults. Errors name the file and
// line when the scenario was loaded from one.
func (s *Scenario) Validate() error {
	_, err := s.Plan()
	return err
}

// Plan validates the scenario (Validate) and returns the fault timeline it
// computed on the way (ScheduleEvents, for the scenario's seed): a run
// validates once and plays what validation checked.
func (s *Scenario) Plan() ([]nemesis.Event, error) {
	var events []nemesis.Event
	bad := func(path []string, format string, a ...any) error {
		where := s.file
		if where == "" {
			where = "scenario " + s.Name
		}
		if l := lineOf(s.root, path...); l > 0 {
			where = fmt.Sprintf("%s:%d", where, l)
		}
		field := strings.Join(path, ".")
		return fmt.Errorf("%w: %s: %s: %s", ErrScenario, where, field, fmt.Sprintf(format, a...))
	}
	if s.Name == "" {
		s.Name = "scenario"
	}
	for _, part := range strings.Split(s.Name, "/") {
		if part == "" || part == "." || part == ".." || strings.ContainsAny(part, " \\") {
			return nil, bad([]string{"name"}, "%q: use words separated by / (it names the results directory)", s.Name)
		}
	}
	caps, err := compose.CapabilitiesOf(s.Cluster.Backend)
	if err != nil {
		return nil, bad([]string{"cluster", "backend"}, "%q: use netns, docker or ssh", s.Cluster.Backend)
	}
	if caps.UserHosts {
		if s.Cluster.SSH == nil {
			return nil, bad([]string{"cluster", "backend"}, "ssh needs its hosts under cluster.ssh (or isrlab run --cluster FILE)")
		}
		if err := s.Cluster.SSH.Validate(); err != nil {
			return nil, bad([]string{"cluster", "ssh"}, "%v", err)
		}
		s.Cluster.Brokers, s.Cluster.Coordinators = s.Cluster.SSH.Counts()
		if len(s.Cluster.Disk) > 0 {
			return nil, bad([]string{"cluster", "disk"}, "faultfs disks need a cluster the lab lays out (netns or docker)")
		}
	} else if s.Cluster.SSH != nil {
		return nil, bad([]string{"cluster", "ssh"}, "hosts are for backend ssh")
	}
	switch {
	case s.Cluster.Secured && caps.UserHosts:
		return nil, bad([]string{"cluster", "secured"}, "the lab lays out no cluster on backend ssh: to reach a secured cluster of your own, give its cluster file a client: config (docs/external.md)")
	case s.Cluster.Secured && !caps.Secured:
		return nil, bad([]string{"cluster", "secured"}, "backend %s lays out no secured cluster (netns and docker do; docs/security.md)", s.Cluster.Backend)
	}
	if s.Cluster.Coordinators == 0 && !caps.UserHosts {
		s.Cluster.Coordinators = 3
	}
	if s.Cluster.Brokers == 0 {
		s.Cluster.Brokers = 3
	}
	if s.Cluster.Coordinators < 0 || s.Cluster.Brokers < 0 {
		return nil, bad([]string{"cluster"}, "node counts must be positive")
	}
	if s.Topic.Name == "" {
		s.Topic.Name = "isrlab"
	}
	if s.Topic.Partitions == 0 {
		s.Topic.Partitions = 3
	}
	if s.Topic.Partitions < 0 {
		return nil, bad([]string{"topic", "partitions"}, "%d: must be positive", s.Topic.Partitions)
	}
	if s.Topic.ReplicationFactor == 0 {
		s.Topic.ReplicationFactor = int16(min(3, s.Cluster.Brokers))
	}
	if s.Topic.ReplicationFactor < 0 || int(s.Topic.ReplicationFactor) > s.Cluster.Brokers {
		return nil, bad([]string{"topic", "replication.factor"}, "%d with %d brokers", s.Topic.ReplicationFactor, s.Cluster.Brokers)
	}
	if err := s.Topic.validReplicas(s.Cluster.Brokers); err != nil {
		return nil, bad([]string{"topic", "replicas"}, "%v", err)
	}
	switch {
	case s.Topic.Leader == "":
	case s.Topic.Leader != LeaderTxnCoordinator:
		return nil, bad([]string{"topic", "leader"}, "%q: the one placement is %s", s.Topic.Leader, LeaderTxnCoordinator)
	case len(s.Topic.Replicas) > 0:
		return nil, bad([]string{"topic", "leader"}, "%s and topic.replicas: give one placement", s.Topic.Leader)
	case s.Workload.Type != "txn":
		return nil, bad([]string{"topic", "leader"}, "%s needs workload type txn", s.Topic.Leader)
	case s.Cluster.Config["transaction.state.log.num.partitions"] != "1":
		return nil, bad([]string{"topic", "leader"}, "%s needs cluster.config transaction.state.log.num.partitions: \"1\" (one broker coordinates every transaction)", s.Topic.Leader)
	}
	bc := kafkaconfig.NewBroker()
	for _, k := range slices.Sorted(maps.Keys(s.Cluster.Config)) {
		if !bc.Known(k) {
			return nil, bad([]string{"cluster", "config", k}, "unknown broker config key%s", nearest(k, bc.Keys()))
		}
		if err := bc.Set(k, s.Cluster.Config[k]); err != nil {
			return nil, bad([]string{"cluster", "config", k}, "%v", err)
		}
	}
	if err := kafkaconfig.CheckELR(bc); err != nil {
		return nil, bad([]string{"cluster", "config", "eligible.leader.replicas.enable"}, "%v", err)
	}
	tc := kafkaconfig.New(kafkaconfig.TopicDefs)
	for _, k := range slices.Sorted(maps.Keys(s.Topic.Config)) {
		if !tc.Known(k) {
			return nil, bad([]string{"topic", "config", k}, "unknown topic config key%s", nearest(k, tc.Keys()))
		}
		if err := tc.Set(k, s.Topic.Config[k]); err != nil {
			return nil, bad([]string{"topic", "config", k}, "%v", err)
		}
	}
	for i, d := range s.Cluster.Disk {
		if d != "faultfs" && !s.isBroker(d) {
			return nil, bad([]string{"cluster", "disk"}, "entry %d: %q: use faultfs (every broker) or broker names b1..b%d", i+1, d, s.Cluster.Brokers)
		}
	}
	if s.Duration == 0 {
		s.Duration = 30 * time.Second
	}
	if s.Duration < 0 {
		return nil, bad([]string{"duration"}, "%v is negative", s.Duration)
	}
	switch s.Workload.Type {
	case "", "log", "queue", "rate", "txn":
	default:
		return nil, bad([]string{"workload", "type"}, "%q: use log, queue, rate or txn", s.Workload.Type)
	}
	s.Workload.Topic, s.Workload.Partitions = s.Topic.Name, s.Topic.Partitions
	if s.Workload.Type == "txn" {
		if err := s.Workload.ValidateTxn(); err != nil {
			return nil, bad([]string{"workload"}, "%v", err)
		}
	} else if keys := s.Workload.TxnKeys(); len(keys) > 0 {
		return nil, bad([]string{"workload", keys[0]}, "a key of the txn workload (workload.type: txn)")
	} else if err := s.Workload.ValidateFor(s.Workload.Type); err != nil {
		return nil, bad([]string{"workload"}, "%v", err)
	}
	if err := clients.Check(s.Workload.ClientSpec, s.Workload.Type, s.Workload.Config); err != nil {
		return nil, bad([]string{"workload", "client"}, "%v", err)
	}
	// The user's own cluster's client config (backend ssh), if it says
	// more than PLAINTEXT.
	var userSec *kafkaconfig.ClientSecurity
	if caps.UserHosts && s.Cluster.SSH.Client != nil && (s.Cluster.SSH.Client.TLS() || s.Cluster.SSH.Client.SASL()) {
		userSec = s.Cluster.SSH.Client
	}
	switch {
	case s.Cluster.Secured:
		// The clients in other processes get the cluster's security in
		// their hello (docs/client-protocol.md, "Secured clusters").
		if err := clients.CheckSecured(s.Workload.ClientSpec, s.Workload.Type, s.Workload.Config, "SASL_SSL", compose.SecuredMechanism); err != nil {
			return nil, bad([]string{"workload", "client"}, "%v (on a secured cluster: SASL_SSL, %s)", err, compose.SecuredMechanism)
		}
	case userSec != nil:
		protocol := strings.ToUpper(userSec.Protocol)
		if err := clients.CheckSecured(s.Workload.ClientSpec, s.Workload.Type, s.Workload.Config, protocol, userSec.Mechanism); err != nil {
			return nil, bad([]string{"workload", "client"}, "%v (the cluster's client config: %s %s)", err, protocol, userSec.Mechanism)
		}
	}
	if slices.Contains(s.faultKinds(), "kafka") {
		// Kafka faults act in a proxy in front of each broker, in its
		// network namespace, on plaintext.
		switch {
		case !caps.KafkaProxy && !slices.Contains([]string{"", "franz-go", "sarama", "kafka-go"}, s.Workload.Client):
			// Without proxies in front of the brokers, the faults act
			// through the dialer of the lab's own clients.
			return nil, bad([]string{"workload", "client"}, "%s: kind: kafka faults on backend %s act on the clients in isrlab's own process (franz-go, sarama, kafka-go); this client runs in another", s.Workload.Client, s.Cluster.Backend)
		case s.Cluster.Secured:
			return nil, bad([]string{"cluster", "secured"}, "kind: kafka faults need a plaintext cluster: the Kafka proxy does not speak TLS")
		case userSec != nil && userSec.TLS():
			return nil, bad([]string{"cluster", "ssh", "client"}, "kind: kafka faults need a cluster reached without TLS: the Kafka proxy does not speak TLS (security.protocol %s)", strings.ToUpper(userSec.Protocol))
		}
	}
	var faultNames []string
	for i, f := range s.Faults {
		if f.Name == "" {
			continue
		}
		if slices.Contains(faultNames, f.Name) {
			return nil, bad([]string{"faults", strconv.Itoa(i), "name"}, "%q names two faults", f.Name)
		}
		faultNames = append(faultNames, f.Name)
	}
	for i, f := range s.Faults {
		at := []string{"faults", strconv.Itoa(i)}
		if f.When != nil {
			if err := f.When.Validate(faultNames); err != nil {
				return nil, bad(append(at, "when"), "%v", err)
			}
			var exprs []string
			if p := f.When.Partition; p != "" {
				exprs = append(exprs, "leader:"+p)
			}
			for _, ref := range []string{f.When.NotInISR, f.When.InISR} {
				if ref != "" && !slices.Contains(faultNames, ref) {
					exprs = append(exprs, ref)
				}
			}
			if err := s.checkExprs(exprs); err != nil {
				return nil, bad(append(at, "when"), "%v", err)
			}
			if w := time.Duration(f.When.Within); w > 0 && f.At+w > s.Duration {
				return nil, bad(append(at, "when", "within"), "at %v + within %v ends after the %v run", f.At, w, s.Duration)
			}
		}
		if f.Spec.Fault == nil {
			return nil, bad(at, "no fault")
		}
		if f.At < 0 || f.At > s.Duration {
			return nil, bad(append(at, "at"), "%v is outside the %v run", f.At, s.Duration)
		}
		if f.HealAfter < 0 {
			return nil, bad(append(at, "heal.after"), "%v is negative", f.HealAfter)
		}
		if err := s.checkTargets(f.Spec.Fault); err != nil {
			return nil, bad(at, "%s: %v", f.Spec.Fault.Kind(), err)
		}
	}
	if sc := s.Schedule; sc != nil {
		at := []string{"schedule"}
		var err error
		if events, err = s.ScheduleEvents(); err != nil {
			return nil, bad(at, "%v", err)
		}
		faults := slices.Collect(func(yield func(nemesis.Fault) bool) {
			for _, w := range sc.Mix {
				yield(w.Fault.Fault)
			}
			if sc.Fault != nil {
				yield(sc.Fault.Fault)
			}
			for _, e := range sc.Events {
				if e.Fault != nil {
					yield(e.Fault.Fault)
				}
			}
		})
		for _, f := range faults {
			if err := s.checkTargets(f); err != nil {
				return nil, bad(at, "%s: %v", f.Kind(), err)
			}
		}
	}
	if path, err := s.Expect.validate(); err != nil {
		return nil, bad(append([]string{"expect"}, path...), "%v", err)
	}
	if s.Schedule == nil {
		var err error
		if events, err = s.ScheduleEvents(); err != nil {
			return nil, bad([]string{"faults"}, "%v", err)
		}
	}
	return events, nil
}

func (s *Scenario) isBroker(name string) bool {
	n, ok := strings.CutPrefix(name, "b")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i >= 1 && i <= s.Cluster.Brokers && "b"+strconv.Itoa(i) == name
}

// internalTopics are the coordinators' topics a target may name, with the
// broker key that sets their partition count (Kafka's default 50).
var internalTopics = map[string]string{
	"__transaction_state": "transaction.state.log.num.partitions",
	"__consumer_offsets":  "offsets.topic.num.partitions",
}

// checkTargets rejects targets that cannot exist in this scenario's
// cluster: nodes it does not have, partitions its topic does not have.
func (s *Scenario) checkTargets(f nemesis.Fault) error {
	exprs := nemesis.TargetExprs(f)
	if p, ok := f.(*nemesis.Partition); ok && p.Partition != "" {
		exprs = append(exprs, "leader:"+p.Partition)
	}
	return s.checkExprs(exprs)
}

// checkExprs rejects target expressions that name no node or partition of
// this scenario's cluster.
func (s *Scenario) checkExprs(exprs []string) error {
	for _, x := range exprs {
		if err := nemesis.CheckTarget(x); err != nil {
			return err
		}
		_, tp, scoped := strings.Cut(x, ":")
		if scoped {
			topic, part, err := nemesis.ParseTopicPartition(tp)
			if err != nil {
				return err
			}
			n := s.Topic.Partitions
			switch {
			case topic == s.Topic.Name:
			case internalTopics[topic] != "":
				// The coordinators' topics: leader:__transaction_state/0
				// is the transaction coordinator of the ids hashed there.
				n = 50
				if v, err := strconv.Atoi(s.Cluster.Config[internalTopics[topic]]); err == nil {
					n = int32(v)
				}
			default:
				return fmt.Errorf("target %s: the scenario's topic is %s (or __transaction_state, __consumer_offsets)", x, s.Topic.Name)
			}
			if part >= n {
				return fmt.Errorf("target %s: topic %s has partitions 0..%d", x, topic, n-1)
			}
			continue
		}
		if strings.Contains(x, "-") || !strings.ContainsAny(x, "0123456789") {
			continue // a group or a role: brokers, controller, random-broker, ...
		}
		if !s.hasNode(x) {
			return fmt.Errorf("target %s: the cluster has c1..c%d, b1..b%d and client1", x, s.Cluster.Coordinators, s.Cluster.Brokers)
		}
	}
	return nil
}

func (s *Scenario) hasNode(name string) bool {
	if s.isBroker(name) || name == "client1" {
		return true
	}
	n, ok := strings.CutPrefix(name, "c")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i >= 1 && i <= s.Cluster.Coordinators && "c"+strconv.Itoa(i) == name
}

// ScheduleEvents is the scenario's whole fault timeline: the fixed faults
// and the generated schedule, in time order, ending with a heal of
// everything at the scenario's duration. It is pure: the same scenario
// and seed give the same events.
func (s *Scenario) ScheduleEvents() ([]nemesis.Event, error) {
	var ev nemesis.Fixed
	key := 0
	for _, f := range s.Faults {
		key++
		ev = append(ev, nemesis.Event{At: f.At, Action: nemesis.ActStart, Key: key, Fault: f.Spec, Name: f.Name, When: f.When})
		if f.HealAfter > 0 {
			ev = append(ev, nemesis.Event{At: f.At + f.HealAfter, Action: nemesis.ActStop, Key: key})
		}
	}
	if s.Schedule != nil {
		spec := s.Schedule.ScheduleSpec
		if spec.Seed == 0 {
			spec.Seed = s.Seed
		}
		if spec.Duration == 0 {
			spec.Duration = units.Duration(s.Duration)
		}
		g, err := spec.Generator()
		if err != nil {
			return nil, err
		}
		gen, err := g.Events()
		if err != nil {
			return nil, err
		}
		for _, e := range gen {
			if e.Key > 0 {
				e.Key += key
			}
			ev = append(ev, e)
		}
	}
	// Faults without a heal.after last until the workload ends.
	if len(ev) > 0 && !slices.ContainsFunc(ev, func(e nemesis.Event) bool { return e.Action == nemesis.ActHealAll && e.At >= s.Duration }) {
		ev = append(ev, nemesis.Event{At: s.Duration, Action: nemesis.ActHealAll})
	}
	return ev.Events()
}

// nearest suggests the known key closest to k.
func nearest(k string, known []string) string {
	best, bd := "", 1<<30
	for _, c := range known {
		if d := editDistance(k, c); d < bd {
			best, bd = c, d
		}
	}
	if best == "" || bd > max(3, len(k)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
