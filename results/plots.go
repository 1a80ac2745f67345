package results

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

// figure is one plot of a report.
type figure struct {
	ID      string
	Title   string
	Caption string
	SVG     template.HTML
}

// plotter draws a run's figures on one time axis.
type plotter struct {
	c     *Curves
	v     *checker.Verdict
	ax    timeAxis
	bands []band
	// shading is bands as the plots shade them: merged when there are
	// too many to draw one by one.
	shading []band
	width   float64 // bucket width, seconds
}

func newPlotter(c *Curves, v *checker.Verdict) *plotter {
	p := &plotter{c: c, v: v, width: float64(c.Width) / 1e9}
	end := float64(c.End) / 1e9
	for _, w := range v.Timeline.Faults {
		end = math.Max(end, w.End)
	}
	p.ax = timeAxis{t1: math.Max(end, 1)}
	p.bands = faultBands(c, v)
	p.shading = mergeBands(p.bands, p.ax.t1/1000)
	return p
}

// maxBands is the most fault windows a plot draws one by one; past it,
// windows closer than a pixel merge into one band (with a count), so that
// a history with thousands of faults still gives a small report.
const maxBands = 100

// mergeBands merges bands (sorted by start) whose gap is under gap when
// there are more than maxBands of them.
func mergeBands(bands []band, gap float64) []band {
	if len(bands) <= maxBands {
		return bands
	}
	var out []band
	for _, b := range bands {
		if n := len(out); n > 0 && (out[n-1].End < 0 || b.Start-out[n-1].End < gap) {
			m := &out[n-1]
			if m.End >= 0 && (b.End < 0 || b.End > m.End) {
				m.End = b.End
			}
			if m.Name != b.Name {
				m.Name = "faults"
			}
			m.Count++
			m.Label = fmt.Sprintf("%d faults", m.Count)
			continue
		}
		b.Count = 1
		out = append(out, b)
	}
	return out
}

// faultBands takes the fault windows from the verdict (the checker's one
// definition of when a fault is in effect) and labels them with the
// targets the history's start operations name.
func faultBands(c *Curves, v *checker.Verdict) []band {
	labels := map[string][]FaultOp{}
	for _, f := range c.Faults {
		labels[f.Name] = append(labels[f.Name], f)
	}
	var out []band
	for _, w := range v.Timeline.Faults {
		b := band{Name: w.Name, Label: w.Name, Start: w.Start, End: w.End}
		for _, f := range labels[w.Name] {
			if math.Abs(float64(f.T)/1e9-w.Start) < 1e-6 && f.Label != "" {
				b.Label = f.Label
				break
			}
		}
		out = append(out, b)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func (p *plotter) figures() []figure {
	return append([]figure{
		p.faultLane(),
		p.throughput(),
		p.latency(),
		p.cluster(),
		p.unavailability(),
		p.unseen(),
		p.lag(),
	}, p.delivery()...)
}

// mid is the x of bucket i's middle.
func (p *plotter) mid(i int) float64 { return p.ax.x((float64(i) + 0.5) * p.width) }

func (p *plotter) begin(s *svg, id string, h float64) {
	s.open("svg", "xmlns", "http://www.w3.org/2000/svg", "viewBox", "0 0 "+fnum(svgW)+" "+fnum(h),
		"class", "plot", "data-plot", id, "data-t1", fsec(p.ax.t1), "data-bucket", fsec(p.width),
		"role", "img", "aria-label", id)
}

// faultLane draws one row per fault name with every window of that name,
// labelled with the resolved targets: the key to the shading in the
// other plots.
func (p *plotter) faultLane() figure {
	var names []string
	for _, b := range p.bands {
		if !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	const rowH, top = 22.0, 8.0
	h := top + rowH*float64(max(len(names), 1)) + 24
	var s svg
	p.begin(&s, "faults", h)
	bottom := h - 24
	s.xAxis(p.ax, top, bottom)
	if len(names) == 0 {
		s.text(marginL+8, top+15, "no faults in this run", "class", "note")
	}
	labels := len(p.bands) <= 60
	for i, name := range names {
		y := top + float64(i)*rowH
		s.text(marginL-6, y+15, name, "class", "rowlabel", "text-anchor", "end")
		var row []band
		for _, b := range p.bands {
			if b.Name == name {
				row = append(row, b)
			}
		}
		for _, b := range mergeBands(row, p.ax.t1/1000) {
			end := b.End
			if end < 0 {
				end = p.ax.t1
			}
			x0, x1 := p.ax.x(b.Start), p.ax.x(end)
			s.open("rect", "class", "faultbar", "x", x0, "y", y+3, "width", math.Max(x1-x0, 1.5), "height", rowH-6,
				"fill", colorOf(b.Name), "data-fault", b.Name, "data-label", b.Label, "data-start", fsec(b.Start), "data-end", fsec(b.End), "data-count", max(b.Count, 1))
			s.title(fmt.Sprintf("%s: %.3fs – %s", b.Label, b.Start, endText(b.End)))
			s.close("rect")
			if labels && x1-x0 > 30 {
				s.text(x0+4, y+15, b.Label, "class", "barlabel")
			}
		}
	}
	s.close("svg")
	return figure{ID: "faults", Title: "Faults", SVG: s.html(),
		Caption: "Each fault from its start's invocation to its heal's completion, with the nodes it resolved to; the same windows are shaded in every plot below."}
}

type series struct {
	name, color, dash string
	pick              func(b *Bucket) float64
}

func (p *plotter) throughput() figure {
	const top, bottom, h = 22.0, 200.0, 222.0
	rate := func(k int, send bool) func(b *Bucket) float64 {
		return func(b *Bucket) float64 {
			if send {
				return float64(b.Send[k])
			}
			return float64(b.Poll[k])
		}
	}
	ss := []series{
		{"send ok", "#2ca02c", "", rate(iOK, true)},
		{"send fail", "#d62728", "", rate(iFail, true)},
		{"send info", "#ff7f0e", "", rate(iInfo, true)},
		{"poll ok", "#1f77b4", "5 3", rate(iOK, false)},
		{"poll fail", "#9467bd", "5 3", rate(iFail, false)},
		{"poll info", "#8c564b", "5 3", rate(iInfo, false)},
	}
	peak := 0.0
	for i := range p.c.Buckets {
		for _, se := range ss {
			peak = math.Max(peak, se.pick(&p.c.Buckets[i])/p.width)
		}
	}
	ticks, ytop := linTicks(peak)
	var s svg
	p.begin(&s, "throughput", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	for _, t := range ticks {
		y := linY(t, ytop, top, bottom)
		s.el("line", "x1", marginL, "x2", plotR, "y1", y, "y2", y, "class", "grid")
		s.text(marginL-6, y+4, countLabel(t), "class", "tick", "text-anchor", "end")
	}
	s.yLabel(top, bottom, "ops/s")
	var legend [][3]string
	for _, se := range ss {
		var xs, ys []float64
		var total float64
		for i := range p.c.Buckets {
			v := se.pick(&p.c.Buckets[i])
			total += v
			xs = append(xs, p.mid(i))
			ys = append(ys, linY(v/p.width, ytop, top, bottom))
		}
		id := seriesID(se.name)
		if total == 0 {
			continue
		}
		legend = append(legend, [3]string{fmt.Sprintf("%s (%s)", se.name, countLabel(total)), se.color, se.dash})
		s.el("polyline", "class", "series", "data-series", id, "data-total", int64(total),
			"points", points(xs, ys), "fill", "none", "stroke", se.color, "stroke-width", 1.6, "stroke-dasharray", se.dash)
	}
	s.legend(14, legend)
	s.close("svg")
	return figure{ID: "throughput", Title: "Throughput", SVG: s.html(),
		Caption: fmt.Sprintf("Completions per second by outcome (ok, fail, info), sends solid and polls dashed, in %s buckets; the totals are in the legend.", secLabel(p.width))}
}

func seriesID(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c == ' ' {
			b[i] = '-'
		}
	}
	return string(b)
}

func secLabel(s float64) string {
	if s < 1 {
		return strconv.FormatFloat(s*1000, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

// quantileLines draws p50 and p99 lines with the band between them, and
// max dotted, for one histogram per bucket.
func (p *plotter) quantileLines(s *svg, ls logScale, id, color string, pick func(b *Bucket) *hist) {
	var xs, y50, y99, ymax []float64
	var n int64
	flush := func() {
		if len(xs) == 0 {
			return
		}
		poly := append(slices.Clone(xs), reversed(xs)...)
		ys := append(slices.Clone(y99), reversed(y50)...)
		s.el("polygon", "class", "band", "points", points(poly, ys), "fill", color, "fill-opacity", 0.18, "stroke", "none")
		s.el("polyline", "class", "series", "data-series", id+"-p50", "points", points(xs, y50), "fill", "none", "stroke", color, "stroke-width", 1.6)
		s.el("polyline", "class", "series", "data-series", id+"-p99", "points", points(xs, y99), "fill", "none", "stroke", color, "stroke-width", 1, "stroke-dasharray", "4 2")
		s.el("polyline", "class", "series", "data-series", id+"-max", "points", points(xs, ymax), "fill", "none", "stroke", color, "stroke-width", 0.8, "stroke-dasharray", "1 2")
		if len(xs) == 1 {
			// A lone bucket draws no line: mark its p50 and its p99..max.
			s.el("line", "class", "lone", "x1", xs[0], "x2", xs[0], "y1", y99[0], "y2", ymax[0], "stroke", color, "stroke-width", 1)
			s.el("circle", "class", "lone", "cx", xs[0], "cy", y50[0], "r", 2.5, "fill", color)
		}
		xs, y50, y99, ymax = nil, nil, nil, nil
	}
	for i := range p.c.Buckets {
		h := pick(&p.c.Buckets[i])
		if h.n == 0 {
			flush()
			continue
		}
		n += h.n
		xs = append(xs, p.mid(i))
		y50 = append(y50, ls.y(h.q(0.5)/1e6))
		y99 = append(y99, ls.y(h.q(0.99)/1e6))
		ymax = append(ymax, ls.y(float64(h.max)/1e6))
	}
	flush()
	s.el("g", "class", "count", "data-series", id, "data-count", n)
}

func reversed(xs []float64) []float64 {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

func (p *plotter) logAxis(s *svg, ls logScale, unit string) {
	for e := ls.lo; e <= ls.hi; e++ {
		v := math.Pow(10, e)
		y := ls.y(v)
		s.el("line", "x1", marginL, "x2", plotR, "y1", y, "y2", y, "class", "grid")
		s.text(marginL-6, y+4, msLabel(v), "class", "tick", "text-anchor", "end")
	}
	s.yLabel(ls.y0, ls.bottom, unit)
}

func histRange(bs []Bucket, pick func(b *Bucket) *hist) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for i := range bs {
		h := pick(&bs[i])
		if h.n == 0 {
			continue
		}
		lo = math.Min(lo, h.q(0.5)/1e6)
		hi = math.Max(hi, float64(h.max)/1e6)
	}
	return lo, hi
}

func (p *plotter) latency() figure {
	const top, bottom, h = 22.0, 220.0, 242.0
	sendH := func(b *Bucket) *hist { return &b.SendLat }
	pollH := func(b *Bucket) *hist { return &b.PollLat }
	lo1, hi1 := histRange(p.c.Buckets, sendH)
	lo2, hi2 := histRange(p.c.Buckets, pollH)
	lo, hi := math.Min(lo1, lo2), math.Max(hi1, hi2)
	for _, pt := range p.c.Points {
		hi = math.Max(hi, float64(pt.Lat)/1e6)
		lo = math.Min(lo, math.Max(float64(pt.Lat)/1e6, 0.001))
	}
	ls := newLogScale(lo, hi, top, bottom)
	var s svg
	p.begin(&s, "latency", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	p.logAxis(&s, ls, "latency")
	p.quantileLines(&s, ls, "send", "#2ca02c", sendH)
	p.quantileLines(&s, ls, "poll", "#1f77b4", pollH)
	var nFail, nInfo int
	for _, pt := range p.c.Points {
		color := "#ff7f0e"
		if pt.Type == history.Fail {
			color = "#d62728"
			nFail++
		} else {
			nInfo++
		}
		x, y := p.ax.x(float64(pt.T)/1e9), ls.y(math.Max(float64(pt.Lat)/1e6, 0.001))
		if pt.F == history.FSend {
			s.el("circle", "class", "point", "data-type", pt.Type.String(), "data-f", pt.F, "cx", x, "cy", y, "r", 2.2, "fill", color)
		} else {
			s.el("rect", "class", "point", "data-type", pt.Type.String(), "data-f", pt.F, "x", x-2, "y", y-2, "width", 4, "height", 4, "fill", "none", "stroke", color)
		}
	}
	s.legend(14, [][3]string{{"send p50 / p99 / max", "#2ca02c", ""}, {"poll p50 / p99 / max", "#1f77b4", ""},
		{"fail", "#d62728", ""}, {"info", "#ff7f0e", ""}})
	s.close("svg")
	caption := "Latency of ok sends and polls per bucket, log scale: p50 solid, p99 dashed (shaded between), max dotted; fail and info completions as points (sends ●, polls □)."
	if p.c.PointStride > 1 {
		caption += fmt.Sprintf(" Points are every %d-th fail or info completion.", p.c.PointStride)
	}
	return figure{ID: "latency", Title: "Latency", SVG: s.html(), Caption: caption}
}

// cluster draws, per partition, the leader (coloured by broker, with the
// leader epoch), one row per replica shaded while it is in the ISR, and
// the high watermark when the history has it.
func (p *plotter) cluster() figure {
	const top, leaderH, isrH, hwH, gap = 8.0, 18.0, 8.0, 28.0, 12.0
	states := slices.Clone(p.c.States)
	sort.Slice(states, func(i, j int) bool { return states[i].Partition < states[j].Partition })
	type lane struct {
		ps       PartitionStates
		replicas []int32
		maxHW    int64
		h        float64
		hidden   int64 // events not drawn
	}
	var lanes []lane
	y := top
	for _, ps := range states {
		l := lane{ps: ps, maxHW: -1}
		for _, e := range ps.Events {
			for _, r := range e.ISR {
				if !slices.Contains(l.replicas, r) {
					l.replicas = append(l.replicas, r)
				}
			}
			if e.Leader >= 0 && !slices.Contains(l.replicas, e.Leader) {
				l.replicas = append(l.replicas, e.Leader)
			}
			l.maxHW = max(l.maxHW, e.HW)
		}
		slices.Sort(l.replicas)
		l.h = leaderH + isrH*float64(len(l.replicas)) + gap
		if l.maxHW >= 0 {
			l.h += hwH
		}
		l.hidden = int64(len(ps.Events)-len(drawable(ps.Events, p.ax))) + ps.Dropped
		if l.hidden > 0 {
			l.h += 10
		}
		lanes = append(lanes, l)
		y += l.h
	}
	h := math.Max(y, top+30) + 24
	bottom := h - 24
	var s svg
	p.begin(&s, "cluster", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	if len(lanes) == 0 {
		s.text(marginL+8, top+18, "no cluster-state events in the history", "class", "note")
	}
	end := p.ax.t1
	y = top
	for _, l := range lanes {
		part := l.ps.Partition
		s.open("g", "class", "partition", "data-partition", part, "data-events", len(l.ps.Events))
		s.text(marginL-6, y+13, "p"+strconv.Itoa(int(part)), "class", "rowlabel", "text-anchor", "end")
		evs := drawable(l.ps.Events, p.ax)
		titles := len(evs) <= 300
		for i, e := range evs {
			t0 := float64(e.T) / 1e9
			t1 := end
			if i+1 < len(evs) {
				t1 = float64(evs[i+1].T) / 1e9
			}
			x0, x1 := p.ax.x(t0), p.ax.x(t1)
			label := "offline"
			if e.Leader >= 0 {
				label = "b" + strconv.Itoa(int(e.Leader))
			}
			s.open("rect", "class", "leader", "data-partition", part, "data-leader", e.Leader, "data-epoch", e.Epoch,
				"data-start", fsec(t0), "x", x0, "y", y, "width", math.Max(x1-x0, 1), "height", leaderH-2, "fill", brokerColor(e.Leader))
			if titles {
				s.title(fmt.Sprintf("partition %d from %.3fs: leader %s, epoch %d, ISR %v", part, t0, label, e.Epoch, e.ISR))
			}
			s.close("rect")
			if x1-x0 > 44 {
				s.text(x0+3, y+12, fmt.Sprintf("%s e%d", label, e.Epoch), "class", "barlabel")
			}
			for k, r := range l.replicas {
				if !slices.Contains(e.ISR, r) {
					continue
				}
				ry := y + leaderH + isrH*float64(k)
				s.el("rect", "class", "isr", "data-partition", part, "data-replica", r, "data-start", fsec(t0),
					"x", x0, "y", ry, "width", math.Max(x1-x0, 1), "height", isrH-2, "fill", brokerColor(r), "fill-opacity", 0.55)
			}
		}
		for k, r := range l.replicas {
			ry := y + leaderH + isrH*float64(k)
			s.text(marginL-6, ry+7, "isr b"+strconv.Itoa(int(r)), "class", "smalllabel", "text-anchor", "end")
		}
		if l.maxHW >= 0 {
			hy0 := y + leaderH + isrH*float64(len(l.replicas)) + 2
			var xs, ys []float64
			for _, e := range evs {
				if e.HW < 0 {
					continue
				}
				xs = append(xs, p.ax.x(float64(e.T)/1e9))
				ys = append(ys, linY(float64(e.HW), float64(l.maxHW), hy0, hy0+hwH-6))
			}
			s.el("polyline", "class", "series", "data-series", "hw", "data-partition", part, "data-max-hw", l.maxHW,
				"points", points(xs, ys), "fill", "none", "stroke", "#333", "stroke-width", 1.2)
			s.text(marginL-6, hy0+12, "HW "+countLabel(float64(l.maxHW)), "class", "smalllabel", "text-anchor", "end")
		}
		if l.hidden > 0 {
			s.text(marginL, y+l.h-gap+2, fmt.Sprintf("%d of partition %d's state events lasted under a pixel or were past the %d kept, and are not drawn", l.hidden, part, maxStateEvents), "class", "smalllabel")
		}
		s.close("g")
		y += l.h
	}
	s.close("svg")
	caption := "Per partition, as the observer saw it: the leader (colour per broker, label broker and leader epoch; red when offline), then one row per replica, filled while it is in the ISR"
	hw := false
	for _, l := range lanes {
		hw = hw || l.maxHW >= 0
	}
	if hw {
		caption += ", and the high watermark."
	} else {
		caption += ". The history records no high watermark."
	}
	return figure{ID: "cluster", Title: "Leaders, epochs and ISR", SVG: s.html(), Caption: caption}
}

// drawable drops the state events that last less than a pixel before
// the next one: what is drawn is the state that held.
func drawable(evs []StateEvent, ax timeAxis) []StateEvent {
	out := make([]StateEvent, 0, len(evs))
	for i, e := range evs {
		if i+1 < len(evs) && ax.x(float64(evs[i+1].T)/1e9)-ax.x(float64(e.T)/1e9) < 0.75 {
			continue
		}
		out = append(out, e)
	}
	return out
}

// unavailability draws, per partition, its ok sends per bucket as a strip
// (white: none) and the checker's longest unavailability window.
func (p *plotter) unavailability() figure {
	const top, rowH = 8.0, 24.0
	parts := p.v.Unavailability.Partitions
	h := top + rowH*float64(max(len(parts), 1)) + 24
	bottom := h - 24
	var s svg
	p.begin(&s, "unavailability", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	strip := map[int32]int{}
	for i, sp := range p.c.StripParts {
		strip[sp] = i
	}
	for r, pu := range parts {
		y := top + float64(r)*rowH
		s.text(marginL-6, y+15, "p"+strconv.Itoa(int(pu.Partition)), "class", "rowlabel", "text-anchor", "end")
		if k, ok := strip[pu.Partition]; ok {
			peak := int64(0)
			for i := range p.c.Buckets {
				if k < len(p.c.Buckets[i].PartOK) {
					peak = max(peak, p.c.Buckets[i].PartOK[k])
				}
			}
			// One path per shade (four of them) rather than a rect per
			// bucket keeps the report small.
			var paths [4]strings.Builder
			for i := range p.c.Buckets {
				var n int64
				if k < len(p.c.Buckets[i].PartOK) {
					n = p.c.Buckets[i].PartOK[k]
				}
				if n == 0 || peak == 0 {
					continue
				}
				lvl := min(int(4*n/peak), 3)
				x0, x1 := p.ax.x(float64(i)*p.width), p.ax.x(float64(i+1)*p.width)
				fmt.Fprintf(&paths[lvl], "M%s %sh%sv%sh-%sz", fnum(x0), fnum(y+4), fnum(x1-x0+0.3), fnum(rowH-8), fnum(x1-x0+0.3))
			}
			for lvl := range paths {
				if paths[lvl].Len() > 0 {
					s.el("path", "class", "okstrip", "d", paths[lvl].String(), "fill", "#2ca02c", "fill-opacity", 0.2+0.18*float64(lvl))
				}
			}
		}
		if pu.Windows > 0 {
			x0, x1 := p.ax.x(pu.LongestStart), p.ax.x(pu.LongestEnd)
			s.open("rect", "class", "unavail", "data-partition", pu.Partition, "data-start", fsec(pu.LongestStart),
				"data-end", fsec(pu.LongestEnd), "data-longest", fsec(pu.Longest), "data-windows", pu.Windows, "data-total", fsec(pu.Total),
				"x", x0, "y", y+2, "width", math.Max(x1-x0, 1.5), "height", rowH-4, "fill", "none", "stroke", "#d62728", "stroke-width", 2)
			s.title(fmt.Sprintf("partition %d: longest window %.3fs (%.3fs – %.3fs); %d windows over %gs, %.3fs in all",
				pu.Partition, pu.Longest, pu.LongestStart, pu.LongestEnd, pu.Windows, p.v.Unavailability.ThresholdSeconds, pu.Total))
			s.close("rect")
			label := fmt.Sprintf("%.1fs unavailable (%s, %.1fs in all)", pu.Longest, plural(pu.Windows, "window"), pu.Total)
			w := 5.5 * float64(len(label))
			switch {
			case x1+4+w <= plotR:
				s.text(x1+4, y+15, label, "class", "unavlabel")
			case x0-4-w >= marginL:
				s.text(x0-4, y+15, label, "class", "unavlabel", "text-anchor", "end")
			default:
				s.text(x0+4, y+15, label, "class", "unavlabel")
			}
		}
	}
	if len(parts) == 0 {
		s.text(marginL+8, top+15, "no sends, no partitions", "class", "note")
	}
	s.close("svg")
	return figure{ID: "unavailability", Title: "Unavailability per partition", SVG: s.html(),
		Caption: fmt.Sprintf("Green: ok sends to the partition per bucket (darker is more). Red outline: the longest window in which sends to it were attempted and none succeeded (windows over %gs count), from the checker.", p.v.Unavailability.ThresholdSeconds)}
}

func (p *plotter) unseen() figure {
	const top, bottom, h = 22.0, 180.0, 202.0
	ticks, ytop := linTicks(float64(p.c.MaxUnseen))
	var s svg
	p.begin(&s, "unseen", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	for _, t := range ticks {
		y := linY(t, ytop, top, bottom)
		s.el("line", "x1", marginL, "x2", plotR, "y1", y, "y2", y, "class", "grid")
		s.text(marginL-6, y+4, countLabel(t), "class", "tick", "text-anchor", "end")
	}
	s.yLabel(top, bottom, "records")
	// A step per bucket at the most that were waiting in it (the value
	// carried from the last bucket that changed it).
	var xs, ys []float64
	cur := int64(0)
	for i := range p.c.Buckets {
		b := &p.c.Buckets[i]
		x0, x1 := p.ax.x(float64(i)*p.width), p.ax.x(float64(i+1)*p.width)
		y := linY(float64(max(b.UnseenMax, cur)), ytop, top, bottom)
		if b.Unseen >= 0 {
			cur = b.Unseen
		}
		xs = append(xs, x0, x1)
		ys = append(ys, y, y)
	}
	s.el("polyline", "class", "series", "data-series", "unseen", "data-max", p.c.MaxUnseen, "data-final", p.c.Unseen,
		"points", points(xs, ys), "fill", "none", "stroke", "#d62728", "stroke-width", 1.5)
	s.legend(14, [][3]string{{fmt.Sprintf("acknowledged, not yet read (peak %s, at the end %s)", countLabel(float64(p.c.MaxUnseen)), countLabel(float64(p.c.Unseen))), "#d62728", ""}})
	s.close("svg")
	return figure{ID: "unseen", Title: "Unseen", SVG: s.html(),
		Caption: fmt.Sprintf("Jepsen's unseen curve: acknowledged records no poll has returned yet, over time (the most at once in each bucket). %d sends were acknowledged; %d were read (%d of them before the acknowledgement arrived), %d never were.",
			p.c.Acked, p.c.FirstReads, p.c.ReadBeforeAck, p.c.Unseen)}
}

func (p *plotter) lag() figure {
	const top, bottom, h = 22.0, 200.0, 222.0
	lagH := func(b *Bucket) *hist { return &b.Lag }
	lo, hi := histRange(p.c.Buckets, lagH)
	ls := newLogScale(lo, hi, top, bottom)
	var s svg
	p.begin(&s, "lag", h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	p.logAxis(&s, ls, "ack → first read")
	p.quantileLines(&s, ls, "lag", "#9467bd", lagH)
	s.legend(14, [][3]string{{"p50 / p99 / max", "#9467bd", ""}})
	s.close("svg")
	l := &p.c.Lag
	return figure{ID: "lag", Title: "Realtime lag", SVG: s.html(),
		Caption: fmt.Sprintf("How long after its acknowledgement a record was first read, by the time of that read, log scale. Over the run: p50 %s, p99 %s, max %s (%d records).",
			msLabel(l.q(0.5)/1e6), msLabel(l.q(0.99)/1e6), msLabel(float64(l.max)/1e6), l.n)}
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}
