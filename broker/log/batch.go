package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Kafka v2 record batch header layout (all big-endian). baseOffset and
// partitionLeaderEpoch lie outside the CRC, which covers bytes [21:end], so the
// log patches them in place without touching the records.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// BatchHeaderSize is the size of a v2 record batch header.
	BatchHeaderSize = 61
	// logOverhead is baseOffset + batchLength: the bytes not counted by batchLength.
	logOverhead = 12
	// minRecordSize is the smallest possible encoded record (length, attributes,
	// timestampDelta, offsetDelta, keyLength, valueLength, headerCount varints).
	minRecordSize = 7
)

// Errors returned by the log. The ones that correspond to a Kafka error code
// are the kerr values themselves, so a caller maps any wrapped error to a
// response code with errors.As(err, new(*kerr.Error)).
var (
	// ErrCorruptMessage: a batch failed its CRC, size or format checks.
	ErrCorruptMessage error = kerr.CorruptMessage
	// ErrUnsupportedMagic: a batch is not magic 2 (v0/v1 message sets are not stored).
	ErrUnsupportedMagic error = kerr.UnsupportedForMessageFormat
	// ErrRecordTooLarge: one batch exceeds the configured maximum batch size
	// (message.max.bytes / max.message.bytes).
	ErrRecordTooLarge error = kerr.MessageTooLarge
	// ErrRecordListTooLarge: the appended batches together exceed log.segment.bytes.
	ErrRecordListTooLarge error = kerr.RecordListTooLarge
	// ErrOffsetOutOfRange: a read below the log start offset or above the log end offset.
	ErrOffsetOutOfRange error = kerr.OffsetOutOfRange
	// ErrOffsetMismatch: a follower append does not start at the log end
	// offset, or its batches do not follow each other without gaps.
	ErrOffsetMismatch = errors.New("append offset does not match the log end offset")
	// ErrClosed: the log or manager was closed.
	ErrClosed = errors.New("log closed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BatchInfo holds the facts of one v2 record batch, parsed from its header.
type BatchInfo struct {
	BaseOffset     int64 // offset of the first record
	LastOffset     int64 // BaseOffset + lastOffsetDelta
	LeaderEpoch    int32 // partitionLeaderEpoch
	FirstTimestamp int64
	MaxTimestamp   int64
	ProducerID     int64
	ProducerEpoch  int16
	BaseSequence   int32
	RecordCount    int32
	Attributes     int16
	Size           int // whole batch size in bytes, header included
}

// NextOffset is the offset after the batch's last record.
func (b BatchInfo) NextOffset() int64 { return b.LastOffset + 1 }

// Compression is the codec in the batch attributes (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
func (b BatchInfo) Compression() int { return int(b.Attributes & 0x07) }

// LogAppendTime reports whether the batch's timestamp type is LogAppendTime.
func (b BatchInfo) LogAppendTime() bool { return b.Attributes&0x08 != 0 }

// Transactional reports whether the batch belongs to a transaction.
func (b BatchInfo) Transactional() bool { return b.Attributes&0x10 != 0 }

// Control reports whether the batch is a control batch (transaction marker).
func (b BatchInfo) Control() bool { return b.Attributes&0x20 != 0 }

// ParseBatches validates a produce payload of one or more concatenated v2
// record batches and returns their header facts. It checks every batch is
// whole, its length sane, magic 2, its CRC-32C, and that lastOffsetDelta and
// recordCount are consistent. A batch larger than maxBatchBytes (when
// maxBatchBytes > 0) fails with ErrRecordTooLarge; magic other than 2 with
// ErrUnsupportedMagic; anything else malformed with ErrCorruptMessage. An
// empty payload is ErrCorruptMessage too. ParseBatches never panics and never
// modifies data.
func ParseBatches(data []byte, maxBatchBytes int) ([]BatchInfo, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty record set: %w", ErrCorruptMessage)
	}
	var out []BatchInfo
	for pos := 0; pos < len(data); {
		b, err := parseBatch(data[pos:], maxBatchBytes, true)
		if err != nil {
			return nil, fmt.Errorf("batch %d at byte %d: %w", len(out), pos, err)
		}
		out = append(out, b)
		pos += b.Size
	}
	return out, nil
}

// parseBatch parses the batch at the start of buf. With checkCRC false only
// the header is looked at (buf may then hold just the header) and the size is
// not checked against len(buf).
func parseBatch(buf []byte, maxBatchBytes int, checkCRC bool) (BatchInfo, error) {
	if len(buf) < BatchHeaderSize {
		return BatchInfo{}, fmt.Errorf("%d bytes left, shorter than a batch header: %w", len(buf), ErrCorruptMessage)
	}
	length := int64(int32(binary.BigEndian.Uint32(buf[offBatchLength:])))
	size := length + logOverhead
	if size < BatchHeaderSize {
		return BatchInfo{}, fmt.Errorf("batch length %d too small: %w", length, ErrCorruptMessage)
	}
	if magic := int8(buf[offMagic]); magic != 2 {
		return BatchInfo{}, fmt.Errorf("magic %d: %w", magic, ErrUnsupportedMagic)
	}
	if maxBatchBytes > 0 && size > int64(maxBatchBytes) {
		return BatchInfo{}, fmt.Errorf("batch of %d bytes exceeds %d: %w", size, maxBatchBytes, ErrRecordTooLarge)
	}
	if checkCRC && size > int64(len(buf)) {
		return BatchInfo{}, fmt.Errorf("batch of %d bytes truncated to %d: %w", size, len(buf), ErrCorruptMessage)
	}
	b := BatchInfo{
		BaseOffset:     int64(binary.BigEndian.Uint64(buf[offBaseOffset:])),
		LeaderEpoch:    int32(binary.BigEndian.Uint32(buf[offLeaderEpoch:])),
		Attributes:     int16(binary.BigEndian.Uint16(buf[offAttributes:])),
		FirstTimestamp: int64(binary.BigEndian.Uint64(buf[offFirstTimestamp:])),
		MaxTimestamp:   int64(binary.BigEndian.Uint64(buf[offMaxTimestamp:])),
		ProducerID:     int64(binary.BigEndian.Uint64(buf[offProducerID:])),
		ProducerEpoch:  int16(binary.BigEndian.Uint16(buf[offProducerEpoch:])),
		BaseSequence:   int32(binary.BigEndian.Uint32(buf[offBaseSequence:])),
		RecordCount:    int32(binary.BigEndian.Uint32(buf[offRecordCount:])),
		Size:           int(size),
	}
	delta := int32(binary.BigEndian.Uint32(buf[offLastOffsetDelta:]))
	if delta < 0 {
		return BatchInfo{}, fmt.Errorf("negative lastOffsetDelta %d: %w", delta, ErrCorruptMessage)
	}
	if b.BaseOffset < 0 || b.BaseOffset > math.MaxInt64-int64(delta)-1 {
		return BatchInfo{}, fmt.Errorf("base offset %d out of range: %w", b.BaseOffset, ErrCorruptMessage)
	}
	b.LastOffset = b.BaseOffset + int64(delta)
	// Compaction may remove records from a batch but never adds offsets: the
	// count is at most lastOffsetDelta+1. An empty batch is legal only after
	// compaction; a produced batch always has records.
	if b.RecordCount < 0 || int64(b.RecordCount) > int64(delta)+1 {
		return BatchInfo{}, fmt.Errorf("record count %d with lastOffsetDelta %d: %w", b.RecordCount, delta, ErrCorruptMessage)
	}
	if b.Compression() == 0 && int64(b.RecordCount)*minRecordSize > size-BatchHeaderSize {
		return BatchInfo{}, fmt.Errorf("%d records cannot fit in %d bytes: %w", b.RecordCount, size-BatchHeaderSize, ErrCorruptMessage)
	}
	if checkCRC {
		want := binary.BigEndian.Uint32(buf[offCRC:])
		if got := crc32.Checksum(buf[offAttributes:size], castagnoli); got != want {
			return BatchInfo{}, fmt.Errorf("crc %08x, header says %08x: %w", got, want, ErrCorruptMessage)
		}
	}
	return b, nil
}

// patchBatch sets the base offset and partition leader epoch of the batch at
// the start of buf. Both lie outside the CRC.
func patchBatch(buf []byte, baseOffset int64, leaderEpoch int32) {
	binary.BigEndian.PutUint64(buf[offBaseOffset:], uint64(baseOffset))
	binary.BigEndian.PutUint32(buf[offLeaderEpoch:], uint32(leaderEpoch))
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// stampLogAppendTime marks the batch at the start of buf as LogAppendTime
// with MaxTimestamp ts and recomputes its CRC, as Kafka's leader does for
// topics with message.timestamp.type=LogAppendTime.
func stampLogAppendTime(buf []byte, size int, ts int64) {
	attrs := binary.BigEndian.Uint16(buf[offAttributes:])
	binary.BigEndian.PutUint16(buf[offAttributes:], attrs|0x08)
	binary.BigEndian.PutUint64(buf[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(buf[offCRC:], crc32c(buf[offAttributes:size]))
}

// firstRecordAtOrAfter walks the records of an uncompressed batch (whole, in
// buf) and returns the offset and timestamp of the first record with
// offset >= minOffset and timestamp >= ts. ok is false when there is none or
// the records cannot be parsed.
func firstRecordAtOrAfter(buf []byte, b BatchInfo, ts, minOffset int64) (offset, timestamp int64, ok bool) {
	if b.Compression() != 0 || len(buf) < b.Size {
		return 0, 0, false
	}
	recs := buf[BatchHeaderSize:b.Size]
	for i := int32(0); i < b.RecordCount && len(recs) > 0; i++ {
		length, n := binary.Varint(recs)
		if n <= 0 || length < 0 || int64(len(recs)-n) < length {
			return 0, 0, false
		}
		rec := recs[n : n+int(length)]
		recs = recs[n+int(length):]
		if len(rec) < 1 {
			return 0, 0, false
		}
		tsDelta, n1 := binary.Varint(rec[1:]) // after the attributes byte
		if n1 <= 0 {
			return 0, 0, false
		}
		offDelta, n2 := binary.Varint(rec[1+n1:])
		if n2 <= 0 {
			return 0, 0, false
		}
		recOffset, recTs := b.BaseOffset+offDelta, b.FirstTimestamp+tsDelta
		if recOffset >= minOffset && recTs >= ts {
			return recOffset, recTs, true
		}
	}
	return 0, 0, false
}

// ParseBatchHeader parses the header of the v2 batch at the start of buf
// without checking its CRC or that the batch is whole.
func ParseBatchHeader(buf []byte) (BatchInfo, error) { return parseBatch(buf, 0, false) }
