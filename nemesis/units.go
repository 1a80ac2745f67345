package nemesis

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Percent is a share in [0, 100] as a spec writes it: "20%" or 20.
type Percent float64

// MarshalJSON writes "20%".
func (p Percent) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatFloat(float64(p), 'f', -1, 64) + "%")
}

// UnmarshalJSON reads "20%", "20" or 20.
func (p *Percent) UnmarshalJSON(b []byte) error {
	var v float64
	if err := json.Unmarshal(b, &v); err == nil {
		*p = Percent(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("percentage %s: want a string like \"20%%\"", b)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("percentage %q: want a number like \"20%%\"", s)
	}
	*p = Percent(v)
	return nil
}

// check reports a percentage outside [0, 100] (or (0, 100] unless zero is
// allowed), naming the field.
func (p Percent) check(field string, zeroOK bool) error {
	if p < 0 || p > 100 || (!zeroOK && p == 0) {
		lo := "("
		if zeroOK {
			lo = "["
		}
		return fmt.Errorf("%w: %s %v%%: want a percentage in %s0%%, 100%%]", ErrBadFault, field, float64(p), lo)
	}
	return nil
}

// Bytes is a size as a spec writes it: "64MiB", "512KiB", "1GiB", "100MB"
// or a number of bytes.
type Bytes uint64

var byteUnits = []struct {
	name string
	mult uint64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
}

// ParseBytes parses a size: a number with an optional unit (B, KiB, MiB,
// GiB, KB, MB, GB).
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(t, u.name); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*float64(mult) >= 1<<63 {
		return 0, fmt.Errorf("%w: size %q: want a number and a unit like 64MiB (B, KiB, MiB, GiB, KB, MB, GB)", ErrBadFault, s)
	}
	return Bytes(v * float64(mult)), nil
}

// String writes the size with the largest binary unit that divides it.
func (b Bytes) String() string {
	for _, u := range byteUnits[:3] {
		if b >= Bytes(u.mult) && uint64(b)%u.mult == 0 {
			return strconv.FormatUint(uint64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(b), 10) + "B"
}

// MarshalJSON writes "64MiB".
func (b Bytes) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads "64MiB" or a number of bytes.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var n uint64
	if err := json.Unmarshal(data, &n); err == nil {
		*b = Bytes(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size %s: want a string like \"64MiB\"", data)
	}
	v, err := ParseBytes(s)
	if err != nil {
		return fmt.Errorf("size %q: want a number and a unit like 64MiB (B, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	*b = v
	return nil
}
