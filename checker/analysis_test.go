package checker

import (
	"testing"
	"unsafe"
)

// TestValueStateSize: the first pass keeps one valueState per distinct
// value (3.3 million in the 10M-entry history of docs/PERFORMANCE.md), so
// a field more is megabytes more; it was 80 bytes before issue 24.
func TestValueStateSize(t *testing.T) {
	if n := unsafe.Sizeof(valueState{}); n > 48 {
		t.Errorf("valueState is %d bytes, want 48 or less", n)
	}
}
