package nemesis

import (
	"math/rand"
	"slices"
	"sort"
)

// Grudge maps a node to the nodes whose packets it drops: Grudge{"b1":
// {"b2"}} cuts b2 -> b1 only (a one-way partition). A symmetric grudge is a
// two-way partition.
type Grudge map[string][]string

// Pairs returns every (from, to) link the grudge cuts, sorted.
func (g Grudge) Pairs() [][2]string {
	var out [][2]string
	for to, froms := range g {
		for _, from := range froms {
			out = append(out, [2]string{from, to})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return slices.Compact(out)
}

// add records that to drops packets from from.
func (g Grudge) add(to, from string) {
	if to == from || slices.Contains(g[to], from) {
		return
	}
	g[to] = append(g[to], from)
	slices.Sort(g[to])
}

// Complete is the grudge of disjoint components: every node drops packets
// from every node outside its component.
func Complete(components ...[]string) Grudge {
	g := Grudge{}
	for i, a := range components {
		for j, b := range components {
			if i == j {
				continue
			}
			for _, to := range a {
				for _, from := range b {
					g.add(to, from)
				}
			}
		}
	}
	return g
}

// Cut is the two-way grudge between the node sets a and b (which may share
// nodes; a node never drops itself). Other links are untouched.
func Cut(a, b []string) Grudge {
	g := Grudge{}
	for _, x := range a {
		for _, y := range b {
			g.add(x, y)
			g.add(y, x)
		}
	}
	return g
}

// OneWay keeps only the links into the nodes of to.
func (g Grudge) OneWay(to []string) Grudge {
	out := Grudge{}
	for n, froms := range g {
		if slices.Contains(to, n) {
			out[n] = slices.Clone(froms)
		}
	}
	return out
}

// Isolate cuts node off from every other node in nodes.
func Isolate(node string, nodes []string) Grudge {
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == node })
	return Complete([]string{node}, rest)
}

// Halves splits nodes into a first half (the smaller one when the count is
// odd) and the rest, in the order given.
func Halves(nodes []string) Grudge {
	h := len(nodes) / 2
	return Complete(slices.Clone(nodes[:h]), slices.Clone(nodes[h:]))
}

// RandomHalves shuffles nodes with rng, then splits them as Halves.
func RandomHalves(rng *rand.Rand, nodes []string) Grudge {
	return Halves(shuffled(rng, nodes))
}

// MajoritiesRing gives every node a view of a majority (itself and its
// neighbours on a ring shuffled by rng) such that no two nodes see the same
// majority: each node drops everyone outside its window.
func MajoritiesRing(rng *rand.Rand, nodes []string) Grudge {
	ring := shuffled(rng, nodes)
	n := len(ring)
	g := Grudge{}
	if n < 3 {
		return g
	}
	maj := n/2 + 1
	r := maj / 2 // window radius: 2r+1 >= maj
	for i, to := range ring {
		for j, from := range ring {
			d := (i - j + n) % n
			if d > r && n-d > r {
				g.add(to, from)
			}
		}
	}
	return g
}

// Bridge splits nodes (shuffled by rng) into two halves joined by one node
// that sees both sides; the sides do not see each other.
func Bridge(rng *rand.Rand, nodes []string) Grudge {
	s := shuffled(rng, nodes)
	if len(s) < 3 {
		return Halves(s)
	}
	mid := len(s) / 2
	return Complete(slices.Clone(s[:mid]), slices.Clone(s[mid+1:]))
}

func shuffled(rng *rand.Rand, nodes []string) []string {
	s := slices.Clone(nodes)
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}
