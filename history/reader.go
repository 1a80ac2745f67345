package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrTruncated is matched (errors.Is) by a LineError for a torn last line: a
// line without its newline that does not decode, as a run cut short by a
// crash leaves behind. Everything before it is intact.
var ErrTruncated = errors.New("torn last line (history truncated)")

// LineError is a history line that cannot be read, with its place.
type LineError struct {
	File string
	Line int64
	Torn bool
	Err  error
}

func (e *LineError) Error() string {
	if e.Torn {
		return fmt.Sprintf("%s:%d: %v: %v", e.File, e.Line, ErrTruncated, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTruncated) true for a torn line.
func (e *LineError) Is(target error) bool { return e.Torn && target == ErrTruncated }

// Reader reads a history line by line; memory stays bounded by the longest
// line.
type Reader struct {
	r    *bufio.Reader
	name string
	h    Header
	line int64 // line number of the last line read
	n    int64 // ops returned
	// consumed is the number of bytes read; lineOff the byte offset of the
	// last line read.
	consumed int64
	lineOff  int64
	long     []byte
	last     []byte
	done     bool
}

// NewReader reads the header of the history in r; name is used in errors.
func NewReader(r io.Reader, name string) (*Reader, error) {
	hr := &Reader{r: bufio.NewReaderSize(r, 1<<20), name: name}
	b, last, err := hr.readLine()
	if err == io.EOF {
		return nil, &LineError{File: name, Line: 1, Err: errors.New("empty history: no header line")}
	}
	if err != nil {
		return nil, &LineError{File: name, Line: 1, Err: err}
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &hr.h); err != nil || hr.h.Version == 0 {
		if err == nil {
			err = errors.New(`no "isrlab_history" version`)
		}
		return nil, &LineError{File: name, Line: 1, Torn: last, Err: fmt.Errorf("bad header: %w", err)}
	}
	if hr.h.Version > Version {
		return nil, &LineError{File: name, Line: 1, Err: fmt.Errorf("history format version %d is newer than this isrlab reads (%d)", hr.h.Version, Version)}
	}
	return hr, nil
}

// Header returns the history's header.
func (r *Reader) Header() Header { return r.h }

// Line returns the line number (1-based, the header is line 1) of the last
// line read.
func (r *Reader) Line() int64 { return r.line }

// Offset returns the byte offset in the file of the last line read.
func (r *Reader) Offset() int64 { return r.lineOff }

// ReadOpAt decodes the op on the line that starts at byte offset off of the
// history in ra (an offset that Reader.Offset or Scan reported).
func ReadOpAt(ra io.ReaderAt, off int64, name string, op *Op) error {
	br := bufio.NewReaderSize(io.NewSectionReader(ra, off, 1<<62), 4096)
	b, err := br.ReadSlice('\n')
	var long []byte
	for err == bufio.ErrBufferFull {
		long = append(long, b...)
		b, err = br.ReadSlice('\n')
	}
	if long != nil {
		b = append(long, b...)
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("%s: read at byte %d: %w", name, off, err)
	}
	if err := DecodeOp(bytes.TrimRight(b, "\n"), op); err != nil {
		return fmt.Errorf("%s: line at byte %d: %w", name, off, err)
	}
	return nil
}

// Count returns the number of ops read so far; the op just returned by Next
// is at position Count()-1.
func (r *Reader) Count() int64 { return r.n }

// readLine returns the next line without its newline; last is true when the
// line had no newline (end of file).
func (r *Reader) readLine() (b []byte, last bool, err error) {
	r.line++
	r.lineOff = r.consumed
	b, err = r.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], b...)
		for err == bufio.ErrBufferFull {
			b, err = r.r.ReadSlice('\n')
			r.long = append(r.long, b...)
		}
		b = r.long
	}
	r.consumed += int64(len(b))
	if err == io.EOF {
		if len(b) == 0 {
			r.line--
			return nil, false, io.EOF
		}
		r.last = b
		return b, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	r.last = b[:len(b)-1]
	return r.last, false, nil
}

// Next decodes the next op into op, reusing its slices. It returns io.EOF at
// the end, and a *LineError for a line that does not decode; after a torn
// last line (errors.Is(err, ErrTruncated)) the next call returns io.EOF.
// Blank lines are allowed and carry nothing.
func (r *Reader) Next(op *Op) error {
	for {
		if r.done {
			return io.EOF
		}
		b, last, err := r.readLine()
		if err == io.EOF {
			r.done = true
			return io.EOF
		}
		if err != nil {
			r.done = true
			return &LineError{File: r.name, Line: r.line, Err: err}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := DecodeOp(b, op); err != nil {
			if last {
				r.done = true
			}
			return &LineError{File: r.name, Line: r.line, Torn: last, Err: err}
		}
		r.n++
		return nil
	}
}

// LastLine returns the last line read by Skip or Next; it is valid until
// the next call.
func (r *Reader) LastLine() []byte { return r.last }

// Skip moves past the next op without decoding it (for a second pass that
// wants only a few ops). It returns io.EOF at the end.
func (r *Reader) Skip() error {
	for {
		if r.done {
			return io.EOF
		}
		b, _, err := r.readLine()
		if err == io.EOF {
			r.done = true
			return io.EOF
		}
		if err != nil {
			r.done = true
			return &LineError{File: r.name, Line: r.line, Err: err}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		r.n++
		return nil
	}
}

// ReadAll reads every op of the history in r. It is meant for small
// histories (tests, tools); checkers stream with Next.
func ReadAll(r io.Reader, name string) (Header, []Op, error) {
	hr, err := NewReader(r, name)
	if err != nil {
		return Header{}, nil, err
	}
	var ops []Op
	var op Op
	for {
		err := hr.Next(&op)
		if err == io.EOF {
			return hr.Header(), ops, nil
		}
		if err != nil {
			return hr.Header(), ops, err
		}
		ops = append(ops, op.Clone())
	}
}
