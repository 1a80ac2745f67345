// Package log is the broker's segmented partition log (KAFKA-SPEC §8): raw
// Kafka v2 record batches in .log segment files with sparse offset and time
// indexes, the leader epoch cache (§5), recovery after an unclean shutdown,
// retention, and the Manager that owns every partition log of a broker.
//
// Batches are stored exactly as the client sent them; the log only patches
// baseOffset and partitionLeaderEpoch, which lie outside the CRC. Log data is
// never kept in memory: reads are one pread after an index lookup, and
// durability comes from the page cache plus the configured flush policy, as
// in Kafka.
package log

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Log is one partition's log in its own directory. Appends, truncation and
// retention are serialized by one mutex; Read, OffsetForTimestamp and the
// offset getters are lock-free against appends and see whole batches only.
// Truncation rewrites the tail in place, so reads of the truncated range must
// not run concurrently with TruncateTo and the appends that follow it: the
// caller excludes them with its partition lock, as Kafka does with
// leaderIsrUpdateLock. Retention is safe against readers: deleted segment
// files stay open until file.delete.delay.ms has passed.
type Log struct {
	dir    string
	clock  func() time.Time
	logger *slog.Logger
	epochs *EpochCache

	mu        sync.Mutex // appends, rolls, truncation, retention, config
	cfg       Config
	unflushed int64     // records appended since the last flush
	lastFlush time.Time // clock at the last flush
	truncGen  uint64    // bumped by every truncation, to discard stale flushes
	pending   []pendingDelete

	segs          atomic.Pointer[[]*segment] // sorted by base offset; last is active
	leo           atomic.Int64
	logStart      atomic.Int64
	recoveryPoint atomic.Int64
	closed        atomic.Bool

	flushMu sync.Mutex     // one flush at a time
	wg      sync.WaitGroup // background fsyncs of rolled segments

	recoveredBytes int64 // bytes validated by recovery in Open
	replayed       int64 // batches replayed into the producer state (Open, truncation)

	// ps is the producer and transaction state, updated by every append
	// under mu; the pointer never changes (reloads swap its contents).
	ps *ProducerState
}

type pendingDelete struct {
	segs []*segment
	due  time.Time
}

// AppendResult describes an append.
type AppendResult struct {
	FirstOffset    int64       // base offset of the first batch
	LastOffset     int64       // last offset of the last batch
	MaxTimestamp   int64       // largest batch MaxTimestamp (CreateTime), -1 if none
	OffsetOfMaxTs  int64       // base offset of the batch holding MaxTimestamp
	LogStartOffset int64       // log start offset after the append
	RecordCount    int64       // records appended
	LogAppendTime  int64       // the stamped time with LogAppendTime, else -1
	Batches        []BatchInfo // the appended batches, offsets as stored
	// Completed are the transactions the appended markers ended.
	Completed []CompletedTxn
}

// ReadResult is the outcome of a Read.
type ReadResult struct {
	// Records holds whole raw batches (possibly none), ready for a fetch
	// response.
	Records        []byte
	LogStartOffset int64
	LogEndOffset   int64
}

// Open opens the partition log in dir, creating it if needed. Unless
// WithCleanShutdown(true) is given, every segment from the one holding the
// recovery point (WithRecoveryPoint, default 0) is validated batch by batch:
// indexes are rebuilt, the first torn or corrupt batch and everything after
// it is truncated, later segments are deleted, and the epoch cache is rebuilt
// from the recovered batches. Index files that fail a sanity check are
// rebuilt, never fatal.
func Open(dir string, cfg Config, opts ...Option) (*Log, error) {
	o := buildOptions(opts)
	l := &Log{dir: dir, clock: o.clock, logger: o.logger.With("dir", dir), cfg: cfg.normalized()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	if err := l.load(o); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l.lastFlush = l.clock()
	return l, nil
}

// loadProducerState builds the producer and transaction state at Open:
// the latest readable snapshot at or below from (the first segment whose
// transaction index is rebuilt, else the LEO) plus the batches after it.
// Abort markers missing from their segment's transaction index are added
// back on the way.
func (l *Log) loadProducerState(from int64) error {
	ps, err := l.latestSnapshot(from)
	if err != nil {
		return err
	}
	l.ps = newProducerState(ps.mapEnd)
	l.ps.reset(ps)
	if err := l.replay(l.ps, ps.mapEnd); err != nil {
		return fmt.Errorf("rebuild producer state: %w", err)
	}
	return nil
}

// latestSnapshot removes the snapshots past the LEO and returns the state
// of the newest readable one at or below upTo (an unreadable one is
// reported and removed), or an empty state at the first segment.
func (l *Log) latestSnapshot(upTo int64) (*ProducerState, error) {
	leo := l.leo.Load()
	if err := removeSnapshots(l.dir, func(off int64) bool { return off > leo }); err != nil {
		return nil, err
	}
	offs, err := listSnapshots(l.dir)
	if err != nil {
		return nil, err
	}
	for i := len(offs) - 1; i >= 0; i-- {
		off := offs[i]
		if off > upTo {
			continue
		}
		data, err := os.ReadFile(snapshotPath(l.dir, off))
		var ps *ProducerState
		if err == nil {
			ps, err = DecodeSnapshot(data)
		}
		if err == nil && ps.mapEnd != off {
			err = fmt.Errorf("snapshot holds offset %d", ps.mapEnd)
		}
		if err == nil {
			return ps, nil
		}
		l.logger.Error("producer state snapshot unreadable, using an older one", "snapshot", off, "err", err)
		if err := os.Remove(snapshotPath(l.dir, off)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove unreadable snapshot: %w", err)
		}
	}
	return newProducerState(l.segments()[0].base), nil
}

// replay applies the batches from offset to the LEO to ps, adding each
// abort marker its segment's transaction index lacks.
func (l *Log) replay(ps *ProducerState, offset int64) error {
	return l.batches(offset, func(s *segment, pos int64, b BatchInfo) (bool, error) {
		l.replayed++
		var m *Marker
		if b.Control() {
			buf := make([]byte, b.Size)
			if _, err := s.log.ReadAt(buf, pos); err != nil {
				return false, fmt.Errorf("read control batch at %d: %w", b.BaseOffset, err)
			}
			mk, err := ParseMarker(buf)
			if err != nil {
				l.logger.Warn("control batch without a transaction marker", "offset", b.BaseOffset, "err", err)
			} else {
				m = &mk
			}
		}
		if _, ab := ps.apply(b, m); ab != nil && ab.LastOffset > s.txn.lastOffset() {
			if err := s.txn.append(*ab); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// publish installs a new segment list and offsets. Readers load the LEO
// before the segment list, so the list they see always covers it.
func (l *Log) publish(segs []*segment, leo, logStart, recoveryPoint int64) {
	l.segs.Store(&segs)
	l.logStart.Store(logStart)
	l.recoveryPoint.Store(recoveryPoint)
	l.leo.Store(leo)
}

func (l *Log) segments() []*segment { return *l.segs.Load() }

// Dir returns the partition directory.
func (l *Log) Dir() string { return l.dir }

// Config returns the log's configuration (after defaults were applied).
func (l *Log) Config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// SetConfig replaces the configuration (topic-level overrides changed); it
// applies to the next append, roll and retention check.
func (l *Log) SetConfig(cfg Config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg = cfg.normalized()
}

// LogStartOffset is the first offset a consumer may read.
func (l *Log) LogStartOffset() int64 { return l.logStart.Load() }

// LogEndOffset (LEO) is the offset the next appended record gets.
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// RecoveryPoint is the offset below which the log is known to be fsynced.
func (l *Log) RecoveryPoint() int64 { return l.recoveryPoint.Load() }

// Epochs returns the leader epoch cache.
func (l *Log) Epochs() *EpochCache { return l.epochs }

// Size is the total bytes of all segment files.
func (l *Log) Size() int64 {
	var n int64
	for _, s := range l.segments() {
		n += s.size.Load()
	}
	return n
}

// NumSegments is the number of segments, the active one included.
func (l *Log) NumSegments() int { return len(l.segments()) }

// MaxTimestamp is the largest batch MaxTimestamp in the log, -1 if none.
func (l *Log) MaxTimestamp() int64 {
	ts := int64(-1)
	for _, s := range l.segments() {
		s.imu.RLock()
		ts = max(ts, s.maxTs)
		s.imu.RUnlock()
	}
	return ts
}

// LegacyOffsetsBefore answers ListOffsets v0 (Kafka's
// UnifiedLog.legacyFetchOffsetsBefore): each segment stands for its base
// offset (at least the log start) at its file's modification time, and a
// non-empty active segment adds the LEO at the clock's now. latest (-1)
// starts from the last of these, earliest (-2) from the first, any other
// ts from the last one modified at or before ts; up to maxNum offsets are
// returned, newest first.
func (l *Log) LegacyOffsetsBefore(ts int64, maxNum int) []int64 {
	type point struct{ offset, ms int64 }
	segs := l.segments()
	start := l.logStart.Load()
	var points []point
	for _, s := range segs {
		ms := int64(0)
		if fi, err := s.log.Stat(); err == nil {
			ms = fi.ModTime().UnixMilli()
		}
		points = append(points, point{max(s.base, start), ms})
	}
	if n := len(segs); n > 0 && segs[n-1].size.Load() > 0 {
		points = append(points, point{l.leo.Load(), l.clock().UnixMilli()})
	}
	i := len(points) - 1
	switch ts {
	case -1:
	case -2:
		i = min(0, i)
	default:
		for i >= 0 && points[i].ms > ts {
			i--
		}
	}
	out := []int64{}
	for ; i >= 0 && len(out) < maxNum; i-- {
		out = append(out, points[i].offset)
	}
	return out
}

// AppendAsLeader validates data (one or more v2 batches), stamps each batch
// with consecutive offsets from the LEO and with leaderEpoch, and appends it.
// data is modified in place (only the fields outside the CRC, plus
// MaxTimestamp, attributes and CRC with Config.LogAppendTime) and is not
// retained. A leaderEpoch newer than the cache's latest is recorded as
// starting at the first appended offset.
func (l *Log) AppendAsLeader(data []byte, leaderEpoch int32) (AppendResult, error) {
	l.mu.Lock()
	maxBytes := l.cfg.MaxMessageBytes
	l.mu.Unlock()
	// The CRC check is the expensive part: keep it outside the lock.
	batches, err := ParseBatches(data, maxBytes)
	if err != nil {
		return AppendResult{}, err
	}
	return l.AppendParsedAsLeader(data, batches, leaderEpoch)
}

// AppendParsedAsLeader is AppendAsLeader for a caller that already ran
// ParseBatches(data, maxBatchBytes) (to check producer sequences, say):
// batches must be exactly what it returned for data, and are not checked
// again. The slice is updated in place with the assigned offsets.
func (l *Log) AppendParsedAsLeader(data []byte, batches []BatchInfo, leaderEpoch int32) (AppendResult, error) {
	if len(batches) == 0 {
		return AppendResult{}, fmt.Errorf("no batches: %w", ErrCorruptMessage)
	}
	total := 0
	for _, b := range batches {
		total += b.Size
	}
	if total != len(data) {
		return AppendResult{}, fmt.Errorf("batches cover %d of %d bytes: %w", total, len(data), ErrCorruptMessage)
	}
	l.mu.Lock()
	appendTime := l.cfg.LogAppendTime
	l.mu.Unlock()
	logAppendTime := int64(-1)
	if appendTime {
		logAppendTime = l.clock().UnixMilli()
		pos := 0
		for i := range batches {
			stampLogAppendTime(data[pos:], batches[i].Size, logAppendTime)
			batches[i].MaxTimestamp = logAppendTime
			batches[i].Attributes |= 0x08
			pos += batches[i].Size
		}
	}
	l.mu.Lock()
	next := l.leo.Load()
	pos := 0
	for i := range batches {
		b := &batches[i]
		patchBatch(data[pos:], next, leaderEpoch)
		b.LastOffset = next + (b.LastOffset - b.BaseOffset)
		b.BaseOffset, b.LeaderEpoch = next, leaderEpoch
		next = b.LastOffset + 1
		pos += b.Size
	}
	res, flush, err := l.appendLocked(data, batches)
	l.mu.Unlock()
	res.LogAppendTime = logAppendTime
	if err == nil && flush {
		err = l.Flush()
	}
	return res, err
}

// AppendAsFollower appends batches fetched from the leader as they are,
// offsets and epochs included. The batches must continue the log exactly:
// the first starts at the LEO and each next one right after the previous
// one (the log has no compaction gaps), else ErrOffsetMismatch. Each epoch
// newer than the cache's latest is recorded at its first batch.
func (l *Log) AppendAsFollower(data []byte) (AppendResult, error) {
	batches, err := ParseBatches(data, 0)
	if err != nil {
		return AppendResult{}, err
	}
	l.mu.Lock()
	next := l.leo.Load()
	for i, b := range batches {
		if b.BaseOffset != next {
			l.mu.Unlock()
			return AppendResult{}, fmt.Errorf("batch %d at offset %d, expected %d: %w", i, b.BaseOffset, next, ErrOffsetMismatch)
		}
		next = b.NextOffset()
	}
	res, flush, err := l.appendLocked(data, batches)
	l.mu.Unlock()
	if err == nil && flush {
		err = l.Flush()
	}
	return res, err
}

// appendLocked writes validated, offset-assigned batches; l.mu is held. It
// reports whether the flush policy asks for a flush.
func (l *Log) appendLocked(data []byte, batches []BatchInfo) (AppendResult, bool, error) {
	if l.closed.Load() {
		return AppendResult{}, false, ErrClosed
	}
	if int64(len(data)) > l.cfg.SegmentBytes {
		return AppendResult{}, false, fmt.Errorf("%d bytes exceed segment size %d: %w", len(data), l.cfg.SegmentBytes, ErrRecordListTooLarge)
	}
	first, last := batches[0].BaseOffset, batches[len(batches)-1].LastOffset
	markers := map[int]Marker{}
	for i, pos := 0, 0; i < len(batches); i++ {
		if batches[i].Control() {
			// A control batch that is no transaction marker (another control
			// type) changes no producer state; refusing it would stop a
			// follower's replication for good.
			m, err := ParseMarker(data[pos : pos+batches[i].Size])
			if err != nil {
				l.logger.Warn("control batch without a transaction marker", "offset", batches[i].BaseOffset, "err", err)
			} else {
				markers[i] = m
			}
		}
		pos += batches[i].Size
	}
	now := l.clock()
	segs := l.segments()
	if len(segs) == 0 {
		return AppendResult{}, false, errors.New("no active segment: a full truncation failed, reopen the log")
	}
	active := segs[len(segs)-1]
	if l.shouldRoll(active, len(data), last, now) {
		var err error
		if active, err = l.roll(first); err != nil {
			return AppendResult{}, false, err
		}
	}
	pos := active.size.Load()
	if _, err := active.log.WriteAt(data, pos); err != nil {
		// Drop whatever part was written so the file ends on a batch boundary.
		if terr := active.log.Truncate(pos); terr != nil {
			l.logger.Error("cannot drop partial append", "segment", active.base, "err", terr)
		}
		return AppendResult{}, false, fmt.Errorf("append to segment %d: %w", active.base, err)
	}
	res := AppendResult{FirstOffset: first, LastOffset: last, MaxTimestamp: -1, OffsetOfMaxTs: first, LogAppendTime: -1, Batches: batches}
	active.imu.Lock()
	p := pos
	for _, b := range batches {
		active.track(b, p, l.cfg.IndexIntervalBytes)
		p += int64(b.Size)
		res.RecordCount += int64(b.RecordCount)
		if b.MaxTimestamp > res.MaxTimestamp {
			res.MaxTimestamp, res.OffsetOfMaxTs = b.MaxTimestamp, b.BaseOffset
		}
	}
	active.imu.Unlock()
	if active.created.IsZero() {
		active.created = now
	}
	for _, b := range batches {
		if b.LeaderEpoch > l.epochs.LatestEpoch() {
			if _, err := l.epochs.Assign(b.LeaderEpoch, b.BaseOffset); err != nil {
				l.logger.Error("persist leader epoch checkpoint", "err", err)
			}
		}
	}
	for i, b := range batches {
		var m *Marker
		if mk, ok := markers[i]; ok {
			m = &mk
		}
		c, ab := l.ps.apply(b, m)
		if c != nil {
			res.Completed = append(res.Completed, *c)
		}
		if ab != nil {
			if err := active.txn.append(*ab); err != nil {
				// The index is rebuilt from the log when the segment is
				// next recovered.
				l.logger.Error("append aborted transaction to index", "segment", active.base, "err", err)
			}
		}
	}
	active.size.Store(p)
	l.leo.Store(last + 1)
	res.LogStartOffset = l.logStart.Load()
	l.unflushed += res.RecordCount
	flush := l.unflushed >= l.cfg.FlushIntervalMessages || now.Sub(l.lastFlush).Milliseconds() >= l.cfg.FlushIntervalMs
	return res, flush, nil
}

// shouldRoll applies KAFKA-SPEC §8.3 to a non-empty active segment.
func (l *Log) shouldRoll(s *segment, n int, last int64, now time.Time) bool {
	if s.size.Load() == 0 {
		return false
	}
	return s.size.Load()+int64(n) > l.cfg.SegmentBytes ||
		!s.created.IsZero() && now.Sub(s.created).Milliseconds() >= l.cfg.SegmentMs ||
		s.indexFull() ||
		!s.canHold(last)
}

// roll seals the active segment and starts a new one at base; l.mu is held.
// The sealed segment is fsynced in the background, then the recovery point
// moves to base.
func (l *Log) roll(base int64) (*segment, error) {
	segs := l.segments()
	old := segs[len(segs)-1]
	// Create first: if that fails the old segment stays active and whole.
	s, err := createSegment(l.dir, base, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("roll: %w", err)
	}
	if err := old.seal(); err != nil {
		s.closeFiles()
		for _, suf := range segmentSuffixes {
			os.Remove(s.path(suf))
		}
		return nil, fmt.Errorf("roll: %w", err)
	}
	next := append(slices.Clip(segs), s)
	l.segs.Store(&next)
	l.logger.Debug("rolled segment", "segment", base)
	// The producer state at the new segment's base, so recovery replays
	// from here; fsynced with the rolled segment.
	snap, serr := writeSnapshot(l.dir, l.ps, false)
	if serr != nil {
		l.logger.Error("producer state snapshot on roll", "segment", base, "err", serr)
	}
	gen := l.truncGen
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := l.flushTo(base, gen); err != nil {
			l.logger.Error("flush rolled segment", "segment", old.base, "err", err)
		}
		if serr == nil {
			if err := syncFile(snapshotPath(l.dir, snap)); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Error("fsync producer state snapshot", "snapshot", snap, "err", err)
			}
		}
	}()
	return s, nil
}

// Flush fsyncs the log up to the LEO and advances the recovery point.
func (l *Log) Flush() error {
	l.mu.Lock()
	leo, gen := l.leo.Load(), l.truncGen
	l.mu.Unlock()
	return l.flushTo(leo, gen)
}

// flushTo fsyncs every segment holding offsets in [recovery point, upTo) and
// moves the recovery point to upTo, unless a truncation happened since upTo
// was taken (generation gen).
func (l *Log) flushTo(upTo int64, gen uint64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	rp := l.recoveryPoint.Load()
	if upTo <= rp || gen != l.truncGen {
		l.mu.Unlock()
		return nil
	}
	segs := l.segments()
	var todo []*segment
	for i, s := range segs {
		end := l.leo.Load()
		if i+1 < len(segs) {
			end = segs[i+1].base
		}
		if s.base < upTo && end > rp {
			todo = append(todo, s)
		}
	}
	if upTo >= l.leo.Load() {
		// Only a flush to the LEO resets the flush policy counters.
		l.unflushed = 0
		l.lastFlush = l.clock()
	}
	l.mu.Unlock()
	for _, s := range todo {
		if err := s.sync(); err != nil {
			return err
		}
	}
	l.mu.Lock()
	if gen == l.truncGen && upTo > l.recoveryPoint.Load() {
		l.recoveryPoint.Store(upTo)
	}
	l.mu.Unlock()
	return nil
}

// maybeFlush applies the time-based flush policy (log.flush.interval.ms).
func (l *Log) maybeFlush(now time.Time) error {
	l.mu.Lock()
	due := l.unflushed > 0 && now.Sub(l.lastFlush).Milliseconds() >= l.cfg.FlushIntervalMs
	l.mu.Unlock()
	if !due {
		return nil
	}
	return l.Flush()
}

// Read returns whole raw batches starting with the batch that holds offset:
// only batches whose last offset is below maxOffset (the high watermark for
// consumers, the LEO for followers), at most maxBytes of them, except that
// with minOneBatch the first batch is returned whole even when larger
// (KIP-74). An offset below the log start or above the LEO is
// ErrOffsetOutOfRange; an offset at the LEO or at or past maxOffset reads
// nothing. Reads come from one segment: a lookup in its sparse offset index,
// a short header scan, then a single pread.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64, minOneBatch bool) (ReadResult, error) {
	return l.ReadWith(nil, offset, maxBytes, maxOffset, minOneBatch)
}

// ReadWith is Read with the read buffer taken from alloc (nil: make), so a
// caller can recycle buffers once the records have been sent. The returned
// Records may be a sub-slice of a buffer alloc returned.
func (l *Log) ReadWith(alloc func(n int) []byte, offset int64, maxBytes int, maxOffset int64, minOneBatch bool) (ReadResult, error) {
	// Order matters: writers publish the log start before a shorter
	// segment list and the segment list before a longer LEO.
	leo := l.leo.Load()
	segs := l.segments()
	res := ReadResult{LogStartOffset: l.logStart.Load(), LogEndOffset: leo}
	if l.closed.Load() {
		return res, ErrClosed
	}
	if offset < res.LogStartOffset || offset > leo {
		return res, fmt.Errorf("offset %d outside [%d, %d]: %w", offset, res.LogStartOffset, leo, ErrOffsetOutOfRange)
	}
	maxOffset = min(maxOffset, leo)
	if offset >= maxOffset || maxBytes <= 0 && !minOneBatch {
		res.Records = []byte{}
		return res, nil
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
	for i = max(i, 0); i < len(segs); i++ {
		// A segment that ends below maxOffset needs no upper bound search.
		whole := i+1 < len(segs) && segs[i+1].base <= maxOffset
		data, found, err := segs[i].read(alloc, offset, maxBytes, maxOffset, minOneBatch, whole)
		if err != nil {
			switch {
			case l.closed.Load():
				return res, ErrClosed
			case errors.Is(err, os.ErrClosed):
				// Retention removed the segment under us (file.delete.delay.ms
				// is 0): the offset is below the log start now.
				return res, fmt.Errorf("offset %d: segment deleted: %w", offset, ErrOffsetOutOfRange)
			}
			return res, fmt.Errorf("read segment %d: %w", segs[i].base, err)
		}
		if found {
			res.Records = data
			return res, nil
		}
	}
	res.Records = []byte{}
	return res, nil
}

// read finds the batch holding offset in this segment and reads from it.
// found is false when the segment holds no batch at or after offset. One
// pread normally covers both the short scan from the index entry to the
// batch holding offset and the data returned.
func (s *segment) read(alloc func(int) []byte, offset int64, maxBytes int, maxOffset int64, minOneBatch, whole bool) ([]byte, bool, error) {
	size := s.size.Load()
	pos, err := s.lookup(offset)
	if err != nil {
		return nil, false, err
	}
	// Bytes past the first indexed batch at or after maxOffset are never
	// returned.
	limit := size
	if !whole {
		if limit, err = s.upperBound(maxOffset, size); err != nil {
			return nil, false, err
		}
	}
	want := min(int64(s.interval)+int64(max(maxBytes, 0)), limit-pos)
	if want < BatchHeaderSize {
		return s.readFrom(pos, size, limit, offset, maxBytes, maxOffset, minOneBatch)
	}
	var buf []byte
	if alloc != nil {
		buf = alloc(int(want))
	} else {
		buf = make([]byte, want)
	}
	got, err := s.log.ReadAt(buf, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("read at %d: %w", pos, err)
	}
	buf = buf[:got]
	start := 0
	var first BatchInfo
	for {
		if start+BatchHeaderSize > len(buf) {
			return s.readFrom(pos+int64(start), size, limit, offset, maxBytes, maxOffset, minOneBatch)
		}
		b, perr := parseBatch(buf[start:], 0, false)
		if perr != nil {
			if pos+int64(start) > 0 {
				// The index pointed at no batch: do not trust it.
				return s.readFrom(0, size, limit, offset, maxBytes, maxOffset, minOneBatch)
			}
			return nil, false, nil
		}
		if b.LastOffset >= offset {
			first = b
			break
		}
		start += b.Size
	}
	if first.LastOffset >= maxOffset || first.Size > maxBytes && !minOneBatch {
		return []byte{}, true, nil
	}
	if start+first.Size > len(buf) {
		return s.readFrom(pos+int64(start), size, limit, offset, maxBytes, maxOffset, minOneBatch)
	}
	return buf[start:wholeBatches(buf, start, maxBytes, maxOffset)], true, nil
}

// wholeBatches returns the end of the run of whole batches in buf from start
// (its first batch always included) that stay below maxOffset and within
// maxBytes.
func wholeBatches(buf []byte, start, maxBytes int, maxOffset int64) int {
	end := start
	for end+BatchHeaderSize <= len(buf) {
		b, err := parseBatch(buf[end:], 0, false)
		if err != nil || end+b.Size > len(buf) || b.LastOffset >= maxOffset || end > start && end+b.Size-start > maxBytes {
			break
		}
		end += b.Size
	}
	return end
}

// readFrom is read's slow path: it scans batch headers from pos with small
// preads, then reads the data.
func (s *segment) readFrom(pos, size, limit, offset int64, maxBytes int, maxOffset int64, minOneBatch bool) ([]byte, bool, error) {
	var first BatchInfo
	for {
		b, ok, err := s.readHeader(pos, size)
		if err != nil {
			return nil, false, err
		}
		if !ok && pos < size && pos > 0 {
			// The index pointed at no batch: do not trust it, scan from the start.
			pos = 0
			continue
		}
		if !ok {
			return nil, false, nil
		}
		if b.LastOffset >= offset {
			first = b
			break
		}
		pos += int64(b.Size)
	}
	if first.LastOffset >= maxOffset || first.Size > maxBytes && !minOneBatch {
		return []byte{}, true, nil
	}
	n := min(int64(max(maxBytes, first.Size)), max(limit, pos+int64(first.Size))-pos)
	buf := make([]byte, n)
	got, err := s.log.ReadAt(buf, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("read at %d: %w", pos, err)
	}
	buf = buf[:got]
	return buf[:wholeBatches(buf, 0, maxBytes, maxOffset)], true, nil
}

// Batches calls fn with the header facts of every batch from the one holding
// offset to the LEO, in order, until fn returns false. Only headers are read
// (one small pread per batch), so rebuilding state such as the producers'
// last sequences after a restart costs little. Like Read, it must not run
// concurrently with TruncateTo.
func (l *Log) Batches(offset int64, fn func(BatchInfo) bool) error {
	return l.batches(offset, func(_ *segment, _ int64, b BatchInfo) (bool, error) { return fn(b), nil })
}

// batches is Batches with each batch's segment and position.
func (l *Log) batches(offset int64, fn func(s *segment, pos int64, b BatchInfo) (bool, error)) error {
	leo := l.leo.Load()
	segs := l.segments()
	if l.closed.Load() {
		return ErrClosed
	}
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > offset })-1, 0)
	for ; i < len(segs); i++ {
		s := segs[i]
		size := s.size.Load()
		pos, err := s.lookup(offset)
		if err != nil {
			return fmt.Errorf("batches of segment %d: %w", s.base, err)
		}
		for {
			b, ok, err := s.readHeader(pos, size)
			if err != nil {
				return fmt.Errorf("batches of segment %d: %w", s.base, err)
			}
			if !ok || b.BaseOffset >= leo {
				break
			}
			at := pos
			pos += int64(b.Size)
			if b.LastOffset < offset {
				continue
			}
			if more, err := fn(s, at, b); err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// OffsetForTimestamp answers ListOffsets by timestamp: the first record at
// or after the log start whose timestamp is >= ts, and that timestamp. The
// segments' largest timestamps and time indexes find the first batch whose
// MaxTimestamp is >= ts; in an uncompressed CreateTime batch the records are
// walked for the exact one, otherwise (compressed, LogAppendTime) the answer
// is the batch's base offset and MaxTimestamp, since the log never
// decompresses. found is false when every record is older. Bounding the
// answer by the high watermark is the caller's business.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, timestamp int64, found bool) {
	leo := l.leo.Load()
	segs := l.segments()
	start := l.logStart.Load()
	for _, s := range segs {
		s.imu.RLock()
		maxTs := s.maxTs
		s.imu.RUnlock()
		if maxTs < ts {
			continue
		}
		pos, err := s.timeLookup(ts)
		if err != nil {
			l.logger.Warn("time index lookup", "segment", s.base, "err", err)
			pos = 0
		}
		size := s.size.Load()
		for {
			b, ok, err := s.readHeader(pos, size)
			if err != nil || !ok || b.BaseOffset >= leo {
				break
			}
			if b.MaxTimestamp >= ts && b.LastOffset >= start {
				if off, rts, ok := s.recordForTimestamp(b, pos, ts, start); ok {
					return off, rts, true
				}
				return max(b.BaseOffset, start), b.MaxTimestamp, true
			}
			pos += int64(b.Size)
		}
	}
	return 0, 0, false
}

// TruncateTo removes every batch at or after offset (follower truncation),
// with the index entries and epoch cache entries for them. A batch holding
// offset is removed whole, so the LEO may end up below offset. Truncating
// below the log start offset empties the log and restarts it at offset.
func (l *Log) TruncateTo(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if offset < 0 {
		return fmt.Errorf("truncate to %d: %w", offset, ErrOffsetOutOfRange)
	}
	if offset >= l.leo.Load() {
		return nil
	}
	segs := l.segments()
	if offset < l.logStart.Load() || len(segs) == 0 {
		return l.truncateFullyLocked(offset)
	}
	l.truncGen++
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > offset })-1, 0)
	keep, drop := slices.Clip(segs[:i+1]), segs[i+1:]
	// Publish the shorter list and LEO first so readers stop looking past it.
	s := keep[i]
	l.leo.Store(min(l.leo.Load(), offset))
	l.segs.Store(&keep)
	if s.sealed {
		if _, err := s.activate(l.cfg); err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
	}
	end, err := s.truncateAt(offset)
	if err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	s.created = time.Time{}
	if s.size.Load() > 0 {
		s.created = l.clock()
	}
	if l.logStart.Load() > end {
		// The batch holding the log start went: as in Kafka, the log start
		// follows the truncation point down.
		l.logStart.Store(end)
	}
	l.leo.Store(end)
	if l.recoveryPoint.Load() > end {
		l.recoveryPoint.Store(end)
	}
	l.scheduleDelete(drop)
	if err := l.epochs.TruncateFromEnd(end); err != nil {
		return fmt.Errorf("truncate epoch cache: %w", err)
	}
	if err := s.txn.truncateFrom(end); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	// The producer state as of end: the latest snapshot at or below it
	// and the batches after.
	ps, err := l.latestSnapshot(end)
	if err != nil {
		return fmt.Errorf("truncate producer state: %w", err)
	}
	if err := l.replay(ps, ps.mapEnd); err != nil {
		return fmt.Errorf("truncate producer state: %w", err)
	}
	l.ps.reset(ps)
	l.logger.Info("truncated log", "offset", offset, "log_end_offset", end)
	return nil
}

// TruncateFullyAndStartAt deletes every segment and restarts the empty log
// at offset, which becomes the log start offset and LEO; the epoch cache is
// cleared.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if offset < 0 {
		return fmt.Errorf("truncate to %d: %w", offset, ErrOffsetOutOfRange)
	}
	return l.truncateFullyLocked(offset)
}

func (l *Log) truncateFullyLocked(offset int64) error {
	l.truncGen++
	old := l.segments()
	empty := []*segment{}
	l.segs.Store(&empty) // readers find nothing while files move
	l.leo.Store(offset)
	l.logStart.Store(offset)
	l.scheduleDelete(old)
	s, err := createSegment(l.dir, offset, l.cfg)
	if err != nil {
		// No segment to append to: appends fail until the log is reopened.
		return fmt.Errorf("truncate fully: %w", err)
	}
	l.publish([]*segment{s}, offset, offset, offset)
	l.ps.reset(newProducerState(offset))
	if err := removeSnapshots(l.dir, func(int64) bool { return true }); err != nil {
		return fmt.Errorf("truncate fully: %w", err)
	}
	if err := l.epochs.clear(); err != nil {
		return fmt.Errorf("truncate fully: %w", err)
	}
	l.logger.Info("truncated log fully", "offset", offset)
	return nil
}

// IncrementLogStartOffset moves the log start offset forward (DeleteRecords,
// or a follower following its leader's log start). Segments wholly below it
// are deleted by the next DeleteOldSegments. An offset above the LEO is
// ErrOffsetOutOfRange; one at or below the current start is a no-op.
func (l *Log) IncrementLogStartOffset(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset > l.leo.Load() {
		return fmt.Errorf("log start %d above log end %d: %w", offset, l.leo.Load(), ErrOffsetOutOfRange)
	}
	if offset <= l.logStart.Load() {
		return nil
	}
	l.logStart.Store(offset)
	return l.epochs.TruncateFromStart(offset)
}

// DeleteOldSegments applies retention (KAFKA-SPEC §8.4) at time now: from the
// oldest segment on, it deletes segments that end at or below highWatermark
// and are wholly before the log start offset, or whose largest timestamp is
// older than retention.ms, or whose removal keeps the log at least
// retention.bytes big. The active segment is never deleted. Deleted segments
// are renamed to .deleted and removed file.delete.delay.ms later (by a later
// call, the Manager's tick or Close).
func (l *Log) DeleteOldSegments(now time.Time, highWatermark int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return 0, ErrClosed
	}
	segs := l.segments()
	total := int64(0)
	for _, s := range segs {
		total += s.size.Load()
	}
	nowMs := now.UnixMilli()
	n := 0
	for ; n < len(segs)-1; n++ {
		s, end := segs[n], segs[n+1].base
		if end > highWatermark {
			break
		}
		size := s.size.Load()
		expired := end <= l.logStart.Load() ||
			l.cfg.RetentionMs >= 0 && nowMs-s.largestTimestamp() > l.cfg.RetentionMs ||
			l.cfg.RetentionBytes >= 0 && total-size >= l.cfg.RetentionBytes
		if !expired {
			break
		}
		total -= size
	}
	if n > 0 {
		keep := slices.Clip(segs[n:])
		// Log start first: a reader that sees the shorter list (loaded
		// after it) also sees the new start and answers OFFSET_OUT_OF_RANGE.
		start := keep[0].base
		if start > l.logStart.Load() {
			l.logStart.Store(start)
		}
		l.segs.Store(&keep)
		l.scheduleDelete(segs[:n])
		if err := l.epochs.TruncateFromStart(l.logStart.Load()); err != nil {
			return n, err
		}
		if err := l.pruneSnapshots(start); err != nil {
			return n, err
		}
		l.logger.Info("deleted old segments", "count", n, "log_start_offset", l.logStart.Load())
	}
	return n, l.removeExpiredLocked(now, false)
}

// scheduleDelete renames the segments' files to .deleted; they are removed
// after file.delete.delay.ms so in-flight readers finish. l.mu is held.
func (l *Log) scheduleDelete(segs []*segment) {
	if len(segs) == 0 {
		return
	}
	for _, s := range segs {
		for _, suf := range segmentSuffixes {
			if err := os.Rename(s.path(suf), s.path(suf)+DeletedFileSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Warn("rename deleted segment", "segment", s.base, "err", err)
			}
		}
	}
	l.pending = append(l.pending, pendingDelete{segs: segs, due: l.clock().Add(time.Duration(l.cfg.FileDeleteDelayMs) * time.Millisecond)})
}

// removeExpiredLocked closes and removes the files of deleted segments whose
// delay has passed (all of them with force). l.mu is held.
func (l *Log) removeExpiredLocked(now time.Time, force bool) error {
	var errs []error
	kept := l.pending[:0]
	for _, p := range l.pending {
		if !force && now.Before(p.due) {
			kept = append(kept, p)
			continue
		}
		for _, s := range p.segs {
			s.closeFiles()
			for _, suf := range segmentSuffixes {
				if err := os.Remove(s.path(suf) + DeletedFileSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("remove deleted segment: %w", err))
				}
			}
		}
	}
	l.pending = kept
	return errors.Join(errs...)
}

// RemoveDeletedFiles removes the files of deleted segments whose
// file.delete.delay.ms has passed at now.
func (l *Log) RemoveDeletedFiles(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.removeExpiredLocked(now, false)
}

// Close flushes the log, writes and trims the active segment's indexes,
// removes pending deleted files and closes everything. It is idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	l.wg.Wait()
	var errs []error
	l.flushMu.Lock()
	l.mu.Lock()
	segs := l.segments()
	if len(segs) > 0 {
		if err := segs[len(segs)-1].seal(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, s := range segs {
		if i+1 == len(segs) || segs[i+1].base > l.recoveryPoint.Load() {
			if err := s.sync(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 {
		l.recoveryPoint.Store(l.leo.Load())
	}
	// A clean shutdown's snapshot at the LEO: the next Open replays nothing.
	if l.ps.MapEndOffset() == l.leo.Load() {
		if _, err := writeSnapshot(l.dir, l.ps, true); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range segs {
		s.closeFiles()
	}
	errs = append(errs, l.removeExpiredLocked(l.clock(), true))
	l.mu.Unlock()
	l.flushMu.Unlock()
	return errors.Join(errs...)
}

// Abandon closes l's files the way a crash (SIGKILL) would: nothing
// flushed, sealed, trimmed or snapshotted. For crash tests.
func Abandon(l *Log) { l.abandon() }

// abandon closes the files the way a crash would: nothing flushed, sealed
// or trimmed. For tests.
func (l *Log) abandon() {
	l.closed.Store(true)
	l.wg.Wait()
	for _, s := range l.segments() {
		s.closeFiles()
	}
}

// Delete closes the log without flushing and removes its directory.
func (l *Log) Delete() error {
	l.mu.Lock()
	l.closed.Store(true)
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	for _, s := range l.segments() {
		s.closeFiles()
	}
	_ = l.removeExpiredLocked(l.clock(), true)
	l.mu.Unlock()
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("delete log: %w", err)
	}
	return nil
}

// pruneSnapshots removes the snapshots older than the newest one at or
// below base (the first segment's), which stays for the next recovery.
func (l *Log) pruneSnapshots(base int64) error {
	offs, err := listSnapshots(l.dir)
	if err != nil {
		return err
	}
	keep := int64(-1)
	for _, off := range offs {
		if off <= base {
			keep = off
		}
	}
	return removeSnapshots(l.dir, func(off int64) bool { return off < keep })
}

// Producers is the partition's producer and transaction state.
func (l *Log) Producers() *ProducerState { return l.ps }

// LastStableOffset is the LSO for high watermark hw (see
// ProducerState.LastStableOffset).
func (l *Log) LastStableOffset(hw int64) int64 { return l.ps.LastStableOffset(hw) }

// AbortedTxns lists the aborted transactions that overlap [from, upTo),
// oldest marker first, from the segments' transaction indexes: what a
// read_committed fetch of that range returns so the consumer drops their
// records.
func (l *Log) AbortedTxns(from, upTo int64) []AbortedTxn {
	segs := l.segments()
	out := []AbortedTxn{}
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > from })-1, 0)
	for ; i < len(segs); i++ {
		var done bool
		if out, done = segs[i].txn.collect(from, upTo, out); done {
			break
		}
	}
	return out
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
