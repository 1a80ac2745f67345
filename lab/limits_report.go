package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// LimitsReport is a limit search's output: limits.json, limits.txt and
// limits.svg in its directory.
type LimitsReport struct {
	Started        string     `json:"started"`
	Brokers        int        `json:"brokers"`
	ConsumerGroups int        `json:"consumer_groups"`
	Rate           float64    `json:"rate_per_producer"`
	WindowSeconds  float64    `json:"window_s"`
	MaxProducers   int        `json:"max_producers"`
	Acks           string     `json:"acks"`
	Compression    string     `json:"compression,omitempty"`
	Thresholds     Thresholds `json:"thresholds"`
	// Headroom is the planning factor: the limit × Headroom tolerates
	// 1-Headroom of the brokers offline (seed 002: 0.8 for 20%).
	Headroom   float64   `json:"headroom"`
	Incomplete bool      `json:"incomplete,omitempty"`
	Searches   []*Search `json:"searches"`
}

// LimitsFiles are the report's file names.
const (
	LimitsJSON = "limits.json"
	LimitsText = "limits.txt"
	LimitsSVG  = "limits.svg"
)

// WriteLimits writes the report's three files into dir.
func WriteLimits(dir string, r *LimitsReport) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, LimitsJSON), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var t strings.Builder
	WriteLimitsTable(&t, r)
	if err := os.WriteFile(filepath.Join(dir, LimitsText), []byte(t.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, LimitsSVG), []byte(LimitsPlot(r)), 0o644)
}

// WriteLimitsTable prints the boundary: per record size the safe and
// overloading producer counts, the limit per broker and the planning figure.
func WriteLimitsTable(w io.Writer, r *LimitsReport) {
	fmt.Fprintf(w, "throughput limit: %d brokers, %d consumer groups, %g records/s per producer, %gs windows, acks=%s\n",
		r.Brokers, r.ConsumerGroups, r.Rate, r.WindowSeconds, r.Acks)
	fmt.Fprintf(w, "overload: handler idle < %.0f%% or ISR changes in > %.0f%% of intervals", 100*r.Thresholds.HandlerIdle, 100*r.Thresholds.IsrChangeFraction)
	if r.Thresholds.ProduceP99Ms > 0 {
		fmt.Fprintf(w, " or produce p99 > %g ms", r.Thresholds.ProduceP99Ms)
	}
	if r.Thresholds.MinAckedRatio > 0 {
		fmt.Fprintf(w, " or acked < %.0f%% of offered", 100*r.Thresholds.MinAckedRatio)
	}
	fmt.Fprintf(w, "; planning figure = limit x %.2f\n", r.Headroom)
	if r.Incomplete {
		fmt.Fprintln(w, "INCOMPLETE: stopped before every search closed; the bounds are what was measured")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "record B\tsafe producers\toverloads at\tpoints\tmsg/s/broker\tMB/s/broker\tplan msg/s/broker\tplan MB/s/broker\t")
	for _, s := range r.Searches {
		hi := fmt.Sprint(s.Hi)
		switch {
		case s.Ceiling:
			hi = fmt.Sprintf(">%d (never)", s.Lo)
		case !s.Done:
			hi += " (open)"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%.0f\t%.2f\t%.0f\t%.2f\t\n", s.RecordSize, s.Lo, hi, len(s.Points),
			s.LimitPerSecPerBroker, s.LimitBytesPerSecPerBroker/1e6, r.Headroom*s.LimitPerSecPerBroker, r.Headroom*s.LimitBytesPerSecPerBroker/1e6)
	}
	tw.Flush()
	for _, s := range r.Searches {
		fmt.Fprintf(w, "\n%d-byte records:\n", s.RecordSize)
		for _, p := range s.Points {
			verdict := "safe"
			if p.Overloaded {
				verdict = "OVERLOAD: " + strings.Join(p.Why, "; ")
			}
			fmt.Fprintf(w, "  %3d producers: %s -> %s\n", p.Producers, FormatSignals(p.Signals), verdict)
		}
	}
}

// LimitsPlot draws the boundary: messages/s and MB/s per broker against
// the record size (log scale), the limit and the planning figure.
func LimitsPlot(r *LimitsReport) string {
	const w, h, pw, ph, left, top = 900, 380, 340, 260, 80, 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">Throughput limit: %d brokers, %d consumer groups, %gs windows (dashed: planning figure x%.2f)</text>`+"\n",
		left, r.Brokers, r.ConsumerGroups, r.WindowSeconds, r.Headroom)
	minS, maxS := math.Inf(1), math.Inf(-1)
	for _, s := range r.Searches {
		minS, maxS = min(minS, float64(s.RecordSize)), max(maxS, float64(s.RecordSize))
	}
	if len(r.Searches) == 0 {
		minS, maxS = 100, 1000
	}
	lx0, lx1 := math.Log10(minS)-0.3, math.Log10(maxS)+0.3
	panel := func(x0 int, title string, val func(*Search) float64) {
		ymax := 0.0
		for _, s := range r.Searches {
			ymax = max(ymax, val(s))
		}
		if ymax <= 0 {
			ymax = 1
		}
		ymax *= 1.15
		px := func(size float64) float64 { return float64(x0) + (math.Log10(size)-lx0)/(lx1-lx0)*pw }
		py := func(v float64) float64 { return top + ph - v/ymax*ph }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, top-8, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, top, pw, ph)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
				x0, x0+pw, py(v), py(v), x0-4, py(v)+4, short(v))
		}
		for e := math.Ceil(lx0); e <= lx1; e++ {
			x := px(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
				x, x, top, top+ph, x, top+ph+16, short(math.Pow(10, e)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">record size (bytes)</text>`+"\n", x0+pw/2, top+ph+34)
		for _, f := range []struct {
			k    float64
			dash string
		}{{1, ""}, {r.Headroom, ` stroke-dasharray="5,4"`}} {
			var pts []string
			for _, s := range r.Searches {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(s.RecordSize)), py(f.k*val(s))))
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#c33" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), f.dash)
		}
		for _, s := range r.Searches {
			x, y := px(float64(s.RecordSize)), py(val(s))
			fill := "#c33"
			if s.Ceiling || !s.Done {
				fill = "white" // a lower bound, not a measured limit
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="#c33"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
				x, y, fill, x, y-8, short(val(s)))
			yp := py(r.Headroom * val(s))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#c33" stroke-dasharray="3,2"/><text x="%.1f" y="%.1f" fill="#c33">plan %s</text>`+"\n",
				x-14, x+14, yp, yp, x+16, yp+4, short(r.Headroom*val(s)))
		}
	}
	panel(left, "messages/s per broker", func(s *Search) float64 { return s.LimitPerSecPerBroker })
	panel(left+pw+110, "MB/s per broker", func(s *Search) float64 { return s.LimitBytesPerSecPerBroker / 1e6 })
	b.WriteString("</svg>\n")
	return b.String()
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
