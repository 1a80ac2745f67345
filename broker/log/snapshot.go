package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SnapshotFileSuffix names a producer state snapshot, <offset>.snapshot
// (the offset zero-padded like a segment's), as Kafka names them. The
// snapshot holds the state of every batch below the offset.
const SnapshotFileSuffix = ".snapshot"

// snapshotVersion is the version of isrlab's snapshot format:
//
//	version int16, crc32c uint32 (of everything after it), offset int64,
//	producer count int32, per producer:
//	  id int64, epoch int16, coordinator epoch int32,
//	  transaction first offset int64, last timestamp int64,
//	  batch count int32, per batch: first seq int32, last seq int32,
//	    first offset int64, last offset int64, max timestamp int64
//	completed-transaction count int32, per transaction:
//	  producer id int64, first offset int64, last offset int64, aborted int8
const snapshotVersion = 1

const (
	snapshotHeader   = 2 + 4
	snapProducerSize = 8 + 2 + 4 + 8 + 8 + 4
	snapBatchSize    = 4 + 4 + 8 + 8 + 8
	snapTxnSize      = 8 + 8 + 8 + 1
)

// EncodeSnapshot serializes ps (its MapEndOffset is the snapshot's offset).
func EncodeSnapshot(ps *ProducerState) []byte {
	c := ps.clone()
	ids := make([]int64, 0, len(c.producers))
	for id := range c.producers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	buf := make([]byte, snapshotHeader, 64+len(ids)*(snapProducerSize+snapBatchSize))
	binary.BigEndian.PutUint16(buf, snapshotVersion)
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.mapEnd))
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(ids)))
	for _, id := range ids {
		e := c.producers[id]
		buf = binary.BigEndian.AppendUint64(buf, uint64(e.ID))
		buf = binary.BigEndian.AppendUint16(buf, uint16(e.Epoch))
		buf = binary.BigEndian.AppendUint32(buf, uint32(e.CoordinatorEpoch))
		buf = binary.BigEndian.AppendUint64(buf, uint64(e.TxnFirstOffset))
		buf = binary.BigEndian.AppendUint64(buf, uint64(e.LastTimestamp))
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.Batches)))
		for _, b := range e.Batches {
			buf = binary.BigEndian.AppendUint32(buf, uint32(b.FirstSeq))
			buf = binary.BigEndian.AppendUint32(buf, uint32(b.LastSeq))
			buf = binary.BigEndian.AppendUint64(buf, uint64(b.FirstOffset))
			buf = binary.BigEndian.AppendUint64(buf, uint64(b.LastOffset))
			buf = binary.BigEndian.AppendUint64(buf, uint64(b.MaxTimestamp))
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(c.unreplicated)))
	for _, t := range c.unreplicated {
		buf = binary.BigEndian.AppendUint64(buf, uint64(t.ProducerID))
		buf = binary.BigEndian.AppendUint64(buf, uint64(t.FirstOffset))
		buf = binary.BigEndian.AppendUint64(buf, uint64(t.LastOffset))
		var ab byte
		if t.Aborted {
			ab = 1
		}
		buf = append(buf, ab)
	}
	binary.BigEndian.PutUint32(buf[2:], crc32c(buf[snapshotHeader:]))
	return buf
}

// DecodeSnapshot parses and checks a snapshot: version, checksum, sizes,
// and that every offset in it lies below the snapshot's offset.
func DecodeSnapshot(data []byte) (*ProducerState, error) {
	if len(data) < snapshotHeader+8+4+4 {
		return nil, fmt.Errorf("snapshot of %d bytes is too short", len(data))
	}
	if v := binary.BigEndian.Uint16(data); v != snapshotVersion {
		return nil, fmt.Errorf("snapshot version %d, want %d", v, snapshotVersion)
	}
	if got, want := crc32c(data[snapshotHeader:]), binary.BigEndian.Uint32(data[2:]); got != want {
		return nil, fmt.Errorf("snapshot checksum %08x, header says %08x", got, want)
	}
	d := data[snapshotHeader:]
	take := func(n int) []byte {
		if len(d) < n {
			return nil
		}
		v := d[:n]
		d = d[n:]
		return v
	}
	short := errors.New("snapshot ends early")
	hdr := take(12)
	ps := newProducerState(int64(binary.BigEndian.Uint64(hdr)))
	if ps.mapEnd < 0 {
		return nil, fmt.Errorf("snapshot offset %d", ps.mapEnd)
	}
	n := binary.BigEndian.Uint32(hdr[8:])
	if uint64(n)*snapProducerSize > uint64(len(d)) {
		return nil, short
	}
	for i := uint32(0); i < n; i++ {
		p := take(snapProducerSize)
		if p == nil {
			return nil, short
		}
		e := &ProducerEntry{
			ID:               int64(binary.BigEndian.Uint64(p)),
			Epoch:            int16(binary.BigEndian.Uint16(p[8:])),
			CoordinatorEpoch: int32(binary.BigEndian.Uint32(p[10:])),
			TxnFirstOffset:   int64(binary.BigEndian.Uint64(p[14:])),
			LastTimestamp:    int64(binary.BigEndian.Uint64(p[22:])),
		}
		nb := binary.BigEndian.Uint32(p[30:])
		if e.ID < 0 || e.TxnFirstOffset < -1 || e.TxnFirstOffset >= ps.mapEnd || nb > ProducerBatchesKept {
			return nil, fmt.Errorf("snapshot producer %d: bad entry", e.ID)
		}
		if _, dup := ps.producers[e.ID]; dup {
			return nil, fmt.Errorf("snapshot producer %d twice", e.ID)
		}
		for j := uint32(0); j < nb; j++ {
			q := take(snapBatchSize)
			if q == nil {
				return nil, short
			}
			b := ProducerBatch{
				FirstSeq: int32(binary.BigEndian.Uint32(q)), LastSeq: int32(binary.BigEndian.Uint32(q[4:])),
				FirstOffset: int64(binary.BigEndian.Uint64(q[8:])), LastOffset: int64(binary.BigEndian.Uint64(q[16:])),
				MaxTimestamp: int64(binary.BigEndian.Uint64(q[24:])),
			}
			if b.FirstOffset < 0 || b.FirstOffset > b.LastOffset || b.LastOffset >= ps.mapEnd {
				return nil, fmt.Errorf("snapshot producer %d: batch at %d..%d", e.ID, b.FirstOffset, b.LastOffset)
			}
			e.Batches = append(e.Batches, b)
		}
		ps.producers[e.ID] = e
		if e.TxnFirstOffset >= 0 {
			ps.ongoing[e.ID] = e.TxnFirstOffset
		}
	}
	t := take(4)
	if t == nil {
		return nil, short
	}
	nt := binary.BigEndian.Uint32(t)
	if uint64(nt)*snapTxnSize != uint64(len(d)) {
		return nil, fmt.Errorf("snapshot: %d completed transactions in %d bytes", nt, len(d))
	}
	for i := uint32(0); i < nt; i++ {
		q := take(snapTxnSize)
		c := CompletedTxn{ProducerID: int64(binary.BigEndian.Uint64(q)), FirstOffset: int64(binary.BigEndian.Uint64(q[8:])),
			LastOffset: int64(binary.BigEndian.Uint64(q[16:])), Aborted: q[24] == 1}
		if c.FirstOffset < 0 || c.FirstOffset > c.LastOffset || c.LastOffset >= ps.mapEnd || q[24] > 1 {
			return nil, fmt.Errorf("snapshot: completed transaction %d..%d", c.FirstOffset, c.LastOffset)
		}
		ps.unreplicated = append(ps.unreplicated, c)
	}
	return ps, nil
}

func snapshotPath(dir string, offset int64) string {
	return filepath.Join(dir, segmentName(offset)+SnapshotFileSuffix)
}

// writeSnapshot writes ps's snapshot through a temporary file and a
// rename, so a crash leaves the old file or the new one (a torn one fails
// its checksum when read). With sync the file is fsynced first.
func writeSnapshot(dir string, ps *ProducerState, sync bool) (int64, error) {
	data := EncodeSnapshot(ps)
	offset := int64(binary.BigEndian.Uint64(data[snapshotHeader:]))
	path := snapshotPath(dir, offset)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("write producer snapshot: %w", err)
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	return offset, nil
}

// listSnapshots returns the offsets of the snapshot files in dir, sorted.
func listSnapshots(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, SnapshotFileSuffix) {
			continue
		}
		off, err := strconv.ParseInt(strings.TrimSuffix(name, SnapshotFileSuffix), 10, 64)
		if err != nil || off < 0 {
			continue
		}
		out = append(out, off)
	}
	slices.Sort(out)
	return out, nil
}

// removeSnapshots deletes the snapshots for which drop is true.
func removeSnapshots(dir string, drop func(offset int64) bool) error {
	offs, err := listSnapshots(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, off := range offs {
		if drop(off) {
			if err := os.Remove(snapshotPath(dir, off)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
