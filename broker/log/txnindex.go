package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
)

// TxnIndexFileSuffix is the aborted-transaction index of a segment.
const TxnIndexFileSuffix = ".txnindex"

// abortedTxnSize is one entry of Kafka's transaction index: version int16,
// producer id int64, first offset int64, last offset int64, last stable
// offset int64.
const abortedTxnSize = 34

// AbortedTxn is an aborted transaction on a partition: its producer, its
// first offset, the offset of its abort marker (LastOffset) and the
// partition's last stable offset once it was aborted (the first offset of
// the earliest other ongoing transaction, else the offset after the
// marker).
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64
	LastStableOffset int64
}

// AppendAbortedTxn encodes e in Kafka's .txnindex entry format.
func AppendAbortedTxn(buf []byte, e AbortedTxn) []byte {
	buf = binary.BigEndian.AppendUint16(buf, 0)
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.ProducerID))
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.FirstOffset))
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.LastOffset))
	return binary.BigEndian.AppendUint64(buf, uint64(e.LastStableOffset))
}

// ParseTxnIndex decodes a .txnindex file of the segment holding offsets
// [base, next) and checks it: whole entries of version 0, each transaction
// starting at or before its marker, markers inside the segment and in
// increasing order.
func ParseTxnIndex(data []byte, base, next int64) ([]AbortedTxn, error) {
	if len(data)%abortedTxnSize != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %d-byte entries", len(data), abortedTxnSize)
	}
	out := make([]AbortedTxn, 0, len(data)/abortedTxnSize)
	last := int64(-1)
	for pos := 0; pos < len(data); pos += abortedTxnSize {
		d := data[pos:]
		if v := int16(binary.BigEndian.Uint16(d)); v != 0 {
			return nil, fmt.Errorf("entry %d: version %d", len(out), v)
		}
		e := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(d[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(d[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(d[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(d[26:])),
		}
		switch {
		case e.ProducerID < 0 || e.FirstOffset < 0:
			return nil, fmt.Errorf("entry %d: producer %d first offset %d", len(out), e.ProducerID, e.FirstOffset)
		case e.FirstOffset > e.LastOffset:
			return nil, fmt.Errorf("entry %d: first offset %d after its marker at %d", len(out), e.FirstOffset, e.LastOffset)
		case e.LastOffset < base || e.LastOffset >= next:
			return nil, fmt.Errorf("entry %d: marker at %d outside the segment [%d, %d)", len(out), e.LastOffset, base, next)
		case e.LastOffset <= last:
			return nil, fmt.Errorf("entry %d: marker at %d not after the previous one at %d", len(out), e.LastOffset, last)
		}
		last = e.LastOffset
		out = append(out, e)
	}
	return out, nil
}

// txnIndex is one segment's aborted transactions: all entries in memory
// (one per aborted transaction whose marker is in the segment) and
// appended to the file as markers are written.
type txnIndex struct {
	mu      sync.RWMutex
	f       *os.File
	entries []AbortedTxn
}

// openTxnIndex opens the index at path, creating an empty one when create
// is set; it does not read it.
func openTxnIndex(path string, create bool) (*txnIndex, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open transaction index: %w", err)
	}
	return &txnIndex{f: f}, nil
}

// load reads and checks the file for the segment [base, next).
func (t *txnIndex) load(base, next int64) error {
	fi, err := t.f.Stat()
	if err != nil {
		return fmt.Errorf("stat transaction index: %w", err)
	}
	data := make([]byte, fi.Size())
	if _, err := t.f.ReadAt(data, 0); err != nil && len(data) > 0 {
		return fmt.Errorf("read transaction index: %w", err)
	}
	entries, err := ParseTxnIndex(data, base, next)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.entries = entries
	t.mu.Unlock()
	return nil
}

// lastOffset is the newest marker offset in the index, -1 if none.
func (t *txnIndex) lastOffset() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if n := len(t.entries); n > 0 {
		return t.entries[n-1].LastOffset
	}
	return -1
}

func (t *txnIndex) append(e AbortedTxn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := t.f.WriteAt(AppendAbortedTxn(nil, e), int64(len(t.entries))*abortedTxnSize); err != nil {
		return fmt.Errorf("append to transaction index: %w", err)
	}
	t.entries = append(t.entries, e)
	return nil
}

// truncateFrom drops the entries whose marker is at or after offset.
func (t *txnIndex) truncateFrom(offset int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.entries)
	for n > 0 && t.entries[n-1].LastOffset >= offset {
		n--
	}
	if err := t.f.Truncate(int64(n) * abortedTxnSize); err != nil {
		return fmt.Errorf("truncate transaction index: %w", err)
	}
	t.entries = t.entries[:n]
	return nil
}

// collect appends the aborted transactions overlapping [from, upTo) to out.
// done reports that no later segment can hold one: an entry's last stable
// offset at or past upTo means every transaction still open then started
// at or after upTo.
func (t *txnIndex) collect(from, upTo int64, out []AbortedTxn) ([]AbortedTxn, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, e := range t.entries {
		if e.LastOffset >= from && e.FirstOffset < upTo {
			out = append(out, e)
		}
		if e.LastStableOffset >= upTo {
			return out, true
		}
	}
	return out, false
}

func (t *txnIndex) sync() error {
	if err := t.f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("fsync %s: %w", t.f.Name(), err)
	}
	return nil
}

func (t *txnIndex) close() { t.f.Close() }
