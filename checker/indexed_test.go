package checker

import (
	"math/rand/v2"
	"testing"
)

// TestIndexed follows a map through random sets, gets and deletes of small,
// large and negative numbers, and resets.
func TestIndexed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var x indexed[int64]
	want := map[int]int64{}
	keys := []int{0, 1, 7, 8, 100, indexedSmall - 1, indexedSmall, 1 << 40, -1, -5}
	for step := range 20000 {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(10) {
		case 0:
			x.del(k)
			delete(want, k)
		case 1, 2, 3:
			x.set(k, int64(step))
			want[k] = int64(step)
		case 4:
			if rng.IntN(50) == 0 {
				x.reset()
				clear(want)
			}
		default:
			got, ok := x.get(k)
			w, wok := want[k]
			if ok != wok || got != w {
				t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", step, k, got, ok, w, wok)
			}
		}
	}
	n := 0
	x.each(func(i int, v int64) {
		n++
		if want[i] != v {
			t.Fatalf("each: %d = %d, want %d", i, v, want[i])
		}
	})
	if n != len(want) {
		t.Fatalf("each saw %d entries, want %d", n, len(want))
	}
}
