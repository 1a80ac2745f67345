// Command flakereport records and summarises repeated `go test -json` runs
// for make flake (scripts/flake.sh).
//
//	flakereport record DIR/run-K < go-test-json   # writes run-K.json and run-K.log, prints package results as they end
//	flakereport summary DIR/run-*.json            # every test that failed in any run, with how many runs it failed in
//
// summary exits 1 when any run had a failure.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: flakereport record PREFIX < json | flakereport summary RUN.json...")
		os.Exit(254)
	}
	switch os.Args[1] {
	case "record":
		if err := record(os.Args[2], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "flakereport:", err)
			os.Exit(255)
		}
	case "summary":
		var runs []run
		for _, path := range os.Args[2:] {
			f, err := os.Open(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "flakereport:", err)
				os.Exit(255)
			}
			r := parse(f)
			f.Close()
			r.name = path
			runs = append(runs, r)
		}
		if !summary(os.Stdout, runs) {
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "flakereport: unknown command %q\n", os.Args[1])
		os.Exit(254)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus the
// build events of Go 1.24+).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// record copies the JSON stream to PREFIX.json, its output text to
// PREFIX.log (what go test -v would have printed: each package's output in
// one piece, when the package ends), and every package's result line and
// failed test to w as they arrive.
func record(prefix string, r io.Reader, w io.Writer) error {
	js, err := os.Create(prefix + ".json")
	if err != nil {
		return err
	}
	defer js.Close()
	lg, err := os.Create(prefix + ".log")
	if err != nil {
		return err
	}
	defer lg.Close()
	pending := map[string]*strings.Builder{} // output of packages still running
	flush := func(pkg string) error {
		b, ok := pending[pkg]
		if !ok {
			return nil
		}
		delete(pending, pkg)
		_, err := io.WriteString(lg, b.String())
		return err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := fmt.Fprintf(js, "%s\n", line); err != nil {
			return err
		}
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// stderr lines from go itself (go: downloading ...)
			fmt.Fprintf(lg, "%s\n", line)
			continue
		}
		switch {
		case e.Action == "build-output" || e.Action == "output" && e.Package == "":
			if _, err := io.WriteString(lg, e.Output); err != nil {
				return err
			}
		case e.Action == "output":
			b := pending[e.Package]
			if b == nil {
				b = &strings.Builder{}
				pending[e.Package] = b
			}
			b.WriteString(e.Output)
			out := strings.TrimLeft(e.Output, " ")
			if e.Test == "" && (strings.HasPrefix(out, "ok  \t") || strings.HasPrefix(out, "FAIL\t")) {
				fmt.Fprint(w, "  ", e.Output)
			} else if strings.HasPrefix(out, "--- FAIL: ") || strings.HasPrefix(out, "panic: ") {
				fmt.Fprintf(w, "  %s  (%s)\n", strings.TrimRight(e.Output, "\n"), e.Package)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			if err := flush(e.Package); err != nil {
				return err
			}
		}
	}
	rest := make([]string, 0, len(pending))
	for pkg := range pending {
		rest = append(rest, pkg)
	}
	sort.Strings(rest)
	for _, pkg := range rest {
		if err := flush(pkg); err != nil {
			return err
		}
	}
	return sc.Err()
}

// key names a failure: a test in a package, or the package itself (Test
// empty) when it failed with no failed test to show for it (a build
// failure, a panic outside a test, TestMain's exit).
type key struct{ Package, Test string }

type run struct {
	name     string
	failures map[key]string // the failure's kind: "", "did not finish", "build failed", ...
}

// parse reads one run's JSON. A test that started but never ended in a
// package that failed (a timeout, a panic in another goroutine) counts as
// failed, "did not finish". A parent whose failure is its subtests' is not
// listed apart from them.
func parse(r io.Reader) run {
	type state struct{ started, ended, failed bool }
	tests := map[key]*state{}
	pkgFailed := map[string]string{}
	var order []key
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Action == "build-fail" {
			pkg, _, _ := strings.Cut(e.ImportPath, " ")
			pkgFailed[pkg] = "build failed"
			continue
		}
		if e.Test == "" {
			if e.Action == "fail" {
				if _, ok := pkgFailed[e.Package]; !ok {
					pkgFailed[e.Package] = ""
				}
			}
			continue
		}
		k := key{e.Package, e.Test}
		s := tests[k]
		if s == nil {
			s = &state{}
			tests[k] = s
			order = append(order, k)
		}
		switch e.Action {
		case "run":
			s.started = true
		case "pass", "skip":
			s.ended = true
		case "fail":
			s.ended, s.failed = true, true
		}
	}
	out := run{failures: map[key]string{}}
	for _, k := range order {
		s := tests[k]
		if s.failed {
			out.failures[k] = ""
		} else if _, pf := pkgFailed[k.Package]; pf && s.started && !s.ended {
			out.failures[k] = "did not finish"
		}
	}
	for k := range out.failures {
		for p := parent(k.Test); p != ""; p = parent(p) {
			delete(out.failures, key{k.Package, p})
		}
	}
	for pkg, why := range pkgFailed {
		found := false
		for k := range out.failures {
			found = found || k.Package == pkg
		}
		if !found {
			if why == "" {
				why = "package failed"
			}
			out.failures[key{pkg, ""}] = why
		}
	}
	return out
}

func parent(test string) string {
	i := strings.LastIndexByte(test, '/')
	if i < 0 {
		return ""
	}
	return test[:i]
}

// summary prints every failure with the runs it happened in; it reports
// whether every run passed.
func summary(w io.Writer, runs []run) bool {
	in := map[key][]int{}
	why := map[key]string{}
	for i, r := range runs {
		for k, kind := range r.failures {
			in[k] = append(in[k], i+1)
			if kind != "" {
				why[k] = kind
			}
		}
	}
	if len(in) == 0 {
		fmt.Fprintf(w, "flake: no test failed in %d runs\n", len(runs))
		return true
	}
	keys := make([]key, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if len(in[a]) != len(in[b]) {
			return len(in[a]) > len(in[b])
		}
		if a.Package != b.Package {
			return a.Package < b.Package
		}
		return a.Test < b.Test
	})
	fmt.Fprintf(w, "flake: %d tests or packages failed in %d runs:\n", len(keys), len(runs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "failed\truns\tpackage\ttest")
	for _, k := range keys {
		nums := make([]string, len(in[k]))
		for i, n := range in[k] {
			nums[i] = fmt.Sprint(n)
		}
		test := k.Test
		if test == "" {
			test = "(" + why[k] + ")"
		} else if why[k] != "" {
			test += " (" + why[k] + ")"
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%s\n", len(in[k]), len(runs), strings.Join(nums, ","), k.Package, test)
	}
	tw.Flush()
	return false
}
