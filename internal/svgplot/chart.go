package svgplot

import (
	"fmt"
	"hash/fnv"
	"math"
)

// CSS styles the classes the helpers below draw with (grid, tick, axis,
// fault, faultlabel, legend, ylabel, title, paneltitle); a page that
// holds plots includes it, a plot that stands alone as a file carries it
// (Builder.Style).
const CSS = `
svg.plot{width:100%;height:auto;display:block}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .tick{fill:#666;font-size:10px}
svg .grid{stroke:#eee;stroke-width:1}
svg .axis{stroke:#999;stroke-width:1}
svg .fault{fill-opacity:.16}
svg .faultlabel{font-size:10px;fill:#555;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .legend{font-size:11px}
svg .title{font-size:14px;font-weight:bold}
svg .paneltitle{font-weight:bold}
`

// Palette colours brokers, sources and fault kinds. Its last colour, a
// red, is left out of ColorAt for marking what is wrong.
var Palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac", "#e15759"}

// ColorOf picks a colour by name, the same for the same name in every
// plot.
func ColorOf(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return Palette[h.Sum32()%uint32(len(Palette))]
}

// ColorAt is the i-th colour of a series of lines, cycling over Palette
// less its red.
func ColorAt(i int) string {
	n := len(Palette) - 1
	return Palette[(i%n+n)%n]
}

// XAxis draws the time grid, a line every NiceStep of at most ten, with
// its labels below bottom and the axis line.
func (s *Builder) XAxis(ax TimeAxis, top, bottom float64) {
	step := NiceStep(ax.T1, 10)
	s.Open("g", "class", "xaxis")
	for t := 0.0; t <= ax.T1+step/1000; t += step {
		x := ax.X(t)
		s.El("line", "x1", x, "x2", x, "y1", top, "y2", bottom, "class", "grid")
		s.Text(x, bottom+14, secTick(t), "class", "tick", "text-anchor", "middle")
	}
	s.El("line", "x1", ax.X0, "x2", ax.X1, "y1", bottom, "y2", bottom, "class", "axis")
	s.Close("g")
}

// YGrid draws a horizontal grid line from x0 to x1 at each tick, y(tick),
// labelled by label left of x0.
func (s *Builder) YGrid(x0, x1 float64, ticks []float64, y func(float64) float64, label func(float64) string) {
	for _, t := range ticks {
		yt := y(t)
		s.El("line", "x1", x0, "x2", x1, "y1", yt, "y2", yt, "class", "grid")
		s.Text(x0-6, yt+4, label(t), "class", "tick", "text-anchor", "end")
	}
}

// YLabel writes an axis title rotated along the left margin.
func (s *Builder) YLabel(top, bottom float64, txt string) {
	y := (top + bottom) / 2
	s.Text(14, y, txt, "class", "ylabel", "transform", fmt.Sprintf("rotate(-90 14 %s)", Num(y)), "text-anchor", "middle")
}

// Key is one legend entry: a label and its line's colour and dash
// pattern ("" for solid).
type Key struct{ Label, Color, Dash string }

// Legend draws keys in a row ending at x1, on baseline y.
func (s *Builder) Legend(x1, y float64, keys []Key) {
	x := x1
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		w := 14 + 6.5*float64(len([]rune(k.Label)))
		x -= w + 10
		s.El("line", "x1", x, "x2", x+12, "y1", y-4, "y2", y-4, "stroke", k.Color, "stroke-width", 2.5, "stroke-dasharray", k.Dash)
		s.Text(x+15, y, k.Label, "class", "legend")
	}
}

// Band is one fault window in seconds; End < 0 means never healed.
type Band struct {
	Name, Label string
	Start, End  float64
	// Count is the number of fault windows merged into this band (0 or
	// 1: one).
	Count int
}

// Title describes the band for a tooltip: "kill b1: 2.500s – 4.200s".
func (b Band) Title() string {
	end := "never healed"
	if b.End >= 0 {
		end = fmt.Sprintf("%.3fs", b.End)
	}
	return fmt.Sprintf("%s: %.3fs – %s", b.Label, b.Start, end)
}

// Shade draws the fault bands behind a plot's data, coloured by name,
// each labelled at the top when there are few enough to read; a band
// never healed runs to the axis's end.
func (s *Builder) Shade(ax TimeAxis, bands []Band, top, bottom float64) {
	s.Open("g", "class", "faults")
	labels := len(bands) <= 40
	lastLabel := 0.0 // where the last label ends, so that labels never overlap
	for _, b := range bands {
		end := b.End
		if end < 0 {
			end = ax.T1
		}
		x0, x1 := ax.X(b.Start), ax.X(end)
		s.Open("rect", "class", "fault", "x", x0, "y", top, "width", math.Max(x1-x0, 1), "height", bottom-top,
			"fill", ColorOf(b.Name), "data-fault", b.Name, "data-start", Sec(b.Start), "data-end", Sec(b.End), "data-count", max(b.Count, 1))
		s.Title(b.Title())
		s.Close("rect")
		if w := 6 * float64(len(b.Name)); labels && x1-x0 > 24 && x0 > lastLabel {
			s.Text(x0+3, top+11, b.Name, "class", "faultlabel")
			lastLabel = x0 + 3 + w
		}
	}
	s.Close("g")
}
