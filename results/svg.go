package results

import "github.com/isrlab/isrlab/internal/svgplot"

// Every plot is an inline SVG of the same width with the same margins, so
// that their time axes line up when stacked; internal/svgplot draws them.
const (
	svgW    = 1100.0
	marginL = 76.0
	marginR = 16.0
	plotR   = svgW - marginR
)

// newTimeAxis maps seconds [0, t1] of a run onto the plots' width.
func newTimeAxis(t1 float64) svgplot.TimeAxis {
	return svgplot.TimeAxis{T1: t1, X0: marginL, X1: plotR}
}

// brokerColor colours a broker by id, an offline leader (-1) red.
func brokerColor(id int32) string {
	if id < 0 {
		return "#d62728"
	}
	return svgplot.ColorAt(int(id))
}

// svgCSS styles the plots: the toolkit's classes and the report's own
// labels. A plot that stands alone as a file carries it.
const svgCSS = svgplot.CSS + `svg .barlabel{font-size:10px;fill:#fff}
svg .rowlabel{font-size:11px;fill:#333}
svg .smalllabel{font-size:9px;fill:#666}
svg .unavlabel{font-size:10px;fill:#c62828;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .note{fill:#888}
`
