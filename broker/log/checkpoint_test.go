package log

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestCheckpointGolden pins the on-disk formats Kafka tools read: the offset
// checkpoints of a log dir and a partition's leader-epoch-checkpoint.
func TestCheckpointGolden(t *testing.T) {
	dir := t.TempDir()
	offsets := map[TopicPartition]int64{
		{"orders", 1}:              1200,
		{"orders", 0}:              17,
		{"__consumer_offsets", 12}: 0,
		{"a-b.c_d", 3}:             9007199254740993,
	}
	if err := writeOffsets(filepath.Join(dir, RecoveryPointCheckpointFile), offsets); err != nil {
		t.Fatal(err)
	}
	c, err := newEpochCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []EpochEntry{{0, 0}, {2, 150}, {5, 9000}} {
		if _, err := c.Assign(e.Epoch, e.StartOffset); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{RecoveryPointCheckpointFile, EpochCheckpointFile} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		scripttest.Golden(t, filepath.Join("testdata", name+".golden"), string(got))
	}
	// And they read back.
	back, err := readOffsets(filepath.Join(dir, RecoveryPointCheckpointFile))
	if err != nil || len(back) != len(offsets) {
		t.Fatalf("read back %v %v", back, err)
	}
	for tp, v := range offsets {
		if back[tp] != v {
			t.Errorf("%v: %d, want %d", tp, back[tp], v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, RecoveryPointCheckpointFile+".tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

func TestReadOffsetsRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt")
	for _, bad := range []string{"", "0\n", "0\n1\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\n1\nbad/topic 0 5\n", "1\n0\n", "0\n-1\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := readOffsets(path); err == nil {
			t.Errorf("checkpoint %q accepted", bad)
		}
	}
	if m, err := readOffsets(filepath.Join(dir, "missing")); err != nil || len(m) != 0 {
		t.Errorf("missing file: %v %v", m, err)
	}
}
