package log

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Batch attribute bits of transactions (Kafka's RecordBatch).
const (
	AttrTransactional = 0x10
	AttrControl       = 0x20
)

// Control record types: the key's second int16 (Kafka's ControlRecordType).
const (
	ControlAbort  int16 = 0
	ControlCommit int16 = 1
)

// Marker is a transaction marker, the one record of a control batch
// (Kafka's EndTransactionMarker): the key is version 0 and the type, the
// value version 0 and the coordinator epoch.
type Marker struct {
	Commit           bool
	CoordinatorEpoch int32
}

// controlKeySize and controlValueSize are the encoded marker key and value.
const (
	controlKeySize   = 4 // version int16, type int16
	controlValueSize = 6 // version int16, coordinator epoch int32
)

// ControlBatch builds the v2 control batch a partition leader appends for a
// transaction marker: transactional and control attributes, producer id and
// epoch, no sequence, one record at offset delta 0 with timestamp ts. The
// base offset and leader epoch are left for the log to assign.
func ControlBatch(producerID int64, producerEpoch int16, m Marker, ts int64) []byte {
	typ := ControlAbort
	if m.Commit {
		typ = ControlCommit
	}
	var key [controlKeySize]byte
	var val [controlValueSize]byte
	binary.BigEndian.PutUint16(key[2:], uint16(typ))
	binary.BigEndian.PutUint32(val[2:], uint32(m.CoordinatorEpoch))
	// The record: attributes, timestamp delta, offset delta, key, value,
	// no headers (lengths and deltas as zigzag varints).
	body := []byte{0}
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, controlKeySize)
	body = append(body, key[:]...)
	body = binary.AppendVarint(body, controlValueSize)
	body = append(body, val[:]...)
	body = binary.AppendVarint(body, 0)
	rec := binary.AppendVarint(nil, int64(len(body)))
	rec = append(rec, body...)

	buf := make([]byte, BatchHeaderSize, BatchHeaderSize+len(rec))
	binary.BigEndian.PutUint32(buf[offBatchLength:], uint32(BatchHeaderSize+len(rec)-logOverhead))
	binary.BigEndian.PutUint32(buf[offLeaderEpoch:], 0xffffffff)
	buf[offMagic] = 2
	binary.BigEndian.PutUint16(buf[offAttributes:], AttrTransactional|AttrControl)
	binary.BigEndian.PutUint32(buf[offLastOffsetDelta:], 0)
	binary.BigEndian.PutUint64(buf[offFirstTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(buf[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(buf[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(buf[offProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(buf[offBaseSequence:], 0xffffffff)
	binary.BigEndian.PutUint32(buf[offRecordCount:], 1)
	buf = append(buf, rec...)
	binary.BigEndian.PutUint32(buf[offCRC:], crc32.Checksum(buf[offAttributes:], castagnoli))
	return buf
}

// ParseMarker decodes the marker of a whole, uncompressed control batch
// (batch holds exactly the batch). Kafka's control batches hold one
// record; a batch whose first record has no version-0 key of a known type,
// or a value shorter than version and epoch, is ErrCorruptMessage.
func ParseMarker(batch []byte) (Marker, error) {
	if len(batch) < BatchHeaderSize {
		return Marker{}, fmt.Errorf("control batch of %d bytes: %w", len(batch), ErrCorruptMessage)
	}
	attrs := int16(binary.BigEndian.Uint16(batch[offAttributes:]))
	if attrs&AttrControl == 0 {
		return Marker{}, fmt.Errorf("not a control batch (attributes %#x): %w", attrs, ErrCorruptMessage)
	}
	if attrs&0x07 != 0 {
		return Marker{}, fmt.Errorf("compressed control batch (attributes %#x): %w", attrs, ErrCorruptMessage)
	}
	if n := int32(binary.BigEndian.Uint32(batch[offRecordCount:])); n != 1 {
		return Marker{}, fmt.Errorf("control batch with %d records: %w", n, ErrCorruptMessage)
	}
	rec := batch[BatchHeaderSize:]
	length, n := binary.Varint(rec)
	if n <= 0 || length < 0 || int64(len(rec)-n) < length {
		return Marker{}, fmt.Errorf("control record length: %w", ErrCorruptMessage)
	}
	rec = rec[n : n+int(length)]
	if len(rec) < 1 {
		return Marker{}, fmt.Errorf("empty control record: %w", ErrCorruptMessage)
	}
	rec = rec[1:]            // attributes
	for i := 0; i < 2; i++ { // timestamp delta, offset delta
		if _, n := binary.Varint(rec); n <= 0 {
			return Marker{}, fmt.Errorf("control record header: %w", ErrCorruptMessage)
		} else {
			rec = rec[n:]
		}
	}
	field := func(what string) ([]byte, error) {
		l, n := binary.Varint(rec)
		if n <= 0 || l < 0 || int64(len(rec)-n) < l {
			return nil, fmt.Errorf("control record %s: %w", what, ErrCorruptMessage)
		}
		v := rec[n : n+int(l)]
		rec = rec[n+int(l):]
		return v, nil
	}
	key, err := field("key")
	if err != nil {
		return Marker{}, err
	}
	if len(key) < controlKeySize {
		return Marker{}, fmt.Errorf("control record key of %d bytes: %w", len(key), ErrCorruptMessage)
	}
	if v := int16(binary.BigEndian.Uint16(key)); v != 0 {
		return Marker{}, fmt.Errorf("control record key version %d: %w", v, ErrCorruptMessage)
	}
	typ := int16(binary.BigEndian.Uint16(key[2:]))
	if typ != ControlAbort && typ != ControlCommit {
		return Marker{}, fmt.Errorf("control record type %d is not a transaction marker: %w", typ, ErrCorruptMessage)
	}
	val, err := field("value")
	if err != nil {
		return Marker{}, err
	}
	if len(val) < controlValueSize {
		return Marker{}, fmt.Errorf("transaction marker value of %d bytes: %w", len(val), ErrCorruptMessage)
	}
	return Marker{Commit: typ == ControlCommit, CoordinatorEpoch: int32(binary.BigEndian.Uint32(val[2:]))}, nil
}
