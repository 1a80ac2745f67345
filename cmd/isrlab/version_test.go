package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	checkout := &debug.BuildInfo{Main: debug.Module{Path: "github.com/isrlab/isrlab", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fee5108489517517bac95061faf1eab422d377cb"}, {Key: "vcs.modified", Value: "true"}}}
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/isrlab/isrlab", Version: "v0.3.0"}}
	for _, tc := range []struct {
		name           string
		stampV, stampC string
		bi             *debug.BuildInfo
		wantV, wantC   string
	}{
		{"stamped", "v0.3.0", "0123abc", checkout, "v0.3.0", "0123abc"},
		{"stamped-over-module", "v0.4.0-rc1", "0123abc", installed, "v0.4.0-rc1", "0123abc"},
		{"go-install", "", "", installed, "v0.3.0", "unknown"},
		{"checkout", "", "", checkout, "devel", "fee5108489517517bac95061faf1eab422d377cb-dirty"},
		{"nothing", "", "", nil, "devel", "unknown"},
	} {
		v, c := versionOf(tc.stampV, tc.stampC, tc.bi)
		if v != tc.wantV || c != tc.wantC {
			t.Errorf("%s: %q %q, want %q %q", tc.name, v, c, tc.wantV, tc.wantC)
		}
	}
}

// TestVersionCommand: isrlab version prints the stamped version and
// commit, and without a stamp what the build information says.
func TestVersionCommand(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.8.7", "cafef00d"
	code, out := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "isrlab v9.8.7 (commit cafef00d, go") {
		t.Errorf("stamped: exit %d: %q", code, out)
	}
	version, commit = "", ""
	code, out = runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "isrlab ") || strings.Contains(out, "v9.8.7") || !strings.Contains(out, "(commit ") {
		t.Errorf("unstamped: exit %d: %q", code, out)
	}
	if code, _ := runCLI(t, "version", "extra"); code != exitBadArgs {
		t.Errorf("version extra: exit %d, want %d", code, exitBadArgs)
	}
}
