package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// AppendOp appends op's JSON encoding (without a newline) to b. Fields at
// their absent value are left out.
func AppendOp(b []byte, op *Op) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, op.Index, 10)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, op.Time, 10)
	b = append(b, `,"process":`...)
	switch op.Process {
	case Nemesis:
		b = append(b, `"nemesis"`...)
	case Cluster:
		b = append(b, `"cluster"`...)
	default:
		if op.Process < 0 {
			b = append(b, `"other"`...)
			break
		}
		b = strconv.AppendInt(b, int64(op.Process), 10)
	}
	if op.Type != TypeNone {
		b = append(b, `,"type":"`...)
		b = append(b, op.Type.String()...)
		b = append(b, '"')
	}
	if op.F != "" {
		b = append(b, `,"f":`...)
		b = appendString(b, op.F)
	}
	if op.Key != "" {
		b = append(b, `,"key":`...)
		b = appendString(b, op.Key)
	}
	if op.Txn != nil {
		b = append(b, `,"value":`...)
		b = appendTxn(b, op.Txn)
	} else if op.RawValue != nil {
		b = append(b, `,"value":`...)
		b = append(b, op.RawValue...)
	} else if op.HasValue {
		b = append(b, `,"value":`...)
		b = strconv.AppendInt(b, op.Value, 10)
	}
	if op.Partition >= 0 {
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(op.Partition), 10)
	}
	if op.Offset >= 0 {
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, op.Offset, 10)
	}
	if op.Group != "" {
		b = append(b, `,"group":`...)
		b = appendString(b, op.Group)
	}
	if op.Committed != nil {
		b = append(b, `,"committed":{`...)
		for i, po := range op.Committed {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendInt(b, int64(po.Partition), 10)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, po.Offset, 10)
		}
		b = append(b, '}')
	}
	if op.Reads != nil {
		b = append(b, `,"offsets":{`...)
		for i, pr := range op.Reads {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendInt(b, int64(pr.Partition), 10)
			b = append(b, `":`...)
			b = appendRecords(b, pr.Records)
		}
		b = append(b, '}')
	}
	if op.Partitions != nil {
		b = append(b, `,"partitions":`...)
		b = appendInts(b, op.Partitions)
	}
	if op.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, op.Error)
	}
	if op.Node != "" {
		b = append(b, `,"node":`...)
		b = appendString(b, op.Node)
	}
	if op.Leader >= 0 {
		b = append(b, `,"leader":`...)
		b = strconv.AppendInt(b, int64(op.Leader), 10)
	}
	if op.Epoch >= 0 {
		b = append(b, `,"epoch":`...)
		b = strconv.AppendInt(b, int64(op.Epoch), 10)
	}
	if op.ISR != nil {
		b = append(b, `,"isr":`...)
		b = appendInts(b, op.ISR)
	}
	if op.HW >= 0 {
		b = append(b, `,"hw":`...)
		b = strconv.AppendInt(b, op.HW, 10)
	}
	if op.CommitAt > 0 {
		b = append(b, `,"commit_at":`...)
		b = strconv.AppendInt(b, op.CommitAt, 10)
	}
	return append(b, '}')
}

func appendInts(b []byte, xs []int32) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\uFFFD"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Writer writes a history as JSONL. It is not safe for concurrent use; see
// Recorder for that.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	n   int64
}

// NewWriter writes h as the header line to w and returns a Writer for the
// ops that follow. h.Version is set to Version.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Version = Version
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode history header: %w", err)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	bw.Write(hb)
	if err := bw.WriteByte('\n'); err != nil {
		return nil, fmt.Errorf("write history header: %w", err)
	}
	return &Writer{w: bw}, nil
}

// Write appends op as one line. Index is written as given.
func (w *Writer) Write(op *Op) error {
	w.buf = AppendOp(w.buf[:0], op)
	w.buf = append(w.buf, '\n')
	if _, err := w.w.Write(w.buf); err != nil {
		return fmt.Errorf("write history op %d: %w", op.Index, err)
	}
	w.n++
	return nil
}

// Count returns the number of ops written.
func (w *Writer) Count() int64 { return w.n }

// Flush writes buffered lines to the underlying writer.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("flush history: %w", err)
	}
	return nil
}
