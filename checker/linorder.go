package checker

import "math"

// orderLegal decides without a search that a piece is linearizable, for
// the pieces of the usual shape: its sends took the ranks from its base
// on, one each, and every record its polls returned is one of those sends.
// The log model then asks only that each send be linearized no earlier
// than the send of the rank below it, and each poll no earlier than the
// sends of its records (a log that grew still holds them). Taking every
// send's point as early as its invocation and the send below allow decides
// that exactly, as intervals that touch are concurrent, as in porcupine. It
// reports false for a piece of another shape or one that fails; a search
// then decides it.
func orderLegal(p *linPiece, ranks *linRanks) bool {
	var sends int32
	for i := range p.ops {
		o := &p.ops[i]
		if o.call > o.ret {
			return false // times go back: leave it to the search
		}
		if o.send {
			sends++
		}
	}
	// byRank[r] is the index in p.ops of the send of rank base+r.
	byRank := make([]int32, sends)
	for i := range byRank {
		byRank[i] = -1
	}
	for i := range p.ops {
		o := &p.ops[i]
		if !o.send {
			continue
		}
		r := o.rank - p.base
		if r < 0 || r >= sends || byRank[r] >= 0 {
			return false
		}
		byRank[r] = int32(i)
	}
	// point[r] is the earliest linearization point of the send of rank
	// base+r.
	point := make([]int64, sends)
	prev := int64(math.MinInt64)
	for r, i := range byRank {
		o := &p.ops[i]
		prev = max(prev, o.call)
		if prev > o.ret {
			return false
		}
		point[r] = prev
	}
	for i := range p.ops {
		o := &p.ops[i]
		if o.send || len(o.recs) == 0 {
			continue
		}
		top := int32(-1)
		for _, rec := range o.recs {
			r := ranks.of(rec.Offset) - p.base
			if r < 0 || r >= sends {
				return false
			}
			s := &p.ops[byRank[r]]
			if s.off != rec.Offset || s.value != rec.Value {
				return false
			}
			top = max(top, r)
		}
		if max(o.call, point[top]) > o.ret {
			return false
		}
	}
	return true
}
