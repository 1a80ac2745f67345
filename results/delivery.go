package results

import (
	"fmt"
	"strings"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/internal/svgplot"
)

// delivery draws, per consumer group of the verdict's delivery section,
// its redelivered and skipped records over time, cumulative: one figure
// per group (none when the run measured no delivery).
func (p *plotter) delivery() []figure {
	d := p.v.Delivery
	if d == nil {
		return nil
	}
	var out []figure
	for i, g := range d.Groups {
		out = append(out, p.groupDelivery(fmt.Sprintf("delivery-%d", i), d.BucketSeconds, g))
	}
	return out
}

// cumulative turns per-bucket counts into running totals.
func cumulative(per []int64) []int64 {
	out := make([]int64, len(per))
	var n int64
	for i, c := range per {
		n += c
		out[i] = n
	}
	return out
}

func (p *plotter) groupDelivery(id string, width float64, g checker.GroupDelivery) figure {
	const top, bottom, h = 22.0, 180.0, 202.0
	red, skip := cumulative(g.RedeliveredPerBucket), cumulative(g.SkippedPerBucket)
	var s svgplot.Builder
	p.begin(&s, id, h)
	s.Shade(p.ax, p.shading, top, bottom)
	s.XAxis(p.ax, top, bottom)
	yOf := countAxis(&s, float64(max(g.Redelivered, g.Skipped, 1)), top, bottom, "records")
	line := func(series string, counts []int64, total int64, color string) {
		var xs, ys []float64
		for i, c := range counts {
			y := yOf(float64(c))
			xs = append(xs, p.ax.X(float64(i)*width), p.ax.X(float64(i+1)*width))
			ys = append(ys, y, y)
		}
		s.El("polyline", "class", "series", "data-series", series, "data-final", total,
			"points", svgplot.Points(xs, ys), "fill", "none", "stroke", color, "stroke-width", 1.5)
	}
	line("redelivered", red, g.Redelivered, "#ff7f0e")
	line("skipped", skip, g.Skipped, "#d62728")
	s.Legend(plotR, 14, []svgplot.Key{
		{Label: fmt.Sprintf("redelivered (%s)", svgplot.CountLabel(float64(g.Redelivered))), Color: "#ff7f0e"},
		{Label: fmt.Sprintf("skipped (%s)", svgplot.CountLabel(float64(g.Skipped))), Color: "#d62728"},
	})
	s.Close("svg")
	var committed []string
	for _, c := range g.Committed {
		committed = append(committed, fmt.Sprintf("%d: %d", c.Partition, c.Final))
	}
	name := g.Group
	if name == "" {
		name = "(unnamed)"
	}
	return figure{ID: id, Title: "Delivery of group " + name, SVG: s.HTML(),
		Caption: fmt.Sprintf("Records the group processed more than once (redelivered: at-least-once's price, by the time of the second processing) and records below an offset it committed that no member processed (skipped: at-most-once's loss, by the time of the first commit that covered them), cumulative. %s processed %s (%s processings), %s; final committed offsets %s. Reported, not judged: they describe the consumer's commit configuration.",
			name, plural(g.Records, "record"), svgplot.CountLabel(float64(g.Processed)), plural(g.Commits, "ok commit"), orNone(strings.Join(committed, ", ")))}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
