// Package svgplot is the small toolkit isrlab draws its charts with: the
// run report's and the limit search's plots (package results) and a
// run's metrics figure (package series) are inline or standalone SVG
// built from it.
//
// It has an element builder that escapes every value it is given, the
// number formats of axes and data attributes, one "nice" tick algorithm
// (steps of 1, 2 or 5 times a power of ten) for value and time axes,
// linear and log scales, a time axis, a legend, shaded fault bands and
// the colours, with CSS giving the classes the helpers draw with.
package svgplot

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Builder writes an SVG document or fragment. Text and attribute values
// pass through html.EscapeString: node names, fault values and scenario
// names are user data.
type Builder struct {
	b strings.Builder
}

// attrs writes key-value pairs as attributes: floats formatted by Num,
// integers in full, anything else escaped.
func (s *Builder) attrs(kv []any) {
	for i := 0; i+1 < len(kv); i += 2 {
		s.b.WriteByte(' ')
		s.b.WriteString(kv[i].(string))
		s.b.WriteString(`="`)
		switch v := kv[i+1].(type) {
		case float64:
			s.b.WriteString(Num(v))
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

// start writes a start tag, ending it with end: ">" or "/>".
func (s *Builder) start(tag string, kv []any, end string) {
	s.b.WriteByte('<')
	s.b.WriteString(tag)
	s.attrs(kv)
	s.b.WriteString(end)
}

// Open starts element tag with attributes kv (name, value, name, value...).
func (s *Builder) Open(tag string, kv ...any) { s.start(tag, kv, ">") }

// Close ends element tag.
func (s *Builder) Close(tag string) {
	s.b.WriteString("</")
	s.b.WriteString(tag)
	s.b.WriteByte('>')
}

// El writes an empty element.
func (s *Builder) El(tag string, kv ...any) { s.start(tag, kv, "/>") }

// Text writes a text element at (x, y).
func (s *Builder) Text(x, y float64, txt string, kv ...any) {
	s.Open("text", append([]any{"x", x, "y", y}, kv...)...)
	s.b.WriteString(html.EscapeString(txt))
	s.Close("text")
}

// Title adds a tooltip to the element just opened.
func (s *Builder) Title(txt string) {
	s.b.WriteString("<title>")
	s.b.WriteString(html.EscapeString(txt))
	s.b.WriteString("</title>")
}

// Style writes a style element with css, which must be trusted (a
// constant such as CSS): it is not escaped.
func (s *Builder) Style(css string) {
	s.b.WriteString("<style>")
	s.b.WriteString(css)
	s.b.WriteString("</style>")
}

// OpenSVG starts an svg root element w by h pixels of user space, with
// further attributes kv.
func (s *Builder) OpenSVG(w, h float64, kv ...any) {
	s.Open("svg", append([]any{"xmlns", "http://www.w3.org/2000/svg", "viewBox", "0 0 " + Num(w) + " " + Num(h)}, kv...)...)
}

// String returns what was written.
func (s *Builder) String() string { return s.b.String() }

// HTML returns the finished SVG for a template.
func (s *Builder) HTML() template.HTML {
	// The builder escaped every value it was given.
	return template.HTML(s.b.String())
}

// Num formats a coordinate or value to a tenth, without trailing zeros
// (NaN and infinities as 0).
func Num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// Sec formats seconds for data attributes, to the millisecond.
func Sec(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// Points encodes a polyline's or polygon's points.
func Points(xs, ys []float64) string {
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Num(xs[i]))
		b.WriteByte(',')
		b.WriteString(Num(ys[i]))
	}
	return b.String()
}

// MsLabel formats milliseconds for an axis or a table: "1.5s", "12ms",
// "300µs".
func MsLabel(ms float64) string {
	switch {
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'g', 3, 64) + "s"
	case ms >= 1:
		return strconv.FormatFloat(ms, 'g', 3, 64) + "ms"
	}
	return strconv.FormatFloat(ms*1000, 'g', 3, 64) + "µs"
}

// CountLabel formats a count or rate for an axis: "2.5M", "15k", "2500",
// "0.25".
func CountLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// secTick formats a time axis's tick in seconds, free of the float
// error that adding up steps of 0.1 leaves.
func secTick(t float64) string {
	return strconv.FormatFloat(math.Round(t*1e6)/1e6, 'f', -1, 64) + "s"
}
