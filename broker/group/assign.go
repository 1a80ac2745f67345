package group

import (
	"slices"
	"sort"
)

// assignment is a member's partitions by topic name, each list sorted.
type assignment map[string][]int32

func (a assignment) clone() assignment {
	out := make(assignment, len(a))
	for t, ps := range a {
		out[t] = slices.Clone(ps)
	}
	return out
}

func (a assignment) size() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a assignment) has(t string, p int32) bool {
	_, ok := slices.BinarySearch(a[t], p)
	return ok
}

func (a assignment) add(t string, p int32) {
	ps := a[t]
	i, ok := slices.BinarySearch(ps, p)
	if !ok {
		a[t] = slices.Insert(ps, i, p)
	}
}

func (a assignment) remove(t string, p int32) {
	ps := a[t]
	if i, ok := slices.BinarySearch(ps, p); ok {
		ps = slices.Delete(ps, i, i+1)
		if len(ps) == 0 {
			delete(a, t)
			return
		}
		a[t] = ps
	}
}

func (a assignment) equal(b assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for t, ps := range a {
		if !slices.Equal(ps, b[t]) {
			return false
		}
	}
	return true
}

// topics returns a's topics, sorted.
func (a assignment) topics() []string {
	out := make([]string, 0, len(a))
	for t := range a {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// assignSpec is what a server-side assignor works from: each member's
// subscription and previous target, and the partition count of every
// subscribed topic that exists.
type assignSpec struct {
	members    []string            // member ids, sorted
	subscribed map[string][]string // member id -> topics
	previous   map[string]assignment
	partitions map[string]int32 // topic -> partition count
}

// assignors are the server-side assignors, by the name a member asks for
// (group.consumer.assignors; the first is the default).
var assignors = map[string]func(assignSpec) map[string]assignment{
	"uniform": uniformAssign,
	"range":   rangeAssign,
}

// defaultAssignor is the first of Kafka's group.consumer.assignors.
const defaultAssignor = "uniform"

// rangeAssign gives each member subscribed to a topic a contiguous range
// of its partitions, the first members (by member id) one more when they
// do not divide evenly, as Kafka's RangeAssignor does for members with
// the same subscription; it is not sticky.
func rangeAssign(s assignSpec) map[string]assignment {
	out := map[string]assignment{}
	for _, id := range s.members {
		out[id] = assignment{}
	}
	byTopic := map[string][]string{}
	for _, id := range s.members {
		for _, t := range s.subscribed[id] {
			byTopic[t] = append(byTopic[t], id)
		}
	}
	for t, ms := range byTopic {
		n, ok := s.partitions[t]
		if !ok || n == 0 {
			continue
		}
		per, extra := int(n)/len(ms), int(n)%len(ms)
		p := int32(0)
		for i, id := range ms {
			k := per
			if i < extra {
				k++
			}
			for j := 0; j < k; j++ {
				out[id].add(t, p)
				p++
			}
		}
	}
	return out
}

// uniformAssign spreads every subscribed partition over the members
// subscribed to its topic so that member sizes differ by at most one
// where the subscriptions allow it, keeping each member's previous
// partitions where balance permits: Kafka's UniformAssignor's goals
// (balanced, sticky), by a simpler greedy algorithm than its optimized
// and general builders.
func uniformAssign(s assignSpec) map[string]assignment {
	out := map[string]assignment{}
	subscribers := map[string][]string{}
	for _, id := range s.members {
		out[id] = assignment{}
		for _, t := range s.subscribed[id] {
			subscribers[t] = append(subscribers[t], id)
		}
	}
	topics := make([]string, 0, len(subscribers))
	for t := range subscribers {
		if s.partitions[t] > 0 {
			topics = append(topics, t)
		}
	}
	sort.Strings(topics)
	subscribes := func(id, t string) bool { return slices.Contains(s.subscribed[id], t) }
	owner := map[TopicPartition]string{}
	// Sticky: keep what each member had and still may have, up to the
	// most any member would hold in a balance.
	total := 0
	for _, t := range topics {
		total += int(s.partitions[t])
	}
	limit := total
	if len(s.members) > 0 {
		limit = (total + len(s.members) - 1) / len(s.members)
	}
	for _, id := range s.members {
		prev := s.previous[id]
		for _, t := range prev.topics() {
			if !subscribes(id, t) {
				continue
			}
			for _, p := range prev[t] {
				tp := TopicPartition{t, p}
				if p >= s.partitions[t] || owner[tp] != "" || out[id].size() >= limit {
					continue
				}
				owner[tp] = id
				out[id].add(t, p)
			}
		}
	}
	fewest := func(t string) string {
		best := ""
		for _, id := range subscribers[t] {
			if best == "" || out[id].size() < out[best].size() {
				best = id
			}
		}
		return best
	}
	for _, t := range topics {
		for p := int32(0); p < s.partitions[t]; p++ {
			tp := TopicPartition{t, p}
			if owner[tp] != "" {
				continue
			}
			id := fewest(t)
			owner[tp] = id
			out[id].add(t, p)
		}
	}
	// Balance: move a partition from a member to another subscriber of its
	// topic while that narrows the gap by more than one.
	for moved := true; moved; {
		moved = false
		for _, t := range topics {
			for p := int32(0); p < s.partitions[t]; p++ {
				tp := TopicPartition{t, p}
				from := owner[tp]
				to := fewest(t)
				if out[to].size()+1 < out[from].size() {
					out[from].remove(t, p)
					out[to].add(t, p)
					owner[tp] = to
					moved = true
				}
			}
		}
	}
	return out
}
