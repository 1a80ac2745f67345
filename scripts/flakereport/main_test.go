package main

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// testdata/run.json is `go test -json -timeout 3s ./...` over a package
// with a passing, a skipped, a hanging test and one with a failing
// subtest, and a package that does not compile.
func TestParse(t *testing.T) {
	f, err := os.Open("testdata/run.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := parse(f).failures
	want := map[key]string{
		{"fr/p", "TestFail/b"}: "",
		{"fr/p", "TestHang"}:   "did not finish",
		{"fr/q", ""}:           "build failed",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("failures = %v, want %v", got, want)
	}
}

func TestSummary(t *testing.T) {
	runs := []run{
		{failures: map[key]string{{"a", "TestX"}: "", {"b", ""}: "package failed"}},
		{failures: map[key]string{}},
		{failures: map[key]string{{"a", "TestX"}: "", {"a", "TestY"}: "did not finish"}},
	}
	var out bytes.Buffer
	if summary(&out, runs) {
		t.Error("summary reported every run passing")
	}
	for _, line := range []string{
		"2/3     1,3   a        TestX",
		"1/3     1     b        (package failed)",
		"1/3     3     a        TestY (did not finish)",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("summary lacks %q:\n%s", line, out.String())
		}
	}
	out.Reset()
	if !summary(&out, runs[1:2]) || !strings.Contains(out.String(), "no test failed in 1 runs") {
		t.Errorf("a passing run: %s", out.String())
	}
}
