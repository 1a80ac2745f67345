package checker

// indexed holds a T per number (a process, a partition): in a slice for the
// usual small numbers, cheaper than a map on the hot path, and in a map for
// the others, so that a corrupt history's huge numbers cannot make it
// allocate gigabytes.
type indexed[T any] struct {
	small []T
	has   []bool
	far   map[int]T
}

// indexedSmall bounds the numbers kept in the slice.
const indexedSmall = 1 << 16

func (x *indexed[T]) get(i int) (T, bool) {
	if i >= 0 && i < indexedSmall {
		if i < len(x.has) && x.has[i] {
			return x.small[i], true
		}
		var zero T
		return zero, false
	}
	v, ok := x.far[i]
	return v, ok
}

func (x *indexed[T]) set(i int, v T) {
	if i < 0 || i >= indexedSmall {
		if x.far == nil {
			x.far = map[int]T{}
		}
		x.far[i] = v
		return
	}
	if i >= len(x.has) {
		n := max(i+1, 2*len(x.has), 8)
		x.small = append(x.small, make([]T, n-len(x.small))...)
		x.has = append(x.has, make([]bool, n-len(x.has))...)
	}
	x.small[i], x.has[i] = v, true
}

func (x *indexed[T]) del(i int) {
	if i >= 0 && i < len(x.has) {
		var zero T
		x.small[i], x.has[i] = zero, false
	} else if len(x.far) > 0 {
		delete(x.far, i)
	}
}

// reset removes every entry.
func (x *indexed[T]) reset() {
	clear(x.has)
	clear(x.far)
}

// each calls fn for every entry, the slice's in order, then the map's.
func (x *indexed[T]) each(fn func(i int, v T)) {
	for i, ok := range x.has {
		if ok {
			fn(i, x.small[i])
		}
	}
	for i, v := range x.far {
		fn(i, v)
	}
}
