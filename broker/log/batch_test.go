package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestParseBatches(t *testing.T) {
	one := makeBatch(t, batchSpec{records: 3, valueSize: 10, ts: 1000})
	two := append(append([]byte{}, one...), makeBatch(t, batchSpec{records: 1, valueSize: 5, ts: 2000})...)
	mutate := func(src []byte, f func([]byte)) []byte {
		b := append([]byte{}, src...)
		f(b)
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		max     int
		wantErr error
		want    []BatchInfo
	}{
		{"one batch", one, 0, nil, []BatchInfo{{BaseOffset: 0, LastOffset: 2, FirstTimestamp: 1000, MaxTimestamp: 1002, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 3, Size: len(one)}}},
		{"two batches", two, 0, nil, []BatchInfo{
			{BaseOffset: 0, LastOffset: 2, FirstTimestamp: 1000, MaxTimestamp: 1002, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 3, Size: len(one)},
			{BaseOffset: 0, LastOffset: 0, FirstTimestamp: 2000, MaxTimestamp: 2000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 1, Size: len(two) - len(one)},
		}},
		{"offset and epoch outside crc", mutate(one, func(b []byte) { patchBatch(b, 42, 7) }), 0, nil, []BatchInfo{{BaseOffset: 42, LastOffset: 44, LeaderEpoch: 7, FirstTimestamp: 1000, MaxTimestamp: 1002, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 3, Size: len(one)}}},
		{"empty", nil, 0, ErrCorruptMessage, nil},
		{"short header", one[:40], 0, ErrCorruptMessage, nil},
		{"short batch", one[:len(one)-1], 0, ErrCorruptMessage, nil},
		{"second batch torn", two[:len(two)-3], 0, ErrCorruptMessage, nil},
		{"trailing bytes", append(append([]byte{}, one...), 0, 0, 0), 0, ErrCorruptMessage, nil},
		{"bad crc", mutate(one, func(b []byte) { b[len(b)-1] ^= 0xff }), 0, ErrCorruptMessage, nil},
		{"crc field flipped", mutate(one, func(b []byte) { b[offCRC] ^= 1 }), 0, ErrCorruptMessage, nil},
		{"magic 1", mutate(one, func(b []byte) { b[offMagic] = 1 }), 0, ErrUnsupportedMagic, nil},
		{"length too small", mutate(one, func(b []byte) { binary.BigEndian.PutUint32(b[offBatchLength:], 10) }), 0, ErrCorruptMessage, nil},
		{"negative length", mutate(one, func(b []byte) { binary.BigEndian.PutUint32(b[offBatchLength:], 0xffffffff) }), 0, ErrCorruptMessage, nil},
		{"oversized", one, len(one) - 1, ErrRecordTooLarge, nil},
		{"exactly max", one, len(one), nil, []BatchInfo{{BaseOffset: 0, LastOffset: 2, FirstTimestamp: 1000, MaxTimestamp: 1002, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 3, Size: len(one)}}},
		{"count above delta", mutate(one, func(b []byte) {
			binary.BigEndian.PutUint32(b[offRecordCount:], 9)
			fixCRC(b)
		}), 0, ErrCorruptMessage, nil},
		{"negative delta", mutate(one, func(b []byte) {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 0xfffffffe)
			fixCRC(b)
		}), 0, ErrCorruptMessage, nil},
		{"compressed: more records than uncompressed bytes could hold", compressedBatch(t), 0, nil, []BatchInfo{{BaseOffset: 0, LastOffset: 99, FirstTimestamp: 7, MaxTimestamp: 7, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 100, Attributes: 4, Size: BatchHeaderSize + 20}}},
		{"uncompressed: more records than bytes", mutate(compressedBatch(t), func(b []byte) {
			binary.BigEndian.PutUint16(b[offAttributes:], 0)
			fixCRC(b)
		}), 0, ErrCorruptMessage, nil},
		{"negative base offset", mutate(one, func(b []byte) { patchBatch(b, -5, 0) }), 0, ErrCorruptMessage, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]byte{}, tt.data...)
			got, err := ParseBatches(tt.data, tt.max)
			if !bytes.Equal(before, tt.data) {
				t.Fatal("ParseBatches modified its input")
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d batches, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("batch %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// compressedBatch is a zstd-flagged batch of 100 records in 20 opaque bytes: the
// log never decompresses, so only the header is checked.
func compressedBatch(t *testing.T) []byte {
	b := make([]byte, BatchHeaderSize+20)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-logOverhead))
	b[offMagic] = 2
	binary.BigEndian.PutUint16(b[offAttributes:], 4)
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 99)
	binary.BigEndian.PutUint64(b[offFirstTimestamp:], 7)
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], 7)
	binary.BigEndian.PutUint64(b[offProducerID:], ^uint64(0))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], 0xffff)
	binary.BigEndian.PutUint32(b[offBaseSequence:], 0xffffffff)
	binary.BigEndian.PutUint32(b[offRecordCount:], 100)
	fixCRC(b)
	return b
}

func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32c(b[offAttributes:]))
}

func FuzzParseBatches(f *testing.F) {
	f.Add(makeBatch(f, batchSpec{records: 2, valueSize: 4, ts: 5}), 0)
	f.Add(append(makeBatch(f, batchSpec{records: 1}), makeBatch(f, batchSpec{records: 3, valueSize: 1})...), 1000)
	f.Add([]byte{}, 0)
	f.Add(make([]byte, BatchHeaderSize), 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		got, err := ParseBatches(data, max)
		if err != nil {
			return
		}
		// Anything accepted re-parses identically and covers the input exactly.
		total := 0
		for _, b := range got {
			// Walking the records of any accepted batch must not panic either.
			firstRecordAtOrAfter(data[total:], b, b.FirstTimestamp, b.BaseOffset)
			total += b.Size
			if b.LastOffset < b.BaseOffset || b.Size < BatchHeaderSize {
				t.Fatalf("accepted nonsense batch %+v", b)
			}
		}
		if total != len(data) {
			t.Fatalf("batches cover %d of %d bytes", total, len(data))
		}
		again, err := ParseBatches(append([]byte{}, data...), max)
		if err != nil || len(again) != len(got) {
			t.Fatalf("re-parse: %v", err)
		}
		for i := range got {
			if again[i] != got[i] {
				t.Fatalf("re-parse batch %d: %+v != %+v", i, again[i], got[i])
			}
		}
	})
}
