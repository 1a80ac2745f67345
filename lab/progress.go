package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/isrlab/isrlab/history"
)

// progress sits between the recorder and the history writer: it counts
// client outcomes and active faults for the progress line and turns every
// completed fault operation into a printed event.
type progress struct {
	sink     history.Sink
	duration time.Duration
	t0       time.Time

	mu             sync.Mutex
	ok, fail, info int64
	active         []string // kinds of the active faults
	events         []string // printed lines not yet written
	// failedInjections describes every fault whose injection failed.
	failedInjections []string
	// waited is how long each fault's wait took until its condition
	// held, in seconds, by the fault's key (a scenario's fault N: N).
	waited map[int]float64
}

// waits returns how long each fault's wait took, by key.
func (p *progress) waits() map[int]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.waited)
}

// failed returns the descriptions of the faults whose injection failed.
func (p *progress) failed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.failedInjections)
}

func newProgress(sink history.Sink, duration time.Duration, t0 time.Time) *progress {
	return &progress{sink: sink, duration: duration, t0: t0}
}

// Write implements history.Sink.
func (p *progress) Write(op *history.Op) error {
	p.mu.Lock()
	switch {
	case op.IsClient():
		switch op.Type {
		case history.OK:
			p.ok++
		case history.Fail:
			p.fail++
		case history.Info:
			p.info++
		}
	case op.Process == history.Nemesis && op.Type != history.Invoke:
		p.nemesis(op)
	}
	p.mu.Unlock()
	return p.sink.Write(op)
}

// Flush flushes the sink.
func (p *progress) Flush() error {
	if f, ok := p.sink.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// nemesis notes a completed fault operation; p.mu is held.
func (p *progress) nemesis(op *history.Op) {
	at := time.Duration(op.Time)
	var desc string
	switch {
	case op.F == history.FHeal:
		p.active = p.active[:0]
		desc = "healed every fault"
	case op.F == history.FCondition || op.F == history.FNotSetUp:
		var c struct {
			Fault  string   `json:"fault"`
			Key    int      `json:"key"`
			Held   string   `json:"held"`
			Error  string   `json:"error"`
			Waited *float64 `json:"waited_s"`
		}
		json.Unmarshal(op.RawValue, &c) //nolint:errcheck // a line without them still prints
		if op.F == history.FNotSetUp {
			p.events = append(p.events, fmt.Sprintf("  +%5.1fs %s", at.Seconds(), c.Error))
			return
		}
		if c.Waited != nil && c.Key > 0 {
			if p.waited == nil {
				p.waited = map[int]float64{}
			}
			p.waited[c.Key] = *c.Waited
		}
		name := c.Fault
		if name != "" {
			name += ": "
		}
		p.events = append(p.events, fmt.Sprintf("  +%5.1fs %scondition held: %s", at.Seconds(), name, c.Held))
		return
	case strings.HasPrefix(op.F, "start-"):
		kind := strings.TrimPrefix(op.F, "start-")
		if op.Type == history.OK {
			p.active = append(p.active, kind)
		}
		desc = kind + " " + describeFault(op.RawValue)
	case strings.HasPrefix(op.F, "stop-"):
		kind := strings.TrimPrefix(op.F, "stop-")
		if i := slices.Index(p.active, kind); i >= 0 && op.Type == history.OK {
			p.active = slices.Delete(p.active, i, i+1)
		}
		desc = "healed " + kind + " " + describeFault(op.RawValue)
	default:
		return
	}
	if op.Type != history.OK {
		desc += " FAILED: " + op.Error
		if strings.HasPrefix(op.F, "start-") {
			p.failedInjections = append(p.failedInjections, fmt.Sprintf("%s at %.1fs", desc, at.Seconds()))
		}
	}
	p.events = append(p.events, fmt.Sprintf("  +%5.1fs %s", at.Seconds(), desc))
}

// event adds a line to print, stamped with the run's time.
func (p *progress) event(s string) {
	p.mu.Lock()
	p.events = append(p.events, fmt.Sprintf("  +%5.1fs %s", time.Since(p.t0).Seconds(), s))
	p.mu.Unlock()
}

// describeFault says which targets a fault named and what they resolved to.
func describeFault(raw json.RawMessage) string {
	f, err := history.ParseFault(raw)
	if err != nil {
		return ""
	}
	var parts []string
	if f.API != "" {
		parts = append(parts, strings.TrimSpace(f.API+" "+f.Direction+" "+f.Action))
	}
	if f.Topology != "" {
		t := f.Topology
		if f.Partition != "" {
			t += " of " + f.Partition
		}
		parts = append(parts, t)
	}
	named := append(slices.Clone(f.Nodes), f.Targets...)
	if len(named) > 0 {
		parts = append(parts, strings.Join(named, ","))
	}
	if len(f.Resolved) > 0 && !slices.Equal(f.Resolved, named) {
		parts = append(parts, "-> "+strings.Join(f.Resolved, ","))
	}
	if f.Acted != nil {
		var n int64
		for _, v := range f.Acted {
			n += v
		}
		parts = append(parts, fmt.Sprintf("(acted on %d)", n))
	}
	return strings.Join(parts, " ")
}

// line is the progress line: elapsed / total, ops/s, outcomes, faults.
func (p *progress) line(now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := now.Sub(p.t0)
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(p.ok+p.fail+p.info) / s
	}
	faults := "none"
	if len(p.active) > 0 {
		faults = strings.Join(p.active, ",")
	}
	return fmt.Sprintf("  [%5.1fs/%v] %6.0f ops/s  ok %d  fail %d  info %d  faults: %s",
		el.Seconds(), p.duration, rate, p.ok, p.fail, p.info, faults)
}

// flushEvents writes the pending event lines.
func (p *progress) flushEvents(w io.Writer) {
	p.mu.Lock()
	ev := p.events
	p.events = nil
	p.mu.Unlock()
	for _, e := range ev {
		fmt.Fprintln(w, e)
	}
}

// report prints events as they happen and the progress line: redrawn in
// place every 500 ms when live, else printed every `every`.
func (p *progress) report(ctx context.Context, w io.Writer, live bool, every time.Duration) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Now()
	const clear = "\r\033[K"
	for {
		select {
		case <-ctx.Done():
			if live {
				fmt.Fprint(w, clear)
			}
			return
		case now := <-tick.C:
			p.mu.Lock()
			pending := len(p.events) > 0
			p.mu.Unlock()
			if live {
				if pending {
					fmt.Fprint(w, clear)
					p.flushEvents(w)
				}
				fmt.Fprint(w, clear+p.line(now))
				continue
			}
			p.flushEvents(w)
			if every > 0 && now.Sub(lastLine) >= every {
				lastLine = now
				fmt.Fprintln(w, p.line(now))
			}
		}
	}
}
