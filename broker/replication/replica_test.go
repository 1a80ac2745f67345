package replication

import (
	"errors"
	"log/slog"
	"maps"
	"testing"

	klog "github.com/isrlab/isrlab/broker/log"
)

// memStore is an OffsetStore in memory.
type memStore struct {
	read    map[klog.TopicPartition]int64
	readErr error
	written []map[klog.TopicPartition]int64
}

func (s *memStore) ReadReplicationOffsets() (map[klog.TopicPartition]int64, error) {
	return s.read, s.readErr
}

func (s *memStore) WriteReplicationOffsets(hws map[klog.TopicPartition]int64) error {
	s.written = append(s.written, hws)
	return nil
}

// TestHWCheckpointKeepsUnassigned: what was read at start is answered and
// written back until it is forgotten; an unreadable checkpoint is an
// error (the broker does not start).
func TestHWCheckpointKeepsUnassigned(t *testing.T) {
	a, b := klog.TopicPartition{Topic: "t", Partition: 0}, klog.TopicPartition{Topic: "t", Partition: 1}
	store := &memStore{read: map[klog.TopicPartition]int64{a: 7, b: 9}}
	hw, err := LoadHWCheckpoint(store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := hw.HW("t", 0); got != 7 {
		t.Fatalf("HW(t, 0) = %d, want 7", got)
	}
	hw.Forget("t", 1)
	hw.Write(nil)
	if len(store.written) != 1 || !maps.Equal(store.written[0], map[klog.TopicPartition]int64{a: 7}) {
		t.Fatalf("written %v, want t/0 at 7 only", store.written)
	}
	if got := hw.HW("t", 1); got != 0 {
		t.Fatalf("HW(t, 1) after Forget = %d, want 0", got)
	}

	torn := errors.New("torn")
	if _, err := LoadHWCheckpoint(&memStore{readErr: torn}, slog.New(slog.DiscardHandler)); !errors.Is(err, torn) {
		t.Fatalf("an unreadable checkpoint: %v, want its error", err)
	}
}
