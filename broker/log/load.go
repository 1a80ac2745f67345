package log

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// load opens the log's files as Open describes, in steps: list the
// segments, read the epoch checkpoint, open each segment (checking the
// sealed ones recovery will not read), recover each segment from the one
// holding the recovery point on (truncating a torn or corrupt tail and
// deleting the segments after it), activate the last segment, rebuild the
// epochs and the transaction indexes where needed, and load the producer
// state. Whatever segments are open when a step fails are closed here,
// the one clean-up path.
func (l *Log) load(o options) error {
	ld := &loading{l: l, o: o, txnRebuild: map[int64]bool{}}
	if err := ld.run(); err != nil {
		for _, s := range ld.segs {
			s.closeFiles()
		}
		return err
	}
	return nil
}

// loading is a log being opened, passed from step to step.
type loading struct {
	l *Log
	o options

	segs []*segment // the segments opened so far, by base offset
	// recoverFrom is the index in segs of the first segment recovery
	// validates (len(segs) after a clean shutdown); the ones before it
	// are trusted after a sanity check.
	recoverFrom int
	txnRebuild  map[int64]bool // segments whose transaction index is rebuilt
}

func (ld *loading) run() error {
	l := ld.l
	bases, err := l.listSegments()
	if err != nil {
		return err
	}
	if err := ld.openEpochs(); err != nil {
		return err
	}
	if len(bases) == 0 {
		return ld.fresh()
	}
	ld.recoverFrom = len(bases)
	if !ld.o.clean {
		ld.recoverFrom = max(sort.Search(len(bases), func(i int) bool { return bases[i] > ld.o.recoveryPoint })-1, 0)
	}
	for i, base := range bases {
		s, err := ld.openSegment(base)
		if err != nil {
			return err
		}
		if i < ld.recoverFrom {
			if err := ld.checkSealed(s); err != nil {
				return err
			}
		}
	}
	if !ld.o.clean {
		if err := ld.recover(); err != nil {
			return err
		}
	}
	active := ld.segs[len(ld.segs)-1]
	if active.sealed {
		if _, err := active.activate(l.cfg); err != nil {
			return err
		}
	}
	leo := active.next
	if err := l.epochs.TruncateFromEnd(leo); err != nil {
		return err
	}
	start := min(max(ld.o.logStartOffset, ld.segs[0].base), leo)
	if err := l.epochs.TruncateFromStart(start); err != nil {
		return err
	}
	from, err := ld.checkTxnIndexes(leo)
	if err != nil {
		return err
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.publish(ld.segs, leo, start, leo)
	return l.loadProducerState(from)
}

// listSegments returns the base offsets of the log's segments, sorted,
// after removing what a crash left behind: files of an interrupted
// deletion or checkpoint write, and index files without a segment.
func (l *Log) listSegments() ([]int64, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var bases []int64
	indexes := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, DeletedFileSuffix), strings.HasSuffix(name, ".tmp"):
			// Left over from a deletion or checkpoint write that a crash interrupted.
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return nil, fmt.Errorf("remove leftover: %w", err)
			}
		case strings.HasSuffix(name, LogFileSuffix):
			base, err := strconv.ParseInt(strings.TrimSuffix(name, LogFileSuffix), 10, 64)
			if err != nil || base < 0 {
				l.logger.Warn("ignoring file with unparsable name", "file", name)
				continue
			}
			bases = append(bases, base)
		case strings.HasSuffix(name, IndexFileSuffix), strings.HasSuffix(name, TimeIndexFileSuffix), strings.HasSuffix(name, TxnIndexFileSuffix):
			indexes[name] = true
		}
	}
	slices.Sort(bases)
	// Index files without a log file belong to nothing.
	have := map[string]bool{}
	for _, b := range bases {
		have[segmentName(b)] = true
	}
	for name := range indexes {
		if !have[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, TimeIndexFileSuffix), TxnIndexFileSuffix), IndexFileSuffix)] {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return nil, fmt.Errorf("remove orphan index: %w", err)
			}
		}
	}
	return bases, nil
}

// openEpochs reads the leader epoch checkpoint; one that cannot be read
// takes the log directory offline (ErrLogDirOffline), as in Kafka.
func (ld *loading) openEpochs() error {
	l := ld.l
	epochs, err := newEpochCache(l.dir)
	l.epochs = epochs
	if err != nil {
		return offline(filepath.Dir(l.dir), err)
	}
	return nil
}

// fresh starts a log that has no segment: one empty segment at the log
// start offset, no epochs, no producer snapshots.
func (ld *loading) fresh() error {
	l := ld.l
	base := max(ld.o.logStartOffset, 0)
	s, err := createSegment(l.dir, base, l.cfg)
	if err != nil {
		return err
	}
	ld.segs = append(ld.segs, s)
	if err := l.epochs.clear(); err != nil {
		return err
	}
	if err := removeSnapshots(l.dir, func(int64) bool { return true }); err != nil {
		return err
	}
	l.ps = newProducerState(base)
	l.publish(ld.segs, base, base, base)
	return nil
}

// openSegment opens the segment at base with its indexes and adds it to
// ld.segs; a missing transaction index is created empty and rebuilt.
func (ld *loading) openSegment(base int64) (*segment, error) {
	l := ld.l
	s := newSegment(l.dir, base, l.cfg)
	var err error
	if s.log, err = os.OpenFile(s.path(LogFileSuffix), os.O_RDWR, 0o644); err != nil {
		return nil, fmt.Errorf("open segment: %w", err)
	}
	ld.segs = append(ld.segs, s)
	if err := s.openIndexes(false); err != nil {
		return nil, err
	}
	if s.txn, err = openTxnIndex(s.path(TxnIndexFileSuffix), false); errors.Is(err, os.ErrNotExist) {
		l.logger.Info("transaction index missing, rebuilding it", "segment", base)
		ld.txnRebuild[base] = true
		s.txn, err = openTxnIndex(s.path(TxnIndexFileSuffix), true)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// checkSealed loads the indexes of a segment recovery does not read and
// rebuilds them when they fail the sanity check.
func (ld *loading) checkSealed(s *segment) error {
	fi, err := s.log.Stat()
	if err != nil {
		return fmt.Errorf("stat segment: %w", err)
	}
	ok, err := s.loadSealed(fi.Size())
	if err != nil || ok {
		return err
	}
	ld.l.logger.Info("rebuilding index", "segment", s.base)
	if _, _, err := s.rebuild(ld.l.cfg, false, nil); err != nil {
		return err
	}
	return s.seal()
}

// recover validates every segment from the one holding the recovery
// point on, batch by batch.
func (ld *loading) recover() error {
	for i := ld.recoverFrom; i < len(ld.segs); i++ {
		if err := ld.recoverSegment(i); err != nil {
			return err
		}
	}
	if ld.recoverFrom < len(ld.segs) {
		ld.l.logger.Info("recovered log", "from_segment", ld.segs[ld.recoverFrom].base, "bytes", ld.l.recoveredBytes)
	}
	return nil
}

// recoverSegment validates segs[i], rebuilding its indexes and the epochs
// of its batches; a torn or corrupt batch, or an overlap with the next
// segment, ends the log there.
func (ld *loading) recoverSegment(i int) error {
	l, s := ld.l, ld.segs[i]
	ld.txnRebuild[s.base] = true
	n, truncated, err := s.rebuild(l.cfg, true, func(b BatchInfo) {
		if b.LeaderEpoch > l.epochs.LatestEpoch() {
			if _, err := l.epochs.Assign(b.LeaderEpoch, b.BaseOffset); err != nil {
				l.logger.Warn("persist epoch cache", "err", err)
			}
		}
	})
	l.recoveredBytes += n
	if err != nil {
		return fmt.Errorf("recover segment %d: %w", s.base, err)
	}
	if truncated || (i+1 < len(ld.segs) && s.next > ld.segs[i+1].base) {
		l.logger.Warn("truncated corrupt or torn log tail", "segment", s.base, "valid_bytes", n, "deleted_segments", len(ld.segs)-i-1)
		if err := ld.deleteAfter(i); err != nil {
			return err
		}
	}
	if i < len(ld.segs)-1 {
		if err := s.seal(); err != nil {
			return err
		}
	}
	return s.sync()
}

// deleteAfter deletes the segments after segs[i], behind a torn tail.
func (ld *loading) deleteAfter(i int) error {
	for _, later := range ld.segs[i+1:] {
		later.closeFiles()
		for _, suf := range segmentSuffixes {
			if err := os.Remove(later.path(suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("delete segment after corruption: %w", err)
			}
		}
	}
	ld.segs = ld.segs[:i+1]
	return nil
}

// checkTxnIndexes checks the transaction indexes kept and empties the ones
// to rebuild (missing, corrupt, or of a recovered segment); it returns the
// offset from which the producer state replays the log, rebuilding them:
// the first such segment's base, else leo.
func (ld *loading) checkTxnIndexes(leo int64) (int64, error) {
	from := leo
	for i, s := range ld.segs {
		next := leo
		if i+1 < len(ld.segs) {
			next = ld.segs[i+1].base
		}
		if !ld.txnRebuild[s.base] {
			if err := s.txn.load(s.base, next); err != nil {
				ld.l.logger.Error("transaction index corrupt, rebuilding it from the log", "segment", s.base, "err", err)
				ld.txnRebuild[s.base] = true
			}
		}
		if ld.txnRebuild[s.base] {
			if err := s.txn.truncateFrom(-1); err != nil {
				return 0, err
			}
			from = min(from, s.base)
		}
	}
	return from, nil
}
