package checker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/isrlab/isrlab/history"
)

// Check reads the history that open returns, streaming, and returns the
// verdict. A malformed line is an error naming the file and line; a torn
// last line is not: the rest is checked and the verdict is marked
// truncated (and is at best unknown). open is called again for the
// linearizability pass, and when examples need their operations.
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
	a := newAnalysis(opt)
	var torn error
	// Ops are located by the byte offset of their line, so that examples
	// can be read back without a second pass over the whole file.
	err = r.Scan(opt.Workers, func(op *history.Op, off int64) error {
		a.add(op, off)
		return nil
	})
	if errors.Is(err, history.ErrTruncated) {
		torn = err
	} else if err != nil {
		return nil, err
	}
	rc.Close()
	replay := func(fn func(*history.Op, int64)) error {
		rc, err := open()
		if err != nil {
			return err
		}
		defer rc.Close()
		r, err := history.NewReader(rc, name)
		if err != nil {
			return err
		}
		err = r.Scan(opt.Workers, func(op *history.Op, off int64) error {
			fn(op, off)
			return nil
		})
		if errors.Is(err, history.ErrTruncated) {
			return nil
		}
		return err
	}
	v, err := a.verdict(torn, replay)
	if err != nil {
		return nil, err
	}
	if err := fillExamples(v, func(want []int64) (map[int64][]byte, error) {
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
	v, _ := a.verdict(nil, func(fn func(*history.Op, int64)) error {
		for i := range ops {
			fn(&ops[i], int64(i))
		}
		return nil
	})
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

// verdict builds the verdict after the first pass; replay runs the
// linearizability pass over the same ops.
func (a *analysis) verdict(torn error, replay func(fn func(*history.Op, int64)) error) (*Verdict, error) {
	v := a.finish()
	var err error
	v.Linearizable, v.lin, err = a.linearize(replay)
	if err != nil {
		return nil, err
	}
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
	return v, nil
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

// fetchOps returns the encoded ops whose lines start at the wanted byte
// offsets (sorted): with ReadAt when the history is a file, else with a
// second pass that decodes only those lines.
func fetchOps(open OpenFunc, name string, want []int64) (map[int64][]byte, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	got := map[int64][]byte{}
	var op history.Op
	if ra, ok := rc.(io.ReaderAt); ok {
		for _, off := range want {
			if _, done := got[off]; done {
				continue
			}
			if err := history.ReadOpAt(ra, off, name, &op); err != nil {
				return nil, err
			}
			got[off] = history.AppendOp(nil, &op)
		}
		return got, nil
	}
	r, err := history.NewReader(rc, name)
	if err != nil {
		return nil, err
	}
	for len(want) > 0 {
		if err := r.Skip(); err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}
		off := r.Offset()
		for len(want) > 0 && want[0] < off {
			want = want[1:]
		}
		if len(want) == 0 || want[0] != off {
			continue
		}
		if err := history.ReadOpAt(bytes.NewReader(r.LastLine()), 0, name, &op); err != nil {
			return nil, err
		}
		got[off] = history.AppendOp(nil, &op)
		for len(want) > 0 && want[0] == off {
			want = want[1:]
		}
	}
	return got, nil
}
