package checker

import (
	"math/rand/v2"
	"testing"
)

// TestFloorTable follows a map through random puts (of keys it does not
// hold) and takes, with keys that share the window's slots or not, drawn
// at random or mostly increasing, as a history's values are.
func TestFloorTable(t *testing.T) {
	for _, keys := range []int32{8, 100, 5000, 100_000, 0} {
		rng := rand.New(rand.NewPCG(1, uint64(keys)))
		var tab floorTable
		want := map[int32]floors{}
		next := int32(0)
		for step := range 200_000 {
			k := rng.Int32N(max(keys, 1))
			if keys == 0 { // mostly increasing, some taken long after
				if k = next; rng.IntN(3) == 0 {
					next++
				} else if len(want) > 0 && rng.IntN(2) == 0 {
					k = max(next-rng.Int32N(20_000), 0)
				}
			}
			if _, in := want[k]; !in && rng.IntN(3) == 0 {
				f := floors{read: int64(step), ack: -int64(step)}
				if step%7 == 0 {
					f.read = 1<<40 + int64(step) // does not fit in the list
				}
				tab.put(k, f)
				want[k] = f
				continue
			}
			got, ok := tab.take(k)
			w, wok := want[k]
			if ok != wok || got != w {
				t.Fatalf("keys %d, step %d: take(%d) = %v, %v; want %v, %v", keys, step, k, got, ok, w, wok)
			}
			delete(want, k)
			if tab.len() != len(want) {
				t.Fatalf("keys %d, step %d: %d entries, want %d", keys, step, tab.len(), len(want))
			}
		}
		for k, w := range want {
			if got, ok := tab.take(k); !ok || got != w {
				t.Fatalf("keys %d: take(%d) at the end = %v, %v; want %v", keys, k, got, ok, w)
			}
		}
		if tab.len() != 0 {
			t.Fatalf("keys %d: %d entries left", keys, tab.len())
		}
	}
}
