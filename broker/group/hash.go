package group

import "unicode/utf16"

// JavaHashCode is Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1]
// over the UTF-16 code units of s, in wrapping int32 arithmetic.
func JavaHashCode(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// Partition is the __consumer_offsets partition holding groupID:
// abs(hashCode) % partitions, with Kafka's Utils.abs(MinInt32) = 0
// (KAFKA-SPEC §9.1). The leader of that partition is the group's
// coordinator.
func Partition(groupID string, partitions int) int32 {
	h := JavaHashCode(groupID)
	switch {
	case h == -1<<31:
		h = 0
	case h < 0:
		h = -h
	}
	return h % int32(partitions)
}
