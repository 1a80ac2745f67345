package history

import (
	"fmt"
	"strconv"
	"strings"
)

// Transactions.
//
// A transactional operation has f "txn" and, as its value, a list of
// micro-operations, the way Jepsen's Kafka workload writes them. Keys name
// a topic-partition as "<topic>/<partition>", for example "t/0":
//
//	["send", "t/0", 17]                 invoke: send value 17 to t/0
//	["send", "t/0", [3, 17]]            completion: 17 landed at offset 3
//	["send", "t/0", [null, 17]]         completion: offset not known
//	["poll"]                            invoke: one poll
//	["poll", {"t/0": [[3, 17], [4, 18]]}] completion: what the poll returned
//	["send-offsets", "g", {"t/0": 5}]   consumer group g's offsets committed
//	                                    in the transaction (TxnOffsetCommit):
//	                                    the next offset to consume
//
// A whole line:
//
//	{"index":4,"time":900,"process":2,"type":"ok","f":"txn","value":[["poll",{"t/0":[[3,17]]}],["send","t/1",[8,40]]],"commit_at":850}
//
// The outcome follows Jepsen: ok means the transaction committed
// (EndTransaction(commit) acknowledged), fail that it definitely aborted
// (EndTransaction(abort) acknowledged, or an error before any commit was
// attempted that aborts it), info that it is unknown (the commit timed out,
// the producer was fenced while committing). commit_at is when the commit
// was requested (the history's clock), so that a read before it can be
// told; it is absent when no commit was requested.
//
// A read_committed consumer's poll outside any transaction is a txn op with
// a single poll micro-op; the final drain's polls have f "txn-drain", and a
// drain that read a partition completely to the end of its transactional
// log ends with an op f "drained" whose key is the partition's key, offset
// the end offset it read up to and value the partition's start offset.

// Transactional operation names. A consumer whose position moves other
// than by reading (a group transact session going back to its group's
// committed offsets after an abort) records an op f "seek" (type info),
// after which its next read may repeat offsets.
const (
	FTxn      = "txn"
	FTxnDrain = "txn-drain"
	FSeek     = "seek"
)

// Micro-operation names.
const (
	MSend        = "send"
	MPoll        = "poll"
	MSendOffsets = "send-offsets"
)

// MicroOp is one micro-operation of a transaction.
type MicroOp struct {
	F string
	// Key is the topic-partition of a send ("t/0").
	Key string
	// Value and Offset are a send's value and, in a completion, its offset
	// (-1 when not known, or in an invocation).
	Value  int64
	Offset int64
	// Done marks a send written in completion form ([offset, value]).
	Done bool
	// Reads are a completed poll's records, per key, in the order the
	// consumer returned them; nil in an invocation.
	Reads []KeyRecords
	// Group and Offsets are a send-offsets' consumer group and its
	// committed offsets per key.
	Group   string
	Offsets []KeyOffset
}

// KeyRecords are the records a poll returned from one key.
type KeyRecords struct {
	Key     string
	Records []Record
}

// KeyOffset is one key's offset.
type KeyOffset struct {
	Key    string
	Offset int64
}

// Send returns a send micro-op in invocation form.
func Send(key string, value int64) MicroOp {
	return MicroOp{F: MSend, Key: key, Value: value, Offset: -1}
}

// TxnKey is the key of a topic-partition.
func TxnKey(topic string, partition int32) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10)
}

// ParseTxnKey splits a key into topic and partition.
func ParseTxnKey(key string) (string, int32, bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", -1, false
	}
	p, err := strconv.ParseInt(key[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", -1, false
	}
	return key[:i], int32(p), true
}

func cloneMicroOps(ms []MicroOp) []MicroOp {
	if ms == nil {
		return nil
	}
	out := make([]MicroOp, len(ms))
	for i, m := range ms {
		out[i] = m
		if m.Reads != nil {
			out[i].Reads = make([]KeyRecords, len(m.Reads))
			for j, kr := range m.Reads {
				out[i].Reads[j] = KeyRecords{Key: kr.Key, Records: append([]Record(nil), kr.Records...)}
			}
		}
		if m.Offsets != nil {
			out[i].Offsets = append([]KeyOffset(nil), m.Offsets...)
		}
	}
	return out
}

// appendTxn appends the micro-op list as JSON.
func appendTxn(b []byte, ms []MicroOp) []byte {
	b = append(b, '[')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendString(b, m.F)
		switch m.F {
		case MSend:
			b = append(b, ',')
			b = appendString(b, m.Key)
			b = append(b, ',')
			if m.Done {
				b = append(b, '[')
				if m.Offset >= 0 {
					b = strconv.AppendInt(b, m.Offset, 10)
				} else {
					b = append(b, "null"...)
				}
				b = append(b, ',')
				b = strconv.AppendInt(b, m.Value, 10)
				b = append(b, ']')
			} else {
				b = strconv.AppendInt(b, m.Value, 10)
			}
		case MPoll:
			if m.Reads != nil {
				b = append(b, ",{"...)
				for j, kr := range m.Reads {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendString(b, kr.Key)
					b = append(b, ':')
					b = appendRecords(b, kr.Records)
				}
				b = append(b, '}')
			}
		case MSendOffsets:
			b = append(b, ',')
			b = appendString(b, m.Group)
			b = append(b, ",{"...)
			for j, ko := range m.Offsets {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendString(b, ko.Key)
				b = append(b, ':')
				b = strconv.AppendInt(b, ko.Offset, 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

func appendRecords(b []byte, rs []Record) []byte {
	b = append(b, '[')
	for j, r := range rs {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, r.Offset, 10)
		b = append(b, ',')
		if r.Value == BadValue {
			b = appendString(b, r.Raw)
		} else {
			b = strconv.AppendInt(b, r.Value, 10)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

// isTxnF reports whether f carries micro-ops as its value.
func isTxnF(f string) bool { return f == FTxn || f == FTxnDrain }

// txnFromRaw decodes op's raw value as micro-ops, for a line whose "value"
// came before its "f".
func txnFromRaw(op *Op) error {
	d := decoder{b: op.RawValue}
	ms, err := d.txn()
	if err != nil {
		return fmt.Errorf("field \"value\": %w", err)
	}
	d.ws()
	if d.i != len(d.b) {
		return fmt.Errorf("field \"value\": unexpected %q after the micro-ops", d.b[d.i])
	}
	op.Txn, op.RawValue = ms, nil
	return nil
}

// txn reads a list of micro-ops.
func (d *decoder) txn() ([]MicroOp, error) {
	if err := d.expect('['); err != nil {
		return nil, err
	}
	ms := []MicroOp{}
	if c, err := d.peek(); err != nil {
		return nil, err
	} else if c == ']' {
		d.i++
		return ms, nil
	}
	for {
		m, err := d.microOp()
		if err != nil {
			return nil, fmt.Errorf("micro-op %d: %w", len(ms), err)
		}
		ms = append(ms, m)
		more, err := d.more(']')
		if err != nil {
			return nil, err
		}
		if !more {
			return ms, nil
		}
	}
}

func (d *decoder) microOp() (MicroOp, error) {
	m := MicroOp{Offset: -1}
	if err := d.expect('['); err != nil {
		return m, err
	}
	f, err := d.str()
	if err != nil {
		return m, err
	}
	m.F = string(f)
	switch m.F {
	case MSend:
		if err := d.expect(','); err != nil {
			return m, err
		}
		k, err := d.str()
		if err != nil {
			return m, err
		}
		m.Key = string(k)
		if err := d.expect(','); err != nil {
			return m, err
		}
		c, err := d.peek()
		if err != nil {
			return m, err
		}
		if c == '[' {
			d.i++
			m.Done = true
			if d.lit("null") {
				m.Offset = -1
			} else if m.Offset, err = d.int(); err != nil {
				return m, err
			}
			if err := d.expect(','); err != nil {
				return m, err
			}
			if m.Value, err = d.int(); err != nil {
				return m, err
			}
			if err := d.expect(']'); err != nil {
				return m, err
			}
		} else if m.Value, err = d.int(); err != nil {
			return m, err
		}
	case MPoll:
		c, err := d.peek()
		if err != nil {
			return m, err
		}
		if c == ',' {
			d.i++
			if m.Reads, err = d.keyRecords(); err != nil {
				return m, err
			}
		}
	case MSendOffsets:
		if err := d.expect(','); err != nil {
			return m, err
		}
		g, err := d.str()
		if err != nil {
			return m, err
		}
		m.Group = string(g)
		if err := d.expect(','); err != nil {
			return m, err
		}
		if m.Offsets, err = d.keyOffsets(); err != nil {
			return m, err
		}
	default:
		// A micro-op this version does not know: keep its name only.
		for {
			c, err := d.peek()
			if err != nil {
				return m, err
			}
			if c != ',' {
				break
			}
			d.i++
			if err := d.skip(1); err != nil {
				return m, err
			}
		}
	}
	return m, d.expect(']')
}

func (d *decoder) keyRecords() ([]KeyRecords, error) {
	out := []KeyRecords{}
	err := d.keyed(func(key string) error {
		rs, err := d.records(nil)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		if rs == nil {
			rs = []Record{}
		}
		out = append(out, KeyRecords{Key: key, Records: rs})
		return nil
	})
	return out, err
}

func (d *decoder) keyOffsets() ([]KeyOffset, error) {
	out := []KeyOffset{}
	err := d.keyed(func(key string) error {
		off, err := d.int()
		out = append(out, KeyOffset{Key: key, Offset: off})
		return err
	})
	return out, err
}

// keyed reads a JSON object, calling fn to read each member's value.
func (d *decoder) keyed(fn func(key string) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if c, err := d.peek(); err != nil {
		return err
	} else if c == '}' {
		d.i++
		return nil
	}
	for {
		k, err := d.str()
		if err != nil {
			return err
		}
		key := string(k)
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		more, err := d.more('}')
		if err != nil || !more {
			return err
		}
	}
}
