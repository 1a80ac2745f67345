package checker

import (
	"math"
	"sort"
)

// floorTable maps a value (its index) to the floors at its send's
// invocation, from the invocation until the value's offset is known. Every
// send goes in and almost every one comes out soon after; a value's index
// is given when it is first seen, usually at its send's invocation, so
// the values in flight have indexes close to the newest. They live in a
// window indexed by the value's index modulo its size (small enough for a
// cache); one still there when a later value needs its slot (a send that
// ended info and was never read, say) moves out to a list sorted by index,
// 12 bytes an entry, or to a map when it comes out of order or its floors
// do not fit in an int32. A Go map alone spent most of its time probing
// past the slots of deleted entries, and kept the never-read ones at
// several times the size.
type floorTable struct {
	win  [floorWindow]floorSlot
	n    int        // entries in win
	old  []floorOld // moved out of win, by key
	gone int        // entries of old taken since
	odd  map[int32]floors
}

const floorWindow = 4096

type floorSlot struct {
	key int32 // the value's index + 1; 0 is an empty slot
	f   floors
}

// floorOld is a floorSlot moved out of the window, its floors in int32s;
// read is floorTaken once it is taken.
type floorOld struct {
	key, read, ack int32
}

const floorTaken = math.MinInt32

// put adds the floors of value index i, which the table does not hold (a
// value's send is invoked once).
func (t *floorTable) put(i int32, f floors) {
	s := &t.win[i%floorWindow]
	if s.key != 0 {
		t.moveOut(*s)
		t.n--
	}
	*s = floorSlot{key: i + 1, f: f}
	t.n++
}

func (t *floorTable) moveOut(s floorSlot) {
	small := func(v int64) bool { return v > floorTaken && v <= math.MaxInt32 }
	if small(s.f.read) && small(s.f.ack) && (len(t.old) == 0 || t.old[len(t.old)-1].key < s.key) {
		t.old = append(t.old, floorOld{key: s.key, read: int32(s.f.read), ack: int32(s.f.ack)})
		return
	}
	if t.odd == nil {
		t.odd = map[int32]floors{}
	}
	t.odd[s.key] = s.f
}

// take removes the floors of value index i and returns them.
func (t *floorTable) take(i int32) (floors, bool) {
	key := i + 1
	if s := &t.win[i%floorWindow]; s.key == key {
		f := s.f
		*s = floorSlot{}
		t.n--
		return f, true
	}
	if j := sort.Search(len(t.old), func(j int) bool { return t.old[j].key >= key }); j < len(t.old) && t.old[j].key == key && t.old[j].read != floorTaken {
		o := &t.old[j]
		f := floors{read: int64(o.read), ack: int64(o.ack)}
		o.read = floorTaken
		if t.gone++; t.gone > len(t.old)/2 {
			t.compact()
		}
		return f, true
	}
	f, ok := t.odd[key]
	if ok {
		delete(t.odd, key)
	}
	return f, ok
}

// compact drops the taken entries of old.
func (t *floorTable) compact() {
	kept := t.old[:0]
	for _, o := range t.old {
		if o.read != floorTaken {
			kept = append(kept, o)
		}
	}
	t.old, t.gone = kept, 0
}

func (t *floorTable) len() int { return t.n + len(t.old) - t.gone + len(t.odd) }
