// Package coordlog is what the coordinators share about the internal
// topics they persist to (__consumer_offsets, __transaction_state): the
// magic-2 record batches they write and read back, transactional and
// control batches included, and the clock they are driven by.
package coordlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Clock is a coordinator's time source.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled callback.
type Timer interface{ Stop() bool }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Record is one key/value; a nil Value is a tombstone.
type Record struct {
	Key, Value []byte
}

// Batch attribute bits (Kafka's RecordBatch).
const (
	attrCodec         = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Control record types, the second field of a control record's key.
const (
	ControlAbort  = 0
	ControlCommit = 1
)

// Producer is the producer a batch is written for; NoProducer for the
// coordinators' own records.
type Producer struct {
	ID            int64
	Epoch         int16
	Transactional bool
}

// NoProducer marks a batch written by no producer.
var NoProducer = Producer{ID: -1, Epoch: -1}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode builds an uncompressed magic-2 record batch of recs with
// timestamp nowMs; the broker assigns its offsets on append. A
// transactional batch starts at sequence 0, as Kafka's group coordinator
// writes TxnOffsetCommit batches (coordinator appends are not sequence
// checked).
func Encode(recs []Record, nowMs int64, p Producer) []byte {
	var body []byte
	for i, r := range recs {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		// Length counts what follows it: encode once with a zero length
		// (one varint byte) to measure.
		rec.Length = int32(len(rec.AppendTo(nil)) - 1)
		body = rec.AppendTo(body)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: nowMs, MaxTimestamp: nowMs, ProducerID: p.ID, ProducerEpoch: p.Epoch, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: body,
	}
	if p.Transactional {
		b.Attributes |= attrTransactional
		b.FirstSequence = 0
	}
	b.Length = int32(49 + len(body))
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], castagnoli))
	return out
}

// EncodeControl builds a control batch holding one end-transaction marker
// for producer p (tests write what a partition leader writes on
// WriteTxnMarkers).
func EncodeControl(p Producer, commit bool, coordinatorEpoch int32, nowMs int64) []byte {
	typ := int16(ControlAbort)
	if commit {
		typ = ControlCommit
	}
	key := binary.BigEndian.AppendUint16(nil, 0)
	key = binary.BigEndian.AppendUint16(key, uint16(typ))
	val := binary.BigEndian.AppendUint16(nil, 0)
	val = binary.BigEndian.AppendUint32(val, uint32(coordinatorEpoch))
	p.Transactional = true
	out := Encode([]Record{{Key: key, Value: val}}, nowMs, p)
	// Attributes are at byte 21 (after the CRC): set the control bit and
	// recompute the CRC. Control batches carry no sequence.
	binary.BigEndian.PutUint16(out[21:23], binary.BigEndian.Uint16(out[21:23])|attrControl)
	binary.BigEndian.PutUint32(out[53:57], 0xffffffff)
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], castagnoli))
	return out
}

// Batch is a decoded batch's header.
type Batch struct {
	FirstOffset, LastOffset int64
	Producer                Producer
	Control                 bool
}

// ControlType returns the type of a control record from its key:
// ControlAbort or ControlCommit.
func ControlType(key []byte) (int16, error) {
	if len(key) < 4 {
		return 0, errors.New("short control record key")
	}
	return int16(binary.BigEndian.Uint16(key[2:4])), nil
}

// Decode calls fn for every record of the whole batches in data, in
// order, and returns the offset after the last batch. Compressed batches
// are not written by the coordinators and are skipped.
func Decode(data []byte, fn func(b Batch, offset int64, r Record) error) (int64, error) {
	next := int64(-1)
	for len(data) >= 12 {
		size := int(int32(binary.BigEndian.Uint32(data[8:12]))) + 12
		if size < 61 || size > len(data) {
			return next, fmt.Errorf("truncated batch (%d of %d bytes)", len(data), size)
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(data[:size]); err != nil {
			return next, fmt.Errorf("decode batch: %w", err)
		}
		data = data[size:]
		next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		if b.Attributes&attrCodec != 0 {
			continue
		}
		hdr := Batch{
			FirstOffset: b.FirstOffset, LastOffset: next - 1,
			Producer: Producer{ID: b.ProducerID, Epoch: b.ProducerEpoch, Transactional: b.Attributes&attrTransactional != 0},
			Control:  b.Attributes&attrControl != 0,
		}
		recs := b.Records
		for i := int32(0); i < b.NumRecords; i++ {
			n, w := binary.Varint(recs)
			if w <= 0 || int(n) < 0 || w+int(n) > len(recs) {
				return next, errors.New("truncated record")
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:w+int(n)]); err != nil {
				return next, fmt.Errorf("decode record: %w", err)
			}
			recs = recs[w+int(n):]
			if err := fn(hdr, b.FirstOffset+int64(r.OffsetDelta), Record{Key: r.Key, Value: r.Value}); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// Reader reads a coordinator's partition: whole batches from offset from
// up to the log end; an empty result means the end.
type Reader interface {
	Read(ctx context.Context, partition int32, from int64) ([]byte, error)
}

// Replay reads partition p from its start to its end and calls fn for
// every record, as a coordinator loads its state when it becomes the
// partition's leader. Read errors are retried every retry until ctx
// ends; a batch that does not decode ends the replay early (what was
// read before it stands). It returns the records seen and ctx's error.
func Replay(ctx context.Context, r Reader, p int32, retry time.Duration, logger *slog.Logger, fn func(b Batch, offset int64, rec Record)) (int, error) {
	from, n := int64(0), 0
	for {
		data, err := r.Read(ctx, p, from)
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			logger.Warn("read coordinator partition", "partition", p, "offset", from, "err", err)
			select {
			case <-ctx.Done():
				return n, ctx.Err()
			case <-time.After(retry):
			}
			continue
		}
		if len(data) == 0 {
			return n, nil
		}
		next, err := Decode(data, func(b Batch, off int64, rec Record) error {
			n++
			fn(b, off, rec)
			return nil
		})
		if err != nil {
			logger.Warn("read coordinator partition: stop at a bad batch", "partition", p, "offset", from, "err", err)
			return n, nil
		}
		if next <= from {
			return n, nil
		}
		from = next
	}
}

// Pending is an append a coordinator has submitted: it returns the
// batch's first offset once the batch is committed (acks=-1), or the
// error that stopped it, waiting at most until ctx ends.
type Pending func(ctx context.Context) (int64, error)
