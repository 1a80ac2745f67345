package svgplot

import "math"

// NiceStep is the tick step for span cut into at most n steps: the
// smallest 1, 2 or 5 times a power of ten that is at least span/n (1 for
// an empty span). Value axes (Ticks) and time axes (TimeAxis) both use
// it.
func NiceStep(span float64, n int) float64 {
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
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

// Ticks returns a value axis's ticks from 0 to at least hi, at most four
// NiceSteps apart, and the last of them: the axis's top.
func Ticks(hi float64) (ticks []float64, top float64) {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	step := NiceStep(hi, 4)
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		if v >= hi*(1-1e-9) {
			return ticks, v
		}
	}
}

// LinY maps v in [0, top] onto [bottom, y0] (values above top to y0).
func LinY(v, top, y0, bottom float64) float64 {
	if top <= 0 {
		return bottom
	}
	return bottom - math.Min(v/top, 1)*(bottom-y0)
}

// LogScale maps values in whole decades [10^Lo, 10^Hi] onto [Bottom, Y0].
type LogScale struct{ Lo, Hi, Y0, Bottom float64 }

// NewLogScale returns the scale of the decades around [minV, maxV] (a
// non-positive minV is 0.01, an empty range at least a decade up).
func NewLogScale(minV, maxV, y0, bottom float64) LogScale {
	if minV <= 0 || math.IsInf(minV, 0) {
		minV = 0.01
	}
	if maxV <= minV {
		maxV = minV * 10
	}
	return LogScale{Lo: math.Floor(math.Log10(minV)), Hi: math.Ceil(math.Log10(maxV)), Y0: y0, Bottom: bottom}
}

// Y is where v falls (a non-positive v at the bottom).
func (l LogScale) Y(v float64) float64 {
	if v <= 0 {
		return l.Bottom
	}
	f := (math.Log10(v) - l.Lo) / (l.Hi - l.Lo)
	return l.Bottom - math.Max(0, math.Min(f, 1))*(l.Bottom-l.Y0)
}

// Ticks returns the scale's decades.
func (l LogScale) Ticks() []float64 {
	var out []float64
	for e := l.Lo; e <= l.Hi; e++ {
		out = append(out, math.Pow(10, e))
	}
	return out
}

// TimeAxis maps seconds from a run's start, [0, T1], onto x pixels [X0,
// X1].
type TimeAxis struct{ T1, X0, X1 float64 }

// X is where second t falls (clamped to the axis).
func (a TimeAxis) X(t float64) float64 {
	if a.T1 <= 0 {
		return a.X0
	}
	t = math.Max(0, math.Min(t, a.T1))
	return a.X0 + t/a.T1*(a.X1-a.X0)
}
