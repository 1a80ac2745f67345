package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// File name suffixes of a segment (KAFKA-SPEC §8.1).
const (
	LogFileSuffix       = ".log"
	IndexFileSuffix     = ".index"
	TimeIndexFileSuffix = ".timeindex"
	DeletedFileSuffix   = ".deleted"

	indexEntrySize = 8  // int32 relative offset, int32 position
	timeEntrySize  = 12 // int64 timestamp, int32 relative offset
)

// segmentSuffixes are the files of one segment.
var segmentSuffixes = []string{LogFileSuffix, IndexFileSuffix, TimeIndexFileSuffix, TxnIndexFileSuffix}

// segmentName is the 20-digit zero-padded base offset.
func segmentName(base int64) string { return fmt.Sprintf("%020d", base) }

type indexEntry struct {
	rel int32 // offset - segment base of the batch starting at pos
	pos int32
}

type timeEntry struct {
	ts  int64 // largest timestamp seen up to and including batch rel
	rel int32 // relative base offset of the batch holding ts
}

// segment is one .log file with its offset and time indexes.
//
// Writers (the Log holding its mutex) append to the file, then publish the
// new size with an atomic store; readers only read bytes below a size they
// loaded, so they never see a partial batch. Index state is guarded by imu:
// the active segment keeps its entries in memory (written to the index files
// on roll, flush and close); a sealed segment's entries are read from its
// trimmed index file with pread, so the log holds no data in memory.
type segment struct {
	base int64
	dir  string
	log  *os.File
	size atomic.Int64 // bytes of whole batches in log

	imu       sync.RWMutex
	idxFile   *os.File
	timeFile  *os.File
	sealed    bool         // entries live only in the files
	idx       []indexEntry // active: every entry
	tidx      []timeEntry
	idxCount  int // entries (sealed: in the file)
	tidxCount int
	idxDisk   int // active: entries already written to the file
	tidxDisk  int
	maxTs     int64 // largest batch MaxTimestamp, -1 if none
	maxTsOff  int64 // base offset of the batch holding maxTs
	lastTs    int64 // timestamp of the last time index entry, -1 if none

	// txn is the aborted-transaction index, entries in memory.
	txn *txnIndex

	// Writer-only state, guarded by the Log's mutex.
	next            int64     // offset after the last batch (base if empty)
	bytesSinceIndex int       // bytes appended since the last index entry
	created         time.Time // clock at first append, for segment.ms
	maxIdx, maxTidx int       // capacity from segment.index.bytes
	interval        int       // index.interval.bytes when created: how far reads look ahead
}

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentName(s.base)+suffix)
}

// createSegment makes a new, empty segment with preallocated indexes.
func createSegment(dir string, base int64, cfg Config) (*segment, error) {
	s := newSegment(dir, base, cfg)
	var err error
	if s.log, err = os.OpenFile(s.path(LogFileSuffix), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644); err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	if err := s.openIndexes(true); err != nil {
		s.closeFiles()
		return nil, err
	}
	if s.txn, err = openTxnIndex(s.path(TxnIndexFileSuffix), true); err != nil {
		s.closeFiles()
		return nil, err
	}
	if err := s.preallocate(); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

func newSegment(dir string, base int64, cfg Config) *segment {
	return &segment{
		base: base, dir: dir, next: base,
		maxTs: -1, maxTsOff: base, lastTs: -1,
		maxIdx:   cfg.SegmentIndexBytes / indexEntrySize,
		maxTidx:  cfg.SegmentIndexBytes / timeEntrySize,
		interval: cfg.IndexIntervalBytes,
	}
}

func (s *segment) openIndexes(truncate bool) error {
	flags := os.O_CREATE | os.O_RDWR
	if truncate {
		flags |= os.O_TRUNC
	}
	var err error
	if s.idxFile, err = os.OpenFile(s.path(IndexFileSuffix), flags, 0o644); err != nil {
		return fmt.Errorf("open offset index: %w", err)
	}
	if s.timeFile, err = os.OpenFile(s.path(TimeIndexFileSuffix), flags, 0o644); err != nil {
		return fmt.Errorf("open time index: %w", err)
	}
	return nil
}

// preallocate grows the index files to segment.index.bytes (sparse), as Kafka
// does; they are trimmed when the segment is sealed.
func (s *segment) preallocate() error {
	if err := s.idxFile.Truncate(int64(s.maxIdx * indexEntrySize)); err != nil {
		return fmt.Errorf("preallocate offset index: %w", err)
	}
	if err := s.timeFile.Truncate(int64(s.maxTidx * timeEntrySize)); err != nil {
		return fmt.Errorf("preallocate time index: %w", err)
	}
	return nil
}

func (s *segment) closeFiles() {
	for _, f := range []*os.File{s.log, s.idxFile, s.timeFile} {
		if f != nil {
			f.Close()
		}
	}
	if s.txn != nil {
		s.txn.close()
	}
}

func (s *segment) rel(offset int64) int32 { return int32(offset - s.base) }

// canHold reports whether offsets up to last fit the int32 relative offsets.
func (s *segment) canHold(last int64) bool { return last-s.base <= math.MaxInt32 && last >= s.base }

// indexFull reports whether either index has no room left (one time index
// slot stays free for the final entry written when the segment is sealed).
func (s *segment) indexFull() bool {
	s.imu.RLock()
	defer s.imu.RUnlock()
	return len(s.idx) >= s.maxIdx || len(s.tidx) >= s.maxTidx-1
}

// track updates index state for a batch written at pos. Caller holds imu.
func (s *segment) track(b BatchInfo, pos int64, interval int) {
	if b.MaxTimestamp > s.maxTs {
		s.maxTs, s.maxTsOff = b.MaxTimestamp, b.BaseOffset
	}
	if s.bytesSinceIndex > interval && len(s.idx) < s.maxIdx {
		s.idx = append(s.idx, indexEntry{s.rel(b.BaseOffset), int32(pos)})
		if s.maxTs > s.lastTs && len(s.tidx) < s.maxTidx-1 {
			s.tidx = append(s.tidx, timeEntry{s.maxTs, s.rel(s.maxTsOff)})
			s.lastTs = s.maxTs
		}
		s.idxCount, s.tidxCount = len(s.idx), len(s.tidx)
		s.bytesSinceIndex = 0
	}
	s.bytesSinceIndex += b.Size
	s.next = b.NextOffset()
}

// writeIndexes writes the in-memory entries not yet in the files. Caller
// holds imu.
func (s *segment) writeIndexes() error {
	if s.sealed {
		return nil
	}
	if n := len(s.idx) - s.idxDisk; n > 0 {
		buf := make([]byte, 0, n*indexEntrySize)
		for _, e := range s.idx[s.idxDisk:] {
			buf = binary.BigEndian.AppendUint32(buf, uint32(e.rel))
			buf = binary.BigEndian.AppendUint32(buf, uint32(e.pos))
		}
		if _, err := s.idxFile.WriteAt(buf, int64(s.idxDisk*indexEntrySize)); err != nil {
			return fmt.Errorf("write offset index: %w", err)
		}
		s.idxDisk = len(s.idx)
	}
	if n := len(s.tidx) - s.tidxDisk; n > 0 {
		buf := make([]byte, 0, n*timeEntrySize)
		for _, e := range s.tidx[s.tidxDisk:] {
			buf = binary.BigEndian.AppendUint64(buf, uint64(e.ts))
			buf = binary.BigEndian.AppendUint32(buf, uint32(e.rel))
		}
		if _, err := s.timeFile.WriteAt(buf, int64(s.tidxDisk*timeEntrySize)); err != nil {
			return fmt.Errorf("write time index: %w", err)
		}
		s.tidxDisk = len(s.tidx)
	}
	return nil
}

// seal makes the segment read-only: a final time index entry for the largest
// timestamp, entries written, index files trimmed, memory released.
func (s *segment) seal() error {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.sealed {
		return nil
	}
	if s.maxTs > s.lastTs {
		s.tidx = append(s.tidx, timeEntry{s.maxTs, s.rel(s.maxTsOff)})
		s.lastTs = s.maxTs
		s.tidxCount = len(s.tidx)
	}
	if err := s.writeIndexes(); err != nil {
		return err
	}
	if err := s.idxFile.Truncate(int64(len(s.idx) * indexEntrySize)); err != nil {
		return fmt.Errorf("trim offset index: %w", err)
	}
	if err := s.timeFile.Truncate(int64(len(s.tidx) * timeEntrySize)); err != nil {
		return fmt.Errorf("trim time index: %w", err)
	}
	s.idx, s.tidx = nil, nil
	s.idxDisk, s.tidxDisk = 0, 0
	s.sealed = true
	return nil
}

// sync fsyncs the log and index files.
func (s *segment) sync() error {
	for _, f := range []*os.File{s.log, s.idxFile, s.timeFile} {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
	}
	if s.txn != nil {
		return s.txn.sync()
	}
	return nil
}

func (s *segment) indexAt(i int) (indexEntry, error) {
	if !s.sealed {
		return s.idx[i], nil
	}
	var b [indexEntrySize]byte
	if _, err := s.idxFile.ReadAt(b[:], int64(i*indexEntrySize)); err != nil {
		return indexEntry{}, fmt.Errorf("read offset index: %w", err)
	}
	return indexEntry{int32(binary.BigEndian.Uint32(b[:])), int32(binary.BigEndian.Uint32(b[4:]))}, nil
}

func (s *segment) timeAt(i int) (timeEntry, error) {
	if !s.sealed {
		return s.tidx[i], nil
	}
	var b [timeEntrySize]byte
	if _, err := s.timeFile.ReadAt(b[:], int64(i*timeEntrySize)); err != nil {
		return timeEntry{}, fmt.Errorf("read time index: %w", err)
	}
	return timeEntry{int64(binary.BigEndian.Uint64(b[:])), int32(binary.BigEndian.Uint32(b[8:]))}, nil
}

// lookup returns the file position of the last indexed batch whose base
// offset is <= offset (0 when there is none): a binary search over the
// sparse offset index.
func (s *segment) lookup(offset int64) (int64, error) {
	s.imu.RLock()
	defer s.imu.RUnlock()
	return s.lookupLocked(offset)
}

func (s *segment) lookupLocked(offset int64) (int64, error) {
	target := offset - s.base
	var err error
	i := sort.Search(s.idxCount, func(i int) bool {
		e, ierr := s.indexAt(i)
		if ierr != nil {
			err = ierr
			return true
		}
		return int64(e.rel) > target
	})
	if err != nil || i == 0 {
		return 0, err
	}
	e, err := s.indexAt(i - 1)
	return int64(e.pos), err
}

// upperBound returns a file position no batch ending below offset extends
// past: the start of the first indexed batch whose base offset is >= offset,
// or size when there is none.
func (s *segment) upperBound(offset int64, size int64) (int64, error) {
	s.imu.RLock()
	defer s.imu.RUnlock()
	target := offset - s.base
	var err error
	i := sort.Search(s.idxCount, func(i int) bool {
		e, ierr := s.indexAt(i)
		if ierr != nil {
			err = ierr
			return true
		}
		return int64(e.rel) >= target
	})
	if err != nil || i == s.idxCount {
		return size, err
	}
	e, err := s.indexAt(i)
	if err != nil {
		return size, err
	}
	return min(int64(e.pos), size), nil
}

// timeLookup returns a file position from which scanning finds the first
// batch with MaxTimestamp >= ts: the batch of the last time index entry with
// a smaller timestamp (every earlier batch is smaller too).
func (s *segment) timeLookup(ts int64) (int64, error) {
	s.imu.RLock()
	defer s.imu.RUnlock()
	var err error
	i := sort.Search(s.tidxCount, func(i int) bool {
		e, terr := s.timeAt(i)
		if terr != nil {
			err = terr
			return true
		}
		return e.ts >= ts
	})
	if err != nil || i == 0 {
		return 0, err
	}
	e, err := s.timeAt(i - 1)
	if err != nil {
		return 0, err
	}
	return s.lookupLocked(s.base + int64(e.rel))
}

// largestTimestamp is the segment's largest batch timestamp, or the log
// file's modification time when no batch carries a timestamp (as in Kafka).
func (s *segment) largestTimestamp() int64 {
	s.imu.RLock()
	ts := s.maxTs
	s.imu.RUnlock()
	if ts >= 0 {
		return ts
	}
	if fi, err := s.log.Stat(); err == nil {
		return fi.ModTime().UnixMilli()
	}
	return -1
}

// readHeader reads the batch header at pos, bounded by size. ok is false at
// the end of the data or at a torn header.
func (s *segment) readHeader(pos, size int64) (BatchInfo, bool, error) {
	if pos+BatchHeaderSize > size {
		return BatchInfo{}, false, nil
	}
	var h [BatchHeaderSize]byte
	if _, err := s.log.ReadAt(h[:], pos); err != nil {
		if errors.Is(err, io.EOF) {
			return BatchInfo{}, false, nil
		}
		return BatchInfo{}, false, fmt.Errorf("read batch header at %d: %w", pos, err)
	}
	b, err := parseBatch(h[:], 0, false)
	if err != nil || pos+int64(b.Size) > size {
		return BatchInfo{}, false, nil
	}
	return b, true, nil
}

// scanner walks the batches of a segment's log file sequentially through a
// read window, validating CRCs when asked.
type scanner struct {
	f        *os.File
	pos, end int64
	validate bool
	win      []byte
	winPos   int64
	winLen   int
}

const scanWindow = 1 << 20

// next returns the batch at the scan position. ok is false at the end of the
// file or at the first invalid or torn batch; pos is then the end of the
// valid bytes.
func (sc *scanner) next() (b BatchInfo, ok bool, err error) {
	h, err := sc.bytes(sc.pos, BatchHeaderSize)
	if err != nil || h == nil {
		return BatchInfo{}, false, err
	}
	b, perr := parseBatch(h, 0, false)
	if perr != nil || sc.pos+int64(b.Size) > sc.end {
		return BatchInfo{}, false, nil
	}
	if sc.validate {
		whole, err := sc.bytes(sc.pos, b.Size)
		if err != nil || whole == nil {
			return BatchInfo{}, false, err
		}
		if _, perr := parseBatch(whole, 0, true); perr != nil {
			return BatchInfo{}, false, nil
		}
	}
	sc.pos += int64(b.Size)
	return b, true, nil
}

// bytes returns n bytes at file position pos, refilling the window; nil when
// the file ends first.
func (sc *scanner) bytes(pos int64, n int) ([]byte, error) {
	if pos+int64(n) > sc.end {
		return nil, nil
	}
	if pos >= sc.winPos && pos+int64(n) <= sc.winPos+int64(sc.winLen) {
		off := int(pos - sc.winPos)
		return sc.win[off : off+n], nil
	}
	want := max(n, scanWindow)
	if rest := sc.end - pos; int64(want) > rest {
		want = int(rest)
	}
	if cap(sc.win) < want {
		sc.win = make([]byte, want)
	}
	sc.win = sc.win[:want]
	got, err := sc.f.ReadAt(sc.win, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read segment at %d: %w", pos, err)
	}
	sc.winPos, sc.winLen = pos, got
	if got < n {
		return nil, nil
	}
	return sc.win[:n], nil
}

// rebuild rescans the log file from the start, recreating the indexes in
// memory (the segment becomes active-style) and rewriting the index files.
// With validate, batches are CRC-checked and must continue each other's
// offsets from the segment's base; the file is truncated at the first bad
// batch.
// onBatch sees every valid batch. It returns the bytes scanned and whether
// the file was truncated.
func (s *segment) rebuild(cfg Config, validate bool, onBatch func(BatchInfo)) (scanned int64, truncated bool, err error) {
	fi, err := s.log.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("stat segment: %w", err)
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	s.idx, s.tidx = s.idx[:0], s.tidx[:0]
	s.idxDisk, s.tidxDisk, s.idxCount, s.tidxCount = 0, 0, 0, 0
	s.sealed = false
	s.maxTs, s.maxTsOff, s.lastTs = -1, s.base, -1
	s.next, s.bytesSinceIndex = s.base, 0
	sc := &scanner{f: s.log, end: fi.Size(), validate: validate}
	for {
		pos := sc.pos
		b, ok, err := sc.next()
		if err != nil {
			return sc.pos, false, err
		}
		// Batches are contiguous (there is no compaction), and baseOffset
		// lies outside the CRC: a gap or overlap is corruption too.
		if ok && validate && (b.BaseOffset != s.next || !s.canHold(b.LastOffset)) {
			ok, sc.pos = false, pos
		}
		if !ok {
			break
		}
		s.track(b, pos, cfg.IndexIntervalBytes)
		if onBatch != nil {
			onBatch(b)
		}
	}
	if sc.pos < fi.Size() {
		if err := s.log.Truncate(sc.pos); err != nil {
			return sc.pos, false, fmt.Errorf("truncate segment: %w", err)
		}
		truncated = true
	}
	s.size.Store(sc.pos)
	if err := s.idxFile.Truncate(0); err != nil {
		return sc.pos, truncated, fmt.Errorf("reset offset index: %w", err)
	}
	if err := s.timeFile.Truncate(0); err != nil {
		return sc.pos, truncated, fmt.Errorf("reset time index: %w", err)
	}
	if err := s.preallocate(); err != nil {
		return sc.pos, truncated, err
	}
	return sc.pos, truncated, s.writeIndexes()
}

// loadSealed opens a segment written by an earlier run as a sealed segment,
// trusting its trimmed indexes after a sanity check. It reports false when
// the indexes look wrong (missing, untrimmed, or pointing past the data) so
// the caller rebuilds them.
func (s *segment) loadSealed(size int64) (bool, error) {
	s.size.Store(size)
	ifi, err := s.idxFile.Stat()
	if err != nil {
		return false, fmt.Errorf("stat offset index: %w", err)
	}
	tfi, err := s.timeFile.Stat()
	if err != nil {
		return false, fmt.Errorf("stat time index: %w", err)
	}
	if ifi.Size()%indexEntrySize != 0 || tfi.Size()%timeEntrySize != 0 {
		return false, nil
	}
	s.sealed = true
	s.idxCount = int(ifi.Size() / indexEntrySize)
	s.tidxCount = int(tfi.Size() / timeEntrySize)
	if s.idxCount > s.maxIdx || s.tidxCount > s.maxTidx {
		return false, nil
	}
	if s.idxCount > 0 {
		e, err := s.indexAt(s.idxCount - 1)
		if err != nil {
			return false, err
		}
		if e.rel < 0 || e.pos < 0 || int64(e.pos) >= size || s.idxCount > 1 && e.rel == 0 {
			return false, nil
		}
	}
	if s.tidxCount == 0 {
		// Every sealed segment with data gets a final time index entry.
		return size == 0, nil
	}
	e, err := s.timeAt(s.tidxCount - 1)
	if err != nil {
		return false, err
	}
	if e.rel < 0 || s.tidxCount > 1 && e.rel == 0 && e.ts == 0 {
		return false, nil
	}
	s.maxTs, s.maxTsOff, s.lastTs = e.ts, s.base+int64(e.rel), e.ts
	return true, nil
}

// activate turns a sealed segment back into the appendable one: its index
// entries are loaded into memory, the files re-extended, and the position
// after the last batch found by scanning from the last index entry. It
// returns the bytes scanned.
func (s *segment) activate(cfg Config) (int64, error) {
	s.imu.Lock()
	defer s.imu.Unlock()
	idx := make([]indexEntry, 0, s.idxCount)
	for i := 0; i < s.idxCount; i++ {
		e, err := s.indexAt(i)
		if err != nil {
			return 0, err
		}
		idx = append(idx, e)
	}
	tidx := make([]timeEntry, 0, s.tidxCount)
	for i := 0; i < s.tidxCount; i++ {
		e, err := s.timeAt(i)
		if err != nil {
			return 0, err
		}
		tidx = append(tidx, e)
	}
	s.idx, s.tidx, s.sealed = idx, tidx, false
	s.idxDisk, s.tidxDisk = len(idx), len(tidx)
	if err := s.preallocate(); err != nil {
		return 0, err
	}
	// Find the end: scan headers from the last indexed batch.
	size := s.size.Load()
	pos := int64(0)
	if n := len(idx); n > 0 {
		pos = int64(idx[n-1].pos)
	}
	start := pos
	s.next, s.bytesSinceIndex = s.base, 0
	if len(idx) > 0 {
		s.next = s.base + int64(idx[len(idx)-1].rel)
	}
	for {
		b, ok, err := s.readHeader(pos, size)
		if err != nil {
			return pos - start, err
		}
		if !ok {
			break
		}
		if b.MaxTimestamp > s.maxTs {
			s.maxTs, s.maxTsOff = b.MaxTimestamp, b.BaseOffset
		}
		s.next = b.NextOffset()
		s.bytesSinceIndex += b.Size
		pos += int64(b.Size)
	}
	if pos < size {
		// A torn tail in a segment we were told is clean: drop it.
		if err := s.log.Truncate(pos); err != nil {
			return pos - start, fmt.Errorf("truncate segment: %w", err)
		}
		s.size.Store(pos)
	}
	return pos - start, nil
}

// truncateAt cuts the active (in-memory indexed) segment before the first
// batch whose last offset is >= offset and drops the index entries past the
// cut, without rescanning the segment: only the batches after the last kept
// index entry are read again. It returns the new end offset.
func (s *segment) truncateAt(offset int64) (int64, error) {
	size := s.size.Load()
	pos, err := s.lookup(offset)
	if err != nil {
		return 0, err
	}
	end := s.next
	for {
		b, ok, err := s.readHeader(pos, size)
		if err != nil {
			return 0, err
		}
		if !ok && pos < size && pos > 0 {
			pos = 0 // the index pointed at no batch: scan from the start
			continue
		}
		if !ok {
			break
		}
		if b.LastOffset >= offset {
			end = b.BaseOffset
			break
		}
		pos += int64(b.Size)
	}
	if pos >= size {
		return s.next, nil
	}
	s.size.Store(pos)
	if err := s.log.Truncate(pos); err != nil {
		return 0, fmt.Errorf("truncate segment: %w", err)
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	idx := s.idx
	for len(idx) > 0 && int64(idx[len(idx)-1].pos) >= pos {
		idx = idx[:len(idx)-1]
	}
	tidx := s.tidx
	for len(tidx) > 0 && s.base+int64(tidx[len(tidx)-1].rel) >= end {
		tidx = tidx[:len(tidx)-1]
	}
	s.idx, s.tidx = idx, tidx
	s.idxCount, s.tidxCount = len(idx), len(tidx)
	s.idxDisk, s.tidxDisk = min(s.idxDisk, len(idx)), min(s.tidxDisk, len(tidx))
	// A kept time entry holds the largest timestamp up to its index entry;
	// batches after the last kept index entry are read again.
	s.maxTs, s.maxTsOff, s.lastTs = -1, s.base, -1
	if n := len(tidx); n > 0 {
		s.maxTs, s.maxTsOff, s.lastTs = tidx[n-1].ts, s.base+int64(tidx[n-1].rel), tidx[n-1].ts
	}
	from := int64(0)
	if n := len(idx); n > 0 {
		from = int64(idx[n-1].pos)
	}
	s.bytesSinceIndex = 0
	for p := from; p < pos; {
		b, ok, err := s.readHeader(p, pos)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, fmt.Errorf("truncate segment %d: no batch at %d: %w", s.base, p, ErrCorruptMessage)
		}
		if b.MaxTimestamp > s.maxTs {
			s.maxTs, s.maxTsOff = b.MaxTimestamp, b.BaseOffset
		}
		s.bytesSinceIndex += b.Size
		p += int64(b.Size)
	}
	s.next = end
	return end, nil
}

// recordForTimestamp reads the batch at pos and finds its first record at or
// after minOffset with a timestamp >= ts (uncompressed CreateTime batches only).
func (s *segment) recordForTimestamp(b BatchInfo, pos, ts, minOffset int64) (int64, int64, bool) {
	if b.Compression() != 0 || b.LogAppendTime() {
		return 0, 0, false
	}
	buf := make([]byte, b.Size)
	if _, err := s.log.ReadAt(buf, pos); err != nil {
		return 0, 0, false
	}
	return firstRecordAtOrAfter(buf, b, ts, minOffset)
}
