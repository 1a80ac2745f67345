package checker

import "testing"

// TestInt32s grows the array in small and large steps, past the first
// chunk's doublings, and checks every element against a slice.
func TestInt32s(t *testing.T) {
	var s int32s
	var want []int32
	for _, n := range []int{1, 5, 1024, 1025, 3000, int32sChunk - 1, int32sChunk + 1, 3*int32sChunk + 17, 3 * int32sChunk} {
		fill := int32(-n)
		from := s.len()
		s.grow(n, fill)
		if s.len() < n {
			t.Fatalf("grow(%d): len %d", n, s.len())
		}
		if s.len() > int32sChunk && s.len()%int32sChunk != 0 {
			t.Fatalf("grow(%d): len %d is not whole chunks", n, s.len())
		}
		for len(want) < s.len() {
			want = append(want, fill)
		}
		if from < s.len() && s.at(s.len()-1) != fill {
			t.Fatalf("grow(%d): new element %d, want %d", n, s.at(s.len()-1), fill)
		}
		for i := 0; i < s.len(); i += 7 {
			s.set(i, int32(i))
			want[i] = int32(i)
		}
		for i := range want {
			if s.at(i) != want[i] {
				t.Fatalf("after grow(%d): [%d] = %d, want %d", n, i, s.at(i), want[i])
			}
		}
	}
}
