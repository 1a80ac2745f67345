package broker

import (
	"math/bits"
	"sync"
)

// Read buffers for fetch responses are recycled by size class (powers of
// two from 4 KiB to 16 MiB): a consumer fetching megabytes per request
// would otherwise allocate, and make the GC scan, a fresh buffer each time.
const (
	minBufShift = 12
	maxBufShift = 24
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// getBuf returns a buffer of length n; oversized requests are allocated.
func getBuf(n int) []byte {
	c := bufClass(n)
	if c >= len(bufPools) {
		return make([]byte, n)
	}
	if b, ok := bufPools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// putBuf returns a buffer obtained from getBuf.
func putBuf(b []byte) {
	c := bufClass(cap(b))
	if c >= len(bufPools) || cap(b) != 1<<(c+minBufShift) {
		return
	}
	b = b[:0]
	bufPools[c].Put(&b)
}

// bufSet tracks the buffers one response uses, to release them together
// once the response has been written (or discarded).
type bufSet struct {
	mu   sync.Mutex
	bufs [][]byte
}

func (s *bufSet) alloc(n int) []byte {
	b := getBuf(n)
	s.mu.Lock()
	s.bufs = append(s.bufs, b)
	s.mu.Unlock()
	return b
}

func (s *bufSet) release() {
	if s == nil {
		return
	}
	s.mu.Lock()
	for _, b := range s.bufs {
		putBuf(b)
	}
	s.bufs = nil
	s.mu.Unlock()
}
