package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// Run states recorded in a State file.
const (
	StatusStarting = "starting" // Up is creating the run
	StatusUp       = "up"       // every node answered its probe
	StatusStopping = "stopping" // Down is removing the run
)

// StateVersion is the state file format version.
const StateVersion = 1

// ErrNotFound reports that no state file exists for a cluster name.
var ErrNotFound = errors.New("cluster not found")

// ErrBusy reports that another process holds a cluster's lock.
var ErrBusy = errors.New("cluster is busy")

// NodeState is what a state file records of one node.
type NodeState struct {
	Name       string `json:"name"`
	NetNS      string `json:"netns,omitempty"`
	SwitchPort string `json:"switch_port,omitempty"`
	Iface      string `json:"iface,omitempty"`
	PID        int    `json:"pid,omitempty"`
	PIDStart   uint64 `json:"pid_start,omitempty"`
	Container  string `json:"container,omitempty"` // Docker: the process container
	Sandbox    string `json:"sandbox,omitempty"`   // Docker: the container holding the network namespace
	// DiskPID is the node's faultfs daemon (NodeSpec.Disk), on the host.
	DiskPID      int    `json:"disk_pid,omitempty"`
	DiskPIDStart uint64 `json:"disk_pid_start,omitempty"`
	// ProxyPID is the node's Kafka proxy (NodeSpec.Proxy), in its
	// network namespace.
	ProxyPID      int    `json:"proxy_pid,omitempty"`
	ProxyPIDStart uint64 `json:"proxy_pid_start,omitempty"`
}

// State is the JSON file that lets other processes (cluster status, exec,
// down, fault, clean) find a cluster. It is written before a run creates
// anything and removed after everything is gone, so `clean` can find every
// leftover by its run id.
type State struct {
	Version int       `json:"version"`
	Name    string    `json:"name"`
	RunID   string    `json:"run_id"`
	Backend string    `json:"backend"`
	Status  string    `json:"status"`
	Created time.Time `json:"created"`
	// Owner is the process that created the run. Until the run is Detached
	// it is alive exactly as long as its owner.
	Owner      int    `json:"owner"`
	OwnerStart uint64 `json:"owner_start"`
	Detached   bool   `json:"detached"`
	// Rootless runs live in a user+mount namespace held by Holder.
	Rootless    bool   `json:"rootless,omitempty"`
	Holder      int    `json:"holder,omitempty"`
	HolderStart uint64 `json:"holder_start,omitempty"`
	SwitchNS    string `json:"switch_ns,omitempty"`
	Bridge      string `json:"bridge,omitempty"`
	NSDir       string `json:"ns_dir,omitempty"`
	Network     string `json:"network,omitempty"` // Docker network id
	KeepData    bool   `json:"keep_data,omitempty"`
	KillOnDown  bool   `json:"kill_on_down,omitempty"` // SIGKILL on Down even with KeepData

	// Topology holds what each node runs, with the brokers' faultfs
	// control sockets (Topology.Disks) that fault commands use.
	Topology Topology    `json:"topology"`
	Nodes    []NodeState `json:"nodes"`
}

// Live reports whether the run still belongs to someone: a detached run that
// came up lives until `cluster down`; any other run lives while its owner does.
func (s *State) Live() bool {
	if s.Detached && s.Status == StatusUp {
		return true
	}
	return Alive(s.Owner, s.OwnerStart)
}

// Node returns the recorded state of the node named name.
func (s *State) Node(name string) *NodeState {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

// SetOwner records the calling process as the run's owner.
func (s *State) SetOwner() {
	s.Owner = os.Getpid()
	s.OwnerStart = Identify(s.Owner)
}

// StateDir is where state files live: $ISRLAB_STATE_DIR, else /run/isrlab for
// root, else $XDG_RUNTIME_DIR/isrlab, else /tmp/isrlab-<uid>.
func StateDir() string {
	if d := os.Getenv("ISRLAB_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/isrlab"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "isrlab")
	}
	return filepath.Join(os.TempDir(), "isrlab-"+strconv.Itoa(os.Getuid()))
}

// StatePath is the state file of cluster name under dir.
func StatePath(dir, name string) string { return filepath.Join(dir, name, "state.json") }

// WriteState writes s atomically to StatePath(dir, s.Name).
func WriteState(dir string, s *State) error {
	s.Version = StateVersion
	p := StatePath(dir, s.Name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadState reads the state of cluster name.
func ReadState(dir, name string) (*State, error) {
	b, err := os.ReadFile(StatePath(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cluster %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read state %s: %w", StatePath(dir, name), err)
	}
	if s.Version != StateVersion {
		return nil, fmt.Errorf("read state %s: version %d, want %d", StatePath(dir, name), s.Version, StateVersion)
	}
	return &s, nil
}

// RemoveState deletes cluster name's state directory.
func RemoveState(dir, name string) error {
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// ListStates returns every readable state under dir, sorted by name. Broken
// files are reported in errs and skipped.
func ListStates(dir string) (states []*State, errs []error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("list states: %w", err)}
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		s, err := ReadState(dir, e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		states = append(states, s)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Name < states[j].Name })
	return states, errs
}

// Lock takes cluster name's lock without blocking (ErrBusy if another
// process holds it). The lock is released by unlock or by process exit.
func Lock(dir, name string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "."+name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", name, ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil
}

// CleanDead tears down, with teardown, every run of backend among states
// whose owner is gone (every run, with all), each under its lock and
// re-read under it; runs whose lock is held or whose owner lives are left
// alone. It returns the "name/run" ids removed and left alone, and the
// errors met.
func CleanDead(ctx context.Context, dir string, states []*State, backend string, all bool, teardown func(context.Context, *State) error) (removed, live []string, errs []error) {
	for _, st := range states {
		if st.Backend != backend {
			continue
		}
		id := st.Name + "/" + st.RunID
		unlock, err := Lock(dir, st.Name)
		if errors.Is(err, ErrBusy) {
			live = append(live, id)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Re-read under the lock: the run may have changed hands.
		cur, err := ReadState(dir, st.Name)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		case cur.Live() && !all:
			live = append(live, id)
		default:
			if err := teardown(ctx, cur); err != nil {
				errs = append(errs, fmt.Errorf("clean %s: %w", id, err))
			} else {
				removed = append(removed, id)
			}
		}
		unlock()
	}
	return removed, live, errs
}
