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
	"github.com/isrlab/isrlab/internal/svgplot"
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
	ax    svgplot.TimeAxis
	bands []svgplot.Band
	// shading is bands as the plots shade them: merged when there are
	// too many to draw one by one.
	shading []svgplot.Band
	width   float64 // bucket width, seconds
}

func newPlotter(c *Curves, v *checker.Verdict) *plotter {
	p := &plotter{c: c, v: v, width: float64(c.Width) / 1e9}
	end := float64(c.End) / 1e9
	for _, w := range v.Timeline.Faults {
		end = math.Max(end, w.End)
	}
	p.ax = newTimeAxis(math.Max(end, 1))
	p.bands = faultBands(c, v)
	p.shading = mergeBands(p.bands, p.ax.T1/1000)
	return p
}

// maxBands is the most fault windows a plot draws one by one; past it,
// windows closer than a pixel merge into one band (with a count), so that
// a history with thousands of faults still gives a small report.
const maxBands = 100

// mergeBands merges bands (sorted by start) whose gap is under gap when
// there are more than maxBands of them.
func mergeBands(bands []svgplot.Band, gap float64) []svgplot.Band {
	if len(bands) <= maxBands {
		return bands
	}
	var out []svgplot.Band
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
func faultBands(c *Curves, v *checker.Verdict) []svgplot.Band {
	labels := map[string][]FaultOp{}
	for _, f := range c.Faults {
		labels[f.Name] = append(labels[f.Name], f)
	}
	var out []svgplot.Band
	for _, w := range v.Timeline.Faults {
		b := svgplot.Band{Name: w.Name, Label: w.Name, Start: w.Start, End: w.End}
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
func (p *plotter) mid(i int) float64 { return p.ax.X((float64(i) + 0.5) * p.width) }

func (p *plotter) begin(s *svgplot.Builder, id string, h float64) {
	s.OpenSVG(svgW, h, "class", "plot", "data-plot", id, "data-t1", svgplot.Sec(p.ax.T1), "data-bucket", svgplot.Sec(p.width),
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
	var s svgplot.Builder
	p.begin(&s, "faults", h)
	bottom := h - 24
	s.XAxis(p.ax, top, bottom)
	if len(names) == 0 {
		s.Text(marginL+8, top+15, "no faults in this run", "class", "note")
	}
	labels := len(p.bands) <= 60
	for i, name := range names {
		y := top + float64(i)*rowH
		s.Text(marginL-6, y+15, name, "class", "rowlabel", "text-anchor", "end")
		var row []svgplot.Band
		for _, b := range p.bands {
			if b.Name == name {
				row = append(row, b)
			}
		}
		for _, b := range mergeBands(row, p.ax.T1/1000) {
			end := b.End
			if end < 0 {
				end = p.ax.T1
			}
			x0, x1 := p.ax.X(b.Start), p.ax.X(end)
			s.Open("rect", "class", "faultbar", "x", x0, "y", y+3, "width", math.Max(x1-x0, 1.5), "height", rowH-6,
				"fill", svgplot.ColorOf(b.Name), "data-fault", b.Name, "data-label", b.Label, "data-start", svgplot.Sec(b.Start), "data-end", svgplot.Sec(b.End), "data-count", max(b.Count, 1))
			s.Title(b.Title())
			s.Close("rect")
			if labels && x1-x0 > 30 {
				s.Text(x0+4, y+15, b.Label, "class", "barlabel")
			}
		}
	}
	s.Close("svg")
	return figure{ID: "faults", Title: "Faults", SVG: s.HTML(),
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
	var s svgplot.Builder
	p.begin(&s, "throughput", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	y := countAxis(&s, peak, top, bottom, "ops/s")
	var legend []svgplot.Key
	for _, se := range ss {
		var xs, ys []float64
		var total float64
		for i := range p.c.Buckets {
			v := se.pick(&p.c.Buckets[i])
			total += v
			xs = append(xs, p.mid(i))
			ys = append(ys, y(v/p.width))
		}
		id := seriesID(se.name)
		if total == 0 {
			continue
		}
		legend = append(legend, svgplot.Key{Label: fmt.Sprintf("%s (%s)", se.name, svgplot.CountLabel(total)), Color: se.color, Dash: se.dash})
		s.El("polyline", "class", "series", "data-series", id, "data-total", int64(total),
			"points", svgplot.Points(xs, ys), "fill", "none", "stroke", se.color, "stroke-width", 1.6, "stroke-dasharray", se.dash)
	}
	s.Legend(plotR, 14, legend)
	s.Close("svg")
	return figure{ID: "throughput", Title: "Throughput", SVG: s.HTML(),
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
func (p *plotter) quantileLines(s *svgplot.Builder, ls svgplot.LogScale, id, color string, pick func(b *Bucket) *hist) {
	var xs, y50, y99, ymax []float64
	var n int64
	flush := func() {
		if len(xs) == 0 {
			return
		}
		poly := append(slices.Clone(xs), reversed(xs)...)
		ys := append(slices.Clone(y99), reversed(y50)...)
		s.El("polygon", "class", "band", "points", svgplot.Points(poly, ys), "fill", color, "fill-opacity", 0.18, "stroke", "none")
		s.El("polyline", "class", "series", "data-series", id+"-p50", "points", svgplot.Points(xs, y50), "fill", "none", "stroke", color, "stroke-width", 1.6)
		s.El("polyline", "class", "series", "data-series", id+"-p99", "points", svgplot.Points(xs, y99), "fill", "none", "stroke", color, "stroke-width", 1, "stroke-dasharray", "4 2")
		s.El("polyline", "class", "series", "data-series", id+"-max", "points", svgplot.Points(xs, ymax), "fill", "none", "stroke", color, "stroke-width", 0.8, "stroke-dasharray", "1 2")
		if len(xs) == 1 {
			// A lone bucket draws no line: mark its p50 and its p99..max.
			s.El("line", "class", "lone", "x1", xs[0], "x2", xs[0], "y1", y99[0], "y2", ymax[0], "stroke", color, "stroke-width", 1)
			s.El("circle", "class", "lone", "cx", xs[0], "cy", y50[0], "r", 2.5, "fill", color)
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
		y50 = append(y50, ls.Y(h.q(0.5)/1e6))
		y99 = append(y99, ls.Y(h.q(0.99)/1e6))
		ymax = append(ymax, ls.Y(float64(h.max)/1e6))
	}
	flush()
	s.El("g", "class", "count", "data-series", id, "data-count", n)
}

func reversed(xs []float64) []float64 {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

// countAxis draws a linear value axis from 0 to at least hi, labelled as
// counts, and returns where a value falls on it.
func countAxis(s *svgplot.Builder, hi, top, bottom float64, unit string) func(float64) float64 {
	ticks, ytop := svgplot.Ticks(hi)
	y := func(v float64) float64 { return svgplot.LinY(v, ytop, top, bottom) }
	s.YGrid(marginL, plotR, ticks, y, svgplot.CountLabel)
	s.YLabel(top, bottom, unit)
	return y
}

// logAxis draws a log scale's decades, labelled as milliseconds.
func logAxis(s *svgplot.Builder, ls svgplot.LogScale, unit string) {
	s.YGrid(marginL, plotR, ls.Ticks(), ls.Y, svgplot.MsLabel)
	s.YLabel(ls.Y0, ls.Bottom, unit)
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
	ls := svgplot.NewLogScale(lo, hi, top, bottom)
	var s svgplot.Builder
	p.begin(&s, "latency", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	logAxis(&s, ls, "latency")
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
		x, y := p.ax.X(float64(pt.T)/1e9), ls.Y(math.Max(float64(pt.Lat)/1e6, 0.001))
		if pt.F == history.FSend {
			s.El("circle", "class", "point", "data-type", pt.Type.String(), "data-f", pt.F, "cx", x, "cy", y, "r", 2.2, "fill", color)
		} else {
			s.El("rect", "class", "point", "data-type", pt.Type.String(), "data-f", pt.F, "x", x-2, "y", y-2, "width", 4, "height", 4, "fill", "none", "stroke", color)
		}
	}
	s.Legend(plotR, 14, []svgplot.Key{{Label: "send p50 / p99 / max", Color: "#2ca02c"}, {Label: "poll p50 / p99 / max", Color: "#1f77b4"},
		{Label: "fail", Color: "#d62728"}, {Label: "info", Color: "#ff7f0e"}})
	s.Close("svg")
	caption := "Latency of ok sends and polls per bucket, log scale: p50 solid, p99 dashed (shaded between), max dotted; fail and info completions as points (sends ●, polls □)."
	if p.c.PointStride > 1 {
		caption += fmt.Sprintf(" Points are every %d-th fail or info completion.", p.c.PointStride)
	}
	return figure{ID: "latency", Title: "Latency", SVG: s.HTML(), Caption: caption}
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
	var s svgplot.Builder
	p.begin(&s, "cluster", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	if len(lanes) == 0 {
		s.Text(marginL+8, top+18, "no cluster-state events in the history", "class", "note")
	}
	end := p.ax.T1
	y = top
	for _, l := range lanes {
		part := l.ps.Partition
		s.Open("g", "class", "partition", "data-partition", part, "data-events", len(l.ps.Events))
		s.Text(marginL-6, y+13, "p"+strconv.Itoa(int(part)), "class", "rowlabel", "text-anchor", "end")
		evs := drawable(l.ps.Events, p.ax)
		titles := len(evs) <= 300
		for i, e := range evs {
			t0 := float64(e.T) / 1e9
			t1 := end
			if i+1 < len(evs) {
				t1 = float64(evs[i+1].T) / 1e9
			}
			x0, x1 := p.ax.X(t0), p.ax.X(t1)
			label := "offline"
			if e.Leader >= 0 {
				label = "b" + strconv.Itoa(int(e.Leader))
			}
			s.Open("rect", "class", "leader", "data-partition", part, "data-leader", e.Leader, "data-epoch", e.Epoch,
				"data-start", svgplot.Sec(t0), "x", x0, "y", y, "width", math.Max(x1-x0, 1), "height", leaderH-2, "fill", brokerColor(e.Leader))
			if titles {
				s.Title(fmt.Sprintf("partition %d from %.3fs: leader %s, epoch %d, ISR %v", part, t0, label, e.Epoch, e.ISR))
			}
			s.Close("rect")
			if x1-x0 > 44 {
				s.Text(x0+3, y+12, fmt.Sprintf("%s e%d", label, e.Epoch), "class", "barlabel")
			}
			for k, r := range l.replicas {
				if !slices.Contains(e.ISR, r) {
					continue
				}
				ry := y + leaderH + isrH*float64(k)
				s.El("rect", "class", "isr", "data-partition", part, "data-replica", r, "data-start", svgplot.Sec(t0),
					"x", x0, "y", ry, "width", math.Max(x1-x0, 1), "height", isrH-2, "fill", brokerColor(r), "fill-opacity", 0.55)
			}
		}
		for k, r := range l.replicas {
			ry := y + leaderH + isrH*float64(k)
			s.Text(marginL-6, ry+7, "isr b"+strconv.Itoa(int(r)), "class", "smalllabel", "text-anchor", "end")
		}
		if l.maxHW >= 0 {
			hy0 := y + leaderH + isrH*float64(len(l.replicas)) + 2
			var xs, ys []float64
			for _, e := range evs {
				if e.HW < 0 {
					continue
				}
				xs = append(xs, p.ax.X(float64(e.T)/1e9))
				ys = append(ys, svgplot.LinY(float64(e.HW), float64(l.maxHW), hy0, hy0+hwH-6))
			}
			s.El("polyline", "class", "series", "data-series", "hw", "data-partition", part, "data-max-hw", l.maxHW,
				"points", svgplot.Points(xs, ys), "fill", "none", "stroke", "#333", "stroke-width", 1.2)
			s.Text(marginL-6, hy0+12, "HW "+svgplot.CountLabel(float64(l.maxHW)), "class", "smalllabel", "text-anchor", "end")
		}
		if l.hidden > 0 {
			s.Text(marginL, y+l.h-gap+2, fmt.Sprintf("%d of partition %d's state events lasted under a pixel or were past the %d kept, and are not drawn", l.hidden, part, maxStateEvents), "class", "smalllabel")
		}
		s.Close("g")
		y += l.h
	}
	s.Close("svg")
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
	return figure{ID: "cluster", Title: "Leaders, epochs and ISR", SVG: s.HTML(), Caption: caption}
}

// drawable drops the state events that last less than a pixel before
// the next one: what is drawn is the state that held.
func drawable(evs []StateEvent, ax svgplot.TimeAxis) []StateEvent {
	out := make([]StateEvent, 0, len(evs))
	for i, e := range evs {
		if i+1 < len(evs) && ax.X(float64(evs[i+1].T)/1e9)-ax.X(float64(e.T)/1e9) < 0.75 {
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
	var s svgplot.Builder
	p.begin(&s, "unavailability", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	strip := map[int32]int{}
	for i, sp := range p.c.StripParts {
		strip[sp] = i
	}
	for r, pu := range parts {
		y := top + float64(r)*rowH
		s.Text(marginL-6, y+15, "p"+strconv.Itoa(int(pu.Partition)), "class", "rowlabel", "text-anchor", "end")
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
				x0, x1 := p.ax.X(float64(i)*p.width), p.ax.X(float64(i+1)*p.width)
				fmt.Fprintf(&paths[lvl], "M%s %sh%sv%sh-%sz", svgplot.Num(x0), svgplot.Num(y+4), svgplot.Num(x1-x0+0.3), svgplot.Num(rowH-8), svgplot.Num(x1-x0+0.3))
			}
			for lvl := range paths {
				if paths[lvl].Len() > 0 {
					s.El("path", "class", "okstrip", "d", paths[lvl].String(), "fill", "#2ca02c", "fill-opacity", 0.2+0.18*float64(lvl))
				}
			}
		}
		if pu.Windows > 0 {
			x0, x1 := p.ax.X(pu.LongestStart), p.ax.X(pu.LongestEnd)
			s.Open("rect", "class", "unavail", "data-partition", pu.Partition, "data-start", svgplot.Sec(pu.LongestStart),
				"data-end", svgplot.Sec(pu.LongestEnd), "data-longest", svgplot.Sec(pu.Longest), "data-windows", pu.Windows, "data-total", svgplot.Sec(pu.Total),
				"x", x0, "y", y+2, "width", math.Max(x1-x0, 1.5), "height", rowH-4, "fill", "none", "stroke", "#d62728", "stroke-width", 2)
			s.Title(fmt.Sprintf("partition %d: longest window %.3fs (%.3fs – %.3fs); %d windows over %gs, %.3fs in all",
				pu.Partition, pu.Longest, pu.LongestStart, pu.LongestEnd, pu.Windows, p.v.Unavailability.ThresholdSeconds, pu.Total))
			s.Close("rect")
			label := fmt.Sprintf("%.1fs unavailable (%s, %.1fs in all)", pu.Longest, plural(pu.Windows, "window"), pu.Total)
			w := 5.5 * float64(len(label))
			switch {
			case x1+4+w <= plotR:
				s.Text(x1+4, y+15, label, "class", "unavlabel")
			case x0-4-w >= marginL:
				s.Text(x0-4, y+15, label, "class", "unavlabel", "text-anchor", "end")
			default:
				s.Text(x0+4, y+15, label, "class", "unavlabel")
			}
		}
	}
	if len(parts) == 0 {
		s.Text(marginL+8, top+15, "no sends, no partitions", "class", "note")
	}
	s.Close("svg")
	return figure{ID: "unavailability", Title: "Unavailability per partition", SVG: s.HTML(),
		Caption: fmt.Sprintf("Green: ok sends to the partition per bucket (darker is more). Red outline: the longest window in which sends to it were attempted and none succeeded (windows over %gs count), from the checker.", p.v.Unavailability.ThresholdSeconds)}
}

func (p *plotter) unseen() figure {
	const top, bottom, h = 22.0, 180.0, 202.0
	var s svgplot.Builder
	p.begin(&s, "unseen", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	yOf := countAxis(&s, float64(p.c.MaxUnseen), top, bottom, "records")
	// A step per bucket at the most that were waiting in it (the value
	// carried from the last bucket that changed it).
	var xs, ys []float64
	cur := int64(0)
	for i := range p.c.Buckets {
		b := &p.c.Buckets[i]
		x0, x1 := p.ax.X(float64(i)*p.width), p.ax.X(float64(i+1)*p.width)
		y := yOf(float64(max(b.UnseenMax, cur)))
		if b.Unseen >= 0 {
			cur = b.Unseen
		}
		xs = append(xs, x0, x1)
		ys = append(ys, y, y)
	}
	s.El("polyline", "class", "series", "data-series", "unseen", "data-max", p.c.MaxUnseen, "data-final", p.c.Unseen,
		"points", svgplot.Points(xs, ys), "fill", "none", "stroke", "#d62728", "stroke-width", 1.5)
	s.Legend(plotR, 14, []svgplot.Key{{Label: fmt.Sprintf("acknowledged, not yet read (peak %s, at the end %s)", svgplot.CountLabel(float64(p.c.MaxUnseen)), svgplot.CountLabel(float64(p.c.Unseen))), Color: "#d62728"}})
	s.Close("svg")
	return figure{ID: "unseen", Title: "Unseen", SVG: s.HTML(),
		Caption: fmt.Sprintf("Jepsen's unseen curve: acknowledged records no poll has returned yet, over time (the most at once in each bucket). %d sends were acknowledged; %d were read (%d of them before the acknowledgement arrived), %d never were.",
			p.c.Acked, p.c.FirstReads, p.c.ReadBeforeAck, p.c.Unseen)}
}

func (p *plotter) lag() figure {
	const top, bottom, h = 22.0, 200.0, 222.0
	lagH := func(b *Bucket) *hist { return &b.Lag }
	lo, hi := histRange(p.c.Buckets, lagH)
	ls := svgplot.NewLogScale(lo, hi, top, bottom)
	var s svgplot.Builder
	p.begin(&s, "lag", h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	logAxis(&s, ls, "ack → first read")
	p.quantileLines(&s, ls, "lag", "#9467bd", lagH)
	s.Legend(plotR, 14, []svgplot.Key{{Label: "p50 / p99 / max", Color: "#9467bd"}})
	s.Close("svg")
	l := &p.c.Lag
	return figure{ID: "lag", Title: "Realtime lag", SVG: s.HTML(),
		Caption: fmt.Sprintf("How long after its acknowledgement a record was first read, by the time of that read, log scale. Over the run: p50 %s, p99 %s, max %s (%d records).",
			svgplot.MsLabel(l.q(0.5)/1e6), svgplot.MsLabel(l.q(0.99)/1e6), svgplot.MsLabel(float64(l.max)/1e6), l.n)}
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}
