package nemesis

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/isrlab/isrlab/nemesis/faultfs"
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
	Type     string           `json:"type"`
	Seed     int64            `json:"seed,omitempty"`
	Interval faultfs.Duration `json:"interval,omitempty"`
	Hold     faultfs.Duration `json:"hold,omitempty"`
	Duration faultfs.Duration `json:"duration,omitempty"`
	Mix      []Weighted       `json:"mix,omitempty"`
	At       faultfs.Duration `json:"at,omitempty"`
	Fault    *Spec            `json:"fault,omitempty"`
	Events   []EventSpec      `json:"events,omitempty"`
}

// EventSpec is an Event with its time as a duration string.
type EventSpec struct {
	At     faultfs.Duration `json:"at"`
	Action Action           `json:"action"`
	Key    int              `json:"key,omitempty"`
	Fault  *Spec            `json:"fault,omitempty"`
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
			x := Event{At: time.Duration(e.At), Action: e.Action, Key: e.Key}
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
