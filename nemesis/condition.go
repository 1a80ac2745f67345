package nemesis

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/units"
)

// Condition is a state of the live cluster that a schedule event waits for
// before it fires. Every field that is set must hold at once. The event's
// time (At) is the earliest moment the condition is looked at; Within
// bounds the wait from then, and Delay postpones the event after the
// condition first held.
//
//	{"partition":"isrlab/0","isr-size":1,"within":"20s"}
//	{"partition":"isrlab/0","not-in-isr":"cut"}     // the nodes fault "cut" hit
//	{"after":"kill-b","delay":"3s"}
type Condition struct {
	// Partition is the topic/partition the partition conditions read.
	Partition string `json:"partition,omitempty"`
	// ISRSize holds once the partition's ISR has exactly this many members.
	ISRSize *int `json:"isr-size,omitempty"`
	// NotInISR holds once none of the named brokers is in the ISR; InISR
	// once all are. Each is a target expression (b2, follower:t/0,
	// resolved once, when the wait begins) or the name of a fault of the
	// same schedule (the nodes that fault was injected on).
	NotInISR string `json:"not-in-isr,omitempty"`
	InISR    string `json:"in-isr,omitempty"`
	// LeaderChanged holds once the partition has a leader other than the
	// one it had when the wait began.
	LeaderChanged bool `json:"leader-changed,omitempty"`
	// After holds once the named fault has been injected; AfterHeal once
	// it has been healed.
	After     string `json:"after,omitempty"`
	AfterHeal string `json:"after-heal,omitempty"`
	// Delay is how long after the condition first held the event fires.
	Delay units.Duration `json:"delay,omitzero"`
	// Within bounds the wait; 0 is the rest of the run.
	Within units.Duration `json:"within,omitzero"`
}

// Validate checks the condition on its own; names lists the schedule's
// fault names that After, AfterHeal, NotInISR and InISR may refer to.
func (c *Condition) Validate(names []string) error {
	partitionKeys := c.ISRSize != nil || c.NotInISR != "" || c.InISR != "" || c.LeaderChanged
	switch {
	case partitionKeys && c.Partition == "":
		return fmt.Errorf("%w: when: isr-size, in-isr, not-in-isr and leader-changed need a partition: topic/N", ErrBadFault)
	case c.Partition != "" && !partitionKeys:
		return fmt.Errorf("%w: when: partition %s with nothing to wait for (isr-size, in-isr, not-in-isr, leader-changed)", ErrBadFault, c.Partition)
	case !partitionKeys && c.After == "" && c.AfterHeal == "":
		return fmt.Errorf("%w: when: nothing to wait for (partition with isr-size, in-isr, not-in-isr or leader-changed; after; after-heal)", ErrBadFault)
	case c.ISRSize != nil && *c.ISRSize < 0:
		return fmt.Errorf("%w: when: isr-size %d is negative", ErrBadFault, *c.ISRSize)
	case c.Delay < 0 || c.Within < 0:
		return fmt.Errorf("%w: when: delay and within must not be negative", ErrBadFault)
	}
	if c.Partition != "" {
		if _, _, err := ParseTopicPartition(c.Partition); err != nil {
			return fmt.Errorf("when: partition: %w", err)
		}
	}
	for key, ref := range map[string]string{"after": c.After, "after-heal": c.AfterHeal} {
		if ref != "" && !slices.Contains(names, ref) {
			return fmt.Errorf("%w: when: %s: no fault is named %q (give the fault a name:)", ErrBadFault, key, ref)
		}
	}
	for key, ref := range map[string]string{"not-in-isr": c.NotInISR, "in-isr": c.InISR} {
		if ref == "" || slices.Contains(names, ref) {
			continue
		}
		if err := CheckTarget(ref); err != nil {
			return fmt.Errorf("when: %s: %q is neither a fault's name nor a target: %w", key, ref, err)
		}
	}
	return nil
}

// String says the condition in words, for progress lines and errors.
func (c *Condition) String() string {
	var parts []string
	if c.ISRSize != nil {
		parts = append(parts, fmt.Sprintf("the ISR of %s has %d member%s", c.Partition, *c.ISRSize, plural(*c.ISRSize)))
	}
	if c.NotInISR != "" {
		parts = append(parts, fmt.Sprintf("%s is out of the ISR of %s", c.NotInISR, c.Partition))
	}
	if c.InISR != "" {
		parts = append(parts, fmt.Sprintf("%s is in the ISR of %s", c.InISR, c.Partition))
	}
	if c.LeaderChanged {
		parts = append(parts, fmt.Sprintf("%s has a new leader", c.Partition))
	}
	if c.After != "" {
		parts = append(parts, fmt.Sprintf("fault %s is injected", c.After))
	}
	if c.AfterHeal != "" {
		parts = append(parts, fmt.Sprintf("fault %s is healed", c.AfterHeal))
	}
	s := strings.Join(parts, " and ")
	if c.Delay > 0 {
		s += fmt.Sprintf(", then %v", time.Duration(c.Delay))
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ErrNotSetUp marks a run whose schedule could not create the state its
// story needs: a condition did not hold in time.
var ErrNotSetUp = errors.New("could not set up")

// NotSetUpError is a condition that did not hold within its bound.
type NotSetUpError struct {
	Fault  string        // the fault's name, or its kind
	When   Condition     // what it waited for
	Waited time.Duration // how long
	// Last is the last state seen of what the condition reads.
	Last string
}

func (e *NotSetUpError) Error() string {
	within := fmt.Sprintf("within %v", time.Duration(e.When.Within))
	if e.When.Within == 0 {
		within = fmt.Sprintf("in the %v the run had left", e.Waited.Round(100*time.Millisecond))
	}
	s := fmt.Sprintf("could not set up: %s: %s did not hold %s", e.Fault, e.When.String(), within)
	if e.Last != "" {
		s += " (" + e.Last + ")"
	}
	return s
}

// Unwrap makes errors.Is(err, ErrNotSetUp) hold.
func (e *NotSetUpError) Unwrap() error { return ErrNotSetUp }

// waiter is a conditional event being waited for.
type waiter struct {
	cond    Condition
	armedAt time.Duration // when the wait began; -1 until then
	heldAt  time.Duration // when the condition first held; -1 until then
	leader  int32         // the partition's leader when the wait began
	// targets are the broker ids NotInISR and InISR resolved to when the
	// wait began (target expressions); nil for fault names, read live.
	notIn, in []int32
	last      string
}

// facts is what conditions read besides the cluster view: which named
// faults were injected or healed, and on which nodes.
type facts struct {
	injected map[string][]string // fault name -> resolved nodes
	healed   map[string]bool
}

// ids maps node names to broker ids (nodes that are not brokers are left
// out).
func ids(c *compose.Cluster, names []string) []int32 {
	var out []int32
	for _, n := range names {
		if node := c.Node(n); node != nil && node.Role == compose.RoleBroker {
			out = append(out, int32(node.ID))
		}
	}
	return out
}

// arm starts the wait at now: it notes the leader and resolves target
// expressions against v.
func (w *waiter) arm(now time.Duration, c *compose.Cluster, v View, ok bool, intn func(int) int, names []string) {
	w.armedAt, w.leader = now, -1
	if ok && w.cond.Partition != "" {
		if p, found := v.Partitions[w.cond.Partition]; found {
			w.leader = p.Leader
		}
	}
	resolveRef := func(ref string) []int32 {
		if ref == "" || slices.Contains(names, ref) || !ok {
			return nil
		}
		ns, err := resolveAll(c, v, intn, []string{ref})
		if err != nil {
			return nil
		}
		return ids(c, ns)
	}
	w.notIn, w.in = resolveRef(w.cond.NotInISR), resolveRef(w.cond.InISR)
}

// holds evaluates the condition against the view and the facts, noting
// what it saw in w.last.
func (w *waiter) holds(c *compose.Cluster, v View, ok bool, f facts, names []string) bool {
	cd := w.cond
	prev := w.last
	w.last = ""
	if cd.After != "" {
		if _, done := f.injected[cd.After]; !done {
			w.last = "fault " + cd.After + " not injected"
			return false
		}
	}
	if cd.AfterHeal != "" && !f.healed[cd.AfterHeal] {
		w.last = "fault " + cd.AfterHeal + " not healed"
		return false
	}
	if cd.Partition == "" {
		return true
	}
	if !ok {
		// A failed read leaves the state last seen the last seen.
		w.last = "no cluster state seen"
		if strings.HasPrefix(prev, "last seen: ") {
			w.last = prev
		}
		return false
	}
	p, found := v.Partitions[cd.Partition]
	if !found {
		w.last = "no metadata for " + cd.Partition
		return false
	}
	w.last = fmt.Sprintf("last seen: leader %d, ISR %v", p.Leader, p.ISR)
	if cd.ISRSize != nil && len(p.ISR) != *cd.ISRSize {
		return false
	}
	refIDs := func(ref string, resolved []int32) ([]int32, bool) {
		if slices.Contains(names, ref) {
			ns, done := f.injected[ref]
			bs := ids(c, ns)
			// A fault that hit no broker names nothing to wait for.
			return bs, done && len(bs) > 0
		}
		return resolved, resolved != nil
	}
	if cd.NotInISR != "" {
		bs, known := refIDs(cd.NotInISR, w.notIn)
		if !known || slices.ContainsFunc(bs, func(b int32) bool { return slices.Contains(p.ISR, b) }) {
			return false
		}
	}
	if cd.InISR != "" {
		bs, known := refIDs(cd.InISR, w.in)
		if !known || len(bs) == 0 {
			return false
		}
		for _, b := range bs {
			if !slices.Contains(p.ISR, b) {
				return false
			}
		}
	}
	if cd.LeaderChanged && (p.Leader < 0 || p.Leader == w.leader) {
		return false
	}
	return true
}

// heldText says what held, for the history.
func (w *waiter) heldText() string {
	if w.last == "" {
		return w.cond.String()
	}
	return w.cond.String() + "; " + strings.TrimPrefix(w.last, "last seen: ")
}

// topicOf is the topic a condition reads, "" for none.
func (c *Condition) topic() string {
	if c == nil || c.Partition == "" {
		return ""
	}
	t, _, err := ParseTopicPartition(c.Partition)
	if err != nil {
		return ""
	}
	return t
}
