package compose

import (
	"errors"
	"fmt"
)

// The backends' names, as scenarios and --backend give them.
const (
	Netns  = "netns"  // network namespaces on this machine (the default)
	Docker = "docker" // Docker containers on this machine
	SSH    = "ssh"    // the user's own hosts, over SSH
)

// ErrRunning reports that a live cluster already has the requested name
// (every backend's Up returns it).
var ErrRunning = errors.New("cluster already running")

// Capabilities are what a backend can do: the code above compose asks
// them instead of comparing backend names.
type Capabilities struct {
	// UserHosts: the nodes are the user's own hosts. The lab lays out
	// nothing (the hosts' config gives the topology), adds or removes no
	// node, and keeps no faultfs mounts on this machine.
	UserHosts bool
	// SharedNetwork: the runs on this machine share one address space
	// (Docker's networks), so each run takes a subnet of its own.
	SharedNetwork bool
	// Switch: the lab owns a switch namespace between the nodes, where
	// network faults can act; without one they act on the nodes' side.
	Switch bool
	// Rootless: a user without root runs it inside a user namespace the
	// command re-executes itself in.
	Rootless bool
	// Secured: it can lay out a secured cluster (TLS and SASL listeners,
	// the run's own CA and users).
	Secured bool
	// KafkaProxy: it can put a Kafka proxy in front of each broker, in
	// the broker's own network namespace, on its advertised address.
	KafkaProxy bool
}

// CapabilitiesOf returns the capabilities of the backend called name (""
// is the default, netns); an unknown name is an error listing the known.
func CapabilitiesOf(name string) (Capabilities, error) {
	switch name {
	case Netns, "":
		return Capabilities{Switch: true, Rootless: true, Secured: true, KafkaProxy: true}, nil
	case Docker:
		return Capabilities{SharedNetwork: true, Secured: true}, nil
	case SSH:
		return Capabilities{UserHosts: true}, nil
	}
	return Capabilities{}, fmt.Errorf("unknown backend %q (use %s, %s or %s)", name, Netns, Docker, SSH)
}

// Caps returns the capabilities of the cluster's backend (none for an
// unknown one).
func (c *Cluster) Caps() Capabilities {
	caps, _ := CapabilitiesOf(c.Backend)
	return caps
}

// CheckExisting is the guard every backend's Up runs, under the state
// lock, before it creates anything for a cluster called name: a live run
// of that name is ErrRunning; a dead run of the same backend is removed
// with teardown; a dead run of another backend is ErrRunning too (its
// leftovers are `isrlab clean`'s to remove).
func CheckExisting(dir, name, backend string, teardown func(old *State) error) error {
	old, err := ReadState(dir, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if old.Live() {
		return fmt.Errorf("%w: %s (run %s, backend %s)", ErrRunning, name, old.RunID, old.Backend)
	}
	if old.Backend != backend {
		return fmt.Errorf("%w: %s has leftovers of a dead %s run %s: run isrlab clean", ErrRunning, name, old.Backend, old.RunID)
	}
	if err := teardown(old); err != nil {
		return fmt.Errorf("remove dead run %s: %w", old.RunID, err)
	}
	return nil
}
