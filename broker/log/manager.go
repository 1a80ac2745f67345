package log

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Files in each log.dirs directory.
const (
	CleanShutdownFile               = ".kafka_cleanshutdown"
	LockFile                        = ".lock"
	RecoveryPointCheckpointFile     = "recovery-point-offset-checkpoint"
	LogStartOffsetCheckpointFile    = "log-start-offset-checkpoint"
	ReplicationOffsetCheckpointFile = "replication-offset-checkpoint"
)

// TopicPartition names a partition; its log lives in <log dir>/<topic>-<partition>.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// String is the partition directory name, "<topic>-<partition>".
func (tp TopicPartition) String() string {
	return tp.Topic + "-" + strconv.FormatInt(int64(tp.Partition), 10)
}

// ParseTopicPartition parses a partition directory name.
func ParseTopicPartition(name string) (TopicPartition, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return TopicPartition{}, false
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 || ValidateTopic(name[:i]) != nil {
		return TopicPartition{}, false
	}
	return TopicPartition{name[:i], int32(p)}, true
}

// ValidateTopic applies Kafka's topic name rules: 1 to 249 characters from
// [a-zA-Z0-9._-], and not "." or "..".
func ValidateTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." || len(topic) > 249 {
		return fmt.Errorf("invalid topic name %q", topic)
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("invalid character %q in topic name %q", c, topic)
		}
	}
	return nil
}

// Manager owns every partition log under one or more log directories
// (log.dirs): it loads and recovers them at start, creates and deletes them,
// runs retention, the time-based flush policy and the offset checkpoints, and
// marks a clean shutdown.
type Manager struct {
	dirs   []string
	cfg    Config
	clock  func() time.Time
	logger *slog.Logger

	locks []*os.File // flock'ed .lock file of each log dir

	// unclean lists the log dirs found without the clean shutdown
	// marker when the manager opened.
	unclean []string

	mu     sync.Mutex
	logs   map[TopicPartition]*Log
	dirOf  map[TopicPartition]string // log dir holding the partition
	closed bool
}

// UncleanShutdown reports whether some log dir was not shut down cleanly
// before this manager opened it (a crash, a SIGKILL, a power loss; a new
// empty dir counts too, as a new broker incarnation does in KRaft).
func (m *Manager) UncleanShutdown() bool { return len(m.unclean) > 0 }

// OpenManager loads every partition directory under dirs. A log dir without
// the .kafka_cleanshutdown marker was not shut down cleanly: each of its logs
// is recovered from the recovery point in recovery-point-offset-checkpoint.
// Log start offsets come from log-start-offset-checkpoint. The marker is
// removed once everything is loaded and written again by Close.
func OpenManager(dirs []string, cfg Config, opts ...Option) (*Manager, error) {
	if len(dirs) == 0 {
		return nil, errors.New("open log manager: no log dirs")
	}
	o := buildOptions(opts)
	m := &Manager{
		dirs: dirs, cfg: cfg.normalized(), clock: o.clock, logger: o.logger,
		logs: map[TopicPartition]*Log{}, dirOf: map[TopicPartition]string{},
	}
	for _, dir := range dirs {
		if err := m.lockDir(dir); err != nil {
			m.closeLogs()
			return nil, fmt.Errorf("open log manager: %w", err)
		}
	}
	for _, dir := range dirs {
		if err := m.loadDir(dir); err != nil {
			m.closeLogs()
			return nil, fmt.Errorf("open log manager: %w", err)
		}
	}
	for _, dir := range dirs {
		if err := os.Remove(filepath.Join(dir, CleanShutdownFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.closeLogs()
			return nil, fmt.Errorf("open log manager: remove clean shutdown marker: %w", err)
		}
		if err := syncDir(dir); err != nil {
			m.closeLogs()
			return nil, fmt.Errorf("open log manager: %w", err)
		}
	}
	return m, nil
}

// lockDir takes Kafka's .lock on a log dir without blocking, so a second
// broker on the same directory fails at once instead of corrupting it.
func (m *Manager) lockDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("log dir %s is in use by another process: %w", dir, ErrDirLocked)
		}
		return fmt.Errorf("lock log dir %s: %w", dir, err)
	}
	m.locks = append(m.locks, f)
	return nil
}

// ErrDirLocked: another process holds the log dir's .lock.
var ErrDirLocked = errors.New("log dir locked")

func (m *Manager) loadDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	_, err := os.Stat(filepath.Join(dir, CleanShutdownFile))
	clean := err == nil
	rps, err := readOffsets(filepath.Join(dir, RecoveryPointCheckpointFile))
	if err != nil {
		return offline(dir, err)
	}
	starts, err := readOffsets(filepath.Join(dir, LogStartOffsetCheckpointFile))
	if err != nil {
		return offline(dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list log dir: %w", err)
	}
	if !clean {
		m.logger.Warn("log dir was not shut down cleanly, recovering", "dir", dir)
		m.unclean = append(m.unclean, dir)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		tp, ok := ParseTopicPartition(e.Name())
		if !ok {
			continue
		}
		if other, dup := m.dirOf[tp]; dup {
			return fmt.Errorf("partition %s in both %s and %s", tp, other, dir)
		}
		l, err := Open(filepath.Join(dir, e.Name()), m.cfg,
			WithClock(m.clock),
			WithLogger(m.logger.With("topic", tp.Topic, "partition", tp.Partition)),
			WithRecoveryPoint(rps[tp]),
			WithLogStartOffset(starts[tp]),
			WithCleanShutdown(clean))
		if err != nil {
			return err
		}
		m.logs[tp], m.dirOf[tp] = l, dir
	}
	return nil
}

// GetOrCreate returns the partition's log, creating it in the log dir with
// the fewest partitions. cfg is the topic's effective config (broker
// defaults plus topic overrides) and replaces the config of an existing log.
func (m *Manager) GetOrCreate(topic string, partition int32, cfg Config) (*Log, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	if partition < 0 {
		return nil, fmt.Errorf("invalid partition %d", partition)
	}
	tp := TopicPartition{topic, partition}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if l, ok := m.logs[tp]; ok {
		l.SetConfig(cfg)
		return l, nil
	}
	count := map[string]int{}
	for _, d := range m.dirOf {
		count[d]++
	}
	dir := m.dirs[0]
	for _, d := range m.dirs[1:] {
		if count[d] < count[dir] {
			dir = d
		}
	}
	l, err := Open(filepath.Join(dir, tp.String()), cfg,
		WithClock(m.clock),
		WithLogger(m.logger.With("topic", tp.Topic, "partition", tp.Partition)),
		WithCleanShutdown(true))
	if err != nil {
		return nil, fmt.Errorf("create log %s: %w", tp, err)
	}
	if err := syncDir(dir); err != nil {
		l.Close()
		return nil, fmt.Errorf("create log %s: %w", tp, err)
	}
	m.logs[tp], m.dirOf[tp] = l, dir
	return l, nil
}

// Get returns the partition's log if this broker has it.
func (m *Manager) Get(topic string, partition int32) (*Log, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[TopicPartition{topic, partition}]
	return l, ok
}

// Delete closes the partition's log and removes its directory (StopReplica
// with deletePartition). Deleting an unknown partition is a no-op.
func (m *Manager) Delete(topic string, partition int32) error {
	tp := TopicPartition{topic, partition}
	m.mu.Lock()
	l, ok := m.logs[tp]
	delete(m.logs, tp)
	delete(m.dirOf, tp)
	m.mu.Unlock()
	if !ok {
		return nil
	}
	return l.Delete()
}

// Logs returns a snapshot of all partition logs.
func (m *Manager) Logs() map[TopicPartition]*Log {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[TopicPartition]*Log, len(m.logs))
	for tp, l := range m.logs {
		out[tp] = l
	}
	return out
}

// byDir groups the partitions by log dir.
func (m *Manager) byDir() map[string][]TopicPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]TopicPartition{}
	for _, d := range m.dirs {
		out[d] = nil
	}
	for tp, d := range m.dirOf {
		out[d] = append(out[d], tp)
	}
	return out
}

// CheckpointRecoveryPoints writes every log's recovery point to
// recovery-point-offset-checkpoint in its log dir.
func (m *Manager) CheckpointRecoveryPoints() error {
	return m.checkpoint(RecoveryPointCheckpointFile, func(l *Log) int64 { return l.RecoveryPoint() })
}

// CheckpointLogStartOffsets writes every log's start offset to
// log-start-offset-checkpoint in its log dir.
func (m *Manager) CheckpointLogStartOffsets() error {
	return m.checkpoint(LogStartOffsetCheckpointFile, func(l *Log) int64 { return l.LogStartOffset() })
}

func (m *Manager) checkpoint(file string, value func(*Log) int64) error {
	logs := m.Logs()
	var errs []error
	for dir, tps := range m.byDir() {
		offsets := map[TopicPartition]int64{}
		for _, tp := range tps {
			if l, ok := logs[tp]; ok {
				offsets[tp] = value(l)
			}
		}
		if err := writeOffsets(filepath.Join(dir, file), offsets); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WriteReplicationOffsets writes the high watermarks of the partitions in
// hw to replication-offset-checkpoint in their log dirs (partitions of this
// manager missing from hw are left out).
func (m *Manager) WriteReplicationOffsets(hw map[TopicPartition]int64) error {
	var errs []error
	for dir, tps := range m.byDir() {
		offsets := map[TopicPartition]int64{}
		for _, tp := range tps {
			if v, ok := hw[tp]; ok {
				offsets[tp] = v
			}
		}
		if err := writeOffsets(filepath.Join(dir, ReplicationOffsetCheckpointFile), offsets); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReadReplicationOffsets reads the high watermarks checkpointed in every
// log dir; a checkpoint that cannot be read is ErrLogDirOffline.
func (m *Manager) ReadReplicationOffsets() (map[TopicPartition]int64, error) {
	out := map[TopicPartition]int64{}
	for _, dir := range m.dirs {
		offs, err := readOffsets(filepath.Join(dir, ReplicationOffsetCheckpointFile))
		if err != nil {
			return nil, offline(dir, err)
		}
		for tp, v := range offs {
			out[tp] = v
		}
	}
	return out, nil
}

// CleanupLogs applies retention to every log at the clock's now; hw gives
// each partition's high watermark (nil: the LEO). It returns the number of
// segments deleted.
func (m *Manager) CleanupLogs(hw func(TopicPartition) int64) (int, error) {
	now := m.clock()
	total := 0
	var errs []error
	for tp, l := range m.Logs() {
		limit := l.LogEndOffset()
		if hw != nil {
			limit = hw(tp)
		}
		n, err := l.DeleteOldSegments(now, limit)
		total += n
		if err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, fmt.Errorf("retention %s: %w", tp, err))
		}
	}
	return total, errors.Join(errs...)
}

// FlushDirtyLogs applies the time-based flush policy (log.flush.interval.ms)
// and removes deleted segment files whose delay has passed.
func (m *Manager) FlushDirtyLogs() error {
	now := m.clock()
	var errs []error
	for tp, l := range m.Logs() {
		if err := l.maybeFlush(now); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, fmt.Errorf("flush %s: %w", tp, err))
		}
		if err := l.RemoveDeletedFiles(now); err != nil {
			errs = append(errs, fmt.Errorf("remove deleted files of %s: %w", tp, err))
		}
	}
	return errors.Join(errs...)
}

// Run does the background work until ctx is cancelled: retention every
// log.retention.check.interval.ms, the flush policy every
// log.flush.scheduler.interval.ms, and recovery point and log start offset
// checkpoints every log.flush.offset.checkpoint.interval.ms. hw gives each
// partition's high watermark for retention (nil: the LEO). Errors are logged;
// Run returns nil when ctx is done.
func (m *Manager) Run(ctx context.Context, hw func(TopicPartition) int64) error {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	retention := time.NewTicker(ms(m.cfg.RetentionCheckIntervalMs))
	defer retention.Stop()
	flush := time.NewTicker(ms(m.cfg.FlushSchedulerIntervalMs))
	defer flush.Stop()
	ckpt := time.NewTicker(ms(m.cfg.FlushOffsetCheckpointIntervalMs))
	defer ckpt.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retention.C:
			if n, err := m.CleanupLogs(hw); err != nil {
				m.logger.Error("log retention", "err", err)
			} else if n > 0 {
				m.logger.Info("log retention deleted segments", "segments", n)
			}
		case <-flush.C:
			if err := m.FlushDirtyLogs(); err != nil {
				m.logger.Error("log flush", "err", err)
			}
		case <-ckpt.C:
			if err := m.CheckpointRecoveryPoints(); err != nil {
				m.logger.Error("checkpoint recovery points", "err", err)
			}
			if err := m.CheckpointLogStartOffsets(); err != nil {
				m.logger.Error("checkpoint log start offsets", "err", err)
			}
		}
	}
}

// Close flushes and closes every log, writes the checkpoints and, when all
// of that succeeded, the .kafka_cleanshutdown marker in each log dir. Stop
// Run first. It is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	var errs []error
	for tp, l := range m.Logs() {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", tp, err))
		}
	}
	if err := m.CheckpointRecoveryPoints(); err != nil {
		errs = append(errs, err)
	}
	if err := m.CheckpointLogStartOffsets(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		m.unlock()
		return errors.Join(errs...)
	}
	defer m.unlock()
	for _, dir := range m.dirs {
		if err := writeFileAtomic(filepath.Join(dir, CleanShutdownFile), nil); err != nil {
			errs = append(errs, fmt.Errorf("write clean shutdown marker: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) closeLogs() {
	for _, l := range m.logs {
		l.Close()
	}
	m.unlock()
}

// unlock releases the log dir locks (closing the file drops the flock).
func (m *Manager) unlock() {
	for _, f := range m.locks {
		f.Close()
	}
	m.locks = nil
}

// readOffsets reads a "topic partition offset" checkpoint file.
func readOffsets(path string) (map[TopicPartition]int64, error) {
	lines, err := readCheckpoint(path, 3)
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]int64, len(lines))
	for _, f := range lines {
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || ValidateTopic(f[0]) != nil {
			return nil, fmt.Errorf("%s: line %q: %w", path, strings.Join(f, " "), errBadCheckpoint)
		}
		out[TopicPartition{f[0], int32(p)}] = off
	}
	return out, nil
}

// writeOffsets writes a "topic partition offset" checkpoint file, sorted.
func writeOffsets(path string, offsets map[TopicPartition]int64) error {
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	lines := make([]string, len(tps))
	for i, tp := range tps {
		lines[i] = fmt.Sprintf("%s %d %d", tp.Topic, tp.Partition, offsets[tp])
	}
	return writeCheckpoint(path, lines)
}
