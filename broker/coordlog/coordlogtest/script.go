package coordlogtest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

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

// During runs f and returns the lines added while it ran, one per line:
// the output of a script's command.
func (tr *Trace) During(f func()) string {
	tr.Take()
	f()
	return strings.Join(tr.Take(), "\n")
}
