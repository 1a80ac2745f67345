package log

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// EpochCheckpointFile is the leader epoch cache file in a partition directory.
const EpochCheckpointFile = "leader-epoch-checkpoint"

// UndefinedEpoch and UndefinedEpochOffset are returned by EndOffsetForEpoch
// when the requested epoch is unknown (Kafka's UNDEFINED_EPOCH(_OFFSET)).
const (
	UndefinedEpoch       int32 = -1
	UndefinedEpochOffset int64 = -1
)

// EpochEntry says leader epoch Epoch started at offset StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochCache is a partition's leader epoch history (KIP-101), persisted to
// leader-epoch-checkpoint on every change. Entries have strictly increasing
// epochs and start offsets. It is safe for concurrent use.
type EpochCache struct {
	mu      sync.Mutex
	path    string // "" for an unpersisted cache
	entries []EpochEntry
}

// newEpochCache loads the cache from dir. A missing file is an empty cache; an
// unreadable one is reported as an error along with an empty cache, which the
// caller rebuilds from the log.
func newEpochCache(dir string) (*EpochCache, error) {
	c := &EpochCache{path: filepath.Join(dir, EpochCheckpointFile)}
	if err := c.load(); err != nil {
		c.entries = nil
		return c, err
	}
	return c, nil
}

func (c *EpochCache) load() error {
	lines, err := readCheckpoint(c.path, 2)
	if err != nil {
		return err
	}
	for _, f := range lines {
		epoch, err1 := strconv.ParseInt(f[0], 10, 32)
		start, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s: entry %q: %w", c.path, strings.Join(f, " "), errBadCheckpoint)
		}
		e := EpochEntry{int32(epoch), start}
		if n := len(c.entries); e.Epoch < 0 || e.StartOffset < 0 || n > 0 && (e.Epoch <= c.entries[n-1].Epoch || e.StartOffset < c.entries[n-1].StartOffset) {
			return fmt.Errorf("%s: entries out of order: %w", c.path, errBadCheckpoint)
		}
		c.entries = append(c.entries, e)
	}
	return nil
}

// Entries returns a copy of the epoch history, oldest first.
func (c *EpochCache) Entries() []EpochEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]EpochEntry(nil), c.entries...)
}

// LatestEpoch returns the newest epoch, or UndefinedEpoch when empty.
func (c *EpochCache) LatestEpoch() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return UndefinedEpoch
	}
	return c.entries[len(c.entries)-1].Epoch
}

// EpochStartOffset returns the start offset of epoch, if it is in the cache.
func (c *EpochCache) EpochStartOffset(epoch int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.Epoch == epoch {
			return e.StartOffset, true
		}
	}
	return 0, false
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch (KAFKA-SPEC §5.2) given the
// log end offset: (epoch, logEndOffset) when epoch is the latest; otherwise
// the largest known epoch <= epoch (or epoch itself when it is older than every
// entry) and the start offset of the first epoch > epoch. An epoch newer than
// the latest, or any epoch on an empty cache, gives (UndefinedEpoch,
// UndefinedEpochOffset).
func (c *EpochCache) EndOffsetForEpoch(epoch int32, logEndOffset int64) (int32, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.entries)
	if epoch < 0 || n == 0 {
		return UndefinedEpoch, UndefinedEpochOffset
	}
	if c.entries[n-1].Epoch == epoch {
		return epoch, logEndOffset
	}
	higher := -1
	for i, e := range c.entries {
		if e.Epoch > epoch {
			higher = i
			break
		}
	}
	if higher < 0 {
		return UndefinedEpoch, UndefinedEpochOffset
	}
	if higher == 0 {
		return epoch, c.entries[0].StartOffset
	}
	return c.entries[higher-1].Epoch, c.entries[higher].StartOffset
}

// Assign records that epoch starts at startOffset. It is a no-op unless epoch
// is newer than the latest or moves the latest epoch's start back; entries
// that conflict (epoch >= epoch or start offset >= startOffset) are removed.
// It returns whether the cache changed.
func (c *EpochCache) Assign(epoch int32, startOffset int64) (bool, error) {
	if epoch < 0 || startOffset < 0 {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.entries); n > 0 {
		last := c.entries[n-1]
		if epoch < last.Epoch || epoch == last.Epoch && startOffset >= last.StartOffset {
			return false, nil
		}
	}
	kept := c.entries[:0]
	for _, e := range c.entries {
		if e.Epoch < epoch && e.StartOffset < startOffset {
			kept = append(kept, e)
		}
	}
	c.entries = append(kept, EpochEntry{epoch, startOffset})
	return true, c.persistLocked()
}

// TruncateFromEnd removes the entries starting at or after endOffset (the log
// was truncated to endOffset).
func (c *EpochCache) TruncateFromEnd(endOffset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= endOffset {
		n--
	}
	if n == len(c.entries) {
		return nil
	}
	c.entries = c.entries[:n]
	return c.persistLocked()
}

// TruncateFromStart drops the entries wholly before startOffset (the log
// start moved to startOffset); the epoch holding startOffset is kept, starting
// at startOffset.
func (c *EpochCache) TruncateFromStart(startOffset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset <= startOffset {
		i++
	}
	if i == 0 {
		return nil
	}
	last := c.entries[i-1]
	if i == 1 && last.StartOffset == startOffset {
		return nil
	}
	last.StartOffset = startOffset
	c.entries = append([]EpochEntry{last}, c.entries[i:]...)
	return c.persistLocked()
}

// clear removes every entry.
func (c *EpochCache) clear() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = nil
	return c.persistLocked()
}

func (c *EpochCache) persistLocked() error {
	if c.path == "" {
		return nil
	}
	lines := make([]string, len(c.entries))
	for i, e := range c.entries {
		lines[i] = fmt.Sprintf("%d %d", e.Epoch, e.StartOffset)
	}
	return writeCheckpoint(c.path, lines)
}
