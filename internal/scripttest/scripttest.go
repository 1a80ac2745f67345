// Package scripttest is what the repository's data-driven and golden-file
// tests share: the one -rewrite flag, running every script of a directory
// with cockroachdb/datadriven, reading a command's arguments, and comparing
// output with a golden file.
//
// A script is a sequence of commands, each followed by "----" and the
// output it must produce, ended by a blank line; lines starting with "#"
// are comments:
//
//	# The HW holds until every ISR follower has fetched.
//	append records=3 acks=-1
//	----
//	offsets 0..2 leader epoch=0 isr=[1 2 3] hw=0 leo=3
//
// go test -run TestScripts -rewrite rewrites the outputs (and golden files)
// with what the code produces; review the diff before committing it.
package scripttest

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Rewrite reports whether the test binary runs with -rewrite. The flag is
// the one datadriven registers, so that one name regenerates every
// expected output of the repository, scripts and golden files alike.
func Rewrite() bool {
	f := flag.Lookup("rewrite")
	return f != nil && f.Value.String() == "true"
}

// RunDir runs every script in dir (dir/*.txt) as a subtest named after its
// file. For each, start sets up a fresh world and returns the function that
// runs one command and returns its output.
func RunDir(t *testing.T, dir string, start func(t *testing.T) func(t *testing.T, td *datadriven.TestData) string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in %s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			datadriven.RunTest(t, file, start(t))
		})
	}
}

// Args is a command's arguments by key: key=value gives value,
// key=(v1, v2) gives "v1,v2", and a bare word is a key with the empty
// value.
type Args map[string]string

// ParseArgs returns td's arguments.
func ParseArgs(td *datadriven.TestData) Args {
	a := Args{}
	for _, arg := range td.CmdArgs {
		a[arg.Key] = strings.Join(arg.Vals, ",")
	}
	return a
}

// Words returns td's bare words (the arguments without "="), in order.
func Words(td *datadriven.TestData) []string {
	var out []string
	for _, arg := range td.CmdArgs {
		if arg.Vals == nil {
			out = append(out, arg.Key)
		}
	}
	return out
}

// Int returns the number under key, or def when the key is absent or has
// no value.
func (a Args) Int(key string, def int64) int64 { return Num(a[key], def) }

// Num parses s as a number, def when s is empty. A malformed number is a
// mistake in the script: Num panics, which fails the test at its line.
func Num(s string, def int64) int64 {
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic("not a number: " + strconv.Quote(s))
	}
	return n
}

// Golden compares got with the file at path; with -rewrite it writes got
// there instead (creating the directory).
func Golden(t testing.TB, path, got string) {
	t.Helper()
	if Rewrite() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run '%s' -rewrite writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run '%s' -rewrite rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}
