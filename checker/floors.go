package checker

// floorTable maps a value (its index) to the floors at its send's
// invocation, from the invocation until the value's offset is known. Every
// send goes in and almost every one comes out soon after; a value's index
// is given when it is first seen, usually at its send's invocation, so
// the values in flight have indexes close to the newest. They live in a
// window indexed by the value's index modulo its size (small enough for a
// cache); one still there when a later value needs its slot (a send that
// ended info and was never read, say) moves to a map. A Go map alone spent
// most of its time probing past the slots of deleted entries.
type floorTable struct {
	win [floorWindow]floorSlot
	old map[int32]floors
	n   int // entries in win
}

const floorWindow = 4096

type floorSlot struct {
	key int32 // the value's index + 1; 0 is an empty slot
	f   floors
}

// put adds the floors of value index i, which the table does not hold (a
// value's send is invoked once).
func (t *floorTable) put(i int32, f floors) {
	s := &t.win[i%floorWindow]
	if s.key != 0 {
		if t.old == nil {
			t.old = map[int32]floors{}
		}
		t.old[s.key-1] = s.f
		t.n--
	}
	*s = floorSlot{key: i + 1, f: f}
	t.n++
}

// take removes the floors of value index i and returns them.
func (t *floorTable) take(i int32) (floors, bool) {
	if s := &t.win[i%floorWindow]; s.key == i+1 {
		f := s.f
		*s = floorSlot{}
		t.n--
		return f, true
	}
	f, ok := t.old[i]
	if ok {
		delete(t.old, i)
	}
	return f, ok
}

func (t *floorTable) len() int { return t.n + len(t.old) }
