package log

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEndOffsetForEpoch(t *testing.T) {
	// KAFKA-SPEC §5.2, Kafka's LeaderEpochFileCache.endOffsetFor.
	entries := []EpochEntry{{1, 0}, {3, 10}, {6, 25}}
	const leo = 40
	tests := []struct {
		name      string
		entries   []EpochEntry
		epoch     int32
		wantEpoch int32
		wantEnd   int64
	}{
		{"latest epoch ends at LEO", entries, 6, 6, leo},
		{"known older epoch ends where the next starts", entries, 3, 3, 25},
		{"first epoch", entries, 1, 1, 10},
		{"unknown epoch between: largest smaller epoch", entries, 4, 3, 25},
		{"unknown epoch between first two", entries, 2, 1, 10},
		{"older than every entry", entries, 0, 0, 0},
		{"newer than latest", entries, 7, UndefinedEpoch, UndefinedEpochOffset},
		{"undefined request", entries, -1, UndefinedEpoch, UndefinedEpochOffset},
		{"empty cache", nil, 1, UndefinedEpoch, UndefinedEpochOffset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &EpochCache{entries: slices.Clone(tt.entries)}
			e, end := c.EndOffsetForEpoch(tt.epoch, leo)
			if e != tt.wantEpoch || end != tt.wantEnd {
				t.Fatalf("EndOffsetForEpoch(%d) = (%d, %d), want (%d, %d)", tt.epoch, e, end, tt.wantEpoch, tt.wantEnd)
			}
		})
	}
}

func TestEpochCacheChanges(t *testing.T) {
	base := []EpochEntry{{1, 0}, {3, 10}, {6, 25}}
	tests := []struct {
		name string
		op   func(c *EpochCache) error
		want []EpochEntry
	}{
		{"assign newer", func(c *EpochCache) error { _, err := c.Assign(7, 30); return err }, []EpochEntry{{1, 0}, {3, 10}, {6, 25}, {7, 30}}},
		{"assign older is ignored", func(c *EpochCache) error { _, err := c.Assign(2, 30); return err }, base},
		{"assign same epoch later start is ignored", func(c *EpochCache) error { _, err := c.Assign(6, 28); return err }, base},
		{"assign same epoch earlier start moves it", func(c *EpochCache) error { _, err := c.Assign(6, 20); return err }, []EpochEntry{{1, 0}, {3, 10}, {6, 20}}},
		{"assign newer at an earlier offset drops conflicts", func(c *EpochCache) error { _, err := c.Assign(8, 10); return err }, []EpochEntry{{1, 0}, {8, 10}}},
		{"truncate from end between", func(c *EpochCache) error { return c.TruncateFromEnd(20) }, []EpochEntry{{1, 0}, {3, 10}}},
		{"truncate from end at a start", func(c *EpochCache) error { return c.TruncateFromEnd(10) }, []EpochEntry{{1, 0}}},
		{"truncate from end past LEO", func(c *EpochCache) error { return c.TruncateFromEnd(100) }, base},
		{"truncate from end to zero", func(c *EpochCache) error { return c.TruncateFromEnd(0) }, nil},
		{"truncate from start inside an epoch", func(c *EpochCache) error { return c.TruncateFromStart(12) }, []EpochEntry{{3, 12}, {6, 25}}},
		{"truncate from start at a start", func(c *EpochCache) error { return c.TruncateFromStart(25) }, []EpochEntry{{6, 25}}},
		{"truncate from start before all", func(c *EpochCache) error { return c.TruncateFromStart(0) }, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := newEpochCache(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range base {
				if _, err := c.Assign(e.Epoch, e.StartOffset); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.op(c); err != nil {
				t.Fatal(err)
			}
			if got := c.Entries(); !slices.Equal(got, tt.want) {
				t.Fatalf("entries = %v, want %v", got, tt.want)
			}
			// Every change is on disk.
			again, err := newEpochCache(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := again.Entries(); !slices.Equal(got, tt.want) {
				t.Fatalf("reloaded entries = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEpochCheckpointFormat(t *testing.T) {
	dir := t.TempDir()
	c, err := newEpochCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Assign(0, 0)
	c.Assign(4, 17)
	data, err := os.ReadFile(filepath.Join(dir, EpochCheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0\n2\n0 0\n4 17\n"; string(data) != want {
		t.Fatalf("checkpoint = %q, want %q", data, want)
	}
	for _, bad := range []string{"1\n0\n", "0\n2\n0 0\n", "0\n1\nx 1\n", "0\n2\n5 0\n4 9\n", "garbage"} {
		os.WriteFile(filepath.Join(dir, EpochCheckpointFile), []byte(bad), 0o644)
		if _, err := newEpochCache(dir); err == nil {
			t.Errorf("checkpoint %q accepted", bad)
		}
	}
}
