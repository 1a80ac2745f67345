package checker

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/isrlab/isrlab/history"
)

// LinResult is the outcome of the linearizability check of each partition
// against a log model: a send is appended at the next offset, and a poll
// returns records that are in the log at its linearization point. "Next"
// counts only offsets that some operation observed (acknowledged or read):
// offsets nobody observed belong to writes the history cannot place (an
// info send never read) and are skipped.
type LinResult struct {
	// Result is "ok", "illegal", "unknown" (the search timed out) or
	// "skipped" (see Reason).
	Result     string `json:"result"`
	Reason     string `json:"reason,omitempty"`
	Ops        int    `json:"ops"`
	Partitions int    `json:"partitions"`
	// IllegalPartitions lists the partitions found illegal on their own.
	IllegalPartitions []int32 `json:"illegal_partitions,omitempty"`
	// Visualization names the HTML file written for an illegal history, when
	// the caller wrote one.
	Visualization string `json:"visualization,omitempty"`
}

type linOp struct {
	proc      int
	part      int32
	send      bool
	typ       history.Type
	value     int64
	off       int64
	call, ret int64
	recs      []history.Record
}

type linCollector struct {
	max   int
	force bool
	over  bool
	ops   []linOp
	arena []history.Record
}

func (c *linCollector) full() bool {
	if c.over {
		return true
	}
	if !c.force && len(c.ops) >= c.max {
		c.over = true
		c.ops, c.arena = nil, nil
		return true
	}
	return false
}

func (c *linCollector) send(proc int, value int64, part int32, t history.Type, off, call, ret, _, _ int64) {
	if t == history.Fail || c.full() {
		return
	}
	c.ops = append(c.ops, linOp{proc: proc, part: part, send: true, typ: t, value: value, off: off, call: call, ret: ret})
}

func (c *linCollector) poll(proc int, part int32, recs []history.Record, call, ret, _, _ int64) {
	if c.full() {
		return
	}
	start := len(c.arena)
	c.arena = append(c.arena, recs...)
	c.ops = append(c.ops, linOp{proc: proc, part: part, recs: c.arena[start:len(c.arena):len(c.arena)], call: call, ret: ret})
}

// logNode is one entry of the model's log, a persistent list so that a send
// is O(1) and states share their prefix.
type logNode struct {
	prev  *logNode
	off   int64
	rank  int32 // position of off among the partition's observed offsets
	value int64
	hash  uint64
}

func (n *logNode) nextRank() int32 {
	if n == nil {
		return 0
	}
	return n.rank + 1
}

func mix(h uint64, a, b int64) uint64 {
	h ^= uint64(a) * 0x9e3779b97f4a7c15
	h = (h<<31 | h>>33) * 0xbf58476d1ce4e5b9
	h ^= uint64(b) * 0x94d049bb133111eb
	return (h<<29 | h>>35) * 0x9e3779b97f4a7c15
}

type linInput struct {
	part  int32
	send  bool
	value int64
	off   int64
	rank  int32
	recs  []history.Record
}

var logModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int32][]porcupine.Operation{}
		var keys []int32
		for _, op := range h {
			p := op.Input.(*linInput).part
			if _, ok := by[p]; !ok {
				keys = append(keys, p)
			}
			by[p] = append(by[p], op)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return (*logNode)(nil) },
	Step: func(state, input, _ any) (bool, any) {
		n := state.(*logNode)
		in := input.(*linInput)
		if in.send {
			if in.rank != n.nextRank() {
				return false, n
			}
			var h uint64
			if n != nil {
				h = n.hash
			}
			return true, &logNode{prev: n, off: in.off, rank: in.rank, value: in.value, hash: mix(h, in.off, in.value)}
		}
		// Records come in ascending offsets: match them from the last one,
		// walking back once (a drain poll of a long log stays linear).
		cur := n
		for i := len(in.recs) - 1; i >= 0; i-- {
			r := in.recs[i]
			if i < len(in.recs)-1 && r.Offset >= in.recs[i+1].Offset {
				cur = n // not ascending: start again from the head
			}
			for cur != nil && cur.off > r.Offset {
				cur = cur.prev
			}
			if cur == nil || cur.off != r.Offset || cur.value != r.Value {
				return false, n
			}
		}
		return true, n
	},
	Equal: func(a, b any) bool {
		x, y := a.(*logNode), b.(*logNode)
		for x != y {
			if x == nil || y == nil || x.off != y.off || x.value != y.value || x.hash != y.hash {
				return false
			}
			x, y = x.prev, y.prev
		}
		return true
	},
	Hash: func(s any) uint64 {
		if n := s.(*logNode); n != nil {
			return n.hash
		}
		return 0
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(*linInput)
		if in.send {
			return fmt.Sprintf("send(%d) -> %d", in.value, in.off)
		}
		var b strings.Builder
		b.WriteString("poll -> [")
		for i, r := range in.recs {
			if i == 8 {
				fmt.Fprintf(&b, " ... %d more", len(in.recs)-i)
				break
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%d", r.Offset, r.Value)
		}
		b.WriteByte(']')
		return b.String()
	},
	DescribeState: func(s any) string {
		n := s.(*logNode)
		var items []string
		for i := 0; n != nil && i < 6; i, n = i+1, n.prev {
			items = append(items, fmt.Sprintf("%d:%d", n.off, n.value))
		}
		if n != nil {
			items = append(items, "...")
		}
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
		return "[" + strings.Join(items, " ") + "]"
	},
}

type linSearch struct {
	info porcupine.LinearizationInfo
}

// linearize resolves unknown sends against the reads, runs porcupine and
// returns the result.
func (a *analysis) linearize() (LinResult, *linSearch) {
	c := a.lin
	if c == nil {
		return LinResult{Result: "skipped", Reason: "disabled"}, nil
	}
	if c.over {
		return LinResult{Result: "skipped", Reason: fmt.Sprintf("more than %d client operations; use --linearizable=on to force", c.max)}, nil
	}
	// Sends still pending at the end of the history are unknown.
	procs := make([]int, 0, len(a.procs))
	for id, ps := range a.procs {
		if ps.hasPend && ps.pend.f == history.FSend && ps.pend.hasValue {
			procs = append(procs, id)
		}
	}
	sort.Ints(procs)
	for _, id := range procs {
		p := a.procs[id].pend
		c.ops = append(c.ops, linOp{proc: id, part: p.part, send: true, typ: history.Info, value: p.value, off: -1, call: p.time, ret: math.MaxInt64})
	}
	ops := make([]porcupine.Operation, 0, len(c.ops))
	parts := map[int32]bool{}
	ranks := map[int32][]int64{}
	for _, o := range c.ops {
		in := &linInput{part: o.part, send: o.send, value: o.value, off: o.off, recs: o.recs}
		ret := o.ret
		if o.send && (o.typ != history.OK || o.off < 0) {
			vs := a.value(o.value, false)
			if vs == nil || vs.fl&flRead == 0 || vs.off < 0 {
				continue // never observed: it may or may not have happened
			}
			in.off, in.part = vs.off, vs.part
			if o.typ != history.OK {
				// It took effect before the first poll that returned it
				// completed: a bound much tighter than "any time later",
				// which keeps the search small when many sends time out.
				ret = max(vs.rt, o.call)
			}
		}
		if in.part < 0 {
			continue
		}
		if in.send {
			in.rank = a.rank(in.part, in.off, ranks)
		}
		parts[in.part] = true
		ops = append(ops, porcupine.Operation{ClientId: o.proc, Input: in, Call: o.call, Output: nil, Return: ret})
	}
	res := LinResult{Ops: len(ops), Partitions: len(parts)}
	out, info := porcupine.CheckOperationsVerbose(logModel, ops, a.opt.LinTimeout)
	switch out {
	case porcupine.Ok:
		res.Result = "ok"
		return res, nil
	case porcupine.Illegal:
		res.Result = "illegal"
		res.IllegalPartitions = illegalPartitions(ops, a.opt.LinTimeout)
		return res, &linSearch{info: info}
	}
	res.Result = "unknown"
	res.Reason = fmt.Sprintf("search did not finish within %s", a.opt.LinTimeout)
	return res, nil
}

// illegalPartitions checks each partition alone to name the illegal ones.
func illegalPartitions(ops []porcupine.Operation, timeout time.Duration) []int32 {
	var out []int32
	for _, part := range logModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(logModel, part, timeout) == porcupine.Illegal {
			out = append(out, part[0].Input.(*linInput).part)
		}
	}
	return out
}

// rank returns the position of off among the observed offsets of part
// (sorted, computed once per partition into ranks).
func (a *analysis) rank(part int32, off int64, ranks map[int32][]int64) int32 {
	known, ok := ranks[part]
	if !ok {
		ps := a.part(part)
		for o, v := range ps.slots {
			if v != emptySlot {
				known = append(known, int64(o))
			}
		}
		far := make([]int64, 0, len(ps.far))
		for o := range ps.far {
			far = append(far, o)
		}
		sort.Slice(far, func(i, j int) bool { return far[i] < far[j] })
		known = append(known, far...)
		ranks[part] = known
	}
	return int32(sort.Search(len(known), func(i int) bool { return known[i] >= off }))
}

// HasVisualization reports whether the verdict can draw porcupine's HTML
// visualization (linearizability was found illegal).
func (v *Verdict) HasVisualization() bool { return v.lin != nil }

// Visualize writes porcupine's HTML visualization of the illegal
// linearizability search.
func (v *Verdict) Visualize(w io.Writer) error {
	if v.lin == nil {
		return fmt.Errorf("no illegal linearizability result to visualize")
	}
	return porcupine.Visualize(logModel, v.lin.info, w)
}
