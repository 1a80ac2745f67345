package msgset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"

	klog "github.com/isrlab/isrlab/broker/log"
)

// legacySet encodes recs as a magic message set, compressed into one
// wrapper when codec is set; offsets are what a producer sends (0..n-1,
// the wrapper's the last for magic 1).
func legacySet(t testing.TB, magic int8, codec int, recs []record) []byte {
	t.Helper()
	var set []byte
	for i, r := range recs {
		set = appendMessage(set, message{offset: int64(i), magic: magic, ts: r.ts, key: r.key, value: r.value})
	}
	if codec == codecNone {
		return set
	}
	value, err := compress(codec, set, magic)
	if err != nil {
		t.Fatal(err)
	}
	maxTs := int64(noTimestamp)
	for _, r := range recs {
		maxTs = max(maxTs, r.ts)
	}
	return appendMessage(nil, message{offset: int64(len(recs) - 1), magic: magic, attrs: int8(codec), ts: maxTs, value: value})
}

func sample(n int, ts int64) []record {
	var recs []record
	for i := 0; i < n; i++ {
		r := record{ts: ts, value: []byte(fmt.Sprintf("value-%d-%s", i, bytes.Repeat([]byte("x"), i%50)))}
		if i%3 != 0 {
			r.key = []byte(fmt.Sprintf("k%d", i))
		}
		if ts >= 0 {
			r.ts = ts + int64(i)
		}
		recs = append(recs, r)
	}
	recs[len(recs)-1].value = nil // a tombstone keeps its null value
	return recs
}

func sameRecords(t *testing.T, what string, got, want []record, baseOffset int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.offset != baseOffset+int64(i) || g.ts != w.ts || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) ||
			(g.key == nil) != (w.key == nil) || (g.value == nil) != (w.value == nil) {
			t.Fatalf("%s: record %d = %+v, want %+v at offset %d", what, i, g, w, baseOffset+int64(i))
		}
	}
}

// TestToV2 up-converts every magic and codec and checks the batch is one
// the log accepts, with the records, their order and timestamps kept.
func TestToV2(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLZ4} {
			t.Run(fmt.Sprintf("magic%d/codec%d", magic, codec), func(t *testing.T) {
				ts := int64(1_700_000_000_000)
				if magic == 0 {
					ts = noTimestamp
				}
				want := sample(40, ts)
				batch, err := ToV2(legacySet(t, magic, codec, want), false)
				if err != nil {
					t.Fatal(err)
				}
				infos, err := klog.ParseBatches(batch, 0)
				if err != nil || len(infos) != 1 {
					t.Fatalf("the log rejects the batch: %v %+v", err, infos)
				}
				b := infos[0]
				wantMax := int64(noTimestamp)
				if magic == 1 {
					wantMax = ts + 39
				}
				if b.Compression() != codec || b.RecordCount != 40 || b.LastOffset != 39 || b.ProducerID != -1 || b.FirstTimestamp != ts || b.MaxTimestamp != wantMax {
					t.Fatalf("batch header %+v", b)
				}
				recs, err := batchRecords(batch, codec)
				if err != nil {
					t.Fatal(err)
				}
				sameRecords(t, "up-converted", recs, want, 0)
			})
		}
	}
}

// TestFromV2 down-converts batches the way an old fetcher needs them and
// reads the result back as a legacy message set.
func TestFromV2(t *testing.T) {
	ts := int64(1_700_000_000_000)
	for _, magic := range []int8{0, 1} {
		for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLZ4} {
			t.Run(fmt.Sprintf("magic%d/codec%d", magic, codec), func(t *testing.T) {
				want := sample(30, ts)
				b1, err := appendBatch(nil, codec, want[:10])
				if err != nil {
					t.Fatal(err)
				}
				b2, err := appendBatch(nil, codec, want[10:])
				if err != nil {
					t.Fatal(err)
				}
				// Stored at offsets 100 and 110, the way the log patches them.
				putBase(b1, 100)
				putBase(b2, 110)
				stored := append(b1, b2...)
				out, err := FromV2(append(stored, b2[:len(b2)-1]...), magic, 103) // a partial batch at the end is ignored
				if err != nil {
					t.Fatal(err)
				}
				got := readBack(t, out, magic, codec)
				first := 0
				if codec == codecNone {
					first = 3 // uncompressed records below the fetch offset are dropped
				}
				wantTs := want[first:]
				if magic == 0 {
					wantTs = stripTs(wantTs)
				}
				sameRecords(t, "down-converted", got, wantTs, 100+int64(first))
			})
		}
	}
}

func putBase(b []byte, off int64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(off >> (56 - 8*i))
	}
}

func stripTs(recs []record) []record {
	out := append([]record(nil), recs...)
	for i := range out {
		out[i].ts = noTimestamp
	}
	return out
}

// readBack decodes a down-converted set as an old consumer would: wrappers
// are opened and inner offsets made absolute.
func readBack(t *testing.T, set []byte, magic int8, codec int) []record {
	t.Helper()
	msgs, err := readMessages(set)
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, m := range msgs {
		if m.magic != magic {
			t.Fatalf("message magic %d, want %d", m.magic, magic)
		}
		if m.codec() == codecNone {
			out = append(out, record{offset: m.offset, ts: m.ts, key: m.key, value: m.value})
			continue
		}
		if m.codec() != codec {
			t.Fatalf("wrapper codec %d, want %d", m.codec(), codec)
		}
		raw, err := decompress(m.codec(), m.value, magic)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := readMessages(raw)
		if err != nil {
			t.Fatal(err)
		}
		base := int64(0)
		if magic == 1 {
			base = m.offset - inner[len(inner)-1].offset
		}
		for _, im := range inner {
			out = append(out, record{offset: base + im.offset, ts: im.ts, key: im.key, value: im.value})
		}
	}
	return out
}

func TestToV2Rejects(t *testing.T) {
	good := legacySet(t, 1, codecNone, sample(3, 5))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 1
	mixed := append(legacySet(t, 0, codecNone, sample(1, -1)), legacySet(t, 1, codecNone, sample(1, 5))...)
	twoWrappers := append(legacySet(t, 1, codecGzip, sample(2, 5)), legacySet(t, 1, codecGzip, sample(2, 5))...)
	nested := appendMessage(nil, message{offset: 0, magic: 1, attrs: codecGzip, ts: 5, value: mustCompress(t, codecGzip, legacySet(t, 1, codecGzip, sample(2, 5)), 1)})
	innerMagic := appendMessage(nil, message{offset: 0, magic: 1, attrs: codecGzip, ts: 5, value: mustCompress(t, codecGzip, legacySet(t, 0, codecNone, sample(2, -1)), 1)})
	zstd := appendMessage(nil, message{offset: 0, magic: 1, attrs: codecZstd, ts: 5, value: []byte{1}})
	nullWrapper := appendMessage(nil, message{offset: 0, magic: 1, attrs: codecGzip, ts: 5})
	producerAppendTime := appendMessage(nil, message{offset: 0, magic: 1, attrs: attrLogAppendV1, ts: 5, value: []byte("v")})
	tiny := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name      string
		data      []byte
		appendTs  bool
		want      *kerr.Error
		wantMatch string
	}{
		{"CRC", corrupt, false, kerr.CorruptMessage, "CRC"},
		{"size below the overhead", tiny, false, kerr.CorruptMessage, "minimum"},
		{"empty", nil, false, kerr.InvalidRecord, "no whole message"},
		{"only a partial message", good[:20], false, kerr.InvalidRecord, "no whole message"},
		{"mixed magic", mixed, false, kerr.InvalidRecord, "magic"},
		{"two compressed wrappers", twoWrappers, false, kerr.InvalidRecord, "wrappers"},
		{"nested compression", nested, false, kerr.InvalidRecord, "compressed"},
		{"inner magic differs", innerMagic, false, kerr.InvalidRecord, "magic"},
		{"zstd in magic 1", zstd, false, kerr.InvalidRecord, "codec 4"},
		{"null wrapper value", nullWrapper, false, kerr.InvalidRecord, "null"},
		{"producer claims LogAppendTime", producerAppendTime, true, kerr.InvalidTimestamp, "LogAppendTime"},
		{"gzip garbage", appendMessage(nil, message{magic: 1, attrs: codecGzip, ts: 1, value: []byte("nope")}), false, kerr.CorruptMessage, "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ToV2(tc.data, tc.appendTs)
			if !errors.Is(err, tc.want) || !bytes.Contains([]byte(err.Error()), []byte(tc.wantMatch)) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.wantMatch)
			}
		})
	}
	// A CreateTime topic keeps a LogAppendTime-flagged message's timestamp.
	if _, err := ToV2(producerAppendTime, false); err != nil {
		t.Fatalf("CreateTime topic: %v", err)
	}
}

func mustCompress(t *testing.T, codec int, b []byte, magic int8) []byte {
	t.Helper()
	out, err := compress(codec, b, magic)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A wrapper stamped with LogAppendTime gives its timestamp to every inner
// message, and down-conversion of a LogAppendTime batch marks the messages.
func TestLogAppendTime(t *testing.T) {
	set := legacySet(t, 1, codecSnappy, sample(3, 10))
	// Re-stamp the wrapper as a broker would have: attributes and timestamp.
	msgs, _ := readMessages(set)
	w := msgs[0]
	w.attrs |= attrLogAppendV1
	w.ts = 99
	batch, err := ToV2(appendMessage(nil, w), false)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := batchRecords(batch, codecSnappy)
	for _, r := range recs {
		if r.ts != 99 {
			t.Fatalf("inner timestamp %d, want the wrapper's 99", r.ts)
		}
	}
	b, _ := appendBatch(nil, codecNone, sample(2, 10))
	b[batchOffAttrs+1] |= batchLogAppend
	putUint64(b[batchOffMaxTs:], 777)
	out, err := FromV2(b, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readMessages(out)
	for _, m := range got {
		if !m.logAppendTime() || m.ts != 777 {
			t.Fatalf("down-converted %+v, want LogAppendTime 777", m)
		}
	}
}

func putUint64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func TestFromV2SkipsAndRejects(t *testing.T) {
	b, _ := appendBatch(nil, codecNone, sample(2, 10))
	control := append([]byte(nil), b...)
	control[batchOffAttrs+1] |= batchControl
	if out, err := FromV2(control, 1, 0); err != nil || len(out) != 0 {
		t.Fatalf("control batch: %d bytes, %v", len(out), err)
	}
	zstd := append([]byte(nil), b...)
	zstd[batchOffAttrs+1] |= codecZstd
	if _, err := FromV2(zstd, 1, 0); !errors.Is(err, kerr.UnsupportedCompressionType) {
		t.Fatalf("zstd: %v", err)
	}
	if out, err := FromV2(b, 0, 5); err != nil || len(out) != 0 {
		t.Fatalf("everything below the fetch offset: %d bytes, %v", len(out), err)
	}
}

// The LZ4 frames follow the frame format (pierrec/lz4 reads them, checking
// the descriptor checksum) except magic 0's, which carry the checksum
// early Kafka computed; frames pierrec writes, with content and block
// checksums, read back.
func TestLZ4Frames(t *testing.T) {
	data := bytes.Repeat([]byte("isrlab lz4 "), 20000)
	frame, err := lz4Frame(data, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(frame)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pierrec reads our frame: %v (%d bytes)", err, len(got))
	}
	broken, _ := lz4Frame(data, true)
	if _, err := io.ReadAll(lz4.NewReader(bytes.NewReader(broken))); err == nil {
		t.Fatal("the magic 0 checksum passed as the standard one")
	}
	if _, err := unlz4(broken, false); err == nil {
		t.Fatal("magic 0 checksum accepted outside magic 0")
	}
	if got, err := unlz4(broken, true); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("magic 0 frame: %v", err)
	}
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	zw.Apply(lz4.ChecksumOption(true), lz4.BlockChecksumOption(true), lz4.BlockSizeOption(lz4.Block64Kb))
	zw.Write(data)
	zw.Close()
	if got, err := unlz4(buf.Bytes(), false); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pierrec frame: %v", err)
	}
}

func TestXXH32(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0x02cc5d05},
		{"a", 0x550d7456},
		{"abc", 0x32d153ff},
		{"Nobody inspects the spammish repetition", 0xe2293b2f},
	} {
		if got := xxh32([]byte(tc.in), 0); got != tc.want {
			t.Errorf("xxh32(%q) = %08x, want %08x", tc.in, got, tc.want)
		}
	}
}

func TestSnappyFramings(t *testing.T) {
	data := bytes.Repeat([]byte("snappy "), 20000)
	for name, enc := range map[string][]byte{"xerial": xerialSnappy(data), "plain": snappyPlain(data)} {
		if got, err := unsnappy(enc); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzToV2: no produce payload panics the up-conversion; whatever converts
// is a batch the log accepts, and converts back to the same records.
func FuzzToV2(f *testing.F) {
	for _, magic := range []int8{0, 1} {
		for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLZ4} {
			f.Add(legacySet(f, magic, codec, sample(4, 1000)), false)
		}
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 1}, true)
	f.Fuzz(func(t *testing.T, data []byte, appendTs bool) {
		batch, err := ToV2(data, appendTs)
		if err != nil {
			var ke *kerr.Error
			if !errors.As(err, &ke) {
				t.Fatalf("error without a Kafka code: %v", err)
			}
			return
		}
		infos, err := klog.ParseBatches(batch, 0)
		if err != nil || len(infos) != 1 {
			t.Fatalf("converted batch rejected by the log: %v", err)
		}
		recs, err := batchRecords(batch, infos[0].Compression())
		if err != nil || int32(len(recs)) != infos[0].RecordCount {
			t.Fatalf("converted batch does not decode: %v", err)
		}
		magic := Magic(data)
		back, err := FromV2(batch, magic, 0)
		if err != nil {
			t.Fatalf("down-converting the up-converted: %v", err)
		}
		got := readBack(t, back, magic, infos[0].Compression())
		if magic == 0 {
			recs = stripTs(recs)
		}
		sameRecords(t, "round trip", got, recs, 0)
	})
}

// FuzzFromV2: no stored bytes panic the down-conversion, and what it
// writes is a message set that reads back.
func FuzzFromV2(f *testing.F) {
	for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLZ4} {
		b, _ := appendBatch(nil, codec, sample(5, 1000))
		f.Add(b, int8(1), int64(2))
		f.Add(b, int8(0), int64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, magic int8, fetchOffset int64) {
		if magic != 0 && magic != 1 {
			return
		}
		out, err := FromV2(data, magic, fetchOffset)
		if err != nil {
			return
		}
		if _, err := readMessages(out); err != nil {
			t.Fatalf("down-converted set does not read back: %v", err)
		}
	})
}

func snappyPlain(b []byte) []byte { return snappy.Encode(nil, b) }
