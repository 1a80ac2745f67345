package main

import (
	"strings"
	"testing"
)

func TestLimitsArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "--record-sizes", "100,x"}, `--record-sizes: "x" is not a positive number of bytes`},
		{[]string{"limits", "--brokers", "0"}, "--brokers must be at least 1"},
		{[]string{"limits", "--producer-rate", "0"}, "--producer-rate must be positive"},
		{[]string{"limits", "--max-producers", "0"}, "--max-producers must be at least 1"},
		{[]string{"limits", "--window", "100ms"}, "--window must be at least 1s"},
		{[]string{"limits", "--headroom", "1.5"}, "--headroom must be in (0, 1]"},
		{[]string{"limits", "--backend", "vm"}, `--backend: "vm": use netns or docker`},
		{[]string{"limits", "--payload", "zeros"}, `--payload: "zeros": use random or compressible`},
		{[]string{"limits", "extra"}, "unknown command"},
	} {
		code, out := runCLI(t, tc.args...)
		if code != exitBadArgs || !strings.Contains(out, tc.want) {
			t.Errorf("isrlab %v: exit %d, want %d containing %q:\n%s", tc.args, code, exitBadArgs, tc.want, out)
		}
	}
	code, out := runCLI(t, "limits", "--help")
	if code != 0 || !strings.Contains(out, "binary-search the number of") || !strings.Contains(out, "--max-producers") {
		t.Errorf("limits --help: exit %d:\n%s", code, out)
	}
}
