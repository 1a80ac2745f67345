package history

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"sync"
)

// chunkSize is the unit of parallel decoding: lines are cut into chunks of
// about this size at newlines; workers decode chunks, the caller gets ops in
// order. The ops of a chunk of 256 KiB (about 2,400 lines) fit in a core's
// cache on their way from the worker to the caller; those of 1 MiB did not.
const chunkSize = 1 << 18

type batch struct {
	data      []byte
	firstLine int64 // line number of data's first line
	startOff  int64 // byte offset of data in the file
	atEOF     bool  // data's last line had no newline
	ops       []Op
	offs      []int64 // byte offset of each op's line
	n         int
	err       error
	intern    map[string]string
	arena     readArena
	done      chan struct{}
}

// Scan decodes the rest of the history with `workers` goroutines (0 means
// GOMAXPROCS) and calls fn for every op, in order, on the calling goroutine,
// with the byte offset of its line (for ReadOpAt). The op passed to fn is
// reused after fn returns. Scan returns nil at the
// end of the history, fn's first error, or the first *LineError in order
// (a torn last line matches ErrTruncated); ops before a bad line are
// delivered first. Memory is bounded by a few chunks per worker.
func (r *Reader) Scan(workers int, fn func(op *Op, off int64) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if r.done {
		return nil
	}
	inflight := 2 * workers
	free := make(chan *batch, inflight)
	for range inflight {
		free <- &batch{done: make(chan struct{}, 1)}
	}
	work := make(chan *batch, inflight)
	ordered := make(chan *batch, inflight)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				b.decode(r.name)
				b.done <- struct{}{}
			}
		}()
	}
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		defer close(ordered)
		readErr = r.chunks(free, work, ordered, stop)
	}()

	var err error
	for b := range ordered {
		<-b.done
		if err == nil {
			for i := 0; i < b.n; i++ {
				r.n++
				if err = fn(&b.ops[i], b.offs[i]); err != nil {
					break
				}
			}
			if err == nil && b.err != nil {
				err = b.err
			}
			if err != nil {
				close(stop)
			}
		}
		free <- b
	}
	wg.Wait()
	r.done = true
	if err == nil && readErr != nil {
		err = &LineError{File: r.name, Line: r.line, Err: readErr}
	}
	return err
}

// chunks reads newline-aligned chunks and hands them to the workers and, in
// the same order, to the consumer.
func (r *Reader) chunks(free, work, ordered chan *batch, stop chan struct{}) error {
	var carry []byte
	line := r.line + 1
	off := r.consumed // byte offset of carry[0] / the next chunk
	for {
		var b *batch
		select {
		case b = <-free:
		case <-stop:
			return nil
		}
		buf := append(b.data[:0], carry...)
		if cap(buf) < len(carry)+chunkSize {
			nb := make([]byte, len(carry), len(carry)+chunkSize)
			copy(nb, carry)
			buf = nb
		}
		n, err := io.ReadFull(r.r, buf[len(buf):len(buf)+chunkSize])
		buf = buf[:len(buf)+n]
		eof := err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			free <- b
			return err
		}
		if eof {
			if len(buf) == 0 {
				free <- b
				return nil
			}
			b.data, b.firstLine, b.atEOF, b.startOff = buf, line, buf[len(buf)-1] != '\n', off
			r.consumed = off + int64(len(buf))
			r.line = line + int64(bytes.Count(buf, []byte{'\n'}))
			if b.atEOF {
				r.line++
			}
			r.line--
			carry = nil
			work <- b
			ordered <- b
			return nil
		}
		cut := bytes.LastIndexByte(buf, '\n')
		if cut < 0 {
			// One line longer than a chunk: keep reading it.
			carry = buf
			b.data = nil
			free <- b
			continue
		}
		carry = append(carry[:0:0], buf[cut+1:]...)
		b.data, b.firstLine, b.atEOF, b.startOff = buf[:cut+1], line, false, off
		off += int64(cut + 1)
		r.consumed = off
		line += int64(bytes.Count(b.data, []byte{'\n'}))
		r.line = line - 1
		work <- b
		ordered <- b
	}
}

func (b *batch) decode(name string) {
	b.n, b.err = 0, nil
	b.arena.reset()
	data := b.data
	line := b.firstLine
	for len(data) > 0 {
		lineOff := b.startOff + int64(len(b.data)-len(data))
		i := bytes.IndexByte(data, '\n')
		var l []byte
		last := false
		if i < 0 {
			l, data, last = data, nil, b.atEOF
		} else {
			l, data = data[:i], data[i+1:]
		}
		if len(bytes.TrimSpace(l)) > 0 {
			if b.n == len(b.ops) {
				b.ops = append(b.ops, Op{})
				b.offs = append(b.offs, 0)
			}
			b.offs[b.n] = lineOff
			if b.intern == nil {
				b.intern = map[string]string{}
			}
			if err := decodeOp(l, &b.ops[b.n], b.intern, &b.arena); err != nil {
				b.err = &LineError{File: name, Line: line, Torn: last && len(data) == 0, Err: err}
				return
			}
			b.n++
		}
		line++
	}
}
