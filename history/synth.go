package history

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// SynthOptions configures Synthesize.
type SynthOptions struct {
	// Ops is the number of lines to generate before the final drain (which
	// adds a few more).
	Ops        int64
	Partitions int
	Producers  int
	Consumers  int
	Seed       uint64
	// InfoRate and FailRate are the fractions of sends that end info or
	// fail. Half of the info sends are written.
	InfoRate float64
	FailRate float64
	// Faults interleaves nemesis start/stop events and cluster-state events.
	Faults bool
	// Anomalies injects each anomaly kind at a low rate (about one per
	// AnomalyEvery sends, at least once each); zero means a valid history.
	AnomalyEvery int64
}

// SynthStats says what Synthesize wrote.
type SynthStats struct {
	Lines    int64            `json:"lines"`
	Sends    int64            `json:"sends"`
	Polls    int64            `json:"polls"`
	Injected map[string]int64 `json:"injected,omitempty"`
}

// Log slots that hold no plain value: synthLost was acknowledged but is
// never returned to consumers; synthHole is an offset reserved for a send
// still to come, which consumers wait at; values from synthRaw down are
// returned as text that is not a number.
const (
	synthLost int64 = -1 << 62
	synthHole int64 = synthLost + 1
	synthRaw  int64 = -1 << 61
)

// synthForced is a value whose send is yet to be invoked although a poll
// already returned it at off of part.
type synthForced struct {
	value, off int64
	part       int32
}

// synthGap is a hole at off of part: a send acknowledged above it
// completed, and the next send to part invoked after that (filler) lands in
// it.
type synthGap struct {
	off    int64
	part   int32
	filler int64 // -1 until chosen
}

type synthProc struct {
	pending bool
	inv     Op
	// readAtInvoke is how far the consumer of the send's partition had read
	// when the send was invoked.
	readAtInvoke int64
	parts        []int32
	pos          map[int32]int64
	lastSent     map[int32]int64
}

// Synthesize writes a history of a simulated, linearizable log to sink:
// producers send unique values (0, 1, 2, ...) to random partitions,
// consumers assign a fixed set of partitions and poll them in order, and a
// final drain reads every partition to its end; now and then a consumer is
// rebalanced and rewinds a little, as a group member may. The same options
// give the same history. With AnomalyEvery > 0 it injects lost writes, duplicates,
// aborted reads, unexpected values (numbers and text), inconsistent offsets,
// nonmonotonic polls and sends, skips, unseen writes and the real-time
// anomalies: a value read before its send was invoked (future-read), a
// truncation of the log below what consumers read, after which sends land
// below offsets already read (send-below-read), and a send landing below one
// acknowledged before it was invoked (nonmonotonic-send-realtime); the
// counts are in SynthStats.Injected.
func Synthesize(sink Sink, o SynthOptions) (SynthStats, error) {
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.Producers <= 0 {
		o.Producers = 8
	}
	if o.Consumers <= 0 {
		o.Consumers = min(4, o.Partitions)
	}
	s := &synth{o: o, sink: sink, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		logs: make([][]int64, o.Partitions), stats: SynthStats{Injected: map[string]int64{}}}
	s.procs = make([]synthProc, o.Producers+o.Consumers)
	for c := 0; c < o.Consumers; c++ {
		p := &s.procs[o.Producers+c]
		for part := c % o.Partitions; part < o.Partitions; part += o.Consumers {
			p.parts = append(p.parts, int32(part))
		}
		p.pos = map[int32]int64{}
	}
	for i := range s.procs[:o.Producers] {
		s.procs[i].lastSent = map[int32]int64{}
	}
	faultOn := false
	for s.stats.Lines < o.Ops && s.err == nil {
		if o.Faults && s.rng.IntN(2000) == 0 {
			s.fault(!faultOn)
			faultOn = !faultOn
			continue
		}
		if o.Faults && s.rng.IntN(5000) == 0 {
			s.clusterState()
			continue
		}
		s.step(s.rng.IntN(len(s.procs)))
	}
	if faultOn {
		s.fault(false)
	}
	for i := range s.procs {
		if s.procs[i].pending {
			s.step(i)
		}
	}
	s.fillGap()
	if s.forced != nil {
		// Its send comes after the poll that returned it, as it must.
		s.step(0)
		s.step(0)
	}
	if o.AnomalyEvery > 0 {
		s.injectUnseen()
	}
	s.drain()
	return s.stats, s.err
}

type synth struct {
	o     SynthOptions
	sink  Sink
	rng   *rand.Rand
	procs []synthProc
	logs  [][]int64
	now   int64
	next  int64 // next send value
	extra int64 // unexpected values
	stats SynthStats
	err   error
	buf   Op
	// forced and gap are the pending halves of a future-read and of a
	// nonmonotonic-send-realtime.
	forced *synthForced
	gap    *synthGap
}

func (s *synth) emit(op *Op) {
	if s.err != nil {
		return
	}
	s.now += 1 + s.rng.Int64N(2000)
	op.Index = s.stats.Lines
	op.Time = s.now
	s.stats.Lines++
	s.err = s.sink.Write(op)
}

func (s *synth) inject(kind string) bool {
	if s.o.AnomalyEvery <= 0 {
		return false
	}
	// Early sends inject each kind once, so that short histories hold them all.
	if s.stats.Injected[kind] == 0 && s.next > 50 || s.rng.Int64N(s.o.AnomalyEvery) == 0 {
		s.stats.Injected[kind]++
		return true
	}
	return false
}

func (s *synth) step(pi int) {
	p := &s.procs[pi]
	isProducer := pi < s.o.Producers
	if !p.pending {
		var op Op
		switch {
		case isProducer:
			op = NewOp(pi, Invoke, FSend)
			op.Value, op.HasValue = s.next, true
			op.Partition = int32(s.rng.IntN(s.o.Partitions))
			if f := s.forced; f != nil && f.value == op.Value {
				op.Partition = f.part
			}
			p.readAtInvoke = s.readTo(op.Partition)
			if g := s.gap; g != nil && g.filler < 0 && g.part == op.Partition && s.forced == nil {
				if last, ok := p.lastSent[g.part]; !ok || last < g.off {
					g.filler = op.Value
				}
			}
			s.next++
		case p.pos[-1] == 0: // not assigned yet
			op = NewOp(pi, Invoke, FAssign)
			op.Partitions = p.parts
		case s.rng.IntN(400) == 0:
			// A group rebalance: the consumer goes back to an earlier
			// (committed) offset, which is legal after it.
			op = NewOp(pi, Info, FRebalance)
			op.Partitions = p.parts
			s.emit(&op)
			for _, part := range p.parts {
				p.pos[part] = max(0, p.pos[part]-s.rng.Int64N(20))
			}
			return
		default:
			op = NewOp(pi, Invoke, FPoll)
		}
		s.emit(&op)
		p.inv, p.pending = op, true
		return
	}
	p.pending = false
	inv := p.inv
	switch inv.F {
	case FSend:
		s.completeSend(pi, &inv)
	case FAssign:
		op := inv
		op.Type = OK
		s.emit(&op)
		p.pos[-1] = 1
		for _, part := range p.parts {
			p.pos[part] = 0
		}
	case FPoll:
		s.completePoll(pi, &inv, 1+s.rng.IntN(10))
	}
}

func (s *synth) completeSend(pi int, inv *Op) {
	p := &s.procs[pi]
	op := *inv
	part := inv.Partition
	log := &s.logs[part]
	r := s.rng.Float64()
	s.stats.Sends++
	if f := s.forced; f != nil && f.value == inv.Value {
		op.Type, op.Node, op.Offset = OK, "n1", f.off
		s.forced = nil
		s.emit(&op)
		return
	}
	if g := s.gap; g != nil && g.filler == inv.Value {
		op.Type, op.Node, op.Offset = OK, "n1", g.off
		(*log)[g.off] = inv.Value
		s.gap = nil
		if last, ok := p.lastSent[part]; !ok || g.off > last {
			p.lastSent[part] = g.off
		}
		s.emit(&op)
		return
	}
	switch {
	case r < s.o.FailRate:
		op.Type, op.Error = Fail, "NOT_ENOUGH_REPLICAS"
		if s.inject("aborted-read") {
			*log = append(*log, inv.Value)
		}
	case r < s.o.FailRate+s.o.InfoRate:
		op.Type, op.Error = Info, "REQUEST_TIMED_OUT"
		if s.rng.IntN(2) == 0 {
			*log = append(*log, inv.Value)
		}
	default:
		op.Type = OK
		op.Node = "n1"
		prevOff, sentHere := p.lastSent[part]
		switch {
		case s.inject("lost-write"):
			op.Offset = int64(len(*log))
			*log = append(*log, synthLost)
		case s.inject("duplicate"):
			*log = append(*log, inv.Value)
			op.Offset = int64(len(*log))
			*log = append(*log, inv.Value)
		case s.inject("unexpected"):
			// Alternately a number nobody sent and a text that is not one.
			if s.extra%2 == 0 {
				*log = append(*log, 1<<50+s.extra)
			} else {
				*log = append(*log, synthRaw-s.extra)
			}
			s.extra++
			op.Offset = int64(len(*log))
			*log = append(*log, inv.Value)
		case s.gap == nil && s.inject("nonmonotonic-send-realtime"):
			// Leave a hole below this send's offset; a send invoked after
			// this one completed fills it.
			s.gap = &synthGap{off: int64(len(*log)), part: part, filler: -1}
			*log = append(*log, synthHole)
			op.Offset = int64(len(*log))
			*log = append(*log, inv.Value)
		case s.gap == nil && s.forced == nil && p.readAtInvoke >= 1 && p.readAtInvoke == int64(len(*log)) && s.inject("send-below-read"):
			// An unclean election: the log loses its last record, which
			// the consumer had read before this send was invoked, and the
			// send lands in its place.
			*log = (*log)[:p.readAtInvoke-1]
			op.Offset = int64(len(*log))
			*log = append(*log, inv.Value)
		case sentHere && prevOff == int64(len(*log))-1 && s.inject("nonmonotonic-send"):
			// The new value lands before this process's previous one.
			last := int64(len(*log)) - 1
			prev := (*log)[last]
			(*log)[last] = inv.Value
			*log = append(*log, prev)
			op.Offset = last
		case len(*log) > 0 && s.inject("inconsistent-offsets"):
			// The ack names an offset that holds another value.
			*log = append(*log, inv.Value)
			op.Offset = int64(len(*log)) - 2
			if op.Offset < 0 {
				op.Offset = 0
			}
		default:
			op.Offset = int64(len(*log))
			*log = append(*log, inv.Value)
		}
		if _, ok := p.lastSent[part]; !ok || op.Offset > p.lastSent[part] {
			p.lastSent[part] = op.Offset
		}
	}
	s.emit(&op)
}

func (s *synth) completePoll(pi int, inv *Op, limit int) {
	p := &s.procs[pi]
	op := *inv
	op.Type = OK
	op.Reads = s.buf.Reads[:0]
	for _, part := range p.parts {
		pos := p.pos[part]
		log := s.logs[part]
		if pos > 1 && s.inject("nonmonotonic-poll") {
			pos -= 2
		}
		if pos+1 < int64(len(log)) && s.inject("poll-skip") {
			pos++
		}
		var recs []Record
		n := len(op.Reads)
		if n < cap(op.Reads) {
			recs = op.Reads[:n+1][n].Records[:0]
		}
		for pos < int64(len(log)) && len(recs) < limit {
			v := log[pos]
			switch {
			case v == synthHole:
				limit = 0 // wait for the send that fills it
				continue
			case v == synthLost:
			case v <= synthRaw:
				recs = append(recs, Record{Offset: pos, Value: BadValue, Raw: fmt.Sprintf("not-a-number-%d", synthRaw-v)})
			default:
				recs = append(recs, Record{Offset: pos, Value: v})
			}
			pos++
		}
		if s.forced == nil && s.gap == nil && pos == int64(len(log)) && len(recs) < limit && limit < 500 && s.inject("future-read") {
			// Return the next value before any producer sent it.
			s.forced = &synthForced{value: s.next, off: pos, part: part}
			s.logs[part] = append(s.logs[part], s.next)
			recs = append(recs, Record{Offset: pos, Value: s.next})
			pos++
		}
		p.pos[part] = pos
		if len(recs) > 0 {
			op.Reads = append(op.Reads[:n], PartitionRecords{Partition: part, Records: recs})
		}
	}
	s.buf.Reads = op.Reads
	s.stats.Polls++
	s.emit(&op)
}

func (s *synth) fault(start bool) {
	f := "stop-partition"
	if start {
		f = "start-partition"
	}
	targets, _ := json.Marshal([]string{fmt.Sprintf("n%d", 1+s.rng.IntN(3))})
	for _, t := range []Type{Invoke, Info} {
		op := NewOp(Nemesis, t, f)
		if t == Info {
			op.RawValue = targets
		}
		s.emit(&op)
	}
}

func (s *synth) clusterState() {
	op := NewOp(Cluster, Info, FState)
	op.Partition = int32(s.rng.IntN(s.o.Partitions))
	op.Leader = int32(1 + s.rng.IntN(3))
	op.Epoch = int32(s.rng.IntN(10))
	op.ISR = []int32{1, 2, 3}
	op.HW = int64(len(s.logs[op.Partition]))
	s.emit(&op)
}

// readTo returns the position of part's consumer: the offsets below it
// were read.
func (s *synth) readTo(part int32) int64 {
	c := &s.procs[s.o.Producers+int(part)%s.o.Consumers]
	if c.pos[-1] == 0 {
		return 0
	}
	return c.pos[part]
}

// fillGap sends the value that fills an open hole, if no send did.
func (s *synth) fillGap() {
	g := s.gap
	if g == nil || g.filler >= 0 {
		return
	}
	// A process of its own: no earlier send of it names the partition.
	proc := len(s.procs)
	op := NewOp(proc, Invoke, FSend)
	op.Value, op.HasValue, op.Partition = s.next, true, g.part
	s.next++
	s.emit(&op)
	op.Type, op.Node, op.Offset = OK, "n1", g.off
	s.logs[g.part][g.off] = op.Value
	s.emit(&op)
	s.stats.Sends++
	s.gap = nil
}

// injectUnseen acknowledges one write that no consumer will ever read.
func (s *synth) injectUnseen() {
	op := NewOp(0, Invoke, FSend)
	op.Value, op.HasValue, op.Partition = s.next, true, 0
	s.next++
	s.emit(&op)
	op.Type, op.Offset = OK, int64(len(s.logs[0]))
	s.emit(&op)
	s.stats.Sends++
	s.stats.Injected["unseen"]++
}

// drain polls every consumer until it has read its partitions to the end.
func (s *synth) drain() {
	for c := s.o.Producers; c < len(s.procs); c++ {
		p := &s.procs[c]
		if p.pos[-1] == 0 {
			s.step(c) // invoke assign
			s.step(c) // complete it
		}
		for s.err == nil {
			behind := false
			for _, part := range p.parts {
				if p.pos[part] < int64(len(s.logs[part])) {
					behind = true
				}
			}
			if !behind {
				break
			}
			inv := NewOp(c, Invoke, FDrain)
			s.emit(&inv)
			s.completePoll(c, &inv, 500)
		}
	}
}
