package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"time"
)

// Action is what a schedule event does.
type Action string

// Actions.
const (
	ActStart   Action = "start"    // inject Fault, remembered under Key
	ActStop    Action = "stop"     // heal the fault started under Key
	ActHealAll Action = "heal-all" // heal everything active
)

// Event is one step of a schedule, at an offset from the schedule's start.
type Event struct {
	At     time.Duration `json:"at"`
	Action Action        `json:"action"`
	// Key pairs a stop with its start.
	Key   int  `json:"key,omitempty"`
	Fault Spec `json:"fault,omitzero"`
}

// Weighted is one fault of a random mix with its relative weight.
type Weighted struct {
	Weight int  `json:"weight"`
	Fault  Spec `json:"fault"`
}

// Generator produces a schedule. Implementations are pure: no clock, no
// sleeping, randomness only from their seed.
type Generator interface {
	Events() ([]Event, error)
}

// Fixed is a timeline given in full: Events sorted by time (stable).
type Fixed []Event

// Events implements Generator.
func (f Fixed) Events() ([]Event, error) {
	out := append([]Event(nil), f...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// Once injects Fault at At and heals it Hold later (never, if Hold is 0).
type Once struct {
	At    time.Duration
	Hold  time.Duration
	Fault Fault
}

// Events implements Generator.
func (o Once) Events() ([]Event, error) {
	if o.Fault == nil {
		return nil, fmt.Errorf("%w: one-shot schedule without a fault", ErrBadFault)
	}
	ev := []Event{{At: o.At, Action: ActStart, Key: 1, Fault: Spec{o.Fault}}}
	if o.Hold > 0 {
		ev = append(ev, Event{At: o.At + o.Hold, Action: ActStop, Key: 1})
	}
	return ev, nil
}

// Every starts a random fault from Mix every Interval, from Interval until
// Duration, and heals it Hold after it started. The choice of each fault
// and the seed of random topologies come from Seed alone. A heal-all ends
// the schedule at Duration.
type Every struct {
	Seed     int64
	Interval time.Duration
	Hold     time.Duration
	Duration time.Duration
	Mix      []Weighted
}

// Events implements Generator.
func (e Every) Events() ([]Event, error) {
	switch {
	case e.Interval <= 0:
		return nil, fmt.Errorf("%w: interval must be positive", ErrBadFault)
	case e.Hold <= 0 || e.Hold > e.Interval:
		return nil, fmt.Errorf("%w: hold %v must be in (0, interval %v]", ErrBadFault, e.Hold, e.Interval)
	case len(e.Mix) == 0:
		return nil, fmt.Errorf("%w: empty fault mix", ErrBadFault)
	}
	total := 0
	for _, w := range e.Mix {
		if w.Weight < 0 || w.Fault.Fault == nil {
			return nil, fmt.Errorf("%w: mix entries need a fault and a weight >= 0", ErrBadFault)
		}
		total += w.Weight
	}
	if total == 0 {
		return nil, fmt.Errorf("%w: every weight of the mix is 0", ErrBadFault)
	}
	rng := rand.New(rand.NewSource(e.Seed))
	var ev []Event
	key := 0
	for at := e.Interval; at+e.Hold <= e.Duration; at += e.Interval {
		pick := rng.Intn(total)
		var w Weighted
		for _, w = range e.Mix {
			if pick < w.Weight {
				break
			}
			pick -= w.Weight
		}
		f, err := Clone(w.Fault.Fault)
		if err != nil {
			return nil, err
		}
		seed := rng.Int63()
		if p, ok := f.(*Partition); ok {
			p.Seed = seed
		}
		key++
		ev = append(ev, Event{At: at, Action: ActStart, Key: key, Fault: Spec{f}},
			Event{At: at + e.Hold, Action: ActStop, Key: key})
	}
	ev = append(ev, Event{At: e.Duration, Action: ActHealAll})
	return Fixed(ev).Events()
}

// Clock is what Run waits with; the real one is RealClock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// Run applies events with n on clock, each at its offset from the call. A
// stop comes as long after its fault was really injected as the schedule
// says after it was due: resolving targets through a slow or partitioned
// cluster can delay an injection by seconds, and the fault's hold must not
// shrink by that much. A fault that fails to inject or heal is recorded
// (by the Nemesis) and the schedule goes on; its errors are returned
// joined at the end. Whatever way Run ends — the last event, an error, ctx
// cancelled — it heals every fault it started.
func Run(ctx context.Context, n *Nemesis, clock Clock, events []Event) error {
	start := clock.Now()
	ids := map[int]string{}
	// late is how much later than scheduled each key's fault went in.
	late := map[int]time.Duration{}
	var errs []error
	defer func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range ids {
			if err := n.Heal(hctx, id); err != nil && !errors.Is(err, ErrNotActive) {
				errs = append(errs, err)
			}
		}
	}()
	due := func(ev Event) time.Duration {
		if ev.Action == ActStop {
			return ev.At + late[ev.Key]
		}
		return ev.At
	}
	pending := slices.Clone(events)
	for len(pending) > 0 {
		// The earliest due event next; ties keep the schedule's order.
		next := 0
		for i, ev := range pending {
			if due(ev) < due(pending[next]) {
				next = i
			}
		}
		ev := pending[next]
		pending = slices.Delete(pending, next, next+1)
		if wait := due(ev) - clock.Now().Sub(start); wait > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(append(errs, ctx.Err())...)
			case <-clock.After(wait):
			}
		}
		switch ev.Action {
		case ActStart:
			f, err := Clone(ev.Fault.Fault)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			a, err := n.Inject(ctx, f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ids[ev.Key] = a.ID
			if d := clock.Now().Sub(start) - ev.At; d > 0 {
				late[ev.Key] = d
			}
		case ActStop:
			if id, ok := ids[ev.Key]; ok {
				if err := n.Heal(ctx, id); err != nil {
					errs = append(errs, err)
				}
				delete(ids, ev.Key)
			}
		case ActHealAll:
			if err := n.HealAll(ctx); err != nil {
				errs = append(errs, err)
			}
			clear(ids)
		default:
			errs = append(errs, fmt.Errorf("%w: unknown schedule action %q", ErrBadFault, ev.Action))
		}
	}
	return errors.Join(errs...)
}
