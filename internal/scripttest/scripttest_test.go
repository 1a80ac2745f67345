package scripttest

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		line  string
		args  Args
		words []string
	}{
		{"state", Args{}, nil},
		{"clock +30000", Args{"+30000": ""}, []string{"+30000"}},
		{"read offset=8 max=1 min-one", Args{"offset": "8", "max": "1", "min-one": ""}, []string{"min-one"}},
		{"commit offset=t/0=10 tp=t/0,t/1", Args{"offset": "t/0=10", "tp": "t/0,t/1"}, nil},
		{"topic t 0=1,2,3 1=(2, 3)", Args{"t": "", "0": "1,2,3", "1": "2,3"}, []string{"t"}},
		{"init id=", Args{"id": ""}, nil},
	} {
		cmd, cmdArgs, err := datadriven.ParseLine(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		td := &datadriven.TestData{Cmd: cmd, CmdArgs: cmdArgs}
		if got := ParseArgs(td); !maps.Equal(got, tc.args) {
			t.Errorf("%s: args %v, want %v", tc.line, got, tc.args)
		}
		if got := Words(td); !slices.Equal(got, tc.words) {
			t.Errorf("%s: words %q, want %q", tc.line, got, tc.words)
		}
	}
}

func TestInt(t *testing.T) {
	a := Args{"n": "-7", "plus": "+5", "empty": ""}
	for _, tc := range []struct {
		key  string
		want int64
	}{{"n", -7}, {"plus", 5}, {"empty", 3}, {"absent", 3}} {
		if got := a.Int(tc.key, 3); got != tc.want {
			t.Errorf("Int(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a malformed number did not panic")
		}
	}()
	Num("x1", 0)
}

func TestGolden(t *testing.T) {
	if Rewrite() {
		t.Skip("checks the comparison, not the rewrite")
	}
	path := filepath.Join(t.TempDir(), "out.golden")
	if err := os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		got  string
		fail bool
	}{{"x\n", false}, {"x", true}, {"y\n", true}} {
		ft := &fakeT{TB: t}
		Golden(ft, path, tc.got)
		if ft.failed != tc.fail {
			t.Errorf("Golden with %q failed=%v, want %v", tc.got, ft.failed, tc.fail)
		}
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
