package svgplot

import (
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestTicks: a value axis's ticks for a table of spans: from 0 in one
// nice step to the first tick at or above the span.
func TestTicks(t *testing.T) {
	spans := map[float64]string{
		0: "0 0.5 1", -3: "0 0.5 1", math.Inf(1): "0 0.5 1", 1: "0 0.5 1",
		4: "0 1 2 3 4", 7: "0 2 4 6 8", 9: "0 5 10", 10: "0 5 10",
		150: "0 50 100 150", 999: "0 500 1000", 1001: "0 500 1000 1500",
		36000: "0 10000 20000 30000 40000",
	}
	spans[math.NaN()] = "0 0.5 1"
	for hi, want := range spans {
		ticks, top := Ticks(hi)
		if got := fmt.Sprint(ticks); got != "["+want+"]" || top != ticks[len(ticks)-1] {
			t.Errorf("Ticks(%v) = %s, top %v; want [%s]", hi, got, top, want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{
		{0, 10, 1}, {1, 10, 0.1}, {6.102, 10, 1}, {40, 10, 5}, {90, 10, 10}, {600, 10, 100}, {3600, 10, 500}, {7, 4, 2},
	} {
		if got := NiceStep(tc.span, tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("NiceStep(%v, %d) = %v, want %v", tc.span, tc.n, got, tc.want)
		}
	}
}

// TestXAxisLabels: a time axis's labels are whole steps, without the
// float error of adding up tenths.
func TestXAxisLabels(t *testing.T) {
	var s Builder
	s.XAxis(TimeAxis{T1: 1, X0: 0, X1: 100}, 0, 10)
	var labels []string
	for _, e := range parse(t, s.String()) {
		if e.name == "text" {
			labels = append(labels, e.text)
		}
	}
	want := "0s 0.1s 0.2s 0.3s 0.4s 0.5s 0.6s 0.7s 0.8s 0.9s 1s"
	if got := strings.Join(labels, " "); got != want {
		t.Errorf("labels %q, want %q", got, want)
	}
}

// TestEscape: text and attribute values that hold markup come out as
// text.
func TestEscape(t *testing.T) {
	const evil = `a<b>&"c'`
	var s Builder
	s.Open("g", "data-name", evil, "data-n", 3)
	s.Text(1, 2, evil, "class", evil)
	s.Open("rect")
	s.Title(evil)
	s.Close("rect")
	s.Close("g")
	got := s.String()
	if strings.Contains(got, `a<b`) || strings.Contains(got, `&"`) {
		t.Errorf("unescaped: %s", got)
	}
	es := parse(t, got)
	if len(es) != 4 || es[0].attrs["data-name"] != evil || es[0].attrs["data-n"] != "3" ||
		es[1].text != evil || es[1].attrs["class"] != evil || es[3].text != evil {
		t.Errorf("parsed back: %+v", es)
	}
}

// TestLogScale: a log scale spans whole decades, its ends at the bottom
// and top, and values outside clamp to them.
func TestLogScale(t *testing.T) {
	l := NewLogScale(3, 450, 10, 110)
	if l.Lo != 0 || l.Hi != 3 {
		t.Fatalf("decades %v..%v, want 0..3", l.Lo, l.Hi)
	}
	for _, tc := range []struct{ v, y float64 }{{1, 110}, {1000, 10}, {10, 110 - 100.0/3}, {0.5, 110}, {1e6, 10}, {0, 110}, {-1, 110}} {
		if got := l.Y(tc.v); math.Abs(got-tc.y) > 1e-9 {
			t.Errorf("Y(%v) = %v, want %v", tc.v, got, tc.y)
		}
	}
	if got := l.Ticks(); !slices.Equal(got, []float64{1, 10, 100, 1000}) {
		t.Errorf("ticks %v", got)
	}
	// No data: from 0.01 up, to 1 (0.01×10 is a hair above 0.1).
	if l := NewLogScale(math.Inf(1), 0, 0, 1); l.Lo != -2 || l.Hi != 0 {
		t.Errorf("empty scale %v..%v", l.Lo, l.Hi)
	}
}

func TestNumbers(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1.25: "1.3", 0.04: "0", 100: "100", math.NaN(): "0", math.Inf(1): "0"} {
		if got := Num(v); got != want {
			t.Errorf("Num(%v) = %q, want %q", v, got, want)
		}
	}
	if got := Sec(2.5); got != "2.500" {
		t.Errorf("Sec = %q", got)
	}
	for v, want := range map[float64]string{2500: "2500", 25000: "25k", 2.5e6: "2.5M", 0.25: "0.25"} {
		if got := CountLabel(v); got != want {
			t.Errorf("CountLabel(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{1500: "1.5s", 12: "12ms", 0.3: "300µs"} {
		if got := MsLabel(v); got != want {
			t.Errorf("MsLabel(%v) = %q, want %q", v, got, want)
		}
	}
	if got := Points([]float64{1, 2.25}, []float64{3, 4}); got != "1,3 2.3,4" {
		t.Errorf("Points = %q", got)
	}
}

// TestChartIsXML: a tiny chart with every helper is well-formed XML,
// with the elements they draw.
func TestChartIsXML(t *testing.T) {
	ax := TimeAxis{T1: 10, X0: 50, X1: 450}
	var s Builder
	s.OpenSVG(500, 200, "class", "plot", "aria-label", "a <tiny> chart")
	s.Style(CSS)
	s.Shade(ax, []Band{{Name: "kill", Label: "kill b1", Start: 2, End: 4}, {Name: "pause", Label: "pause <all>", Start: 6, End: -1}}, 10, 150)
	s.XAxis(ax, 10, 150)
	ticks, top := Ticks(42)
	y := func(v float64) float64 { return LinY(v, top, 10, 150) }
	s.YGrid(ax.X0, ax.X1, ticks, y, CountLabel)
	s.YLabel(10, 150, "ops/s")
	s.El("polyline", "points", Points([]float64{ax.X(0), ax.X(5), ax.X(10)}, []float64{y(0), y(42), y(10)}), "fill", "none", "stroke", ColorAt(0))
	s.Legend(ax.X1, 8, []Key{{Label: "send & poll", Color: ColorAt(1)}, {Label: "fail", Color: ColorOf("fail"), Dash: "4 2"}})
	s.Close("svg")

	es := parse(t, s.String())
	count := map[string]int{}
	for _, e := range es {
		count[e.name]++
	}
	if es[0].name != "svg" || es[0].attrs["viewBox"] != "0 0 500 200" || es[0].attrs["aria-label"] != "a <tiny> chart" {
		t.Errorf("root %+v", es[0])
	}
	// 2 fault rects with titles; 11 time grid lines (0..10s) and the
	// axis, 4 value grid lines (0..60 by 20), 2 legend keys; labels: 2
	// faults, 11 times, 4 values, the axis title, 2 keys.
	if count["rect"] != 2 || count["title"] != 2 || count["line"] != 11+1+4+2 || count["text"] != 2+11+4+1+2 || count["polyline"] != 1 || count["style"] != 1 {
		t.Errorf("elements %v", count)
	}
	for _, e := range es {
		if e.name == "rect" && e.attrs["data-fault"] == "pause" {
			if e.attrs["data-end"] != "-1.000" || e.attrs["x"] != "290" || e.attrs["width"] != "160" {
				t.Errorf("open band %v: want it to run to the axis's end", e.attrs)
			}
		}
	}
}

// node is an element read back by encoding/xml.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Kids    []node     `xml:",any"`
}

type elem struct {
	name  string
	attrs map[string]string
	text  string
}

// parse reads SVG with encoding/xml in strict mode, failing on anything
// that is not well-formed, and returns its elements in document order.
func parse(t *testing.T, doc string) []*elem {
	t.Helper()
	var root node
	if err := xml.Unmarshal([]byte("<root>"+doc+"</root>"), &root); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, doc)
	}
	var out []*elem
	var walk func(n node)
	walk = func(n node) {
		e := &elem{name: n.XMLName.Local, attrs: map[string]string{}, text: n.Text}
		for _, a := range n.Attrs {
			e.attrs[a.Name.Local] = a.Value
		}
		out = append(out, e)
		for _, k := range n.Kids {
			walk(k)
		}
	}
	for _, k := range root.Kids {
		walk(k)
	}
	return out
}
