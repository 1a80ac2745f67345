package faultfs

import "testing"

func TestParseDaemon(t *testing.T) {
	for _, tt := range []struct {
		cmdline, mount, run string
		ok                  bool
	}{
		{"/bin/isrlab\x00faultfs\x00--backing\x00/b\x00--mount\x00/m/data\x00--run-id\x0004064675\x00--verbose\x00", "/m/data", "04064675", true},
		{"/bin/isrlab\x00broker\x00--mount\x00/m\x00--run-id\x00x\x00", "", "", false},
		{"/bin/isrlab\x00faultfs\x00--mount\x00/m\x00", "/m", "", false},
		{"sleep\x00600\x00", "", "", false},
	} {
		mount, run, ok := parseDaemon(tt.cmdline)
		if mount != tt.mount || run != tt.run || ok != tt.ok {
			t.Errorf("%q: %q %q %v", tt.cmdline, mount, run, ok)
		}
	}
}
