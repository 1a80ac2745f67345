package series

import (
	"io"
	"math"
	"slices"

	"github.com/isrlab/isrlab/internal/svgplot"
)

// Panel is one plot of a figure: the measures it draws, per source.
type Panel struct {
	Title string
	// Measure is the value drawn; Src selects the samples ("workload", or
	// "" for every broker, one line each).
	Measure string
	Src     string
	// Sum draws one line of the brokers' values summed per second
	// instead of one per broker.
	Sum bool
	// Scale multiplies the values (100 for a fraction shown in %).
	Scale float64
	// Also draws a second measure of the same source, dashed.
	Also string
}

// IncidentPanels are the seed 004 figure: throughput, ISR churn, handler
// idleness, partition-lock waits and follower fetch latency.
var IncidentPanels = []Panel{
	{Title: "throughput (records/s acknowledged; dashed: offered)", Measure: "acked_per_s", Src: SrcWorkload, Also: "offered_per_s"},
	{Title: "ISR shrinks/s, all brokers (dashed: expands/s)", Measure: "IsrShrinksPerSec", Sum: true, Also: "IsrExpandsPerSec"},
	{Title: "request handler idle % per broker", Measure: "RequestHandlerAvgIdlePercent", Scale: 100},
	{Title: "partition read-lock wait, ms per second per broker", Measure: "LockWaitMsPerSec.read"},
	{Title: "follower fetch p99 ms per leader broker", Measure: "FetchFollowerP99Ms"},
	{Title: "produce p99 ms (acknowledgement latency)", Measure: "produce_p99_ms", Src: SrcWorkload},
}

// line is one polyline: a source's values of the panel's measure, or of
// its second measure (dashed).
type line struct {
	src    string
	pts    [][2]float64
	dashed bool
}

// Plot writes an SVG figure of the panels over the samples, with the fault
// windows shaded. It carries its own style, so that it stands alone as a
// file.
func Plot(w io.Writer, title string, samples []Sample, faults []Window, panels []Panel) error {
	const width, left, right, panelH, gap, top = 960.0, 70.0, 16.0, 120.0, 38.0, 40.0
	end := 0.0
	for _, s := range samples {
		end = max(end, s.T)
	}
	if end <= 0 {
		end = 1
	}
	interval := 1.0
	if dts := Intervals(samples); len(dts) > 0 {
		ds := slices.Clone(dts)
		slices.Sort(ds)
		interval = ds[len(ds)/2]
	}
	ax := svgplot.TimeAxis{T1: end, X0: left, X1: width - right}
	bands := make([]svgplot.Band, len(faults))
	for i, f := range faults {
		bands[i] = svgplot.Band{Name: f.Name, Label: f.Name, Start: f.Start, End: f.End}
	}
	height := top + float64(len(panels))*(panelH+gap) + 10
	var s svgplot.Builder
	s.OpenSVG(width, height, "width", width, "height", height, "data-plot", "metrics", "role", "img", "aria-label", title)
	s.Style(svgplot.CSS)
	s.El("rect", "width", width, "height", height, "fill", "#fff")
	s.Text(left, 20, title, "class", "title")
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap) + 14
		bottom := y0 + panelH
		lines := panelLines(samples, p)
		hi := 0.0
		for _, l := range lines {
			for _, pt := range l.pts {
				hi = max(hi, pt[1])
			}
		}
		ticks, ytop := svgplot.Ticks(hi)
		y := func(v float64) float64 { return svgplot.LinY(v, ytop, y0, bottom) }
		s.Open("g", "class", "panel", "data-panel", p.Measure)
		s.Text(left, y0-4, p.Title, "class", "paneltitle")
		s.Shade(ax, bands, y0, bottom)
		s.XAxis(ax, y0, bottom)
		s.YGrid(ax.X0, ax.X1, ticks, y, svgplot.CountLabel)
		s.El("rect", "x", ax.X0, "y", y0, "width", ax.X1-ax.X0, "height", panelH, "fill", "none", "class", "axis")
		colors := map[string]string{}
		var keys []svgplot.Key
		for _, l := range lines {
			if _, ok := colors[l.src]; !ok {
				colors[l.src] = svgplot.ColorAt(len(colors))
				keys = append(keys, svgplot.Key{Label: l.src, Color: colors[l.src]})
			}
			dash := ""
			if l.dashed {
				dash = "4 3"
			}
			// A gap in the samples (nothing measured, a broker that did
			// not answer) breaks the line rather than bridging it.
			var xs, ys []float64
			flush := func() {
				if len(xs) > 0 {
					s.El("polyline", "class", "series", "data-series", l.src, "points", svgplot.Points(xs, ys),
						"fill", "none", "stroke", colors[l.src], "stroke-width", 1.4, "stroke-dasharray", dash)
				}
				xs, ys = xs[:0], ys[:0]
			}
			for k, pt := range l.pts {
				if k > 0 && pt[0]-l.pts[k-1][0] > 2*interval {
					flush()
				}
				xs, ys = append(xs, ax.X(pt[0])), append(ys, y(pt[1]))
			}
			flush()
		}
		s.Legend(ax.X1, y0-4, keys)
		s.Close("g")
	}
	s.Close("svg")
	_, err := io.WriteString(w, s.String()+"\n")
	return err
}

// panelLines collects a panel's lines: per source, or the brokers summed.
func panelLines(samples []Sample, p Panel) []line {
	scale := p.Scale
	if scale == 0 {
		scale = 1
	}
	bySrc := map[string]*line{}
	var order []string
	add := func(src string, t, v float64, dashed bool) {
		key := src
		if dashed {
			key += "\x00dashed"
		}
		l := bySrc[key]
		if l == nil {
			l = &line{src: src, dashed: dashed}
			bySrc[key] = l
			order = append(order, key)
		}
		l.pts = append(l.pts, [2]float64{t, v * scale})
	}
	sums := map[string]map[int64]float64{}
	for _, s := range samples {
		broker := s.Src != SrcWorkload
		if p.Src != "" && s.Src != p.Src || p.Src == "" && !broker {
			continue
		}
		for _, m := range []string{p.Measure, p.Also} {
			if m == "" {
				continue
			}
			v, ok := s.Values[m]
			if !ok {
				continue
			}
			if p.Sum {
				if sums[m] == nil {
					sums[m] = map[int64]float64{}
				}
				sums[m][int64(math.Round(s.T))] += v
				continue
			}
			add(s.Src, s.T, v, m != p.Measure)
		}
	}
	for _, m := range []string{p.Measure, p.Also} {
		ts := make([]int64, 0, len(sums[m]))
		for t := range sums[m] {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		for _, t := range ts {
			add("all brokers", float64(t), sums[m][t], m != p.Measure)
		}
	}
	slices.Sort(order)
	out := make([]line, 0, len(order))
	for _, k := range order {
		out = append(out, *bySrc[k])
	}
	return out
}
