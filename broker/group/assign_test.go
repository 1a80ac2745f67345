package group

import (
	"fmt"
	"testing"
)

// TestAssignors: every subscribed partition goes to exactly one member
// subscribed to its topic; with one subscription for all, sizes differ by
// at most one; the uniform assignor moves only what balance needs when a
// member joins.
func TestAssignors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		members    int
		partitions map[string]int32
		subscribe  func(i int) []string
	}{
		{"one topic", 3, map[string]int32{"t": 7}, func(int) []string { return []string{"t"} }},
		{"two topics", 4, map[string]int32{"t": 5, "u": 6}, func(int) []string { return []string{"t", "u"} }},
		{"more members than partitions", 5, map[string]int32{"t": 3}, func(int) []string { return []string{"t"} }},
		{"different subscriptions", 3, map[string]int32{"t": 4, "u": 4}, func(i int) []string {
			if i == 0 {
				return []string{"t"}
			}
			return []string{"t", "u"}
		}},
	} {
		for name, assign := range assignors {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				spec := assignSpec{subscribed: map[string][]string{}, previous: map[string]assignment{}, partitions: tc.partitions}
				for i := 0; i < tc.members; i++ {
					id := fmt.Sprintf("m%d", i)
					spec.members = append(spec.members, id)
					spec.subscribed[id] = tc.subscribe(i)
				}
				out := assign(spec)
				check(t, spec, out, tc.subscribe(1), name == "uniform")
				if name != "uniform" {
					return
				}
				// A member joins: the others keep what they had up to
				// their new share.
				spec.previous = out
				spec.members = append(spec.members, "new")
				spec.subscribed["new"] = tc.subscribe(1)
				next := assign(spec)
				check(t, spec, next, tc.subscribe(1), true)
				moved := 0
				for id, a := range out {
					for top, ps := range a {
						for _, p := range ps {
							if !next[id].has(top, p) {
								moved++
							}
						}
					}
				}
				if moved > next["new"].size() {
					t.Fatalf("%d partitions moved, the new member got %d: %v -> %v", moved, next["new"].size(), out, next)
				}
			})
		}
	}
}

// check checks an assignment; balanced asks sizes within one of each
// other over all topics (range balances each topic alone).
func check(t *testing.T, spec assignSpec, out map[string]assignment, common []string, balanced bool) {
	t.Helper()
	owners := map[TopicPartition]int{}
	homogeneous := true
	for _, id := range spec.members {
		if fmt.Sprint(spec.subscribed[id]) != fmt.Sprint(common) {
			homogeneous = false
		}
		for top, ps := range out[id] {
			subscribed := false
			for _, s := range spec.subscribed[id] {
				subscribed = subscribed || s == top
			}
			if !subscribed {
				t.Fatalf("%s got %s without subscribing: %v", id, top, out)
			}
			for _, p := range ps {
				owners[TopicPartition{top, p}]++
			}
		}
	}
	for top, n := range spec.partitions {
		for p := int32(0); p < n; p++ {
			if owners[TopicPartition{top, p}] != 1 {
				t.Fatalf("%s/%d assigned %d times: %v", top, p, owners[TopicPartition{top, p}], out)
			}
		}
	}
	if !homogeneous {
		return
	}
	lo, hi := -1, 0
	for _, id := range spec.members {
		n := out[id].size()
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi-lo > 1 && (balanced || len(spec.partitions) == 1) {
		t.Fatalf("sizes from %d to %d: %v", lo, hi, out)
	}
}
