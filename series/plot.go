package series

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
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

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"}

// line is one polyline: a source's values of the panel's measure, or of
// its second measure (dashed).
type line struct {
	src    string
	pts    [][2]float64
	dashed bool
}

// Plot writes an SVG figure of the panels over the samples, with the fault
// windows shaded.
func Plot(w io.Writer, title string, samples []Sample, faults []Window, panels []Panel) error {
	const width, left, right, panelH, gap, top = 960.0, 70.0, 110.0, 120.0, 38.0, 40.0
	end := 0.0
	for _, s := range samples {
		end = max(end, s.T)
	}
	if end <= 0 {
		end = 1
	}
	plotW := width - left - right
	interval := 1.0
	if dts := Intervals(samples); len(dts) > 0 {
		ds := slices.Clone(dts)
		slices.Sort(ds)
		interval = ds[len(ds)/2]
	}
	height := top + float64(len(panels))*(panelH+gap) + 10
	x := func(t float64) float64 { return left + plotW*t/end }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap) + 14
		lines := panelLines(samples, p)
		hi := 0.0
		for _, l := range lines {
			for _, pt := range l.pts {
				hi = max(hi, pt[1])
			}
		}
		hi = niceCeil(hi)
		y := func(v float64) float64 { return y0 + panelH - panelH*v/hi }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-4, html.EscapeString(p.Title))
		for _, f := range faults {
			e := f.End
			if e < 0 {
				e = end
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4c7c3" opacity="0.5"><title>%s</title></rect>`+"\n",
				x(f.Start), y0, max(0.5, x(e)-x(f.Start)), panelH, html.EscapeString(f.Name))
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		for _, v := range []float64{0, hi / 2, hi} {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y(v)+4, short(v))
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+plotW, y(v), y(v))
		}
		step := tickStep(end)
		for t := 0.0; t <= end; t += step {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#666">%gs</text>`+"\n", x(t), y0+panelH+12, t)
		}
		colors := map[string]string{}
		for _, l := range lines {
			if _, ok := colors[l.src]; !ok {
				c := palette[len(colors)%len(palette)]
				fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="%s">%s</text>`+"\n", left+plotW+6, y0+12+float64(len(colors))*13, c, html.EscapeString(l.src))
				colors[l.src] = c
			}
			dash := ""
			if l.dashed {
				dash = ` stroke-dasharray="4,3"`
			}
			// A gap in the samples (nothing measured, a broker that did
			// not answer) breaks the line rather than bridging it.
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.4"%s points="%s"/>`+"\n", colors[l.src], dash, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for k, pt := range l.pts {
				if k > 0 && pt[0]-l.pts[k-1][0] > 2*interval {
					flush()
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt[0]), y(pt[1])))
			}
			flush()
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
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

func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func tickStep(end float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if end/s <= 12 {
			return s
		}
	}
	return 1200
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case v >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/1e2)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}
