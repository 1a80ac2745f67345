// Package lab runs scenarios: it brings a cluster up (compose), drives the
// workload, applies the scenario's faults on a timeline, records every
// operation and cluster-state change in a history, checks it, and writes
// the run directory (results/<scenario>/<start>/).
package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/workloads"
)

// Scenario is what one run does. Its YAML form is the file format of
// scenarios/ and `isrlab run FILE`.
type Scenario struct {
	Name string `yaml:"name"`
	// Seed drives the workload and the run id; 0 picks one, which is
	// written to the resolved scenario so the run can be replayed.
	Seed    int64   `yaml:"seed"`
	Cluster Cluster `yaml:"cluster"`
	Topic   Topic   `yaml:"topic"`
	// Workload is the log workload's configuration (workloads.Config).
	Workload workloads.Config `yaml:"workload"`
	// Duration is how long the workload runs before the final drain.
	Duration time.Duration `yaml:"duration"`
	Faults   []Fault       `yaml:"faults"`
}

// Cluster sizes the system under test.
type Cluster struct {
	Backend      string            `yaml:"backend"` // netns (default) or docker
	Coordinators int               `yaml:"coordinators"`
	Brokers      int               `yaml:"brokers"`
	Config       map[string]string `yaml:"config"` // broker config, Kafka's names
}

// Topic is the topic the workload uses.
type Topic struct {
	Name              string            `yaml:"name"`
	Partitions        int32             `yaml:"partitions"`
	ReplicationFactor int16             `yaml:"replication.factor"`
	Config            map[string]string `yaml:"config"`
}

// Fault is one fault on the timeline: at At after the workload starts,
// Kind is applied to Target; HealAfter later it is healed (restart for
// kill and stop, resume for pause).
type Fault struct {
	Kind      string        `yaml:"kind"`   // kill | stop | pause
	Target    string        `yaml:"target"` // node (b2), leader:TOPIC/P, follower:TOPIC/P or controller
	At        time.Duration `yaml:"at"`
	HealAfter time.Duration `yaml:"heal.after"`
}

// ErrScenario marks an invalid scenario.
var ErrScenario = errors.New("invalid scenario")

// Default is the embedded default scenario: 3 coordinators, 3 brokers,
// acks=all with min.insync.replicas=2, and the leader of partition 0 killed
// and restarted mid-run. Nothing acknowledged may be lost.
func Default() Scenario {
	return Scenario{
		Name: "leader-kill",
		Cluster: Cluster{Coordinators: 3, Brokers: 3, Config: map[string]string{
			"coordinator.session.timeout.ms": "6000",
			"replica.lag.time.max.ms":        "10000",
		}},
		Topic: Topic{Name: "isrlab", Partitions: 3, ReplicationFactor: 3, Config: map[string]string{"min.insync.replicas": "2"}},
		Workload: workloads.Config{Producers: 2, Consumers: 2, Acks: "all", Idempotent: true,
			SendInterval: 2 * time.Millisecond, DeliveryTimeout: 30 * time.Second},
		Duration: 30 * time.Second,
		Faults:   []Fault{{Kind: "kill", Target: "leader:isrlab/0", At: 8 * time.Second, HealAfter: 10 * time.Second}},
	}
}

// Load reads a scenario file; unknown keys are errors, naming the file.
func Load(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("%w: %s: %v", ErrScenario, path, err)
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Validate checks a scenario and fills defaults.
func (s *Scenario) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrScenario, fmt.Sprintf(format, a...))
	}
	if s.Name == "" {
		s.Name = "scenario"
	}
	if s.Cluster.Coordinators == 0 {
		s.Cluster.Coordinators = 3
	}
	if s.Cluster.Brokers == 0 {
		s.Cluster.Brokers = 3
	}
	if s.Topic.Name == "" {
		s.Topic.Name = "isrlab"
	}
	if s.Topic.Partitions == 0 {
		s.Topic.Partitions = 3
	}
	if s.Topic.ReplicationFactor == 0 {
		s.Topic.ReplicationFactor = int16(min(3, s.Cluster.Brokers))
	}
	if int(s.Topic.ReplicationFactor) > s.Cluster.Brokers {
		return bad("topic replication.factor %d > %d brokers", s.Topic.ReplicationFactor, s.Cluster.Brokers)
	}
	if s.Duration <= 0 {
		s.Duration = 30 * time.Second
	}
	s.Workload.Topic, s.Workload.Partitions = s.Topic.Name, s.Topic.Partitions
	if err := s.Workload.Validate(); err != nil {
		return bad("workload: %v", err)
	}
	for i, f := range s.Faults {
		switch f.Kind {
		case "kill", "stop", "pause":
		default:
			return bad("fault %d: kind %q: use kill, stop or pause", i+1, f.Kind)
		}
		if f.Target == "" {
			return bad("fault %d: no target", i+1)
		}
		if (strings.HasPrefix(f.Target, "leader:") || strings.HasPrefix(f.Target, "follower:")) && !strings.Contains(f.Target, "/") {
			return bad("fault %d: target %q: use leader:TOPIC/PARTITION or follower:TOPIC/PARTITION", i+1, f.Target)
		}
		if f.At < 0 || f.At > s.Duration {
			return bad("fault %d: at %v is outside the %v run", i+1, f.At, s.Duration)
		}
	}
	return nil
}
