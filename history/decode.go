package history

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// OtherProcess is the Process of a line whose process is a name this version
// does not know; checkers ignore such lines.
const OtherProcess = -3

// DecodeOp decodes one history line into op, reusing op's slices. It is a
// hand-written decoder for the flat shape the Writer produces (encoding/json
// is several times slower, and checkers read millions of lines); unknown
// fields are validated and skipped.
func DecodeOp(b []byte, op *Op) error {
	return decodeOp(b, op, nil, nil)
}

// decodeOp decodes with an optional intern table for repeated strings
// (node names, error names), which saves an allocation per op, and an
// optional arena that a poll's records go to.
func decodeOp(b []byte, op *Op, intern map[string]string, arena *readArena) error {
	op.Reset()
	d := decoder{b: b, intern: intern, arena: arena}
	if ok, err := d.prefix(op); err != nil {
		return err
	} else if ok {
		if err := d.rest(op); err != nil {
			return err
		}
	} else if err := d.object(op); err != nil {
		return err
	}
	d.ws()
	if d.i != len(d.b) {
		return d.errf("unexpected %q after the object", d.b[d.i])
	}
	if isTxnF(op.F) && op.Txn == nil && op.RawValue != nil {
		return txnFromRaw(op)
	}
	return nil
}

type decoder struct {
	b       []byte
	i       int
	scratch []byte
	intern  map[string]string
	arena   *readArena
}

// readArena holds the records of the polls of a batch of ops, one after
// the other, so that a consumer reading them goes through memory in order
// instead of chasing each op's slices; the ops' Reads are slices of it.
type readArena struct {
	reads []PartitionRecords
	recs  []Record
}

func (a *readArena) reset() {
	if a.reads == nil {
		a.reads, a.recs = make([]PartitionRecords, 0, 1024), make([]Record, 0, 4096)
	}
	clear(a.reads) // drop the old records' slices and raw texts
	clear(a.recs)
	a.reads, a.recs = a.reads[:0], a.recs[:0]
}

func (d *decoder) string(s []byte) string {
	if d.intern == nil || len(s) > 64 {
		return string(s)
	}
	if v, ok := d.intern[string(s)]; ok {
		return v
	}
	v := string(s)
	if len(d.intern) < 4096 {
		d.intern[v] = v
	}
	return v
}

var errEnd = errors.New("unexpected end of line")

func (d *decoder) errf(format string, args ...any) error {
	return fmt.Errorf("column %d: %s", d.i+1, fmt.Sprintf(format, args...))
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) expect(c byte) error {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return nil
	}
	d.ws()
	if d.i >= len(d.b) {
		return errEnd
	}
	if d.b[d.i] != c {
		return d.errf("expected %q, found %q", c, d.b[d.i])
	}
	d.i++
	return nil
}

func (d *decoder) peek() (byte, error) {
	if d.i < len(d.b) && d.b[d.i] > ' ' {
		return d.b[d.i], nil
	}
	d.ws()
	if d.i >= len(d.b) {
		return 0, errEnd
	}
	return d.b[d.i], nil
}

// more reads the separator after a member or element: true after ',',
// false after the closing byte.
func (d *decoder) more(closing byte) (bool, error) {
	c, err := d.peek()
	if err != nil {
		return false, err
	}
	d.i++
	switch c {
	case ',':
		return true, nil
	case closing:
		return false, nil
	}
	d.i--
	return false, d.errf("expected ',' or %q, found %q", closing, c)
}

// lit consumes s if the input continues with it.
func (d *decoder) lit(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

// prefix decodes the members that the Writer always writes first, in its
// order and without whitespace, skipping the key scan and dispatch for
// them. It reports false (having consumed nothing) when the line starts
// otherwise; the general decoder then reads it.
func (d *decoder) prefix(op *Op) (bool, error) {
	if !d.lit(`{"index":`) {
		return false, nil
	}
	var err error
	if op.Index, err = d.int(); err != nil {
		return true, err
	}
	if !d.lit(`,"time":`) {
		return true, nil
	}
	if op.Time, err = d.int(); err != nil {
		return true, err
	}
	if !d.lit(`,"process":`) {
		return true, nil
	}
	if err := d.process(op); err != nil {
		return true, err
	}
	if d.lit(`,"type":"`) {
		switch {
		case d.lit(`invoke"`):
			op.Type = Invoke
		case d.lit(`ok"`):
			op.Type = OK
		case d.lit(`info"`):
			op.Type = Info
		case d.lit(`fail"`):
			op.Type = Fail
		default:
			d.i -= len(`"`)
			s, err := d.str()
			if err != nil {
				return true, err
			}
			return true, fmt.Errorf("field \"type\": unknown type %q", s)
		}
	}
	if d.lit(`,"f":"`) {
		switch {
		case d.lit(`send"`):
			op.F = FSend
		case d.lit(`poll"`):
			op.F = FPoll
		default:
			d.i -= len(`"`)
			s, err := d.str()
			if err != nil {
				return true, fmt.Errorf("field \"f\": %w", err)
			}
			op.F = internF(s)
		}
	}
	return true, nil
}

// restFields are the members the Writer writes most after the prefix, in
// its order: rest reads them without the key scan and dispatch.
var restFields = [...]struct{ lit, key string }{
	{`,"value":`, "value"},
	{`,"partition":`, "partition"},
	{`,"offset":`, "offset"},
	{`,"offsets":`, "offsets"},
	{`,"node":`, "node"},
}

// rest decodes the members after the prefix.
func (d *decoder) rest(op *Op) error {
	for _, f := range restFields {
		if d.lit(f.lit) {
			if err := d.field(f.key, op); err != nil {
				return fmt.Errorf("field %q: %w", f.key, err)
			}
		}
	}
	more, err := d.more('}')
	if err != nil || !more {
		return err
	}
	return d.members(op)
}

func (d *decoder) object(op *Op) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if c, err := d.peek(); err != nil {
		return err
	} else if c == '}' {
		d.i++
		return nil
	}
	return d.members(op)
}

func (d *decoder) members(op *Op) error {
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := d.field(string(key), op); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
		more, err := d.more('}')
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

func (d *decoder) field(key string, op *Op) error {
	var err error
	switch key {
	case "index":
		op.Index, err = d.int()
	case "time":
		op.Time, err = d.int()
	case "process":
		err = d.process(op)
	case "type":
		var s []byte
		if s, err = d.str(); err == nil {
			var ok bool
			if op.Type, ok = ParseType(string(s)); !ok {
				err = fmt.Errorf("unknown type %q", s)
			}
		}
	case "f":
		var s []byte
		if s, err = d.str(); err == nil {
			op.F = internF(s)
		}
	case "key":
		var s []byte
		if s, err = d.str(); err == nil {
			op.Key = string(s)
		}
	case "value":
		err = d.value(op)
	case "partition":
		var v int64
		v, err = d.int()
		op.Partition = int32(v)
	case "offset":
		op.Offset, err = d.int()
	case "offsets":
		err = d.reads(op)
	case "partitions":
		op.Partitions, err = d.ints(op.spareParts)
	case "error":
		var s []byte
		if s, err = d.str(); err == nil {
			op.Error = d.string(s)
		}
	case "node":
		var c byte
		if c, err = d.peek(); err == nil && c != '"' {
			var v int64
			v, err = d.int()
			op.Node = strconv.FormatInt(v, 10)
		} else if err == nil {
			var s []byte
			s, err = d.str()
			op.Node = d.string(s)
		}
	case "leader":
		var v int64
		v, err = d.int()
		op.Leader = int32(v)
	case "epoch":
		var v int64
		v, err = d.int()
		op.Epoch = int32(v)
	case "isr":
		op.ISR, err = d.ints(op.spareISR)
	case "hw":
		op.HW, err = d.int()
	case "commit_at":
		op.CommitAt, err = d.int()
	case "group":
		var s []byte
		if s, err = d.str(); err == nil {
			op.Group = d.string(s)
		}
	case "committed":
		err = d.committed(op)
	default:
		err = d.skip(0)
	}
	return err
}

func internF(s []byte) string {
	switch string(s) {
	case FSend:
		return FSend
	case FPoll:
		return FPoll
	case FAssign:
		return FAssign
	case FSubscribe:
		return FSubscribe
	case FRebalance:
		return FRebalance
	case FCrash:
		return FCrash
	case FDrain:
		return FDrain
	case FState:
		return FState
	case FTxn:
		return FTxn
	case FProcessed:
		return FProcessed
	case FCommit:
		return FCommit
	}
	return string(s)
}

func (d *decoder) process(op *Op) error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	if c != '"' {
		v, err := d.int()
		if err != nil {
			return err
		}
		if v < 0 || v > 1<<31 {
			return fmt.Errorf("client process %d out of range", v)
		}
		op.Process = int(v)
		return nil
	}
	s, err := d.str()
	if err != nil {
		return err
	}
	switch string(s) {
	case "nemesis":
		op.Process = Nemesis
	case "cluster":
		op.Process = Cluster
	default:
		op.Process = OtherProcess
	}
	return nil
}

// value decodes a send's integer value; anything else is kept raw.
func (d *decoder) value(op *Op) error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	if c == '-' || (c >= '0' && c <= '9') {
		op.Value, err = d.int()
		op.HasValue = err == nil
		return err
	}
	start := d.i
	if c == 'n' {
		return d.skip(0) // null: absent
	}
	if c == '[' && isTxnF(op.F) {
		op.Txn, err = d.txn()
		return err
	}
	if err := d.skip(0); err != nil {
		return err
	}
	op.RawValue = append(op.spareRaw[:0], d.b[start:d.i]...)
	return nil
}

func (d *decoder) reads(op *Op) error {
	if c, err := d.peek(); err != nil {
		return err
	} else if c == 'n' {
		return d.skip(0)
	}
	if err := d.expect('{'); err != nil {
		return err
	}
	if a := d.arena; a != nil {
		start := len(a.reads)
		defer func() { op.Reads = a.reads[start:len(a.reads):len(a.reads)] }()
		return d.partitioned(func(p int32) error {
			from := len(a.recs)
			var err error
			a.recs, err = d.records(a.recs)
			a.reads = append(a.reads, PartitionRecords{Partition: p, Records: a.recs[from:len(a.recs):len(a.recs)]})
			return err
		})
	}
	op.Reads = op.spareReads[:0]
	if op.Reads == nil {
		op.Reads = make([]PartitionRecords, 0, 1)
	}
	return d.partitioned(func(p int32) error {
		n := len(op.Reads)
		if n < cap(op.Reads) {
			op.Reads = op.Reads[:n+1]
		} else {
			op.Reads = append(op.Reads, PartitionRecords{})
		}
		pr := &op.Reads[n]
		pr.Partition = p
		var err error
		pr.Records, err = d.records(pr.Records[:0])
		return err
	})
}

// committed decodes a commit's offsets: {"partition": offset, ...}.
func (d *decoder) committed(op *Op) error {
	if c, err := d.peek(); err != nil {
		return err
	} else if c == 'n' {
		return d.skip(0)
	}
	if err := d.expect('{'); err != nil {
		return err
	}
	op.Committed = []PartitionOffset{}
	return d.partitioned(func(p int32) error {
		off, err := d.int()
		op.Committed = append(op.Committed, PartitionOffset{Partition: p, Offset: off})
		return err
	})
}

// partitioned reads the members of an object keyed by partition numbers,
// its '{' already read, calling fn to read each member's value.
func (d *decoder) partitioned(fn func(p int32) error) error {
	if c, err := d.peek(); err != nil {
		return err
	} else if c == '}' {
		d.i++
		return nil
	}
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		p, err := strconv.ParseInt(string(key), 10, 32)
		if err != nil || p < 0 {
			return fmt.Errorf("partition key %q is not a partition number", key)
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := fn(int32(p)); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
		more, err := d.more('}')
		if err != nil || !more {
			return err
		}
	}
}

func (d *decoder) records(rs []Record) ([]Record, error) {
	if err := d.expect('['); err != nil {
		return rs, err
	}
	if c, err := d.peek(); err != nil {
		return rs, err
	} else if c == ']' {
		d.i++
		return rs, nil
	}
	for {
		if err := d.expect('['); err != nil {
			return rs, err
		}
		off, err := d.int()
		if err != nil {
			return rs, err
		}
		if err := d.expect(','); err != nil {
			return rs, err
		}
		r := Record{Offset: off}
		c, err := d.peek()
		if err != nil {
			return rs, err
		}
		if c == '"' {
			s, err := d.str()
			if err != nil {
				return rs, err
			}
			if v, perr := strconv.ParseInt(string(s), 10, 64); perr == nil && v != BadValue {
				r.Value = v
			} else {
				r.Value, r.Raw = BadValue, string(s)
			}
		} else if r.Value, err = d.int(); err != nil {
			return rs, err
		}
		if err := d.expect(']'); err != nil {
			return rs, err
		}
		rs = append(rs, r)
		more, err := d.more(']')
		if err != nil {
			return rs, err
		}
		if !more {
			return rs, nil
		}
	}
}

func (d *decoder) ints(xs []int32) ([]int32, error) {
	xs = xs[:0]
	if xs == nil {
		xs = make([]int32, 0, 4)
	}
	if err := d.expect('['); err != nil {
		return xs, err
	}
	if c, err := d.peek(); err != nil {
		return xs, err
	} else if c == ']' {
		d.i++
		return xs, nil
	}
	for {
		v, err := d.int()
		if err != nil {
			return xs, err
		}
		if v < -1<<31 || v >= 1<<31 {
			return xs, fmt.Errorf("%d out of int32 range", v)
		}
		xs = append(xs, int32(v))
		more, err := d.more(']')
		if err != nil {
			return xs, err
		}
		if !more {
			return xs, nil
		}
	}
}

// int reads a JSON number that must be an integer in int64 range.
func (d *decoder) int() (int64, error) {
	if d.i < len(d.b) && d.b[d.i] <= ' ' {
		d.ws()
	}
	b, i := d.b, d.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(b); i++ {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		u = u*10 + uint64(c)
	}
	d.i = i
	if i == start {
		if i >= len(b) {
			return 0, errEnd
		}
		return 0, d.errf("expected an integer, found %q", b[i])
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, d.errf("expected an integer, found %q", b[start:i+1])
	}
	if i-start > 18 { // may have overflowed: let strconv decide
		from := start
		if neg {
			from--
		}
		v, err := strconv.ParseInt(string(b[from:i]), 10, 64)
		if err != nil {
			return 0, d.errf("integer overflows int64")
		}
		return v, nil
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// str reads a JSON string. The result aliases the line or a scratch buffer:
// copy it to keep it.
func (d *decoder) str() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	start := d.i
	b := d.b
	for i := start; i < len(b); i++ {
		c := b[i]
		if c > '\\' || (c >= 0x20 && c != '"' && c != '\\') {
			continue
		}
		d.i = i
		switch {
		case c == '"':
			d.i++
			return b[start:i], nil
		case c == '\\':
			return d.strEscaped(start)
		}
		return nil, d.errf("control character in string")
	}
	d.i = len(b)
	return nil, errEnd
}

func (d *decoder) strEscaped(start int) ([]byte, error) {
	out := append(d.scratch[:0], d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			d.scratch = out
			return out, nil
		case c < 0x20:
			return nil, d.errf("control character in string")
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.b) {
			return nil, errEnd
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(utf8.RuneError)
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					d.i += 2
					lo, err := d.hex4()
					if err != nil {
						return nil, err
					}
					r2 = utf16.DecodeRune(r, lo)
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, d.errf("bad escape \\%c", e)
		}
	}
	return nil, errEnd
}

func (d *decoder) hex4() (rune, error) {
	if d.i+4 > len(d.b) {
		return 0, errEnd
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, d.errf("bad \\u escape")
		}
	}
	d.i += 4
	return r, nil
}

// skip validates and skips any JSON value.
func (d *decoder) skip(depth int) error {
	if depth > 64 {
		return d.errf("nesting too deep")
	}
	c, err := d.peek()
	if err != nil {
		return err
	}
	switch {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{':
		d.i++
		if c, err := d.peek(); err != nil {
			return err
		} else if c == '}' {
			d.i++
			return nil
		}
		for {
			if _, err := d.str(); err != nil {
				return err
			}
			if err := d.expect(':'); err != nil {
				return err
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			more, err := d.more('}')
			if err != nil || !more {
				return err
			}
		}
	case c == '[':
		d.i++
		if c, err := d.peek(); err != nil {
			return err
		} else if c == ']' {
			d.i++
			return nil
		}
		for {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			more, err := d.more(']')
			if err != nil || !more {
				return err
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		d.i++
		for d.i < len(d.b) {
			switch c := d.b[d.i]; {
			case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
				d.i++
				continue
			}
			break
		}
		return nil
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
			d.i += len(lit)
			return nil
		}
	}
	if len(d.b)-d.i < 5 {
		return errEnd
	}
	return d.errf("unexpected %q", c)
}
