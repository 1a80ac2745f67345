package results

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/isrlab/isrlab/internal/svgplot"
)

// A limit search's directory (isrlab limits): limits.json, limits.txt,
// limits.svg and report.html, and the points' run directories under
// points/. lab.LimitsReport is Limits.
const (
	LimitsFile     = "limits.json"
	LimitsTextFile = "limits.txt"
	LimitsSVGFile  = "limits.svg"
	PointsDir      = "points"
)

// LimitSignals are what one point's observation window showed.
type LimitSignals struct {
	// HandlerIdle is the mean RequestHandlerAvgIdlePercent over the
	// brokers' samples (a fraction, 0..1); HandlerIdleMin the lowest.
	HandlerIdle    float64 `json:"handler_idle"`
	HandlerIdleMin float64 `json:"handler_idle_min"`
	// NoIdle: the brokers reported no handler idle metric.
	NoIdle bool `json:"no_idle_metric,omitempty"`
	// IsrChangeFraction is the fraction of the sampling intervals in which
	// some broker shrank or expanded an ISR.
	IsrChangeFraction float64 `json:"isr_change_fraction"`
	Intervals         int     `json:"intervals"`
	ProduceP99Ms      float64 `json:"produce_p99_ms"`
	AckedPerSec       float64 `json:"acked_per_s"`
	OfferedPerSec     float64 `json:"offered_per_s"`
	AckedBytesPerSec  float64 `json:"acked_bytes_per_s"`
}

// LimitThresholds decide when a point overloads.
type LimitThresholds struct {
	// HandlerIdle: overloaded when the mean handler idle drops below it
	// (default 0.20).
	HandlerIdle float64 `json:"handler_idle"`
	// IsrChangeFraction: overloaded when ISR changes happen in more than
	// this fraction of the sampling intervals (default 0.50).
	IsrChangeFraction float64 `json:"isr_change_fraction"`
	// ProduceP99Ms: overloaded when the worst interval's produce p99
	// exceeds it; 0 disables it.
	ProduceP99Ms float64 `json:"produce_p99_ms,omitempty"`
	// MinAckedRatio: overloaded when the acked rate falls below this
	// fraction of the offered rate (the cluster cannot keep up); 0
	// disables it.
	MinAckedRatio float64 `json:"min_acked_ratio,omitempty"`
}

// Overloaded reports whether s overloads under t, and why.
func (t LimitThresholds) Overloaded(s LimitSignals) (bool, []string) {
	var why []string
	if s.HandlerIdle < t.HandlerIdle {
		why = append(why, fmt.Sprintf("handler idle %.0f%% < %.0f%%", 100*s.HandlerIdle, 100*t.HandlerIdle))
	}
	if s.IsrChangeFraction > t.IsrChangeFraction {
		why = append(why, fmt.Sprintf("ISR changes in %.0f%% of intervals > %.0f%%", 100*s.IsrChangeFraction, 100*t.IsrChangeFraction))
	}
	if t.ProduceP99Ms > 0 && s.ProduceP99Ms > t.ProduceP99Ms {
		why = append(why, fmt.Sprintf("produce p99 %.0f ms > %.0f ms", s.ProduceP99Ms, t.ProduceP99Ms))
	}
	if t.MinAckedRatio > 0 && s.OfferedPerSec > 0 && s.AckedPerSec < t.MinAckedRatio*s.OfferedPerSec {
		why = append(why, fmt.Sprintf("acked %.0f/s < %.0f%% of offered %.0f/s", s.AckedPerSec, 100*t.MinAckedRatio, s.OfferedPerSec))
	}
	return len(why) > 0, why
}

// LimitPoint is one measured point of a search.
type LimitPoint struct {
	Producers  int          `json:"producers"`
	Signals    LimitSignals `json:"signals"`
	Overloaded bool         `json:"overloaded"`
	Why        []string     `json:"why,omitempty"`
	Dir        string       `json:"dir,omitempty"`
}

// LimitSearch is one record size's binary search.
type LimitSearch struct {
	RecordSize int `json:"record_size"`
	// Lo is the largest producer count known safe (0: none measured
	// safe), Hi the smallest known to overload (MaxProducers+1 when none
	// did: the limit is at least Lo, the search's ceiling).
	Lo int `json:"lo"`
	Hi int `json:"hi"`
	// Ceiling is set when even MaxProducers did not overload.
	Ceiling bool `json:"ceiling,omitempty"`
	// Done is set when the interval closed; false when the search was
	// stopped (the bounds are what was measured).
	Done   bool         `json:"done"`
	Points []LimitPoint `json:"points"`
	// LimitPerSec and LimitBytesPerSec are the safe bound's offered
	// traffic (Lo producers × rate), in total and per broker.
	LimitPerSec               float64 `json:"limit_per_s"`
	LimitBytesPerSec          float64 `json:"limit_bytes_per_s"`
	LimitPerSecPerBroker      float64 `json:"limit_per_s_per_broker"`
	LimitBytesPerSecPerBroker float64 `json:"limit_bytes_per_s_per_broker"`
}

// SetLimit fills in the safe bound's traffic for a per-producer rate
// (records/s) on a cluster of brokers.
func (s *LimitSearch) SetLimit(rate float64, brokers int) {
	s.LimitPerSec = float64(s.Lo) * rate
	s.LimitBytesPerSec = s.LimitPerSec * float64(s.RecordSize)
	if brokers > 0 {
		s.LimitPerSecPerBroker = s.LimitPerSec / float64(brokers)
		s.LimitBytesPerSecPerBroker = s.LimitBytesPerSec / float64(brokers)
	}
}

// Bound reports whether the search's limit is only a lower bound: the
// ceiling never overloaded, or the search was stopped.
func (s *LimitSearch) Bound() bool { return s.Ceiling || !s.Done }

// Limits is a limit search's limits.json.
type Limits struct {
	Started        string          `json:"started"`
	Brokers        int             `json:"brokers"`
	ConsumerGroups int             `json:"consumer_groups"`
	Rate           float64         `json:"rate_per_producer"`
	WindowSeconds  float64         `json:"window_s"`
	MaxProducers   int             `json:"max_producers"`
	Acks           string          `json:"acks"`
	Compression    string          `json:"compression,omitempty"`
	Payload        string          `json:"payload,omitempty"`
	Thresholds     LimitThresholds `json:"thresholds"`
	// Headroom is the planning factor: the limit × Headroom tolerates
	// 1-Headroom of the brokers offline (seed 002: 0.8 for 20%).
	Headroom   float64        `json:"headroom"`
	Incomplete bool           `json:"incomplete,omitempty"`
	Searches   []*LimitSearch `json:"searches"`
}

// IsLimits reports whether dir of fsys is a limit search's directory.
func IsLimits(fsys fs.FS, dir string) bool {
	st, err := fs.Stat(fsys, path.Join(dir, LimitsFile))
	return err == nil && st.Mode().IsRegular()
}

// ReadLimits reads a limit search's limits.json.
func ReadLimits(fsys fs.FS) (*Limits, error) {
	b, err := fs.ReadFile(fsys, LimitsFile)
	if err != nil {
		return nil, err
	}
	var l Limits
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s: %w", LimitsFile, err)
	}
	return &l, nil
}

// WriteLimitsReport writes report.html into the limit search's directory.
func WriteLimitsReport(dir string) error {
	return writeReport(dir, LimitsReport)
}

type limitsPage struct {
	Name     string
	Style    template.CSS
	L        *Limits
	Payload  string
	Plot     template.HTML
	Searches []limitsSearchRow
	Files    []string
}

type limitsSearchRow struct {
	*LimitSearch
	Hi                   string
	PlanPerSec, PlanMBps float64
	Points               []limitsPointRow
}

type limitsPointRow struct {
	LimitPoint
	N      int
	Idle   string
	P99    string
	Report string // the point's run report, relative to the search
}

// LimitsReport builds the report of a limit search's directory: its
// settings, the boundary table and plot with the planning figure, and
// every probed point's signals and verdict, linking to the point's run
// report.
func LimitsReport(fsys fs.FS, name string) ([]byte, error) {
	l, err := ReadLimits(fsys)
	if err != nil {
		return nil, err
	}
	d := limitsPage{Name: name, Style: template.CSS(reportCSS), L: l, Payload: l.Payload, Plot: LimitsPlot(l)}
	if d.Payload == "" {
		d.Payload = "random"
	}
	for _, s := range l.Searches {
		row := limitsSearchRow{LimitSearch: s, Hi: strconv.Itoa(s.Hi),
			PlanPerSec: l.Headroom * s.LimitPerSecPerBroker, PlanMBps: l.Headroom * s.LimitBytesPerSecPerBroker / 1e6}
		switch {
		case s.Ceiling:
			row.Hi = fmt.Sprintf(">%d (never)", s.Lo)
		case !s.Done:
			row.Hi += " (open)"
		}
		for i, p := range s.Points {
			pr := limitsPointRow{LimitPoint: p, N: i + 1, Idle: "n/a", P99: "n/a"}
			if !p.Signals.NoIdle {
				pr.Idle = fmt.Sprintf("%.0f%% (min %.0f%%)", 100*p.Signals.HandlerIdle, 100*p.Signals.HandlerIdleMin)
			}
			if p.Signals.ProduceP99Ms > 0 {
				pr.P99 = svgplot.MsLabel(p.Signals.ProduceP99Ms)
			}
			if rel := pointRel(p.Dir); rel != "" {
				if _, err := fs.Stat(fsys, path.Join(rel, ReportFile)); err == nil {
					pr.Report = rel + "/" + ReportFile
				}
			}
			row.Points = append(row.Points, pr)
		}
		d.Searches = append(d.Searches, row)
	}
	d.Files = existing(fsys, LimitsFile, LimitsTextFile, LimitsSVGFile)
	return renderPage(limitsTmpl, &d)
}

// pointRel is a point's run directory relative to its search's directory:
// from the last points/ element on ("" when there is none).
func pointRel(dir string) string {
	dir = filepath.ToSlash(dir)
	i := strings.LastIndex("/"+dir, "/"+PointsDir+"/")
	if i < 0 {
		return ""
	}
	rel := path.Clean(dir[i:])
	if !fs.ValidPath(rel) {
		return ""
	}
	return rel
}

// LimitsPlot draws the boundary, one panel above the other: messages/s
// and MB/s per broker against the record size (log scale), the limit
// solid and the planning figure (the limit × headroom) dashed. A limit
// that is only a lower bound (never overloaded, or stopped) is a hollow
// marker. The SVG carries its own style, so that it also stands alone as
// limits.svg.
func LimitsPlot(l *Limits) template.HTML {
	const panelH, top, bottom = 250.0, 30.0, 214.0
	var s svgplot.Builder
	s.OpenSVG(svgW, 2*panelH, "width", svgW, "height", 2*panelH, "class", "plot", "data-plot", "limits", "role", "img", "aria-label", "throughput limit per broker")
	s.Style(svgCSS)
	s.El("rect", "width", svgW, "height", 2*panelH, "fill", "#fff")
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, se := range l.Searches {
		lo, hi = math.Min(lo, float64(se.RecordSize)), math.Max(hi, float64(se.RecordSize))
	}
	if len(l.Searches) == 0 {
		lo, hi = 100, 1000
	}
	lx0, lx1 := math.Log10(lo)-0.3, math.Log10(hi)+0.3
	x := func(size float64) float64 { return marginL + (math.Log10(size)-lx0)/(lx1-lx0)*(plotR-marginL) }
	panel := func(y0 float64, id, title string, val func(*LimitSearch) float64, label func(float64) string) {
		peak := 0.0
		for _, se := range l.Searches {
			peak = math.Max(peak, val(se))
		}
		ticks, ytop := svgplot.Ticks(peak * 1.15)
		t, b := y0+top, y0+bottom
		y := func(v float64) float64 { return svgplot.LinY(v, ytop, t, b) }
		s.Open("g", "class", "panel", "data-panel", id)
		s.Text(marginL, y0+16, title, "class", "paneltitle")
		s.YGrid(marginL, plotR, ticks, y, label)
		for e := math.Ceil(lx0); e <= lx1; e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if lv := math.Log10(v); lv < lx0 || lv > lx1 {
					continue
				}
				s.El("line", "x1", x(v), "x2", x(v), "y1", t, "y2", b, "class", "grid")
				s.Text(x(v), b+14, svgplot.CountLabel(v)+" B", "class", "tick", "text-anchor", "middle")
			}
		}
		s.El("line", "x1", marginL, "x2", plotR, "y1", b, "y2", b, "class", "axis")
		s.YLabel(t, b, id)
		for _, f := range []struct {
			name, dash string
			k          float64
		}{{"limit", "", 1}, {"plan", "6 4", l.Headroom}} {
			var xs, ys []float64
			for _, se := range l.Searches {
				xs, ys = append(xs, x(float64(se.RecordSize))), append(ys, y(f.k*val(se)))
			}
			s.El("polyline", "class", "series", "data-series", f.name, "points", svgplot.Points(xs, ys), "fill", "none",
				"stroke", "#c62828", "stroke-width", 2, "stroke-dasharray", f.dash)
		}
		for _, se := range l.Searches {
			cx, v := x(float64(se.RecordSize)), val(se)
			fill := "#c62828"
			if se.Bound() {
				fill = "#fff"
			}
			s.Open("circle", "cx", cx, "cy", y(v), "r", 4.5, "fill", fill, "stroke", "#c62828", "stroke-width", 1.5,
				"data-size", se.RecordSize, "data-limit", strconv.FormatFloat(v, 'g', 6, 64), "data-plan", strconv.FormatFloat(l.Headroom*v, 'g', 6, 64))
			bound := ""
			if se.Bound() {
				bound = " (at least)"
			}
			s.Title(fmt.Sprintf("%d-byte records: limit %s%s, plan %s", se.RecordSize, label(v), bound, label(l.Headroom*v)))
			s.Close("circle")
			s.Text(cx+8, y(v)-6, label(v), "class", "legend")
			s.Text(cx+8, y(l.Headroom*v)+12, "plan "+label(l.Headroom*v), "class", "smalllabel")
		}
		s.Legend(plotR, y0+16, []svgplot.Key{{Label: "limit (hollow: at least)", Color: "#c62828"}, {Label: fmt.Sprintf("planning figure ×%.2f", l.Headroom), Color: "#c62828", Dash: "6 4"}})
		s.Close("g")
	}
	panel(0, "msg/s", "messages/s per broker", func(se *LimitSearch) float64 { return se.LimitPerSecPerBroker }, svgplot.CountLabel)
	panel(panelH, "MB/s", "MB/s per broker", func(se *LimitSearch) float64 { return se.LimitBytesPerSecPerBroker / 1e6 },
		func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) })
	s.Close("svg")
	return s.HTML()
}

var limitsTmpl = template.Must(template.New("limits").Funcs(funcs).Funcs(template.FuncMap{
	"pct100": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" },
	"sub1":   func(f float64) float64 { return 1 - f },
	"mb":     func(b float64) string { return strconv.FormatFloat(b/1e6, 'f', 2, 64) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>isrlab limits {{.Name}}</title>
<style>{{.Style}}</style></head>
<body>
<header>
<h1>throughput limit{{if .L.Incomplete}} <span class="badge undecided" id="incomplete">INCOMPLETE</span>{{end}}</h1>
<p class="sub">{{.Name}} · started {{.L.Started}} · {{.L.Brokers}} brokers · {{.L.ConsumerGroups}} consumer groups · {{.L.Rate}} records/s per producer · {{.L.WindowSeconds}}s windows</p>
</header>
<main>
{{if .L.Incomplete}}<p class="note">Stopped before every search closed: the bounds are what was measured, and an open search's limit is only a lower bound.</p>{{end}}
<section id="settings"><h2>Settings</h2>
<table class="kv">
<tr><th>cluster</th><td>{{.L.Brokers}} brokers, a topic of 10 partitions per broker, {{.L.ConsumerGroups}} consumer groups reading it all</td></tr>
<tr><th>producers</th><td>up to {{.L.MaxProducers}}, each {{.L.Rate}} records/s, acks={{.L.Acks}}, compression {{if .L.Compression}}{{.L.Compression}}{{else}}none{{end}}</td></tr>
<tr><th>payload</th><td id="payload">{{.Payload}}</td></tr>
<tr><th>overload</th><td id="thresholds">handler idle &lt; {{pct100 .L.Thresholds.HandlerIdle}} or ISR changes in &gt; {{pct100 .L.Thresholds.IsrChangeFraction}} of the intervals{{if .L.Thresholds.ProduceP99Ms}} or produce p99 &gt; {{.L.Thresholds.ProduceP99Ms}} ms{{end}}{{if .L.Thresholds.MinAckedRatio}} or acked &lt; {{pct100 .L.Thresholds.MinAckedRatio}} of offered{{end}}</td></tr>
<tr><th>planning</th><td id="headroom">limit × {{printf "%.2f" .L.Headroom}} (tolerates {{pct100 (sub1 .L.Headroom)}} of the brokers offline)</td></tr>
</table>
</section>

<section id="boundary"><h2>Boundary</h2>
<table class="limits"><tr><th>record B</th><th>safe producers</th><th>overloads at</th><th>points</th><th>msg/s/broker</th><th>MB/s/broker</th><th>plan msg/s/broker</th><th>plan MB/s/broker</th></tr>
{{range .Searches}}<tr class="limit" data-size="{{.RecordSize}}"><td class="num">{{.RecordSize}}</td><td class="num">{{.Lo}}</td><td class="num">{{.Hi}}</td><td class="num">{{len .Points}}</td>
<td class="num">{{printf "%.0f" .LimitPerSecPerBroker}}</td><td class="num">{{mb .LimitBytesPerSecPerBroker}}</td><td class="num plan">{{printf "%.0f" .PlanPerSec}}</td><td class="num plan">{{printf "%.2f" .PlanMBps}}</td></tr>
{{end}}</table>
<figure id="plot-limits"><figcaption><b>Limit per broker against record size</b> — the produced traffic of the safe bound divided by the brokers; dashed: the planning figure.</figcaption>{{.Plot}}</figure>
</section>

<section id="points"><h2>Points</h2>
{{range .Searches}}<h3>{{.RecordSize}}-byte records</h3>
<table class="points" data-size="{{.RecordSize}}"><tr><th>#</th><th>producers</th><th>offered msg/s</th><th>acked msg/s</th><th>acked MB/s</th><th>handler idle</th><th>ISR changes</th><th>produce p99</th><th>verdict</th><th>run</th></tr>
{{range .Points}}<tr class="point {{if .Overloaded}}overload{{else}}safe{{end}}" data-producers="{{.Producers}}"><td class="num">{{.N}}</td><td class="num">{{.Producers}}</td>
<td class="num">{{printf "%.0f" .Signals.OfferedPerSec}}</td><td class="num">{{printf "%.0f" .Signals.AckedPerSec}}</td><td class="num">{{mb .Signals.AckedBytesPerSec}}</td>
<td class="num">{{.Idle}}</td><td class="num">{{pct100 .Signals.IsrChangeFraction}} of {{.Signals.Intervals}}</td><td class="num">{{.P99}}</td>
<td>{{if .Overloaded}}<span class="badge notmet">OVERLOAD</span>{{range .Why}}<div class="reason">{{.}}</div>{{end}}{{else}}<span class="badge met">safe</span>{{end}}</td>
<td>{{if .Report}}<a href="{{.Report}}">report</a>{{end}}</td></tr>
{{end}}</table>
{{end}}
</section>

<section id="files"><h2>Files</h2><ul>{{range .Files}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul></section>
</main></body></html>
`))
