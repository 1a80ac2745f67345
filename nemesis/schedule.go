package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/history"
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
	// Name names a start's fault, for the conditions of other events.
	Name string `json:"name,omitempty"`
	// When makes a start wait, from At on, for a state of the cluster.
	When *Condition `json:"when,omitempty"`
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
		f, seed := w.Fault.Fault, rng.Int63()
		if p, ok := f.(*Partition); ok {
			// Each event draws its own shuffle; specs are shared, so it
			// gets a copy.
			c := *p
			c.Seed = seed
			f = &c
		}
		key++
		ev = append(ev, Event{At: at, Action: ActStart, Key: key, Fault: Spec{f}},
			Event{At: at + e.Hold, Action: ActStop, Key: key})
	}
	ev = append(ev, Event{At: e.Duration, Action: ActHealAll})
	return Fixed(ev).Events()
}

// Clock is what Play waits with; the real one is RealClock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// PlayOptions configure Play.
type PlayOptions struct {
	Clock Clock // default RealClock
	// State returns the latest observed cluster state, what conditions
	// read (the lab passes the view it records); nil reads it through the
	// nemesis's Resolver, at most every 500 ms.
	State func() (View, bool)
	// Poll is how often waiting conditions are evaluated; default 100 ms.
	Poll time.Duration
}

// item is a pending event and, for a conditional start, its wait.
type item struct {
	ev Event
	w  *waiter
}

// never is the due time of an event that waits for another.
const never = time.Duration(math.MaxInt64)

// Play applies events with n, each at its offset from the call. A start
// with a condition (When) begins to wait at its offset and fires once the
// condition holds (plus its delay); one that does not hold within its
// bound ends the schedule with a *NotSetUpError, and so does every
// condition still waiting when ctx ends. The moment a condition held is
// recorded (f "condition") before its fault. A stop comes as long after
// its fault was really injected as the schedule says after it was due:
// resolving targets through a slow or partitioned cluster, or waiting for
// a condition, delays an injection, and the fault's hold must not shrink
// by that much. A fault that fails to inject or heal is recorded (by the
// Nemesis) and the schedule goes on; its errors are returned joined at
// the end. Whatever way Play ends — the last event, an error, ctx
// cancelled — it heals every fault it started.
func Play(ctx context.Context, n *Nemesis, events []Event, o PlayOptions) error {
	clock := o.Clock
	if clock == nil {
		clock = RealClock
	}
	poll := o.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	start := clock.Now()
	elapsed := func() time.Duration { return clock.Now().Sub(start) }
	ids := map[int]string{}
	// late is how much later than scheduled each key's fault went in.
	late := map[int]time.Duration{}
	// waiting holds the keys whose start has not been played yet.
	waiting := map[int]bool{}
	nameOf := map[int]string{}
	var names []string
	var topics []string
	pending := make([]item, 0, len(events))
	for _, ev := range events {
		it := item{ev: ev}
		if ev.Action == ActStart {
			waiting[ev.Key] = true
			if ev.Name != "" {
				nameOf[ev.Key] = ev.Name
				names = append(names, ev.Name)
			}
			if ev.When != nil {
				it.w = &waiter{cond: *ev.When, armedAt: -1, heldAt: -1}
				if t := ev.When.topic(); t != "" && !slices.Contains(topics, t) {
					topics = append(topics, t)
				}
			}
		}
		pending = append(pending, it)
	}
	fs := facts{injected: map[string][]string{}, healed: map[string]bool{}}
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
	// The state conditions read: the recorded view, or the resolver's.
	var lastRead time.Time
	var cached View
	var cachedOK bool
	state := func() (View, bool) {
		if o.State != nil {
			return o.State()
		}
		if n.Env == nil || n.Env.Resolver == nil || len(topics) == 0 {
			return View{}, false
		}
		if now := clock.Now(); lastRead.IsZero() || now.Sub(lastRead) >= 500*time.Millisecond {
			lastRead = now
			v, err := n.Env.Resolver.View(ctx, topics)
			cached, cachedOK = v, err == nil
		}
		return cached, cachedOK
	}
	var cluster *compose.Cluster
	if n.Env != nil {
		cluster = n.Env.Cluster
	}
	intn := func(int) int { return 0 }
	if n.Env != nil {
		intn = n.Env.rng().Intn
	}
	due := func(it item) time.Duration {
		ev := it.ev
		switch {
		case it.w != nil && it.w.armedAt < 0:
			return ev.At
		case it.w != nil && it.w.heldAt < 0:
			return never
		case it.w != nil:
			return it.w.heldAt + time.Duration(it.w.cond.Delay)
		case ev.Action == ActStop:
			if _, on := ids[ev.Key]; on {
				return ev.At + late[ev.Key]
			}
			if waiting[ev.Key] {
				return never
			}
		}
		return ev.At
	}
	// notSetUp reports every condition still waiting.
	notSetUp := func(now time.Duration) []error {
		var out []error
		for _, it := range pending {
			if it.w == nil || it.w.heldAt >= 0 {
				continue
			}
			name := it.ev.Name
			if name == "" && it.ev.Fault.Fault != nil {
				name = it.ev.Fault.Fault.Kind()
			}
			waited := time.Duration(0)
			if it.w.armedAt >= 0 {
				waited = now - it.w.armedAt
			}
			e := &NotSetUpError{Fault: name, When: it.w.cond, Waited: waited, Last: it.w.last}
			n.recordValue(history.Info, history.FNotSetUp, map[string]any{"fault": name, "when": it.w.cond, "error": e.Error()})
			out = append(out, e)
		}
		return out
	}
	for len(pending) > 0 {
		now := elapsed()
		// Conditions: arm those whose time came, look at the armed ones.
		var view View
		var viewOK, read bool
		for _, it := range pending {
			w := it.w
			if w == nil || w.heldAt >= 0 || now < it.ev.At {
				continue
			}
			if !read && (w.cond.Partition != "" || w.cond.NotInISR != "" || w.cond.InISR != "") {
				view, viewOK = state()
				read = true
			}
			if w.armedAt < 0 {
				w.arm(now, cluster, view, viewOK, intn, names)
			}
			if w.holds(cluster, view, viewOK, fs, names) {
				w.heldAt = now
				// key names the start event (a scenario's fault N has key N);
				// waited_s is how long of its within it took.
				n.recordValue(history.Info, history.FCondition, map[string]any{"fault": it.ev.Name, "key": it.ev.Key, "when": w.cond,
					"held": w.heldText(), "waited_s": (now - w.armedAt).Seconds()})
				continue
			}
			if lim := time.Duration(w.cond.Within); lim > 0 && now-w.armedAt >= lim {
				return errors.Join(append(errs, notSetUp(now)...)...)
			}
		}
		// The earliest due event next; ties keep the schedule's order.
		next := -1
		for i, it := range pending {
			if d := due(it); d <= now && (next < 0 || d < due(pending[next])) {
				next = i
			}
		}
		if next < 0 {
			wait := never
			for _, it := range pending {
				wait = min(wait, due(it)-now)
				if it.w != nil && it.w.heldAt < 0 && now >= it.ev.At {
					wait = min(wait, poll)
				}
			}
			if wait == never {
				// Only stops of faults that wait: cannot happen, as every
				// waiting start is armed or due.
				wait = poll
			}
			select {
			case <-ctx.Done():
				return errors.Join(append(append(errs, notSetUp(elapsed())...), ctx.Err())...)
			case <-clock.After(wait):
			}
			continue
		}
		ev := pending[next].ev
		pending = slices.Delete(pending, next, next+1)
		switch ev.Action {
		case ActStart:
			delete(waiting, ev.Key)
			a, err := n.Inject(ctx, ev.Fault.Fault)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ids[ev.Key] = a.ID
			if name := nameOf[ev.Key]; name != "" {
				fs.injected[name] = resolvedNodes(a.Fault.Run)
			}
			if d := elapsed() - ev.At; d > 0 {
				late[ev.Key] = d
			}
		case ActStop:
			if id, ok := ids[ev.Key]; ok {
				if err := n.Heal(ctx, id); err != nil {
					errs = append(errs, err)
				} else if name := nameOf[ev.Key]; name != "" {
					fs.healed[name] = true
				}
				delete(ids, ev.Key)
			}
		case ActHealAll:
			if err := n.HealAll(ctx); err != nil {
				errs = append(errs, err)
			}
			for k := range ids {
				if name := nameOf[k]; name != "" {
					fs.healed[name] = true
				}
			}
			clear(ids)
		default:
			errs = append(errs, fmt.Errorf("%w: unknown schedule action %q", ErrBadFault, ev.Action))
		}
	}
	return errors.Join(errs...)
}

// resolvedNodes is the nodes a fault was injected on, as its run records
// them ("resolved").
func resolvedNodes(r Run) []string {
	if n, ok := r.(interface{ resolvedNodes() []string }); ok {
		return n.resolvedNodes()
	}
	return nil
}
