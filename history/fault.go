package history

import "encoding/json"

// Fault is what the value of a nemesis op says about its fault: the fault
// as it fired (nemesis.Fired), its spec's fields and its run's in one
// object. It holds the fields the history's readers use; the nemesis
// package owns the full schema of each kind.
type Fault struct {
	Kind string `json:"kind"`
	// The spec: target expressions and a partition's topology.
	Nodes     []string            `json:"nodes,omitempty"`
	Targets   []string            `json:"targets,omitempty"`
	Topology  string              `json:"topology,omitempty"`
	Partition string              `json:"partition,omitempty"`
	Grudge    map[string][]string `json:"grudge,omitempty"`
	// A kafka fault's rule.
	API       string `json:"api,omitempty"`
	Direction string `json:"direction,omitempty"`
	Action    string `json:"action,omitempty"`
	// The run: the nodes the targets resolved to, the links a partition
	// cut (node -> nodes whose packets it drops), and how often a kafka
	// fault acted, per broker.
	Resolved []string            `json:"resolved,omitempty"`
	Cut      map[string][]string `json:"cut,omitempty"`
	Acted    map[string]int64    `json:"acted,omitempty"`
}

// ParseFault reads the fault of a nemesis op's value.
func ParseFault(raw json.RawMessage) (Fault, error) {
	var f Fault
	err := json.Unmarshal(raw, &f)
	return f, err
}

// Links is the links a partition cut. Histories recorded before runs were
// kept apart from specs hold them in "grudge".
func (f Fault) Links() map[string][]string {
	if len(f.Cut) > 0 {
		return f.Cut
	}
	return f.Grudge
}
