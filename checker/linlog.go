package checker

import (
	"encoding/binary"
	"math"

	"github.com/isrlab/isrlab/history"
)

// linLog is what the linearizability pass needs of the history, kept by the
// first pass so that the history is read once: one event per client op, in
// history order, a completion marked when it closes its process's
// invocation (whose time and value it then takes). Events are varints
// (times, values and offsets as differences from the previous ones), about
// 6 bytes per op, in chunks that the pass frees as it goes.
type linLog struct {
	chunks [][]byte
	cur    []byte
	n      int64 // events
	enc    linCoder
	// resolve lists the values of sends whose completion did not give
	// their offset: the pass places them where they were read.
	resolve []int64
}

// Event kinds (the low 3 bits of an event's first byte) and flags.
const (
	evTick    = iota // a client op the model does not see
	evInvoke         // an invocation
	evDone           // a completion of a send or poll that adds no model op
	evSend           // an ok send with its offset
	evResolve        // a send without its offset (info, or ok without one)
	evPoll           // an ok or info poll or drain

	evKind   = 7
	evPaired = 1 << 3 // the completion closes its process's invocation
	evModel  = 1 << 4 // an invocation of a send, poll or drain
	evValue  = 1 << 5 // an invocation of a send with a value
	evOK     = 1 << 6 // evResolve: the send ended ok
	evSame   = 1 << 7 // evSend, evResolve: the value is the invocation's
)

// inflight holds each process's invocation time of the model op it has in
// flight.
type inflight struct{ indexed[int64] }

// earliest returns the earliest invocation in flight (math.MaxInt64 for
// none).
func (f *inflight) earliest() int64 {
	e := int64(math.MaxInt64)
	f.each(func(_ int, t int64) { e = min(e, t) })
	return e
}

// linLogChunk is the size at which a chunk is closed.
const linLogChunk = 1 << 20

// linEvent is one decoded event. Records is reused from event to event.
type linEvent struct {
	kind, flags byte
	proc        int
	time, call  int64 // the op's time; its invocation's time for a completion
	value, off  int64
	part        int32
	reads       []linRead
}

// linRead is the records a poll returned from one partition.
type linRead struct {
	part int32
	recs []linRec
}

// linCoder holds the previous time, value and offsets that the next event
// is written relative to; the writer and the reader keep one each. The
// reader also keeps each process's last invocation.
type linCoder struct {
	t, v, rv int64
	parts    []linPartCoder
	procs    indexed[linInvoke]
}

type linPartCoder struct{ send, read int64 }

type linInvoke struct{ t, v int64 }

// part returns the offsets partition p's next events are written
// relative to (the usual small partitions keep theirs; others start at 0).
func (c *linCoder) part(p int32) *linPartCoder {
	if p < 0 || p >= 1<<16 {
		return &linPartCoder{}
	}
	for int(p) >= len(c.parts) {
		c.parts = append(c.parts, linPartCoder{})
	}
	return &c.parts[p]
}

func appendZ(b []byte, v int64) []byte  { return binary.AppendVarint(b, v) }
func appendU(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func (l *linLog) begin(kind byte) {
	if len(l.cur) >= linLogChunk {
		l.chunks = append(l.chunks, l.cur)
		l.cur = nil
	}
	if l.cur == nil {
		l.cur = make([]byte, 0, linLogChunk+64)
	}
	l.cur = append(l.cur, kind)
	l.n++
}

func (l *linLog) head(proc int, t int64) {
	l.cur = appendU(l.cur, uint64(proc))
	l.cur = appendZ(l.cur, t-l.enc.t)
	l.enc.t = t
}

func (l *linLog) value(v int64) {
	l.cur = appendZ(l.cur, v-l.enc.v)
	l.enc.v = v
}

// invoke records an invocation by a client process.
func (l *linLog) invoke(op *history.Op) {
	k := byte(evInvoke)
	if isModelF(op.F) {
		k |= evModel
	}
	if op.F == history.FSend && op.HasValue {
		k |= evValue
	}
	l.begin(k)
	l.head(op.Process, op.Time)
	if k&evValue != 0 {
		l.value(op.Value)
	}
}

// complete records a completion by a client process; inv is the invocation
// it closes, if any.
func (l *linLog) complete(op *history.Op, inv *pending) {
	var paired byte
	if inv != nil {
		paired = evPaired
	}
	done := func() {
		l.begin(evDone | paired)
		if paired != 0 {
			l.cur = appendU(l.cur, uint64(op.Process))
		}
	}
	switch op.F {
	case history.FSend:
		value, has, part := op.Value, op.HasValue, op.Partition
		if inv != nil {
			if !has {
				value, has = inv.value, inv.hasValue
			}
			if part < 0 {
				part = inv.part
			}
		}
		switch {
		case op.Type == history.Fail || !has || op.Type == history.OK && op.Offset >= 0 && part < 0:
			done()
		case op.Type == history.OK && op.Offset >= 0:
			same := sameValue(inv, value)
			l.begin(evSend | paired | same)
			l.head(op.Process, op.Time)
			if same == 0 {
				l.value(value)
			}
			l.cur = appendZ(l.cur, int64(part))
			pc := l.enc.part(part)
			l.cur = appendZ(l.cur, op.Offset-pc.send)
			pc.send = op.Offset
		default:
			same := sameValue(inv, value)
			k := byte(evResolve) | paired | same
			if op.Type == history.OK {
				k |= evOK
			}
			l.begin(k)
			l.head(op.Process, op.Time)
			if same == 0 {
				l.value(value)
			}
			l.resolve = append(l.resolve, value)
		}
	case history.FPoll, history.FDrain:
		if op.Type != history.OK && op.Type != history.Info {
			done()
			return
		}
		l.begin(evPoll | paired)
		l.head(op.Process, op.Time)
		n := 0
		for _, pr := range op.Reads {
			if len(pr.Records) > 0 {
				n++
			}
		}
		l.cur = appendU(l.cur, uint64(n))
		for _, pr := range op.Reads {
			if len(pr.Records) == 0 {
				continue
			}
			l.cur = appendZ(l.cur, int64(pr.Partition))
			l.cur = appendU(l.cur, uint64(len(pr.Records)))
			pc := l.enc.part(pr.Partition)
			for _, r := range pr.Records {
				l.cur = appendZ(l.cur, r.Offset-pc.read-1)
				pc.read = r.Offset
				l.cur = appendZ(l.cur, r.Value-l.enc.rv)
				l.enc.rv = r.Value
			}
		}
	default:
		l.begin(evTick)
	}
}

// sameValue returns evSame when value is that of the invocation inv, which
// the reader knows.
func sameValue(inv *pending, value int64) byte {
	if inv != nil && inv.hasValue && inv.value == value {
		return evSame
	}
	return 0
}

// events calls fn for every event, in order, freeing each chunk once it is
// read; the log is empty afterwards.
func (l *linLog) events(fn func(*linEvent)) {
	if l.cur != nil {
		l.chunks = append(l.chunks, l.cur)
		l.cur = nil
	}
	var dec linCoder
	var ev linEvent
	for i, b := range l.chunks {
		l.chunks[i] = nil
		for len(b) > 0 {
			b = dec.next(b, &ev)
			fn(&ev)
		}
	}
	l.chunks = nil
}

// next decodes the event at the start of b into ev and returns the rest.
func (c *linCoder) next(b []byte, ev *linEvent) []byte {
	k := b[0]
	b = b[1:]
	ev.kind, ev.flags = k&evKind, k&^evKind
	z := func() int64 {
		v, n := binary.Varint(b)
		b = b[n:]
		return v
	}
	u := func() uint64 {
		v, n := binary.Uvarint(b)
		b = b[n:]
		return v
	}
	// head reads the process and time of an event, and for a completion
	// takes its invocation's time and value.
	var inv linInvoke
	head := func() {
		ev.proc = int(u())
		c.t += z()
		ev.time, ev.call = c.t, c.t
		if k&evPaired != 0 {
			inv, _ = c.procs.get(ev.proc)
			ev.call = inv.t
		}
	}
	value := func() {
		if k&evSame != 0 {
			ev.value = inv.v
			return
		}
		c.v += z()
		ev.value = c.v
	}
	switch ev.kind {
	case evInvoke:
		head()
		if k&evValue != 0 {
			c.v += z()
			ev.value = c.v
		}
		c.procs.set(ev.proc, linInvoke{t: ev.time, v: ev.value})
	case evDone:
		if k&evPaired != 0 {
			ev.proc = int(u())
		}
	case evSend:
		head()
		value()
		ev.part = int32(z())
		pc := c.part(ev.part)
		pc.send += z()
		ev.off = pc.send
	case evResolve:
		head()
		value()
	case evPoll:
		head()
		n := int(u())
		ev.reads = ev.reads[:0]
		for range n {
			if len(ev.reads) < cap(ev.reads) {
				ev.reads = ev.reads[:len(ev.reads)+1]
			} else {
				ev.reads = append(ev.reads, linRead{})
			}
			pr := &ev.reads[len(ev.reads)-1]
			pr.part = int32(z())
			m := int(u())
			pr.recs = pr.recs[:0]
			pc := c.part(pr.part)
			for range m {
				pc.read += z() + 1
				c.rv += z()
				pr.recs = append(pr.recs, linRec{Offset: pc.read, Value: c.rv})
			}
		}
	}
	return b
}
