package results

import (
	"fmt"
	"strings"

	"github.com/isrlab/isrlab/checker"
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
	ticks, ytop := linTicks(float64(max(g.Redelivered, g.Skipped, 1)))
	var s svg
	p.begin(&s, id, h)
	s.shade(p.ax, p.shading, top, bottom)
	s.xAxis(p.ax, top, bottom)
	for _, t := range ticks {
		y := linY(t, ytop, top, bottom)
		s.el("line", "x1", marginL, "x2", plotR, "y1", y, "y2", y, "class", "grid")
		s.text(marginL-6, y+4, countLabel(t), "class", "tick", "text-anchor", "end")
	}
	s.yLabel(top, bottom, "records")
	line := func(series string, counts []int64, total int64, color string) {
		var xs, ys []float64
		for i, c := range counts {
			y := linY(float64(c), ytop, top, bottom)
			xs = append(xs, p.ax.x(float64(i)*width), p.ax.x(float64(i+1)*width))
			ys = append(ys, y, y)
		}
		s.el("polyline", "class", "series", "data-series", series, "data-final", total,
			"points", points(xs, ys), "fill", "none", "stroke", color, "stroke-width", 1.5)
	}
	line("redelivered", red, g.Redelivered, "#ff7f0e")
	line("skipped", skip, g.Skipped, "#d62728")
	s.legend(14, [][3]string{
		{fmt.Sprintf("redelivered (%s)", countLabel(float64(g.Redelivered))), "#ff7f0e", ""},
		{fmt.Sprintf("skipped (%s)", countLabel(float64(g.Skipped))), "#d62728", ""},
	})
	s.close("svg")
	var committed []string
	for _, c := range g.Committed {
		committed = append(committed, fmt.Sprintf("%d: %d", c.Partition, c.Final))
	}
	name := g.Group
	if name == "" {
		name = "(unnamed)"
	}
	return figure{ID: id, Title: "Delivery of group " + name, SVG: s.html(),
		Caption: fmt.Sprintf("Records the group processed more than once (redelivered: at-least-once's price, by the time of the second processing) and records below an offset it committed that no member processed (skipped: at-most-once's loss, by the time of the first commit that covered them), cumulative. %s processed %s (%s processings), %s; final committed offsets %s. Reported, not judged: they describe the consumer's commit configuration.",
			name, plural(g.Records, "record"), countLabel(float64(g.Processed)), plural(g.Commits, "ok commit"), orNone(strings.Join(committed, ", ")))}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
