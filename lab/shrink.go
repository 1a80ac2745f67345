package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/nemesis"
	"github.com/isrlab/isrlab/results"
)

// A shrink treats a run as an oracle: the reduction steps below are pure
// functions from a scenario to the smaller candidates worth trying, and
// the search (Shrink) asks an Oracle whether each candidate still fails
// the way the original run did. RunOracle is the real one (lab.Run, K
// times); tests use fakes.

// Target is the way the original run failed, which every accepted
// candidate must show again: the kinds of the expectation's clauses it
// did not meet ("expected lost-write 0"), or, for a run that met its
// expectation but whose history is invalid, the anomaly kinds it showed.
// A run matches when its own unmet clauses (or anomaly kinds) share at
// least one kind with the target's: runs are noisy, and a smaller
// scenario that still loses writes but no longer reorders sends fails the
// same way.
type Target struct {
	Reasons   []string `json:"reasons,omitempty"`
	Anomalies []string `json:"anomalies,omitempty"`
}

// ErrNotFailing marks a run with nothing to shrink: it met its
// expectation and its history is valid.
var ErrNotFailing = errors.New("the run did not fail")

// TargetOf is the target of a stored run's outcome. anomalies, if given,
// replaces the run's own (the kinds the shrink must keep).
func TargetOf(o *results.Outcome, anomalies []string) (Target, error) {
	if len(anomalies) > 0 {
		for _, k := range anomalies {
			if !slices.Contains(checker.AnomalyNames, k) {
				return Target{}, fmt.Errorf("%w: unknown anomaly %q (known: %s)", ErrScenario, k, strings.Join(checker.AnomalyNames, ", "))
			}
		}
		return Target{Anomalies: slices.Sorted(slices.Values(anomalies))}, nil
	}
	if o.Outcome == results.NotMet {
		var t Target
		for _, r := range o.Reasons {
			if k := reasonKind(r); !slices.Contains(t.Reasons, k) {
				t.Reasons = append(t.Reasons, k)
			}
		}
		if len(t.Reasons) > 0 {
			return t, nil
		}
	}
	var t Target
	for k, n := range o.Anomalies {
		if n > 0 {
			t.Anomalies = append(t.Anomalies, k)
		}
	}
	if len(t.Anomalies) == 0 {
		return Target{}, fmt.Errorf("%w: outcome %q, valid=%v, no anomaly: nothing to shrink", ErrNotFailing, o.Outcome, o.Valid)
	}
	slices.Sort(t.Anomalies)
	return t, nil
}

// reasonKind is the clause of an unmet-expectation reason without what
// the run showed: "expected lost-write 0, got 12" -> "expected lost-write 0".
func reasonKind(r string) string {
	k, _, _ := strings.Cut(r, ", got")
	return k
}

// Matches reports whether a run with this outcome, unmet reasons and
// anomalies fails the target's way.
func (t Target) Matches(outcome Outcome, reasons []string, anomalies map[string]int64) bool {
	if len(t.Reasons) > 0 {
		if outcome != NotMet {
			return false
		}
		for _, r := range reasons {
			if slices.Contains(t.Reasons, reasonKind(r)) {
				return true
			}
		}
		return false
	}
	for _, k := range t.Anomalies {
		if anomalies[k] > 0 {
			return true
		}
	}
	return false
}

func (t Target) String() string {
	if len(t.Reasons) > 0 {
		return "not met: " + strings.Join(t.Reasons, " or ")
	}
	return "anomaly " + strings.Join(t.Anomalies, " or ")
}

// TrialRun is one run of a candidate.
type TrialRun struct {
	Seed       int64            `json:"seed"`
	Dir        string           `json:"dir,omitempty"`
	Outcome    string           `json:"outcome,omitempty"`
	Reasons    []string         `json:"reasons,omitempty"`
	Anomalies  map[string]int64 `json:"anomalies,omitempty"`
	Incomplete bool             `json:"incomplete,omitempty"`
	Fails      bool             `json:"fails"`
	Seconds    float64          `json:"seconds"`
	Error      string           `json:"error,omitempty"`
}

// Trial is a candidate's runs: it fails when at least one run failed the
// target's way.
type Trial struct {
	Runs  []TrialRun `json:"runs"`
	Fails bool       `json:"fails"`
}

// Failed is how many runs of the trial failed the target's way.
func (t Trial) Failed() int {
	n := 0
	for _, r := range t.Runs {
		if r.Fails {
			n++
		}
	}
	return n
}

// Oracle judges a candidate scenario.
type Oracle interface {
	Fails(ctx context.Context, sc Scenario) (Trial, error)
}

// Candidate is a smaller scenario one reduction step proposes.
type Candidate struct {
	// Step is the reduction: faults, hold, start, targets, duration,
	// producers, consumers, partitions, brokers, coordinators.
	Step string `json:"step"`
	// Desc says what changed: "drop faults 2,4", "hold of fault 1
	// (partition): 12s -> 6s".
	Desc     string   `json:"desc"`
	Scenario Scenario `json:"-"`
}

// Reducer proposes candidates from a scenario, most reducing first.
// Reducers are pure: the same scenario gives the same candidates.
type Reducer struct {
	Step string
	Gen  func(Scenario) []Candidate
}

// Steps are the reductions after the faults' delta debugging, in the
// order that pays most: what a fault does and how long, then the size of
// the run.
var Steps = []Reducer{
	{"hold", HoldCandidates},
	{"start", StartCandidates},
	{"targets", TargetCandidates},
	{"duration", DurationCandidates},
	{"producers", countCandidates("producers", 2, func(s *Scenario) *int { return &s.Workload.Producers })},
	{"consumers", countCandidates("consumers", 2, func(s *Scenario) *int { return &s.Workload.Consumers })},
	{"partitions", PartitionCandidates},
	{"brokers", BrokerCandidates},
	{"coordinators", countCandidates("coordinators", 3, func(s *Scenario) *int { return &s.Cluster.Coordinators })},
}

// StepNames lists the reductions a shrink can make, in order.
func StepNames() []string {
	out := []string{"faults"}
	for _, r := range Steps {
		out = append(out, r.Step)
	}
	return out
}

// clone copies a scenario deeply enough for a reduction to change it: the
// fault list is new (faults are replaced, never changed in place), and
// the file and document it came from are forgotten (their line numbers
// no longer match).
func (s Scenario) clone() Scenario {
	s.Faults = slices.Clone(s.Faults)
	s.file, s.root = "", nil
	return s
}

// valid keeps the candidates whose scenario validates.
func valid(cs []Candidate) []Candidate {
	out := cs[:0]
	for _, c := range cs {
		if c.Scenario.Validate() == nil {
			out = append(out, c)
		}
	}
	return out
}

// Materialise turns a scenario's generated schedule into fixed faults, the
// same timeline as ScheduleEvents makes: each start paired with its stop
// (by key) becomes a fault with that hold, a heal of everything before the
// end heals what it finds active, and a fault healed only at the end has
// no heal.after (it lasts until the workload ends). Names and conditions
// are kept. A scenario without a schedule is returned as it is.
func Materialise(sc Scenario) (Scenario, error) {
	if sc.Schedule == nil {
		return sc, nil
	}
	gen := sc.clone()
	gen.Faults = nil
	ev, err := gen.ScheduleEvents()
	if err != nil {
		return sc, err
	}
	out := sc.clone()
	out.Schedule = nil
	active := map[int]int{} // key -> index in out.Faults
	for _, e := range ev {
		switch e.Action {
		case nemesis.ActStart:
			active[e.Key] = len(out.Faults)
			out.Faults = append(out.Faults, Fault{Spec: e.Fault, At: e.At, Name: e.Name, When: e.When})
		case nemesis.ActStop:
			if i, ok := active[e.Key]; ok {
				out.Faults[i].HealAfter = max(e.At-out.Faults[i].At, time.Millisecond)
				delete(active, e.Key)
			}
		case nemesis.ActHealAll:
			if e.At >= sc.Duration {
				continue // the end of the run heals anyway
			}
			for k, i := range active {
				out.Faults[i].HealAfter = max(e.At-out.Faults[i].At, time.Millisecond)
				delete(active, k)
			}
		}
	}
	return out, out.Validate()
}

// faultDesc names fault i (0-based) of sc for descriptions: "fault 2
// (kill)".
func faultDesc(sc Scenario, i int) string {
	kind := "?"
	if f := sc.Faults[i].Spec.Fault; f != nil {
		kind = f.Kind()
	}
	if n := sc.Faults[i].Name; n != "" {
		kind += " " + n
	}
	return fmt.Sprintf("fault %d (%s)", i+1, kind)
}

func numbers(idx []int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, strconv.Itoa(i+1))
	}
	return strings.Join(parts, ",")
}

// DropFaults keeps only the faults keep (0-based, ascending). A kept
// fault whose condition names a dropped one loses that part of its
// condition (after:, after-heal:, in-isr:, not-in-isr: naming it), and
// its whole condition if nothing is left to wait for: it then fires at
// its at: time. The candidate says so.
func DropFaults(sc Scenario, keep []int) Candidate {
	out := sc.clone()
	out.Faults = nil
	var dropped []int
	var gone []string
	for i, f := range sc.Faults {
		if slices.Contains(keep, i) {
			out.Faults = append(out.Faults, f)
		} else {
			dropped = append(dropped, i)
			if f.Name != "" {
				gone = append(gone, f.Name)
			}
		}
	}
	desc := "drop faults " + numbers(dropped) + " (keep " + numbers(keep) + ")"
	if len(keep) == 0 {
		desc = "drop every fault"
	}
	for i, f := range out.Faults {
		if f.When == nil {
			continue
		}
		w := *f.When
		var lost []string
		for _, ref := range []*string{&w.After, &w.AfterHeal, &w.InISR, &w.NotInISR} {
			if *ref != "" && slices.Contains(gone, *ref) {
				lost = append(lost, *ref)
				*ref = ""
			}
		}
		if len(lost) == 0 {
			continue
		}
		partitionKeys := w.ISRSize != nil || w.InISR != "" || w.NotInISR != "" || w.LeaderChanged
		if !partitionKeys {
			w.Partition = ""
		}
		if !partitionKeys && w.After == "" && w.AfterHeal == "" {
			out.Faults[i].When = nil
			desc += fmt.Sprintf("; %s no longer waits (its condition named %s)", faultDesc(out, i), strings.Join(lost, ", "))
		} else {
			out.Faults[i].When = &w
			desc += fmt.Sprintf("; %s no longer waits for %s", faultDesc(out, i), strings.Join(lost, ", "))
		}
	}
	return Candidate{Step: "faults", Desc: desc, Scenario: out}
}

// hold is how long fault i lasts: its heal.after, or until the run ends.
func hold(sc Scenario, i int) time.Duration {
	if h := sc.Faults[i].HealAfter; h > 0 {
		return h
	}
	return max(sc.Duration-sc.Faults[i].At, 0)
}

// halve is d halved, in whole seconds from 2 s on, never below floor; ok
// is false when that would not shorten d.
func halve(d, floor time.Duration) (time.Duration, bool) {
	h := d / 2
	if h >= 2*time.Second {
		h = h.Truncate(time.Second)
	}
	h = max(h, floor)
	return h, h < d
}

// HoldCandidates halves each fault's hold (not below 1 s), one candidate
// per fault in order.
func HoldCandidates(sc Scenario) []Candidate {
	var out []Candidate
	for i := range sc.Faults {
		h := hold(sc, i)
		nh, ok := halve(h, time.Second)
		if !ok {
			continue
		}
		c := sc.clone()
		c.Faults[i].HealAfter = nh
		was := h.String()
		if sc.Faults[i].HealAfter == 0 {
			was = "until the end (" + h.String() + ")"
		}
		out = append(out, Candidate{Step: "hold", Desc: fmt.Sprintf("hold of %s: %s -> %v", faultDesc(sc, i), was, nh), Scenario: c})
	}
	return valid(out)
}

// StartCandidates halves each fault's start time (to 0 below 2 s), one
// candidate per fault in order: the run gets to its story sooner and can
// then be shorter.
func StartCandidates(sc Scenario) []Candidate {
	var out []Candidate
	for i, f := range sc.Faults {
		if f.At <= 0 {
			continue
		}
		at, _ := halve(f.At, 0)
		if f.At < 2*time.Second {
			at = 0 // no 1.5 s, 750 ms, ...: each step is K runs
		}
		c := sc.clone()
		c.Faults[i].At = at
		out = append(out, Candidate{Step: "start", Desc: fmt.Sprintf("start of %s: %v -> %v", faultDesc(sc, i), f.At, at), Scenario: c})
	}
	return valid(out)
}

// groupMembers is what a target expression naming several nodes narrows
// to, one node each (nothing for other expressions).
func groupMembers(sc Scenario, x string) []string {
	var out []string
	add := func(prefix string, n int) {
		for i := 1; i <= n; i++ {
			out = append(out, prefix+strconv.Itoa(i))
		}
	}
	switch {
	case x == nemesis.TargetBrokers:
		add("b", sc.Cluster.Brokers)
	case x == nemesis.TargetCoordinators:
		add("c", sc.Cluster.Coordinators)
	case x == nemesis.TargetAll:
		add("c", sc.Cluster.Coordinators)
		add("b", sc.Cluster.Brokers)
	case strings.HasPrefix(x, nemesis.TargetFollowers+":"):
		out = append(out, nemesis.TargetFollower+":"+strings.TrimPrefix(x, nemesis.TargetFollowers+":"))
	}
	return out
}

// TargetCandidates narrows each fault's targets to one node: a list of
// several nodes to each of them, a group (brokers, coordinators, all,
// followers:t/0) to each member (or one follower). Only the fields that
// list targets (nodes, and a partition's targets) are narrowed; a
// topology's sides are its meaning.
func TargetCandidates(sc Scenario) []Candidate {
	var out []Candidate
	for i, f := range sc.Faults {
		m, err := jsonMap(f.Spec)
		if err != nil {
			continue
		}
		for _, field := range []string{"nodes", "targets"} {
			if _, isPart := f.Spec.Fault.(*nemesis.Partition); field == "nodes" && isPart {
				continue // the nodes a halves topology divides
			}
			list, _ := m[field].([]any)
			var xs []string
			for _, v := range list {
				if s, ok := v.(string); ok {
					xs = append(xs, s)
				}
			}
			var ones []string
			switch {
			case len(xs) > 1:
				ones = xs
			case len(xs) == 1:
				ones = groupMembers(sc, xs[0])
			}
			for _, one := range ones {
				mm := make(map[string]any, len(m))
				for k, v := range m {
					mm[k] = v
				}
				mm[field] = []string{one}
				spec, err := specFromMap(mm)
				if err != nil {
					continue
				}
				c := sc.clone()
				c.Faults[i].Spec = spec
				out = append(out, Candidate{Step: "targets", Scenario: c,
					Desc: fmt.Sprintf("%s of %s: [%s] -> [%s]", field, faultDesc(sc, i), strings.Join(xs, " "), one)})
			}
		}
	}
	return valid(out)
}

func specFromMap(m map[string]any) (nemesis.Spec, error) {
	b, err := yaml.Marshal(m)
	if err != nil {
		return nemesis.Spec{}, err
	}
	var f Fault
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nemesis.Spec{}, err
	}
	return f.Spec, nil
}

// DurationCandidates halves the run's duration, not below 5 s after the
// last fault's heal (or the end of its condition's wait).
func DurationCandidates(sc Scenario) []Candidate {
	floor := time.Duration(0)
	for _, f := range sc.Faults {
		end := f.At + f.HealAfter
		if f.HealAfter == 0 {
			end = f.At + time.Second
		}
		if f.When != nil {
			end = max(end, f.At+time.Duration(f.When.Within)+f.HealAfter)
		}
		floor = max(floor, end)
	}
	floor = (floor + 5*time.Second).Truncate(time.Second)
	d, ok := halve(sc.Duration, floor)
	if !ok {
		return nil
	}
	c := sc.clone()
	c.Duration = d
	return valid([]Candidate{{Step: "duration", Desc: fmt.Sprintf("duration: %v -> %v", sc.Duration, d), Scenario: c}})
}

// countCandidates reduces a count (of producers, consumers,
// coordinators) to 1, then to half: two candidates, the larger cut first.
func countCandidates(what string, def int, field func(*Scenario) *int) func(Scenario) []Candidate {
	return func(sc Scenario) []Candidate {
		n := *field(&sc)
		if n == 0 {
			n = def
		}
		var out []Candidate
		for _, m := range []int{1, n / 2} {
			if m < 1 || m >= n || slices.ContainsFunc(out, func(c Candidate) bool { return *field(&c.Scenario) == m }) {
				continue
			}
			c := sc.clone()
			*field(&c) = m
			out = append(out, Candidate{Step: what, Desc: fmt.Sprintf("%s: %d -> %d", what, n, m), Scenario: c})
		}
		return valid(out)
	}
}

// PartitionCandidates reduces the topic to 1 partition, then to half,
// where no fault or condition names a partition beyond (Validate refuses
// those).
func PartitionCandidates(sc Scenario) []Candidate {
	n := sc.Topic.Partitions
	var out []Candidate
	for _, m := range []int32{1, n / 2} {
		if m < 1 || m >= n || slices.ContainsFunc(out, func(c Candidate) bool { return c.Scenario.Topic.Partitions == m }) {
			continue
		}
		c := sc.clone()
		c.Topic.Partitions = m
		if sc.Topic.Replicas != nil {
			// The kept partitions keep their assignment.
			c.Topic.Replicas = maps.Clone(sc.Topic.Replicas)
			maps.DeleteFunc(c.Topic.Replicas, func(p int32, _ []int32) bool { return p >= m })
		}
		out = append(out, Candidate{Step: "partitions", Desc: fmt.Sprintf("partitions: %d -> %d", n, m), Scenario: c})
	}
	return valid(out)
}

// BrokerCandidates removes one broker at a time, down to the topic's
// replication factor, where no fault names the broker removed (Validate
// refuses those).
func BrokerCandidates(sc Scenario) []Candidate {
	rf := int(sc.Topic.ReplicationFactor)
	if rf == 0 {
		rf = min(3, sc.Cluster.Brokers)
	}
	if caps, _ := compose.CapabilitiesOf(sc.Cluster.Backend); sc.Cluster.Brokers <= rf || caps.UserHosts {
		return nil
	}
	c := sc.clone()
	c.Cluster.Brokers--
	c.Topic.ReplicationFactor = int16(rf)
	return valid([]Candidate{{Step: "brokers", Desc: fmt.Sprintf("brokers: %d -> %d", sc.Cluster.Brokers, c.Cluster.Brokers), Scenario: c}})
}

// ShrinkStep is one candidate tried.
type ShrinkStep struct {
	N int `json:"n"`
	Candidate
	Trial    Trial   `json:"trial"`
	Accepted bool    `json:"accepted"`
	Seconds  float64 `json:"seconds"`
	// Faults, Duration: the candidate's size, for the report.
	Faults   int    `json:"faults"`
	Duration string `json:"duration"`
}

// ShrinkOptions configure Shrink.
type ShrinkOptions struct {
	// Budget: no candidate is started after it has passed (0: none).
	Budget time.Duration
	// Steps limits the reductions to these (StepNames); empty: all.
	Steps []string
	// Out receives a line per candidate.
	Out io.Writer
	// Now is the clock of the budget; default time.Now.
	Now func() time.Time
	// OnStep is called after each candidate tried, with the best
	// scenario so far (to write them as the search goes).
	OnStep func(step ShrinkStep, best Scenario)
}

// ShrinkResult is a finished (or stopped) search.
type ShrinkResult struct {
	Target Target       `json:"target"`
	Steps  []ShrinkStep `json:"steps"`
	// Best is the smallest scenario found that still fails.
	Best Scenario `json:"-"`
	// Stopped says why the search ended before it was done (a signal,
	// the budget).
	Stopped string  `json:"stopped,omitempty"`
	Seconds float64 `json:"seconds"`
	Runs    int     `json:"runs"`
}

// errStop ends the search early: budget or signal.
type errStop struct{ why string }

func (e errStop) Error() string { return e.why }

// Shrink searches for the smallest scenario that still fails like sc,
// which is known to fail (its stored run did). First the faults: sc's
// schedule is materialised into fixed faults and DDMin drops what the
// failure does not need; then, for each reducer of Steps in order, the
// first of its candidates that still fails replaces the best scenario and
// the reducer proposes again, until none of its candidates fails. Each
// distinct scenario is tried once. A cancelled ctx or the budget ends the
// search with the best scenario so far (Stopped says which); an error of
// the oracle ends it with that error.
func Shrink(ctx context.Context, sc Scenario, orc Oracle, o ShrinkOptions) (*ShrinkResult, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	start := now()
	res := &ShrinkResult{}
	best, err := Materialise(sc)
	if err != nil {
		return res, fmt.Errorf("%w: materialise the schedule: %v", ErrScenario, err)
	}
	best.Seed = sc.Seed
	res.Best = best
	canon := func(s Scenario) string {
		b, err := yaml.Marshal(s)
		if err != nil {
			return fmt.Sprint(s)
		}
		return string(b)
	}
	cache := map[string]bool{canon(best): true}
	try := func(c Candidate) (bool, error) {
		k := canon(c.Scenario)
		if r, ok := cache[k]; ok {
			return r, nil
		}
		if ctx.Err() != nil {
			return false, errStop{fmt.Sprintf("stopped (%v)", context.Cause(ctx))}
		}
		if o.Budget > 0 && now().Sub(start) > o.Budget {
			return false, errStop{fmt.Sprintf("the budget of %v ran out", o.Budget)}
		}
		t0 := now()
		tr, err := orc.Fails(ctx, c.Scenario)
		if ctx.Err() != nil {
			// A candidate cut short by the signal proves nothing.
			return false, errStop{fmt.Sprintf("stopped (%v)", context.Cause(ctx))}
		}
		if err != nil {
			return false, err
		}
		cache[k] = tr.Fails
		st := ShrinkStep{N: len(res.Steps) + 1, Candidate: c, Trial: tr, Accepted: tr.Fails, Seconds: now().Sub(t0).Seconds(),
			Faults: len(c.Scenario.Faults), Duration: c.Scenario.Duration.String()}
		res.Steps = append(res.Steps, st)
		res.Runs += len(tr.Runs)
		verdict := "passes"
		if tr.Fails {
			verdict = "FAILS"
			res.Best = c.Scenario
		}
		fmt.Fprintf(out, "  [%d] %s: %s in %d of %d run(s) (%.0fs, %.0fs in all)\n", st.N, c.Desc, verdict, tr.Failed(), len(tr.Runs),
			st.Seconds, now().Sub(start).Seconds())
		if o.OnStep != nil {
			o.OnStep(st, res.Best)
		}
		return tr.Fails, nil
	}
	on := func(step string) bool { return len(o.Steps) == 0 || slices.Contains(o.Steps, step) }
	err = func() error {
		if n := len(best.Faults); n > 1 && on("faults") {
			fmt.Fprintf(out, "  faults: delta debugging over %d faults\n", n)
			full := best
			keep, err := DDMin(ctx, n, func(_ context.Context, keep []int) (bool, error) {
				return try(DropFaults(full, keep))
			})
			if len(keep) < n {
				res.Best = DropFaults(full, keep).Scenario
			}
			if err != nil {
				return err
			}
		}
		for _, r := range Steps {
			if !on(r.Step) {
				continue
			}
			for progressed := true; progressed; {
				progressed = false
				for _, c := range r.Gen(res.Best) {
					ok, err := try(c)
					if err != nil {
						return err
					}
					if ok {
						progressed = true
						break
					}
				}
			}
		}
		return nil
	}()
	res.Seconds = now().Sub(start).Seconds()
	var stop errStop
	if errors.As(err, &stop) {
		res.Stopped = stop.why
		fmt.Fprintf(out, "  %s: keeping the best scenario so far\n", stop.why)
		return res, nil
	}
	return res, err
}

// RunOracle judges candidates by running them with Run: up to Runs times
// each (K, default 3), stopping at the first run that fails the target's
// way. Every run keeps the candidate's seed; what differs between runs is
// the timing. A run that could not run (an internal error) does not fail;
// a candidate none of whose runs could run is an error.
type RunOracle struct {
	Target Target
	Runs   int
	// Options are each run's; its ResultsDir receives the run directories.
	Options Options
	// LogDir receives each run's output, logs/<candidate>-<run>.log.
	LogDir string
	n      int
}

// Fails implements Oracle.
func (r *RunOracle) Fails(ctx context.Context, sc Scenario) (Trial, error) {
	return r.Trial(ctx, sc, max(r.Runs, 1), true)
}

// Trial runs sc k times (until the first failure when firstFail).
func (r *RunOracle) Trial(ctx context.Context, sc Scenario, k int, firstFail bool) (Trial, error) {
	r.n++
	var t Trial
	errs := 0
	for i := range k {
		if ctx.Err() != nil {
			break
		}
		run := r.run(ctx, sc, fmt.Sprintf("candidate-%03d-run-%d", r.n, i+1))
		t.Runs = append(t.Runs, run)
		if run.Error != "" {
			errs++
		}
		if run.Fails {
			t.Fails = true
			if firstFail {
				break
			}
		}
	}
	if errs > 0 && errs == len(t.Runs) && ctx.Err() == nil {
		return t, fmt.Errorf("%w: no run of the candidate could run: %s", ErrInternal, firstLine(t.Runs[0].Error))
	}
	return t, nil
}

func (r *RunOracle) run(ctx context.Context, sc Scenario, name string) TrialRun {
	tr := TrialRun{Seed: sc.Seed}
	o := r.Options
	o.Live, o.RunID = false, ""
	lf, err := results.CreateCellLog(r.LogDir, name)
	if err != nil {
		tr.Error = err.Error()
		return tr
	}
	defer lf.Close()
	o.Out = lf
	start := time.Now()
	res, err := Run(ctx, sc, o)
	tr.Seconds, tr.Dir = time.Since(start).Seconds(), res.Dir
	if err != nil {
		tr.Error = err.Error()
		fmt.Fprintf(lf, "error: %v\n", err)
		return tr
	}
	tr.Outcome, tr.Reasons, tr.Incomplete = res.Judgement.Outcome.String(), res.Judgement.Reasons, res.Incomplete
	if res.Verdict != nil {
		tr.Anomalies = res.Verdict.Anomalies
		tr.Fails = !res.Incomplete && r.Target.Matches(res.Judgement.Outcome, res.Judgement.Reasons, res.Verdict.Anomalies)
	}
	return tr
}

// ShrinkRunOptions configure ShrinkRun.
type ShrinkRunOptions struct {
	// Options are each run's (ResultsDir is ignored: runs go in the
	// shrink directory); Out receives the progress.
	Options
	// Runs is K, the runs per candidate (default 3).
	Runs int
	// Confirm is how many runs measure the reproducer's rate at the end
	// (0: none).
	Confirm int
	// Budget: no candidate starts after it (0: none).
	Budget time.Duration
	// OutFile is where the reproducer goes (default RUN_DIR/reproducer.yaml).
	OutFile string
	// Anomalies, if given, are the anomaly kinds the shrink keeps instead
	// of the run's own failure.
	Anomalies []string
	// Steps limits the reductions (StepNames); empty: all.
	Steps []string
}

// ShrinkReport is shrink.json: the search, its candidates and the
// reproducer's measured rate.
type ShrinkReport struct {
	RunDir     string  `json:"run_dir"`
	Dir        string  `json:"dir"`
	Reproducer string  `json:"reproducer"`
	Started    string  `json:"started"`
	Seconds    float64 `json:"seconds"`
	Original   Size    `json:"original"`
	Final      Size    `json:"final"`
	*ShrinkResult
	// Confirm is the reproducer's measurement (every run made).
	Confirm *Trial `json:"confirm,omitempty"`
}

// Size is what a shrink reduces, for the report.
type Size struct {
	Faults       int    `json:"faults"`
	Duration     string `json:"duration"`
	Producers    int    `json:"producers"`
	Consumers    int    `json:"consumers"`
	Partitions   int32  `json:"partitions"`
	Brokers      int    `json:"brokers"`
	Coordinators int    `json:"coordinators"`
}

func sizeOf(sc Scenario) Size {
	return Size{Faults: len(sc.Faults), Duration: sc.Duration.String(), Producers: sc.Workload.Producers, Consumers: sc.Workload.Consumers,
		Partitions: sc.Topic.Partitions, Brokers: sc.Cluster.Brokers, Coordinators: sc.Cluster.Coordinators}
}

func (s Size) String() string {
	return fmt.Sprintf("%d fault(s), %s, %d producer(s), %d consumer(s), %d partition(s), %d broker(s), %d coordinator(s)",
		s.Faults, s.Duration, s.Producers, s.Consumers, s.Partitions, s.Brokers, s.Coordinators)
}

// Files of a shrink directory.
const (
	ShrinkDirName    = "shrink"
	ShrinkFile       = "shrink.json"
	ShrinkReportFile = "report.html"
	ReproducerFile   = "reproducer.yaml"
)

// Code is the shrink's exit status: 0 the reproducer failed the same way
// in at least one of its confirmation runs (or none were asked for), 2
// the search was stopped by a signal or the reproducer did not fail in
// any confirmation run.
func (r *ShrinkReport) Code() int {
	if r.ShrinkResult == nil || strings.HasPrefix(r.Stopped, "stopped") {
		return 2
	}
	if r.Confirm != nil && r.Confirm.Failed() == 0 {
		return 2
	}
	return 0
}

// ShrinkRun shrinks the stored run in runDir: it reads its resolved
// scenario and its outcome (the target), searches with a RunOracle whose
// runs, logs and candidates go in runDir/shrink/ (shrink-2/, ... if that
// exists), writes the smallest failing scenario found to o.OutFile as it
// goes (a file `isrlab run FILE` runs), measures its rate over o.Confirm
// runs, and writes shrink.json and report.html. A run that did not fail
// is ErrNotFailing; a directory that is not a run is ErrScenario.
func ShrinkRun(ctx context.Context, runDir string, o ShrinkRunOptions) (*ShrinkReport, error) {
	o.Options = o.Options.withDefaults()
	if o.Runs <= 0 {
		o.Runs = 3
	}
	runDir, err := filepath.Abs(runDir)
	if err != nil {
		return nil, internalErr(err)
	}
	sc, err := Load(filepath.Join(runDir, results.ScenarioFile))
	if err != nil {
		if errors.Is(err, ErrScenario) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s is not a run directory (no %s): %v", ErrScenario, runDir, results.ScenarioFile, err)
	}
	oc, err := results.ReadOutcome(os.DirFS(runDir))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (a run that finished has one)", ErrScenario, runDir, err)
	}
	target, err := TargetOf(oc, o.Anomalies)
	if err != nil {
		return nil, err
	}
	for _, s := range o.Steps {
		if !slices.Contains(StepNames(), s) {
			return nil, fmt.Errorf("%w: no reduction step %q (steps: %s)", ErrScenario, s, strings.Join(StepNames(), ", "))
		}
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, internalErr(err)
		}
		o.Binary = exe
	}
	dir := filepath.Join(runDir, ShrinkDirName)
	for i := 2; ; i++ {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dir = filepath.Join(runDir, fmt.Sprintf("%s-%d", ShrinkDirName, i))
	}
	if o.OutFile == "" {
		o.OutFile = filepath.Join(runDir, ReproducerFile)
	}
	if err := results.MakeDir(filepath.Join(dir, "candidates")); err != nil {
		return nil, internalErr(err)
	}
	lf, err := os.Create(filepath.Join(dir, "shrink.log"))
	if err != nil {
		return nil, internalErr(err)
	}
	defer lf.Close()
	out := io.MultiWriter(o.Out, lf)
	start := time.Now()
	mat, err := Materialise(sc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: materialise the schedule: %v", ErrScenario, runDir, err)
	}
	rep := &ShrinkReport{RunDir: runDir, Dir: dir, Reproducer: o.OutFile, Started: start.UTC().Format(time.RFC3339), Original: sizeOf(mat)}
	var werr []error
	writeRepro := func(best Scenario, note string) {
		r := best.clone()
		r.Name = strings.TrimSuffix(sc.Name, "-shrunk") + "-shrunk"
		r.Description = fmt.Sprintf("shrunk from %s (%s): %s", runDir, target, note)
		werr = append(werr, results.WriteYAML(o.OutFile, r), results.WriteYAML(filepath.Join(dir, ReproducerFile), r))
	}
	werr = append(werr, results.WriteYAML(filepath.Join(dir, "original.yaml"), mat))
	writeRepro(mat, "the original, its schedule materialised")
	fmt.Fprintf(out, "isrlab shrink %s\n  target: %s\n  original: %s\n  %d run(s) per candidate%s; candidates and runs in %s\n",
		runDir, target, rep.Original, o.Runs, budgetNote(o.Budget), dir)
	runOpts := o.Options
	runOpts.ResultsDir = filepath.Join(dir, results.RunsDir)
	orc := &RunOracle{Target: target, Runs: o.Runs, Options: runOpts, LogDir: dir}
	writeJSON := func() {
		rep.Seconds = time.Since(start).Seconds()
		werr = append(werr, results.WriteJSON(filepath.Join(dir, ShrinkFile), rep))
	}
	res, err := Shrink(ctx, mat, orc, ShrinkOptions{Budget: o.Budget, Steps: o.Steps, Out: out,
		OnStep: func(st ShrinkStep, best Scenario) {
			werr = append(werr, results.WriteYAML(filepath.Join(dir, "candidates", fmt.Sprintf("%03d.yaml", st.N)), st.Scenario))
			if st.Accepted {
				writeRepro(best, "step "+strconv.Itoa(st.N)+": "+st.Desc)
			}
			rep.ShrinkResult = &ShrinkResult{Target: target, Steps: append(rep.stepsSoFar(), st)}
			writeJSON()
		}})
	if res == nil {
		res = &ShrinkResult{}
	}
	res.Target = target
	rep.ShrinkResult, rep.Final = res, sizeOf(res.Best)
	if err != nil {
		writeJSON()
		return rep, err
	}
	fmt.Fprintf(out, "  smallest failing scenario after %d candidate(s), %d run(s), %.0fs: %s\n", len(res.Steps), res.Runs, res.Seconds, rep.Final)
	note := fmt.Sprintf("%d candidate(s) tried in %d run(s)", len(res.Steps), res.Runs)
	if o.Confirm > 0 && ctx.Err() == nil {
		fmt.Fprintf(out, "  measuring its reproduction rate over %d run(s)\n", o.Confirm)
		tr, err := orc.Trial(ctx, res.Best, o.Confirm, false)
		if ctx.Err() == nil {
			rep.Confirm = &tr
			note += fmt.Sprintf("; fails in %d of %d runs", tr.Failed(), len(tr.Runs))
			fmt.Fprintf(out, "  the reproducer fails in %d of %d runs\n", tr.Failed(), len(tr.Runs))
		}
		if err != nil {
			writeJSON()
			return rep, err
		}
	}
	writeRepro(res.Best, note)
	writeJSON()
	werr = append(werr, writeShrinkReport(filepath.Join(dir, ShrinkReportFile), rep, res.Best))
	// The run's directory says what the shrink found, and so does the
	// matrix the run is a cell of.
	sh := results.Shrunk{FailsWith: FailsWith(res.Best), Reproducer: relTo(runDir, filepath.Join(dir, ReproducerFile)),
		Report: relTo(runDir, filepath.Join(dir, ShrinkReportFile))}
	if rep.Confirm != nil {
		sh.Rate = fmt.Sprintf("fails in %d of %d runs", rep.Confirm.Failed(), len(rep.Confirm.Runs))
	}
	matrix, err := results.WriteShrunk(runDir, sh)
	werr = append(werr, err)
	if matrix != "" {
		fmt.Fprintf(out, "  matrix %s: its cell shows the reproducer (report.html, junit.xml)\n", matrix)
	}
	fmt.Fprintf(out, "  reproducer: %s (isrlab run %s)\n  report: %s\n", o.OutFile, o.OutFile, filepath.Join(dir, ShrinkReportFile))
	return rep, internalErr(errors.Join(werr...))
}

func (r *ShrinkReport) stepsSoFar() []ShrinkStep {
	if r.ShrinkResult == nil {
		return nil
	}
	return r.Steps
}

// FailsWith says what a failing scenario is, in a line: its faults with
// their timing, then the run's duration and size.
func FailsWith(sc Scenario) string {
	var fs []string
	for _, f := range sc.Faults {
		d := f.Spec.Fault.Kind()
		if raw, err := json.Marshal(f.Spec); err == nil {
			if t := describeFault(raw); t != "" {
				d += " " + t
			}
		}
		if f.When != nil {
			d += " when " + f.When.String()
			if f.At > 0 {
				d += " (from " + f.At.String() + ")"
			}
		} else {
			d += " at " + f.At.String()
		}
		if f.HealAfter > 0 {
			d += " for " + f.HealAfter.String()
		} else {
			d += " until the end"
		}
		fs = append(fs, d)
	}
	faults := "no fault"
	switch len(fs) {
	case 0:
	case 1:
		faults = "1 fault: " + fs[0]
	default:
		faults = fmt.Sprintf("%d faults: %s", len(fs), strings.Join(fs, "; "))
	}
	return fmt.Sprintf("%s; a %s run, %d producer(s), %d consumer(s), %d partition(s), %d broker(s)",
		faults, sc.Duration, sc.Workload.Producers, sc.Workload.Consumers, sc.Topic.Partitions, sc.Cluster.Brokers)
}

// relTo is path relative to base, or path when it is not under base.
func relTo(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

func budgetNote(b time.Duration) string {
	if b <= 0 {
		return ""
	}
	return fmt.Sprintf(", a budget of %v", b)
}

var shrinkTmpl = template.Must(template.New("shrink").Funcs(template.FuncMap{
	"rel": func(base, p string) string {
		if r, err := filepath.Rel(base, p); err == nil {
			return filepath.ToSlash(r)
		}
		return p
	},
	"join": func(xs []string) string { return strings.Join(xs, "; ") },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>isrlab shrink: {{.R.RunDir}}</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
tr.fails{background:#fde2e2}tr.passes{background:#eef7ee}pre{background:#f6f6f6;padding:1em}</style></head><body>
<h1>Shrink of {{.R.RunDir}}</h1>
<p>Target: the run failed as <b>{{.R.Target}}</b>; a candidate fails when one of its runs does.</p>
<table><tr><th></th><th>size</th></tr>
<tr><td>original</td><td>{{.R.Original}}</td></tr>
<tr><td>smallest failing</td><td>{{.R.Final}}</td></tr></table>
<p>{{len .R.Steps}} candidate(s), {{.R.Runs}} run(s), {{printf "%.0f" .R.ShrinkResult.Seconds}} s.{{with .R.Stopped}} The search {{.}}.{{end}}
{{with .R.Confirm}} The reproducer fails in <b>{{.Failed}} of {{len .Runs}}</b> runs.{{end}}</p>
<h2>Step by step</h2>
<table><tr><th>#</th><th>step</th><th>candidate</th><th>faults</th><th>duration</th><th>runs failing</th><th>runs</th><th>s</th></tr>
{{range .R.Steps}}<tr class="{{if .Accepted}}fails{{else}}passes{{end}}"><td><a href="candidates/{{printf "%03d" .N}}.yaml">{{.N}}</a></td><td>{{.Step}}</td>
<td>{{.Desc}}{{if .Accepted}} <b>(kept: still fails)</b>{{end}}</td><td>{{.Faults}}</td><td>{{.Duration}}</td><td>{{.Trial.Failed}} of {{len .Trial.Runs}}</td>
<td>{{range .Trial.Runs}}{{if .Dir}}<a href="{{rel $.R.Dir .Dir}}/report.html">{{.Outcome}}{{if .Fails}} (fails){{end}}</a>{{else}}{{.Error}}{{end}}<br>{{end}}</td>
<td>{{printf "%.0f" .Seconds}}</td></tr>
{{end}}</table>
<h2>Reproducer</h2><p><code>isrlab run {{.R.Reproducer}}</code></p><pre>{{.YAML}}</pre>
</body></html>
`))

// writeShrinkReport writes the shrink's report page: the reduction step
// by step, each candidate linked to its scenario and runs, and the
// reproducer.
func writeShrinkReport(path string, rep *ShrinkReport, best Scenario) error {
	y, err := yaml.Marshal(best)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := shrinkTmpl.Execute(&b, struct {
		R    *ShrinkReport
		YAML string
	}{rep, string(y)}); err != nil {
		return err
	}
	return results.WriteFile(path, []byte(b.String()))
}
