package checker

// int32s is a growable array of int32 kept in chunks, so that growing it
// never copies what it holds or leaves the old copy behind as garbage: the
// first chunk doubles up to int32sChunk elements, every later one is
// allocated whole. Its length is always that of its chunks.
type int32s struct {
	chunks [][]int32
	n      int
}

const (
	int32sShift = 16
	int32sChunk = 1 << int32sShift
	int32sMask  = int32sChunk - 1
	int32sFirst = 1024 // the first chunk's first size
)

func (s *int32s) len() int { return s.n }

func (s *int32s) at(i int) int32 { return s.chunks[i>>int32sShift][i&int32sMask] }

func (s *int32s) set(i int, v int32) { s.chunks[i>>int32sShift][i&int32sMask] = v }

// grow makes the length at least n, the new elements set to fill.
func (s *int32s) grow(n int, fill int32) {
	for s.n < n {
		from := s.n
		switch {
		case s.n < int32sChunk:
			size := min(max(2*s.n, int32sFirst), int32sChunk)
			for size < n && size < int32sChunk {
				size *= 2
			}
			first := make([]int32, size)
			if s.n > 0 {
				copy(first, s.chunks[0])
				s.chunks[0] = first
			} else {
				s.chunks = append(s.chunks, first)
			}
			s.n = size
		default:
			s.chunks = append(s.chunks, make([]int32, int32sChunk))
			s.n += int32sChunk
		}
		if fill != 0 {
			for i := from; i < s.n; i++ {
				s.set(i, fill)
			}
		}
	}
}
