package log

import (
	"io"
	"log/slog"
	"math"
	"time"
)

// Config holds the storage settings of one partition log. Field comments give
// the Kafka broker setting (and topic-level override) each one mirrors.
type Config struct {
	// SegmentBytes: log.segment.bytes / segment.bytes. Roll when an append
	// would grow the active segment past it. Default 1 GiB.
	SegmentBytes int64
	// SegmentMs: log.roll.ms (log.roll.hours) / segment.ms. Roll a segment
	// this long (by the injected clock) after its first append since the log
	// was opened. Default 168 h.
	SegmentMs int64
	// SegmentIndexBytes: log.index.size.max.bytes / segment.index.bytes. Size
	// the index files are preallocated to; a full index rolls the segment.
	// Default 10 MiB.
	SegmentIndexBytes int
	// IndexIntervalBytes: log.index.interval.bytes / index.interval.bytes.
	// Bytes appended between two index entries. Default 4096.
	IndexIntervalBytes int
	// RetentionMs: log.retention.ms (.minutes, .hours) / retention.ms. Delete
	// segments whose largest timestamp is older; -1 keeps forever. Default 168 h.
	RetentionMs int64
	// RetentionBytes: log.retention.bytes / retention.bytes. Delete the oldest
	// segments while the log is larger; -1 means no limit (default).
	RetentionBytes int64
	// FlushIntervalMessages: log.flush.interval.messages / flush.messages.
	// fsync after this many unflushed records. Default math.MaxInt64 (never).
	FlushIntervalMessages int64
	// FlushIntervalMs: log.flush.interval.ms / flush.ms. fsync when the last
	// flush is this old. Default math.MaxInt64 (never).
	FlushIntervalMs int64
	// FileDeleteDelayMs: log.segment.delete.delay.ms / file.delete.delay.ms.
	// Delay between renaming a deleted segment to .deleted and removing it.
	// Default 60000.
	FileDeleteDelayMs int64
	// MaxMessageBytes: message.max.bytes / max.message.bytes. Largest batch
	// accepted from a producer. Default 1048588.
	MaxMessageBytes int
	// LogAppendTime: message.timestamp.type=LogAppendTime. The leader sets
	// each batch's MaxTimestamp to its clock and the timestamp-type bit, and
	// recomputes the CRC (records are not touched). Default false (CreateTime).
	LogAppendTime bool

	// The following are broker-wide and used by Manager only.

	// RetentionCheckIntervalMs: log.retention.check.interval.ms. Default 300000.
	RetentionCheckIntervalMs int64
	// FlushSchedulerIntervalMs: log.flush.scheduler.interval.ms, how often
	// the time-based flush policy is checked. Kafka's default is "never";
	// ours is 1000 so that FlushIntervalMs works when set.
	FlushSchedulerIntervalMs int64
	// FlushOffsetCheckpointIntervalMs: log.flush.offset.checkpoint.interval.ms
	// (recovery points) and log.flush.start.offset.checkpoint.interval.ms (log
	// start offsets). Default 60000.
	FlushOffsetCheckpointIntervalMs int64
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:                    1 << 30,
		SegmentMs:                       168 * 3600 * 1000,
		SegmentIndexBytes:               10 << 20,
		IndexIntervalBytes:              4096,
		RetentionMs:                     168 * 3600 * 1000,
		RetentionBytes:                  -1,
		FlushIntervalMessages:           math.MaxInt64,
		FlushIntervalMs:                 math.MaxInt64,
		FileDeleteDelayMs:               60000,
		MaxMessageBytes:                 1048588,
		RetentionCheckIntervalMs:        300000,
		FlushSchedulerIntervalMs:        1000,
		FlushOffsetCheckpointIntervalMs: 60000,
	}
}

// normalized replaces zero or negative sizes and intervals, which Kafka
// rejects, with the defaults. RetentionMs, RetentionBytes and
// FileDeleteDelayMs keep 0 as a real value, so start from DefaultConfig.
func (c Config) normalized() Config {
	d := DefaultConfig()
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = d.SegmentBytes
	}
	if c.SegmentBytes > math.MaxInt32 {
		// File positions in the index are int32.
		c.SegmentBytes = math.MaxInt32
	}
	if c.SegmentMs <= 0 {
		c.SegmentMs = d.SegmentMs
	}
	if c.SegmentIndexBytes <= 0 {
		c.SegmentIndexBytes = d.SegmentIndexBytes
	}
	if c.SegmentIndexBytes < 2*timeEntrySize {
		c.SegmentIndexBytes = 2 * timeEntrySize
	}
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = d.IndexIntervalBytes
	}
	if c.RetentionMs < 0 {
		c.RetentionMs = -1
	}
	if c.RetentionBytes < 0 {
		c.RetentionBytes = -1
	}
	if c.FlushIntervalMessages <= 0 {
		c.FlushIntervalMessages = d.FlushIntervalMessages
	}
	if c.FlushIntervalMs <= 0 {
		c.FlushIntervalMs = d.FlushIntervalMs
	}
	if c.FileDeleteDelayMs < 0 {
		c.FileDeleteDelayMs = 0
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.RetentionCheckIntervalMs <= 0 {
		c.RetentionCheckIntervalMs = d.RetentionCheckIntervalMs
	}
	if c.FlushSchedulerIntervalMs <= 0 {
		c.FlushSchedulerIntervalMs = d.FlushSchedulerIntervalMs
	}
	if c.FlushOffsetCheckpointIntervalMs <= 0 {
		c.FlushOffsetCheckpointIntervalMs = d.FlushOffsetCheckpointIntervalMs
	}
	return c
}

// Option configures Open and OpenManager.
type Option interface{ apply(*options) }

type options struct {
	clock          func() time.Time
	logger         *slog.Logger
	recoveryPoint  int64
	logStartOffset int64
	clean          bool
}

type optFunc func(*options)

func (f optFunc) apply(o *options) { f(o) }

// WithClock sets the clock used for segment rolling, retention, flush policy
// and delayed file deletion. Default time.Now.
func WithClock(now func() time.Time) Option {
	return optFunc(func(o *options) { o.clock = now })
}

// WithLogger sets the structured logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return optFunc(func(o *options) { o.logger = l })
}

// WithRecoveryPoint tells Open the offset up to which the log is known to be
// flushed (from recovery-point-offset-checkpoint). An unclean open validates
// every segment from the one holding this offset. Default 0 (validate all).
func WithRecoveryPoint(offset int64) Option {
	return optFunc(func(o *options) { o.recoveryPoint = offset })
}

// WithLogStartOffset sets the log start offset remembered from
// log-start-offset-checkpoint. Default 0 (the first segment's base offset).
func WithLogStartOffset(offset int64) Option {
	return optFunc(func(o *options) { o.logStartOffset = offset })
}

// WithCleanShutdown tells Open the log was closed cleanly (the log dir held
// .kafka_cleanshutdown), so no recovery scan is needed. Default false.
func WithCleanShutdown(clean bool) Option {
	return optFunc(func(o *options) { o.clean = clean })
}

func buildOptions(opts []Option) options {
	o := options{clock: time.Now}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}
