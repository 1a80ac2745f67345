// Package msgset converts between Kafka's legacy message sets (message
// format v0 and v1: magic 0 and 1) and v2 record batches, as a Kafka 3.x
// broker does. The log stores v2 batches only, so a produce request before
// v3 is up-converted (LogValidator: offsets from 0, timestamps kept, every
// CRC checked) and a fetch before v4 is down-converted (RecordsUtil:
// control batches dropped, codecs kept, headers lost). Messages are read
// and written with kmsg's MessageV0 and MessageV1.
//
// Errors wrap Kafka's error for the condition (kerr), so a caller answers
// with its code: CORRUPT_MESSAGE for a failed CRC or size, INVALID_RECORD
// for a set Kafka rejects, INVALID_TIMESTAMP, UNSUPPORTED_COMPRESSION_TYPE.
package msgset

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Legacy message layout: offset (8), size (4), then the message: CRC-32
// (IEEE) over everything after it, magic, attributes, timestamp (magic 1
// only), key and value as nullable bytes.
const (
	logOverhead     = 12 // offset + size, outside the size
	offCRC          = 12
	offMagic        = 16
	overheadV0      = 14 // smallest magic 0 message (crc, magic, attributes, two -1 lengths)
	overheadV1      = overheadV0 + 8
	attrCodecMask   = 0x07
	attrLogAppendV1 = 0x08 // timestamp type LogAppendTime (magic 1)
)

// v2 batch header layout (see broker/log).
const (
	batchHeader     = 61
	batchOffLength  = 8
	batchOffMagic   = 16
	batchOffCRC     = 17
	batchOffAttrs   = 21
	batchOffFirstTs = 27
	batchOffMaxTs   = 35
	batchOffCount   = 57
	batchLogAppend  = 0x08
	batchControl    = 0x20
	noTimestamp     = -1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Magic returns the format of the record set in data: the magic byte sits
// at byte 16 in all three formats. -1 if data is shorter.
func Magic(data []byte) int8 {
	if len(data) <= offMagic {
		return -1
	}
	return int8(data[offMagic])
}

// message is one legacy message, decoded; ts is -1 for magic 0.
type message struct {
	offset int64
	magic  int8
	attrs  int8
	ts     int64
	key    []byte
	value  []byte
}

func (m message) codec() int { return int(m.attrs & attrCodecMask) }

// logAppendTime reports a magic 1 message stamped with LogAppendTime.
func (m message) logAppendTime() bool { return m.magic > 0 && m.attrs&attrLogAppendV1 != 0 }

// readMessages decodes the whole messages of a message set, checking each
// CRC. A partial message at the end is left out, as Kafka's log input
// streams do.
func readMessages(data []byte) ([]message, error) {
	var out []message
	for pos := 0; len(data)-pos >= logOverhead; {
		size := int64(int32(binary.BigEndian.Uint32(data[pos+8:])))
		if size < overheadV0 {
			return nil, fmt.Errorf("message at byte %d: size %d below the minimum %d: %w", pos, size, overheadV0, kerr.CorruptMessage)
		}
		if size > int64(len(data)-pos-logOverhead) {
			break
		}
		entry := data[pos : pos+logOverhead+int(size)]
		pos += len(entry)
		m, err := decodeMessage(entry)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", len(out), err)
		}
		out = append(out, m)
	}
	return out, nil
}

func decodeMessage(entry []byte) (message, error) {
	magic := int8(entry[offMagic])
	if want := binary.BigEndian.Uint32(entry[offCRC:]); crc32.ChecksumIEEE(entry[offMagic:]) != want {
		return message{}, fmt.Errorf("CRC mismatch (stored %d): %w", want, kerr.CorruptMessage)
	}
	switch magic {
	case 0:
		var m kmsg.MessageV0
		if err := m.ReadFrom(entry); err != nil {
			return message{}, fmt.Errorf("magic 0: %v: %w", err, kerr.CorruptMessage)
		}
		return message{offset: m.Offset, magic: 0, attrs: m.Attributes, ts: noTimestamp, key: m.Key, value: m.Value}, nil
	case 1:
		if len(entry)-logOverhead < overheadV1 {
			return message{}, fmt.Errorf("magic 1 message of %d bytes: %w", len(entry)-logOverhead, kerr.CorruptMessage)
		}
		var m kmsg.MessageV1
		if err := m.ReadFrom(entry); err != nil {
			return message{}, fmt.Errorf("magic 1: %v: %w", err, kerr.CorruptMessage)
		}
		return message{offset: m.Offset, magic: 1, attrs: m.Attributes, ts: m.Timestamp, key: m.Key, value: m.Value}, nil
	}
	return message{}, fmt.Errorf("magic %d in a legacy message set: %w", magic, kerr.CorruptMessage)
}

// appendMessage encodes one legacy message with its size and CRC.
func appendMessage(dst []byte, m message) []byte {
	start := len(dst)
	if m.magic == 0 {
		v := kmsg.MessageV0{Offset: m.offset, Magic: 0, Attributes: m.attrs, Key: m.key, Value: m.value}
		dst = v.AppendTo(dst)
	} else {
		v := kmsg.MessageV1{Offset: m.offset, Magic: 1, Attributes: m.attrs, Timestamp: m.ts, Key: m.key, Value: m.value}
		dst = v.AppendTo(dst)
	}
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-logOverhead))
	binary.BigEndian.PutUint32(dst[start+offCRC:], crc32.ChecksumIEEE(dst[start+offMagic:]))
	return dst
}

// record is one record on its way between the formats.
type record struct {
	offset     int64
	ts         int64
	key, value []byte
}

// ToV2 up-converts a produce request's legacy message set to one v2
// record batch with offsets from 0, no producer id and the wrappers' codec
// (compression.type=producer), for the log to assign offsets and stamp
// LogAppendTime. logAppendTime is the topic's message.timestamp.type: with
// CreateTime a message's own timestamp is kept; a producer may not claim
// LogAppendTime otherwise (INVALID_TIMESTAMP). The checks are Kafka's
// LogValidator's, in its order.
func ToV2(data []byte, logAppendTime bool) ([]byte, error) {
	outer, err := readMessages(data)
	if err != nil {
		return nil, err
	}
	if len(outer) == 0 {
		return nil, fmt.Errorf("no whole message in %d bytes: %w", len(data), kerr.InvalidRecord)
	}
	magic, codec := outer[0].magic, codecNone
	for i, m := range outer {
		if m.magic != magic {
			return nil, fmt.Errorf("message %d has magic %d, the first has %d: %w", i, m.magic, magic, kerr.InvalidRecord)
		}
		if m.codec() != codecNone {
			codec = m.codec()
		}
	}
	if codec != codecNone && len(outer) > 1 {
		return nil, fmt.Errorf("compressed message set with %d wrappers: %w", len(outer), kerr.InvalidRecord)
	}
	var recs []record
	if codec == codecNone {
		for i, m := range outer {
			if err := checkTimestamp(m, m.ts, logAppendTime); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			recs = append(recs, record{ts: m.ts, key: m.key, value: m.value})
		}
	} else if recs, err = innerRecords(outer[0], logAppendTime); err != nil {
		return nil, err
	}
	return appendBatch(nil, codec, recs)
}

// innerRecords unpacks a compressed wrapper (Kafka's DeepRecordsIterator).
func innerRecords(w message, logAppendTime bool) ([]record, error) {
	switch c := w.codec(); {
	case c == codecZstd || c > codecZstd:
		return nil, fmt.Errorf("wrapper codec %d with magic %d: %w", c, w.magic, kerr.InvalidRecord)
	case w.value == nil:
		return nil, fmt.Errorf("compressed wrapper with a null value: %w", kerr.InvalidRecord)
	}
	raw, err := decompress(w.codec(), w.value, w.magic)
	if err != nil {
		return nil, err
	}
	inner, err := readMessages(raw)
	if err != nil {
		return nil, fmt.Errorf("inside the wrapper: %w", err)
	}
	if len(inner) == 0 {
		return nil, fmt.Errorf("compressed wrapper without inner messages: %w", kerr.InvalidRecord)
	}
	if last := inner[len(inner)-1].offset; w.magic == 1 && w.offset != 0 && w.offset < last {
		return nil, fmt.Errorf("wrapper offset %d below the last inner offset %d: %w", w.offset, last, kerr.InvalidRecord)
	}
	recs := make([]record, 0, len(inner))
	for i, m := range inner {
		switch {
		case m.magic != w.magic:
			return nil, fmt.Errorf("inner message %d has magic %d, the wrapper %d: %w", i, m.magic, w.magic, kerr.InvalidRecord)
		case m.codec() != codecNone:
			return nil, fmt.Errorf("inner message %d is compressed: %w", i, kerr.InvalidRecord)
		}
		ts := m.ts
		if w.logAppendTime() {
			ts = w.ts // the wrapper's stamp stands for every inner message
		}
		if err := checkTimestamp(w, ts, logAppendTime); err != nil {
			return nil, fmt.Errorf("inner message %d: %w", i, err)
		}
		recs = append(recs, record{ts: ts, key: m.key, value: m.value})
	}
	return recs, nil
}

// checkTimestamp is LogValidator.validateTimestamp without the time range
// (message.timestamp.difference.max.ms is not applied): a CreateTime topic
// takes any set timestamp; otherwise the producer may not have claimed
// LogAppendTime.
func checkTimestamp(batch message, ts int64, logAppendTime bool) error {
	if !logAppendTime && ts != noTimestamp {
		return nil
	}
	if batch.logAppendTime() {
		return fmt.Errorf("producer set timestamp type LogAppendTime: %w", kerr.InvalidTimestamp)
	}
	return nil
}

// appendBatch encodes recs as one v2 batch with base offset 0 and
// consecutive offsets, compressed with codec.
func appendBatch(dst []byte, codec int, recs []record) ([]byte, error) {
	first, maxTs := recs[0].ts, int64(noTimestamp)
	var body []byte
	for i, r := range recs {
		maxTs = max(maxTs, r.ts)
		body = appendRecord(body, int32(i), r.ts-first, r.key, r.value)
	}
	if codec != codecNone {
		var err error
		if body, err = compress(codec, body, 2); err != nil {
			return nil, err
		}
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, 0) // base offset: the log assigns it
	dst = binary.BigEndian.AppendUint32(dst, uint32(batchHeader-logOverhead+len(body)))
	dst = binary.BigEndian.AppendUint32(dst, 0xffffffff) // partition leader epoch -1: the log sets it
	dst = append(dst, 2)
	dst = binary.BigEndian.AppendUint32(dst, 0) // CRC, below
	dst = binary.BigEndian.AppendUint16(dst, uint16(codec))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)-1))
	dst = binary.BigEndian.AppendUint64(dst, uint64(first))
	dst = binary.BigEndian.AppendUint64(dst, uint64(maxTs))
	dst = binary.BigEndian.AppendUint64(dst, 0xffffffffffffffff) // no producer id
	dst = binary.BigEndian.AppendUint16(dst, 0xffff)             // producer epoch -1
	dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)         // base sequence -1
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)))
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start+batchOffCRC:], crc32.Checksum(dst[start+batchOffAttrs:], castagnoli))
	return dst, nil
}

// appendRecord encodes one v2 record without headers.
func appendRecord(dst []byte, offsetDelta int32, tsDelta int64, key, value []byte) []byte {
	body := []byte{0} // attributes
	body = kbin.AppendVarlong(body, tsDelta)
	body = kbin.AppendVarint(body, offsetDelta)
	body = kbin.AppendVarintBytes(body, key)
	body = kbin.AppendVarintBytes(body, value)
	body = kbin.AppendVarint(body, 0) // headers
	dst = kbin.AppendVarint(dst, int32(len(body)))
	return append(dst, body...)
}

// FromV2 down-converts the v2 batches read from the log to magic (0 or 1)
// messages for an old fetcher, as Kafka's RecordsUtil.downConvert does:
// control batches are dropped; records of an uncompressed batch below
// fetchOffset are left out, a compressed batch is kept whole (the client
// skips what it did not ask for); each batch keeps its codec, in one
// wrapper; headers are lost. A zstd batch cannot be converted
// (UNSUPPORTED_COMPRESSION_TYPE). A partial batch at the end is ignored.
func FromV2(data []byte, magic int8, fetchOffset int64) ([]byte, error) {
	if magic != 0 && magic != 1 {
		return nil, fmt.Errorf("down-conversion to magic %d", magic)
	}
	out := []byte{}
	for pos := 0; len(data)-pos >= batchHeader; {
		size := int64(int32(binary.BigEndian.Uint32(data[pos+batchOffLength:]))) + logOverhead
		if size < batchHeader {
			return nil, fmt.Errorf("batch at byte %d: length %d: %w", pos, size-logOverhead, kerr.CorruptMessage)
		}
		if size > int64(len(data)-pos) {
			break
		}
		batch := data[pos : pos+int(size)]
		pos += len(batch)
		if m := int8(batch[batchOffMagic]); m != 2 { // the log stores v2 only
			return nil, fmt.Errorf("stored batch with magic %d: %w", m, kerr.CorruptMessage)
		}
		var err error
		if out, err = appendDownConverted(out, batch, magic, fetchOffset); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func appendDownConverted(dst, batch []byte, magic int8, fetchOffset int64) ([]byte, error) {
	attrs := binary.BigEndian.Uint16(batch[batchOffAttrs:])
	if attrs&batchControl != 0 {
		return dst, nil
	}
	codec := int(attrs & attrCodecMask)
	if codec == codecZstd {
		return nil, fmt.Errorf("zstd batch to magic %d: %w", magic, kerr.UnsupportedCompressionType)
	}
	recs, err := batchRecords(batch, codec)
	if err != nil {
		return nil, err
	}
	if codec == codecNone {
		kept := recs[:0]
		for _, r := range recs {
			if r.offset >= fetchOffset {
				kept = append(kept, r)
			}
		}
		recs = kept
	}
	if len(recs) == 0 {
		return dst, nil
	}
	var msgAttrs int8
	if magic == 1 && attrs&batchLogAppend != 0 {
		msgAttrs = attrLogAppendV1
	}
	if codec == codecNone {
		for _, r := range recs {
			dst = appendMessage(dst, message{offset: r.offset, magic: magic, attrs: msgAttrs, ts: r.ts, key: r.key, value: r.value})
		}
		return dst, nil
	}
	// One wrapper: inner offsets relative to the first record for magic 1,
	// absolute for magic 0; the wrapper has the last offset and the
	// largest timestamp.
	var inner []byte
	maxTs := int64(noTimestamp)
	for _, r := range recs {
		off := r.offset
		if magic == 1 {
			off -= recs[0].offset
		}
		inner = appendMessage(inner, message{offset: off, magic: magic, attrs: msgAttrs, ts: r.ts, key: r.key, value: r.value})
		maxTs = max(maxTs, r.ts)
	}
	value, err := compress(codec, inner, magic)
	if err != nil {
		return nil, err
	}
	w := message{offset: recs[len(recs)-1].offset, magic: magic, attrs: msgAttrs | int8(codec), ts: maxTs, value: value}
	return appendMessage(dst, w), nil
}

// batchRecords decodes a v2 batch's records with absolute offsets and
// their timestamps (the batch's for LogAppendTime).
func batchRecords(batch []byte, codec int) ([]record, error) {
	bad := func(what string) ([]record, error) {
		return nil, fmt.Errorf("v2 batch: %s: %w", what, kerr.CorruptMessage)
	}
	base := int64(binary.BigEndian.Uint64(batch))
	attrs := binary.BigEndian.Uint16(batch[batchOffAttrs:])
	firstTs := int64(binary.BigEndian.Uint64(batch[batchOffFirstTs:]))
	maxTs := int64(binary.BigEndian.Uint64(batch[batchOffMaxTs:]))
	count := int32(binary.BigEndian.Uint32(batch[batchOffCount:]))
	body := batch[batchHeader:]
	if codec != codecNone {
		var err error
		if body, err = decompress(codec, body, 2); err != nil {
			return nil, err
		}
	}
	if count < 0 || int64(count) > int64(len(body)) {
		return bad(fmt.Sprintf("record count %d for %d bytes", count, len(body)))
	}
	recs := make([]record, 0, count)
	r := kbin.Reader{Src: body}
	for i := int32(0); i < count; i++ {
		n := r.Varint()
		if !r.Ok() || n < 0 || int(n) > len(r.Src) {
			return bad(fmt.Sprintf("record %d length %d", i, n))
		}
		rr := kbin.Reader{Src: r.Span(int(n))}
		rr.Int8() // attributes
		tsDelta := rr.Varlong()
		offDelta := rr.Varint()
		key := rr.VarintBytes()
		value := rr.VarintBytes()
		headers := rr.Varint()
		for h := int32(0); h < headers && rr.Ok(); h++ {
			rr.VarintBytes()
			rr.VarintBytes()
		}
		if !rr.Ok() || headers < 0 {
			return bad(fmt.Sprintf("record %d does not decode", i))
		}
		ts := firstTs + tsDelta
		if attrs&batchLogAppend != 0 {
			ts = maxTs
		}
		recs = append(recs, record{offset: base + int64(offDelta), ts: ts, key: key, value: value})
	}
	return recs, nil
}
