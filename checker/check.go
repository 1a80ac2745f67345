package checker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/isrlab/isrlab/history"
)

// Check reads the history that open returns, streaming, once, and returns
// the verdict. A malformed line is an error naming the file and line; a
// torn last line is not: the rest is checked and the verdict is marked
// truncated (and is at best unknown). The operations of examples are read
// back from the same file when it is an io.ReaderAt (an *os.File is);
// otherwise open is called once more for them.
func Check(open OpenFunc, name string, opt Options) (*Verdict, error) {
	opt = opt.withDefaults()
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := history.NewReader(rc, name)
	if err != nil {
		return nil, err
	}
	if opt.Partitions <= 0 {
		opt.Partitions = r.Header().Partitions
	}
	for _, c := range opt.Also {
		c.Start(r.Header())
	}
	a := newAnalysis(opt)
	var torn error
	var lines lineIndex
	var n int64
	err = r.Scan(opt.Workers, func(op *history.Op, off int64) error {
		if n == maxOps {
			return fmt.Errorf("%s: more than %d operations", name, maxOps)
		}
		lines.note(n, off)
		a.add(op, n)
		for _, c := range opt.Also {
			c.Op(op)
		}
		n++
		return nil
	})
	if errors.Is(err, history.ErrTruncated) {
		torn = err
	} else if err != nil {
		return nil, err
	}
	for _, c := range opt.Also {
		c.Finish(torn)
	}
	v := a.verdict(torn)
	if err := fillExamples(v, func(want []int64) (map[int64][]byte, error) {
		if ra, ok := rc.(io.ReaderAt); ok {
			return lines.read(ra, name, want)
		}
		rc.Close()
		return fetchOps(open, name, want)
	}); err != nil {
		return nil, err
	}
	return v, nil
}

// CheckOps checks an in-memory history.
func CheckOps(ops []history.Op, opt Options) *Verdict {
	opt = opt.withDefaults()
	a := newAnalysis(opt)
	for i := range ops {
		a.add(&ops[i], int64(i))
	}
	v := a.verdict(nil)
	fillExamples(v, func(want []int64) (map[int64][]byte, error) {
		got := map[int64][]byte{}
		for _, p := range want {
			if p >= 0 && p < int64(len(ops)) {
				got[p] = history.AppendOp(nil, &ops[p])
			}
		}
		return got, nil
	})
	return v
}

// verdict builds the verdict after the first pass, the linearizability
// pass included.
func (a *analysis) verdict(torn error) *Verdict {
	v := a.finish()
	v.Linearizable, v.lin = a.linearize()
	switch v.Linearizable.Result {
	case "illegal":
		v.Valid = Invalid
	case "unknown":
		if v.Valid == Valid {
			v.Valid = Unknown
		}
	}
	if torn != nil {
		v.TruncatedHistory = true
		v.Truncation = torn.Error()
		if v.Valid == Valid {
			v.Valid = Unknown
		}
	}
	return v
}

func fillExamples(v *Verdict, fetch func([]int64) (map[int64][]byte, error)) error {
	var want []int64
	for _, exs := range v.Examples {
		for _, ex := range exs {
			want = append(want, ex.positions...)
		}
	}
	if len(want) == 0 {
		return nil
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	got, err := fetch(want)
	if err != nil {
		return fmt.Errorf("read example operations: %w", err)
	}
	for _, exs := range v.Examples {
		for i := range exs {
			exs[i].Ops = exs[i].Ops[:0]
			for _, p := range exs[i].positions {
				if b, ok := got[p]; ok {
					exs[i].Ops = append(exs[i].Ops, json.RawMessage(b))
				}
			}
		}
	}
	return nil
}

// lineIndex maps positions (op numbers) back to the history's lines: it
// keeps the byte offset of every lineIndexEvery-th op's line, and reads
// from there.
type lineIndex struct {
	offs []int64
}

const lineIndexEvery = 1024

func (x *lineIndex) note(pos, off int64) {
	if pos%lineIndexEvery == 0 {
		x.offs = append(x.offs, off)
	}
}

// read returns the encoded ops at the wanted positions (sorted).
func (x *lineIndex) read(ra io.ReaderAt, name string, want []int64) (map[int64][]byte, error) {
	got := map[int64][]byte{}
	var br *bufio.Reader
	var at, off int64 // the position and byte offset of br's next line
	var op history.Op
	for _, p := range want {
		if _, done := got[p]; done || p < 0 || p/lineIndexEvery >= int64(len(x.offs)) {
			continue
		}
		if br == nil || p < at || p-at > lineIndexEvery {
			at = p / lineIndexEvery * lineIndexEvery
			off = x.offs[at/lineIndexEvery]
			br = bufio.NewReaderSize(io.NewSectionReader(ra, off, 1<<62), 64<<10)
		}
		for at <= p {
			line, err := readLine(br)
			if err != nil {
				return nil, fmt.Errorf("%s: read at byte %d: %w", name, off, err)
			}
			off += int64(len(line))
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if at == p {
				if err := history.DecodeOp(bytes.TrimRight(line, "\n"), &op); err != nil {
					return nil, fmt.Errorf("%s: line at byte %d: %w", name, off-int64(len(line)), err)
				}
				got[p] = history.AppendOp(nil, &op)
			}
			at++
		}
	}
	return got, nil
}

// readLine returns the next line with its newline (without one at the
// end of the file); it is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), b...)
		for err == bufio.ErrBufferFull {
			b, err = br.ReadSlice('\n')
			long = append(long, b...)
		}
		b = long
	}
	if err == io.EOF && len(b) > 0 {
		err = nil
	}
	return b, err
}

// fetchOps returns the encoded ops at the wanted positions (sorted) with a
// pass that decodes only those lines, for a history that is not an
// io.ReaderAt.
func fetchOps(open OpenFunc, name string, want []int64) (map[int64][]byte, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := history.NewReader(rc, name)
	if err != nil {
		return nil, err
	}
	got := map[int64][]byte{}
	var op history.Op
	for len(want) > 0 {
		if err := r.Skip(); err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}
		pos := r.Count() - 1
		for len(want) > 0 && want[0] < pos {
			want = want[1:]
		}
		if len(want) == 0 || want[0] != pos {
			continue
		}
		if err := history.ReadOpAt(bytes.NewReader(r.LastLine()), 0, name, &op); err != nil {
			return nil, err
		}
		got[pos] = history.AppendOp(nil, &op)
		for len(want) > 0 && want[0] == pos {
			want = want[1:]
		}
	}
	return got, nil
}
