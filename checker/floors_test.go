package checker

import (
	"math/rand/v2"
	"testing"
)

// TestFloorTable follows a map through random puts (of keys it does not
// hold) and takes, with keys that share the window's slots or not.
func TestFloorTable(t *testing.T) {
	for _, keys := range []int32{8, 100, 5000, 100_000} {
		rng := rand.New(rand.NewPCG(1, uint64(keys)))
		var tab floorTable
		want := map[int32]floors{}
		for step := range 200_000 {
			k := rng.Int32N(keys)
			if _, in := want[k]; !in && rng.IntN(3) == 0 {
				f := floors{read: int64(step), ack: -int64(step)}
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
