package workloads

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// batch is what one producer's n consecutive records hold, end to end:
// what a record batch's codec sees.
func batch(p payloads, n int) []byte {
	var b bytes.Buffer
	for i := range n {
		b.Write(p.value(i))
	}
	return b.Bytes()
}

func compressed(t *testing.T, codec string, in []byte) int {
	t.Helper()
	var b bytes.Buffer
	var w interface {
		Write([]byte) (int, error)
		Close() error
	}
	switch codec {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&b, gzip.BestCompression)
	case "zstd":
		z, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
		if err != nil {
			t.Fatal(err)
		}
		w = z
	case "lz4":
		w = lz4.NewWriter(&b)
	}
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Len()
}

// TestRandomPayloadsIncompressible: a batch of the default (random)
// payloads does not shrink below 95% under gzip, zstd or lz4 at their
// best, for small and large records and a batch bigger than the pool;
// compressible payloads shrink to a few percent.
func TestRandomPayloadsIncompressible(t *testing.T) {
	for _, c := range []struct{ size, n int }{{100, 10000}, {1000, 1000}, {10000, 100}, {1 << 20, 6}} {
		for _, codec := range []string{"gzip", "zstd", "lz4"} {
			t.Run(fmt.Sprintf("%dB/%s", c.size, codec), func(t *testing.T) {
				in := batch(newPayloads("", c.size, 7), c.n)
				if got := compressed(t, codec, in); float64(got) < 0.95*float64(len(in)) {
					t.Errorf("random: %d bytes compress to %d (%.1f%%)", len(in), got, 100*float64(got)/float64(len(in)))
				}
				in = batch(newPayloads(PayloadCompressible, c.size, 7), c.n)
				if got := compressed(t, codec, in); float64(got) > 0.05*float64(len(in)) {
					t.Errorf("compressible: %d bytes compress to %d (%.1f%%)", len(in), got, 100*float64(got)/float64(len(in)))
				}
			})
		}
	}
}

// TestPayloads: values have the record size, consecutive values differ,
// the pool is the seed's (the same seed, the same bytes; another seed,
// others), and the wrap-around stays inside the pool.
func TestPayloads(t *testing.T) {
	p := newPayloads(PayloadRandom, 1000, 3)
	if !bytes.Equal(batch(p, 50), batch(newPayloads("", 1000, 3), 50)) {
		t.Error("the same seed gave other payloads")
	}
	if bytes.Equal(p.value(0), newPayloads("", 1000, 4).value(0)) {
		t.Error("another seed gave the same payload")
	}
	seen := map[string]bool{}
	for i := range 20000 { // past the pool's end: it wraps
		v := p.value(i)
		if len(v) != 1000 || cap(v) != 1000 {
			t.Fatalf("value %d: len %d cap %d", i, len(v), cap(v))
		}
		if i < 4000 {
			if seen[string(v)] {
				t.Fatalf("value %d repeats an earlier one", i)
			}
			seen[string(v)] = true
		}
	}
	c := newPayloads(PayloadCompressible, 64, 3)
	if v := c.value(9); !bytes.Equal(v, bytes.Repeat([]byte("a"), 64)) {
		t.Errorf("compressible value %q", v)
	}
}

// BenchmarkPayload: taking a record's value allocates nothing.
func BenchmarkPayload(b *testing.B) {
	p := newPayloads("", 1000, 1)
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		n += len(p.value(i))
	}
	if n == 0 {
		b.Fatal("no bytes")
	}
}
