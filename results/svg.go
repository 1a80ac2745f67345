package results

import (
	"fmt"
	"hash/fnv"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Every plot is an inline SVG of the same width with the same margins, so
// that their time axes line up when stacked. Text and attribute values
// pass through html.EscapeString: node names, fault values and scenario
// names are user data.
const (
	svgW    = 1100.0
	marginL = 76.0
	marginR = 16.0
	plotR   = svgW - marginR
)

// timeAxis maps seconds from the run's start onto x pixels.
type timeAxis struct{ t1 float64 }

func (a timeAxis) x(t float64) float64 {
	if a.t1 <= 0 {
		return marginL
	}
	t = math.Max(0, math.Min(t, a.t1))
	return marginL + t/a.t1*(plotR-marginL)
}

type svg struct {
	b strings.Builder
}

func fnum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// fsec formats seconds for data attributes, to the millisecond.
func fsec(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func (s *svg) attrs(kv []any) {
	for i := 0; i+1 < len(kv); i += 2 {
		s.b.WriteByte(' ')
		s.b.WriteString(kv[i].(string))
		s.b.WriteString(`="`)
		switch v := kv[i+1].(type) {
		case float64:
			s.b.WriteString(fnum(v))
		case int:
			s.b.WriteString(strconv.Itoa(v))
		case int64:
			s.b.WriteString(strconv.FormatInt(v, 10))
		case int32:
			s.b.WriteString(strconv.FormatInt(int64(v), 10))
		case string:
			s.b.WriteString(html.EscapeString(v))
		default:
			s.b.WriteString(html.EscapeString(fmt.Sprint(v)))
		}
		s.b.WriteByte('"')
	}
}

func (s *svg) open(tag string, kv ...any) {
	s.b.WriteByte('<')
	s.b.WriteString(tag)
	s.attrs(kv)
	s.b.WriteByte('>')
}

func (s *svg) close(tag string) {
	s.b.WriteString("</")
	s.b.WriteString(tag)
	s.b.WriteByte('>')
}

func (s *svg) el(tag string, kv ...any) {
	s.b.WriteByte('<')
	s.b.WriteString(tag)
	s.attrs(kv)
	s.b.WriteString("/>")
}

func (s *svg) text(x, y float64, txt string, kv ...any) {
	s.open("text", append([]any{"x", x, "y", y}, kv...)...)
	s.b.WriteString(html.EscapeString(txt))
	s.close("text")
}

// title adds a tooltip to the element just opened.
func (s *svg) title(txt string) {
	s.b.WriteString("<title>")
	s.b.WriteString(html.EscapeString(txt))
	s.b.WriteString("</title>")
}

// points encodes a polyline's points.
func points(xs, ys []float64) string {
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fnum(xs[i]))
		b.WriteByte(',')
		b.WriteString(fnum(ys[i]))
	}
	return b.String()
}

// html returns the finished SVG for a template.
func (s *svg) html() template.HTML {
	// The builder escaped every value it was given.
	return template.HTML(s.b.String())
}

// niceStep is a 1, 2 or 5 times a power of ten near span/n.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// linTicks returns ticks from 0 to at least hi.
func linTicks(hi float64) (ticks []float64, top float64) {
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi, 4)
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		if v >= hi*(1-1e-9) {
			return ticks, v
		}
	}
}

// linY maps [0, top] onto [bottom, y0].
func linY(v, top, y0, bottom float64) float64 {
	if top <= 0 {
		return bottom
	}
	return bottom - math.Min(v/top, 1)*(bottom-y0)
}

// logScale maps [lo, hi] (decades) onto [bottom, y0].
type logScale struct{ lo, hi, y0, bottom float64 }

func newLogScale(minV, maxV, y0, bottom float64) logScale {
	if minV <= 0 || math.IsInf(minV, 0) {
		minV = 0.01
	}
	if maxV <= minV {
		maxV = minV * 10
	}
	return logScale{lo: math.Floor(math.Log10(minV)), hi: math.Ceil(math.Log10(maxV)), y0: y0, bottom: bottom}
}

func (l logScale) y(v float64) float64 {
	if v <= 0 {
		return l.bottom
	}
	f := (math.Log10(v) - l.lo) / (l.hi - l.lo)
	return l.bottom - math.Max(0, math.Min(f, 1))*(l.bottom-l.y0)
}

// msLabel formats milliseconds for a log axis.
func msLabel(ms float64) string {
	switch {
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'g', 3, 64) + "s"
	case ms >= 1:
		return strconv.FormatFloat(ms, 'g', 3, 64) + "ms"
	}
	return strconv.FormatFloat(ms*1000, 'g', 3, 64) + "µs"
}

func countLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// palette colours brokers and fault kinds; colorOf picks one by name.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac", "#e15759"}

func colorOf(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return palette[h.Sum32()%uint32(len(palette))]
}

func brokerColor(id int32) string {
	if id < 0 {
		return "#d62728"
	}
	return palette[int(id)%(len(palette)-1)]
}

// band is one fault window in seconds; end < 0 means never healed.
type band struct {
	Name, Label string
	Start, End  float64
	// Count is the number of fault windows merged into this band (0 or
	// 1: one).
	Count int
}

// xAxis draws the time grid and its labels at the bottom of a plot.
func (s *svg) xAxis(ax timeAxis, top, bottom float64) {
	step := niceStep(ax.t1, 10)
	s.open("g", "class", "xaxis")
	for t := 0.0; t <= ax.t1+step/1000; t += step {
		x := ax.x(t)
		s.el("line", "x1", x, "x2", x, "y1", top, "y2", bottom, "class", "grid")
		s.text(x, bottom+14, strconv.FormatFloat(t, 'f', -1, 64)+"s", "class", "tick", "text-anchor", "middle")
	}
	s.el("line", "x1", marginL, "x2", plotR, "y1", bottom, "y2", bottom, "class", "axis")
	s.close("g")
}

// shade draws the fault windows behind a plot's data, each labelled at the
// top when there are few enough to read.
func (s *svg) shade(ax timeAxis, bands []band, top, bottom float64) {
	s.open("g", "class", "faults")
	labels := len(bands) <= 40
	lastLabel := 0.0 // where the last label ends, so that labels never overlap
	for _, b := range bands {
		end := b.End
		if end < 0 {
			end = ax.t1
		}
		x0, x1 := ax.x(b.Start), ax.x(end)
		s.open("rect", "class", "fault", "x", x0, "y", top, "width", math.Max(x1-x0, 1), "height", bottom-top,
			"fill", colorOf(b.Name), "data-fault", b.Name, "data-start", fsec(b.Start), "data-end", fsec(b.End), "data-count", max(b.Count, 1))
		s.title(fmt.Sprintf("%s: %.3fs – %s", b.Label, b.Start, endText(b.End)))
		s.close("rect")
		if w := 6 * float64(len(b.Name)); labels && x1-x0 > 24 && x0 > lastLabel {
			s.text(x0+3, top+11, b.Name, "class", "faultlabel")
			lastLabel = x0 + 3 + w
		}
	}
	s.close("g")
}

func endText(end float64) string {
	if end < 0 {
		return "never healed"
	}
	return fmt.Sprintf("%.3fs", end)
}

// legend draws coloured keys in a row at the top right of a plot.
func (s *svg) legend(y float64, items [][3]string) {
	x := plotR
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i] // label, colour, dash
		w := 14 + 6.5*float64(len([]rune(it[0])))
		x -= w + 10
		s.el("line", "x1", x, "x2", x+12, "y1", y-4, "y2", y-4, "stroke", it[1], "stroke-width", 2.5, "stroke-dasharray", it[2])
		s.text(x+15, y, it[0], "class", "legend")
	}
}

// yLabel writes an axis title rotated along the left margin.
func (s *svg) yLabel(top, bottom float64, txt string) {
	y := (top + bottom) / 2
	s.text(14, y, txt, "class", "ylabel", "transform", fmt.Sprintf("rotate(-90 14 %s)", fnum(y)), "text-anchor", "middle")
}
