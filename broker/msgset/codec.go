package msgset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/klauspost/compress/snappy"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Compression codecs, as the low three attribute bits of every format carry them.
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

// maxInflated bounds what one compressed wrapper or batch may inflate to,
// so a small request cannot make the broker allocate without limit.
const maxInflated = 256 << 20

var errTooLarge = fmt.Errorf("inflates past %d bytes: %w", maxInflated, kerr.CorruptMessage)

// decompress inflates a compressed payload. magic matters for LZ4 only:
// magic 0 message sets carry the frame descriptor checksum of early Kafka
// clients (KAFKA-3160), which Kafka ignores for them.
func decompress(codec int, data []byte, magic int8) ([]byte, error) {
	switch codec {
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("gzip: %v: %w", err, kerr.CorruptMessage)
		}
		out, err := io.ReadAll(io.LimitReader(zr, maxInflated+1))
		if err != nil {
			return nil, fmt.Errorf("gzip: %v: %w", err, kerr.CorruptMessage)
		}
		if len(out) > maxInflated {
			return nil, errTooLarge
		}
		return out, nil
	case codecSnappy:
		return unsnappy(data)
	case codecLZ4:
		return unlz4(data, magic == 0)
	}
	return nil, fmt.Errorf("compression codec %d: %w", codec, kerr.UnsupportedCompressionType)
}

// compress deflates data with codec the way Kafka's Java client and broker
// write it: gzip, xerial-framed snappy, and LZ4 frames in 64 KiB
// independent blocks (with magic 0's checksum quirk when magic is 0).
func compress(codec int, data []byte, magic int8) ([]byte, error) {
	switch codec {
	case codecGzip:
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(data); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case codecSnappy:
		return xerialSnappy(data), nil
	case codecLZ4:
		return lz4Frame(data, magic == 0)
	}
	return nil, fmt.Errorf("compression codec %d: %w", codec, kerr.UnsupportedCompressionType)
}

// xerialMagic starts snappy-java's framed stream (SnappyOutputStream),
// which Kafka's Java producer and broker write.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialBlock = 32 << 10 // snappy-java's default block size

func xerialSnappy(data []byte) []byte {
	out := append([]byte(nil), xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1) // version
	out = binary.BigEndian.AppendUint32(out, 1) // minimum compatible version
	for len(data) > 0 {
		n := min(len(data), xerialBlock)
		block := snappy.Encode(nil, data[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		data = data[n:]
	}
	return out
}

// unsnappy reads xerial-framed or plain snappy, as clients send either.
func unsnappy(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, xerialMagic) {
		return snappyBlock(nil, data)
	}
	if len(data) < 16 {
		return nil, fmt.Errorf("snappy: truncated xerial header: %w", kerr.CorruptMessage)
	}
	var out []byte
	for rest := data[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("snappy: truncated xerial chunk: %w", kerr.CorruptMessage)
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, fmt.Errorf("snappy: xerial chunk of %d bytes past the end: %w", n, kerr.CorruptMessage)
		}
		var err error
		if out, err = snappyBlock(out, rest[4:4+n]); err != nil {
			return nil, err
		}
		rest = rest[4+n:]
	}
	return out, nil
}

// snappyBlock appends the decoded block to dst.
func snappyBlock(dst, block []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("snappy: %v: %w", err, kerr.CorruptMessage)
	}
	if n > maxInflated-len(dst) {
		return nil, errTooLarge
	}
	out, err := snappy.Decode(nil, block)
	if err != nil {
		return nil, fmt.Errorf("snappy: %v: %w", err, kerr.CorruptMessage)
	}
	return append(dst, out...), nil
}

// LZ4 frame layout (lz4 frame format 1.6), as Kafka's KafkaLZ4BlockOutputStream
// writes and KafkaLZ4BlockInputStream reads it.
const (
	lz4Magic        = 0x184D2204
	lz4FLG          = 0x60 // version 01, independent blocks, no checksums, no content size
	lz4BD           = 0x40 // 64 KiB blocks
	lz4Block        = 64 << 10
	lz4Uncompressed = 0x80000000
)

func lz4Frame(data []byte, brokenChecksum bool) ([]byte, error) {
	out := binary.LittleEndian.AppendUint32(nil, lz4Magic)
	out = append(out, lz4FLG, lz4BD)
	out = append(out, lz4HeaderChecksum(out, brokenChecksum))
	buf := make([]byte, lz4.CompressBlockBound(lz4Block))
	for len(data) > 0 {
		n := min(len(data), lz4Block)
		c, err := lz4.CompressBlock(data[:n], buf, nil)
		if err != nil {
			return nil, fmt.Errorf("lz4: %w", err)
		}
		if c == 0 || c >= n { // incompressible: stored as is
			out = binary.LittleEndian.AppendUint32(out, uint32(n)|lz4Uncompressed)
			out = append(out, data[:n]...)
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(c))
			out = append(out, buf[:c]...)
		}
		data = data[n:]
	}
	return binary.LittleEndian.AppendUint32(out, 0), nil // end mark
}

// lz4HeaderChecksum is the frame descriptor checksum over hdr (magic
// included). Kafka before 0.10 hashed the magic too (the broken checksum
// magic 0 keeps); the frame format hashes only the descriptor.
func lz4HeaderChecksum(hdr []byte, broken bool) byte {
	if !broken {
		hdr = hdr[4:]
	}
	return byte(xxh32(hdr, 0) >> 8)
}

func unlz4(data []byte, ignoreChecksum bool) ([]byte, error) {
	bad := func(what string) ([]byte, error) {
		return nil, fmt.Errorf("lz4: %s: %w", what, kerr.CorruptMessage)
	}
	if len(data) < 7 || binary.LittleEndian.Uint32(data) != lz4Magic {
		return bad("not an LZ4 frame")
	}
	flg, bd := data[4], data[5]
	switch {
	case flg>>6 != 1:
		return bad("frame version is not 1")
	case flg&0x02 != 0 || bd&0x8f != 0:
		return bad("reserved descriptor bits set")
	case flg&0x20 == 0:
		return bad("dependent blocks are not supported")
	case flg&0x01 != 0:
		return bad("preset dictionaries are not supported")
	}
	maxBlock := 1 << (8 + 2*int(bd>>4))
	if bd>>4 < 4 {
		return bad("block size code below 4")
	}
	pos := 6
	if flg&0x08 != 0 { // content size
		pos += 8
	}
	if len(data) < pos+1 {
		return bad("truncated frame descriptor")
	}
	if !ignoreChecksum && data[pos] != lz4HeaderChecksum(data[:pos], false) {
		return bad("frame descriptor checksum mismatch")
	}
	pos++
	blockChecksum, contentChecksum := flg&0x10 != 0, flg&0x04 != 0
	var out []byte
	for {
		if len(data)-pos < 4 {
			return bad("truncated block header")
		}
		size := binary.LittleEndian.Uint32(data[pos:])
		pos += 4
		if size == 0 {
			if contentChecksum && len(data)-pos < 4 {
				return bad("truncated content checksum")
			}
			return out, nil
		}
		stored := size&lz4Uncompressed != 0
		size &^= lz4Uncompressed
		if int(size) > maxBlock || int(size) > len(data)-pos {
			return bad(fmt.Sprintf("block of %d bytes (limit %d, %d left)", size, maxBlock, len(data)-pos))
		}
		block := data[pos : pos+int(size)]
		pos += int(size)
		if blockChecksum {
			if len(data)-pos < 4 {
				return bad("truncated block checksum")
			}
			if binary.LittleEndian.Uint32(data[pos:]) != xxh32(block, 0) {
				return bad("block checksum mismatch")
			}
			pos += 4
		}
		if len(out)+maxBlock > maxInflated {
			return nil, errTooLarge
		}
		if stored {
			out = append(out, block...)
			continue
		}
		start := len(out)
		out = append(out, make([]byte, maxBlock)...)
		n, err := lz4.UncompressBlock(block, out[start:])
		if err != nil {
			return bad(err.Error())
		}
		out = out[:start+n]
	}
}

// xxh32 is the 32-bit xxHash the LZ4 frame format checksums with.
func xxh32(b []byte, seed uint32) uint32 {
	const (
		p1 = 2654435761
		p2 = 2246822519
		p3 = 3266489917
		p4 = 668265263
		p5 = 374761393
	)
	rotl := func(x uint32, r uint) uint32 { return x<<r | x>>(32-r) }
	round := func(acc, in uint32) uint32 { return rotl(acc+in*p2, 13) * p1 }
	n := uint32(len(b))
	var h uint32
	if len(b) >= 16 {
		v1, v2, v3, v4 := seed+p1+p2, seed+p2, seed, seed-p1
		for len(b) >= 16 {
			v1 = round(v1, binary.LittleEndian.Uint32(b))
			v2 = round(v2, binary.LittleEndian.Uint32(b[4:]))
			v3 = round(v3, binary.LittleEndian.Uint32(b[8:]))
			v4 = round(v4, binary.LittleEndian.Uint32(b[12:]))
			b = b[16:]
		}
		h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
	} else {
		h = seed + p5
	}
	h += n
	for len(b) >= 4 {
		h = rotl(h+binary.LittleEndian.Uint32(b)*p3, 17) * p4
		b = b[4:]
	}
	for _, c := range b {
		h = rotl(h+uint32(c)*p5, 11) * p1
	}
	h ^= h >> 15
	h *= p2
	h ^= h >> 13
	h *= p3
	h ^= h >> 16
	return h
}
