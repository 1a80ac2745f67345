package units

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{`"20ms"`, 20 * time.Millisecond, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`1000`, time.Microsecond, ""},
		{`"soon"`, 0, `duration "soon"`},
		{`true`, 0, `want a string like "20ms"`},
	} {
		var d Duration
		err := json.Unmarshal([]byte(c.in), &d)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || time.Duration(d) != c.want {
			t.Errorf("%s: %v, %v; want %v", c.in, time.Duration(d), err, c.want)
		}
		b, err := json.Marshal(d)
		if err != nil || string(b) != `"`+c.want.String()+`"` {
			t.Errorf("%s: marshals to %s, %v", c.in, b, err)
		}
	}
}
