package coordlogtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// RunScript runs the data-driven script at path. A line "> command args"
// is run by run, which returns the lines it produced; they must equal the
// lines that follow it in the file (comments and blank lines are kept).
// With rewrite the file is rewritten with what the commands produced.
func RunScript(t *testing.T, path string, rewrite bool, run func(fields []string) []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if !strings.HasPrefix(line, "> ") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				got = append(got, line)
			}
			want = append(want, line)
			continue
		}
		got, want = append(got, line), append(want, line)
		got = append(got, run(strings.Fields(line[2:]))...)
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Fatalf("%s: output differs (go test -run TestScripts -rewrite to accept):\n--- got\n%s\n--- want\n%s", path, g, w)
	}
}

// Args parses key=value arguments.
func Args(fields []string) map[string]string {
	out := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

// ErrName is a Kafka error code's name, "ok" for none.
func ErrName(code int16) string {
	if code == 0 {
		return "ok"
	}
	if e := kerr.ErrorForCode(code); e != nil {
		return e.(*kerr.Error).Message
	}
	return strconv.Itoa(int(code))
}

// RunScripts runs every script in dir (dir/*.txt) as a subtest; start
// returns, for a fresh coordinator, the function that runs one command.
func RunScripts(t *testing.T, dir string, rewrite bool, start func(t *testing.T) func(fields []string) []string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	if len(files) == 0 {
		t.Fatal("no scripts in " + dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { RunScript(t, f, rewrite, start(t)) })
	}
}

// Trace collects the lines a command's effects print, from any goroutine.
type Trace struct {
	mu    sync.Mutex
	lines []string
}

// Emit adds a line.
func (tr *Trace) Emit(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

// Take returns the lines added since the last Take.
func (tr *Trace) Take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.lines
	tr.lines = nil
	return out
}
