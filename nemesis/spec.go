package nemesis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/isrlab/isrlab/units"
)

// ScheduleSpec is the JSON form of a schedule, as scenarios and
// `isrlab fault run` carry it:
//
//	{"type":"every","seed":7,"interval":"10s","hold":"4s","duration":"1m",
//	 "mix":[{"weight":3,"fault":{"kind":"kill","nodes":["leader:t/0"]}},
//	        {"weight":1,"fault":{"kind":"partition","topology":"random-halves"}}]}
//	{"type":"once","at":"5s","hold":"10s","fault":{"kind":"pause","nodes":["controller"]}}
//	{"type":"fixed","events":[{"at":"2s","action":"start","key":1,"fault":{...}},
//	                          {"at":"8s","action":"stop","key":1}]}
type ScheduleSpec struct {
	Type     string         `json:"type"`
	Seed     int64          `json:"seed,omitempty"`
	Interval units.Duration `json:"interval,omitempty"`
	Hold     units.Duration `json:"hold,omitempty"`
	Duration units.Duration `json:"duration,omitempty"`
	Mix      []Weighted     `json:"mix,omitempty"`
	At       units.Duration `json:"at,omitempty"`
	Fault    *Spec          `json:"fault,omitempty"`
	Events   []EventSpec    `json:"events,omitempty"`
}

// EventSpec is an Event with its time as a duration string.
type EventSpec struct {
	At     units.Duration `json:"at"`
	Action Action         `json:"action"`
	Key    int            `json:"key,omitempty"`
	Fault  *Spec          `json:"fault,omitempty"`
	Name   string         `json:"name,omitempty"`
	When   *Condition     `json:"when,omitempty"`
}

// Kinds lists the kinds of the faults the schedule can start, in the
// order they appear.
func (s ScheduleSpec) Kinds() []string {
	var out []string
	add := func(sp *Spec) {
		if sp != nil && sp.Fault != nil && !slices.Contains(out, sp.Fault.Kind()) {
			out = append(out, sp.Fault.Kind())
		}
	}
	for _, w := range s.Mix {
		add(&w.Fault)
	}
	add(s.Fault)
	for _, e := range s.Events {
		add(e.Fault)
	}
	return out
}

// Generator returns the schedule's generator.
func (s ScheduleSpec) Generator() (Generator, error) {
	switch s.Type {
	case "every":
		return Every{Seed: s.Seed, Interval: time.Duration(s.Interval), Hold: time.Duration(s.Hold),
			Duration: time.Duration(s.Duration), Mix: s.Mix}, nil
	case "once":
		if s.Fault == nil {
			return nil, fmt.Errorf("%w: a once schedule needs a fault", ErrBadFault)
		}
		return Once{At: time.Duration(s.At), Hold: time.Duration(s.Hold), Fault: s.Fault.Fault}, nil
	case "fixed":
		var ev Fixed
		for i, e := range s.Events {
			switch e.Action {
			case ActStart:
				if e.Fault == nil {
					return nil, fmt.Errorf("%w: event %d starts no fault", ErrBadFault, i)
				}
			case ActStop, ActHealAll:
			default:
				return nil, fmt.Errorf("%w: event %d: unknown action %q", ErrBadFault, i, e.Action)
			}
			if e.When != nil && e.Action != ActStart {
				return nil, fmt.Errorf("%w: event %d: only a start waits for a condition", ErrBadFault, i)
			}
			x := Event{At: time.Duration(e.At), Action: e.Action, Key: e.Key, Name: e.Name, When: e.When}
			if e.Fault != nil {
				x.Fault = *e.Fault
			}
			ev = append(ev, x)
		}
		return ev, nil
	}
	return nil, fmt.Errorf("%w: schedule type %q: want every, once or fixed", ErrBadFault, s.Type)
}

// ParseSchedule decodes a ScheduleSpec and generates its events.
func ParseSchedule(b []byte) ([]Event, error) {
	var s ScheduleSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: schedule: %v", ErrBadFault, err)
	}
	g, err := s.Generator()
	if err != nil {
		return nil, err
	}
	return g.Events()
}

// RuntimeFields lists, sorted, the JSON fields a fault of kind fills in
// when it fires (its run's: resolved nodes, rule tables, delayer pids,
// crash reports): what a replay strips from a recorded fault to get its
// spec back, and what a user's spec cannot set.
func RuntimeFields(kind string) []string {
	f, err := New(kind)
	if err != nil {
		return nil
	}
	out := jsonFields(reflect.TypeOf(f.NewRun()))
	slices.Sort(out)
	return out
}

// validator is a fault whose fields can be checked without a cluster
// (percentages, sizes, durations): ParseUserSpec checks them, so a
// scenario with a bad value fails when it loads, and Resolve checks them
// again for faults that came another way.
type validator interface {
	Validate() error
}

// ParseUserSpec decodes a fault as a user writes it ({"kind":"kill",
// "nodes":["b2"]}) strictly: an unknown field, a field only the fault itself
// sets when it fires, or a malformed target expression is an error naming it.
func ParseUserSpec(b []byte) (Fault, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFault, err)
	}
	var kind string
	if k, ok := raw["kind"]; !ok || json.Unmarshal(k, &kind) != nil || kind == "" {
		return nil, fmt.Errorf("%w: a fault needs a kind (one of %v)", ErrBadFault, Kinds())
	}
	delete(raw, "kind")
	runtime := RuntimeFields(kind)
	for k := range raw {
		if slices.Contains(runtime, k) {
			return nil, fmt.Errorf("%w: %s: field %q is set by the fault when it fires, not by a spec", ErrBadFault, kind, k)
		}
	}
	f, err := New(kind)
	if err != nil {
		return nil, err
	}
	rest, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadFault, kind, strings.TrimPrefix(err.Error(), "json: "))
	}
	for _, x := range TargetExprs(f) {
		if err := CheckTarget(x); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
	}
	if v, ok := f.(validator); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
	}
	return f, nil
}

// TargetExprs lists the target expressions a fault names (its nodes, the
// sides of a partition), for validation before a cluster exists.
func TargetExprs(f Fault) []string {
	switch f := f.(type) {
	case *Partition:
		return slices.Concat(f.Targets, f.Others, f.Nodes)
	case *Loss:
		return f.Nodes
	case *SlowNet:
		return f.Nodes
	case *Reassign:
		return f.targets()
	}
	var n struct {
		Nodes []string `json:"nodes"`
	}
	if b, err := json.Marshal(f); err == nil {
		json.Unmarshal(b, &n) //nolint:errcheck // a fault without nodes has no targets
	}
	return n.Nodes
}
