package lab

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/results"
)

// Expect is what a run must show. The zero value expects a valid history.
//
//	expect:
//	  valid: false              # true (default), false or any
//	  anomalies:
//	    lost-write: ">0"        # a count: 0, ">0", ">=10", "<5", "!=0"
//	    G0: 0                   # transactional ones too (G1a: aborted-read)
//	  availability: ">=0.9"     # the fraction of ok sends and polls
//	  unavailability: ">10s"    # the longest window with no ok send on a partition
//	  throughput:               # the rate workload's, against its pre-fault baseline
//	    during-faults: "<0.5x"  # from the first fault's start to the last heal
//	    after-heal: ">=0.9x"
//	  isr-shrinks: ">=10"       # ISR shrinks the brokers made during the faults
//	  collateral-isr-drops: ">0" # ISR drops between brokers no fault touched
//	  read-lock-wait: ">1000"   # ms/s the brokers' handlers waited on partition locks, during the faults
//	  across-seeds:             # what is possible, over a matrix's seeds
//	    lost-write: ">0 in >=1 of 5" # >0 in at least 1 of the matrix's 5 seeds
//	    valid: "false in >=1 of 5"
//
// A run alone judges everything but across-seeds; a matrix judges those
// claims over its seeds (JudgeSeeds).
type Expect struct {
	Valid          string          `yaml:"valid,omitempty"`
	Anomalies      map[string]Cond `yaml:"anomalies,omitempty"`
	Availability   Cond            `yaml:"availability,omitempty"`
	Unavailability Cond            `yaml:"unavailability,omitempty"`
	Throughput     Throughput      `yaml:"throughput,omitempty"`
	IsrShrinks     Cond            `yaml:"isr-shrinks,omitempty"`
	// CollateralIsrDrops counts, during the faults, the replicas dropped
	// from an ISR by a leader when neither broker was a fault's target and
	// no partition cut their link: churn that spread by itself.
	CollateralIsrDrops Cond `yaml:"collateral-isr-drops,omitempty"`
	// ReadLockWait is, during the faults, the milliseconds per second the
	// brokers' request handlers spent waiting on partition read locks,
	// summed over brokers: the stall behind an ISR update made under the
	// lock, measured where it happens rather than through throughput.
	ReadLockWait Cond `yaml:"read-lock-wait,omitempty"`
	// AcrossSeeds states what is possible, not certain: per anomaly (or
	// valid), a per-run condition and on how many of a matrix's seeds it
	// must hold.
	AcrossSeeds map[string]SeedCond `yaml:"across-seeds,omitempty"`
}

// Throughput compares the rate workload's mean acknowledged records per
// second with its pre-fault baseline (the run's metrics.jsonl, see package
// series): ratios like "<0.5x".
type Throughput struct {
	DuringFaults Cond `yaml:"during-faults,omitempty"`
	AfterHeal    Cond `yaml:"after-heal,omitempty"`
}

// Cond is a comparison against a number, a duration or a ratio: "0",
// ">0", ">=0.9", "<20s", "<0.5x". A bare value means equality.
type Cond struct {
	Op    string // one of = != < <= > >=
	Value float64
	// Dur marks a duration (Value in seconds), Ratio a ratio ("0.5x").
	Dur, Ratio bool
	src        string
}

// ParseCond parses a condition.
func ParseCond(s string) (Cond, error) {
	s = strings.TrimSpace(s)
	c := Cond{Op: "=", src: s}
	for _, op := range []string{">=", "<=", "!=", "==", ">", "<", "="} {
		if rest, ok := strings.CutPrefix(s, op); ok {
			c.Op, s = op, strings.TrimSpace(rest)
			if op == "==" {
				c.Op = "="
			}
			break
		}
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		c.Value = v
		return c, nil
	}
	if r, ok := strings.CutSuffix(s, "x"); ok {
		if v, err := strconv.ParseFloat(r, 64); err == nil {
			c.Value, c.Ratio = v, true
			return c, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		c.Value, c.Dur = d.Seconds(), true
		return c, nil
	}
	return Cond{}, fmt.Errorf("%q: want a number or duration with an optional comparison, like 0, \">0\", \">=0.9\" or \"<20s\" (or a ratio: \"<0.5x\")", c.src)
}

// IsZero reports an unset condition.
func (c Cond) IsZero() bool { return c.Op == "" }

func (c Cond) String() string {
	if c.src != "" {
		return c.src
	}
	if c.Op == "" {
		return ""
	}
	return c.Op + strconv.FormatFloat(c.Value, 'g', -1, 64)
}

// UnmarshalYAML accepts a number or a string.
func (c *Cond) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a condition like \">0\"", v.Line)
	}
	p, err := ParseCond(v.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", v.Line, err)
	}
	*c = p
	return nil
}

// MarshalYAML writes the condition as written.
func (c Cond) MarshalYAML() (any, error) { return c.String(), nil }

// exceeded reports whether x misses c by being past an upper bound
// ("0", "<3", "<=3", "=3" and x above), which a count that only grows
// with a longer run can never come back under.
func (c Cond) exceeded(x float64) bool {
	if c.Holds(x) {
		return false
	}
	switch c.Op {
	case "<":
		return x >= c.Value
	case "=", "<=":
		return x > c.Value
	}
	return false
}

// Holds reports whether x meets the condition.
func (c Cond) Holds(x float64) bool {
	const eps = 1e-9
	switch c.Op {
	case "=":
		return x > c.Value-eps && x < c.Value+eps
	case "!=":
		return x <= c.Value-eps || x >= c.Value+eps
	case "<":
		return x < c.Value
	case "<=":
		return x <= c.Value+eps
	case ">":
		return x > c.Value
	case ">=":
		return x >= c.Value-eps
	}
	return true
}

// anomalyAliases are other names an expectation may give an anomaly:
// Adya's G1a is the checker's aborted-read.
var anomalyAliases = map[string]string{"G1a": checker.AbortedRead}

func anomalyName(k string) string {
	if a, ok := anomalyAliases[k]; ok {
		return a
	}
	return k
}

// validate returns the path of the first bad field and what is wrong.
func (e Expect) validate() ([]string, error) {
	switch e.Valid {
	case "", "true", "false", "any":
	default:
		return []string{"valid"}, fmt.Errorf("%q: use true, false or any", e.Valid)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Anomalies)) {
		if !slices.Contains(checker.AnomalyNames, anomalyName(k)) {
			return []string{"anomalies", k}, fmt.Errorf("unknown anomaly %q (known: %s)", k, strings.Join(checker.AnomalyNames, ", "))
		}
		if e.Anomalies[k].Dur {
			return []string{"anomalies", k}, fmt.Errorf("a count, not a duration")
		}
	}
	if e.Availability.Dur {
		return []string{"availability"}, fmt.Errorf("a fraction, not a duration")
	}
	if !e.Unavailability.IsZero() && !e.Unavailability.Dur && e.Unavailability.Value != 0 {
		return []string{"unavailability"}, fmt.Errorf("a duration like \">10s\"")
	}
	for _, t := range []struct {
		key string
		c   Cond
	}{{"during-faults", e.Throughput.DuringFaults}, {"after-heal", e.Throughput.AfterHeal}} {
		if !t.c.IsZero() && !t.c.Ratio {
			return []string{"throughput", t.key}, fmt.Errorf("a ratio to the baseline like \"<0.5x\"")
		}
	}
	if e.IsrShrinks.Dur || e.IsrShrinks.Ratio {
		return []string{"isr-shrinks"}, fmt.Errorf("a count like \">=10\"")
	}
	if e.CollateralIsrDrops.Dur || e.CollateralIsrDrops.Ratio {
		return []string{"collateral-isr-drops"}, fmt.Errorf("a count like \">0\"")
	}
	if e.ReadLockWait.Dur || e.ReadLockWait.Ratio {
		return []string{"read-lock-wait"}, fmt.Errorf("milliseconds per second like \">1000\"")
	}
	if e.Availability.Ratio || e.Unavailability.Ratio {
		return []string{"availability"}, fmt.Errorf("availability and unavailability are not ratios to a baseline")
	}
	for _, k := range slices.Sorted(maps.Keys(e.AcrossSeeds)) {
		if _, err := ParseSeedClaim(k, e.AcrossSeeds[k]); err != nil {
			return []string{"across-seeds", k}, err
		}
	}
	return nil, nil
}

// series reports whether the expectation reads the run's time series.
func (e Expect) series() bool {
	return !e.Throughput.DuringFaults.IsZero() || !e.Throughput.AfterHeal.IsZero() || !e.IsrShrinks.IsZero() || !e.CollateralIsrDrops.IsZero() ||
		!e.ReadLockWait.IsZero()
}

// IsZero reports an empty expectation (which means: a valid history).
func (e Expect) IsZero() bool {
	return e.Valid == "" && len(e.Anomalies) == 0 && e.Availability.IsZero() && e.Unavailability.IsZero() && !e.series() &&
		len(e.AcrossSeeds) == 0
}

// valid is the validity the expectation asks for: "true" when it says
// nothing at all, "any" when it only names counts or measures (or only
// claims across seeds: each run alone may then be anything).
func (e Expect) valid() string {
	if e.Valid != "" {
		return e.Valid
	}
	if e.IsZero() {
		return "true"
	}
	return "any"
}

// String says the expectation in a few words, for listings.
func (e Expect) String() string {
	var parts []string
	switch e.valid() {
	case "true":
		parts = append(parts, "valid")
	case "false":
		parts = append(parts, "invalid")
	}
	for _, k := range slices.Sorted(maps.Keys(e.Anomalies)) {
		parts = append(parts, k+" "+e.Anomalies[k].String())
	}
	if !e.Availability.IsZero() {
		parts = append(parts, "availability "+e.Availability.String())
	}
	if !e.Unavailability.IsZero() {
		parts = append(parts, "unavailability "+e.Unavailability.String())
	}
	if c := e.Throughput.DuringFaults; !c.IsZero() {
		parts = append(parts, "throughput during faults "+c.String())
	}
	if c := e.Throughput.AfterHeal; !c.IsZero() {
		parts = append(parts, "throughput after heal "+c.String())
	}
	if !e.IsrShrinks.IsZero() {
		parts = append(parts, "isr-shrinks "+e.IsrShrinks.String())
	}
	if !e.CollateralIsrDrops.IsZero() {
		parts = append(parts, "collateral-isr-drops "+e.CollateralIsrDrops.String())
	}
	if !e.ReadLockWait.IsZero() {
		parts = append(parts, "read-lock-wait "+e.ReadLockWait.String())
	}
	if a := e.acrossString(); a != "" {
		parts = append(parts, a)
	}
	if len(parts) == 0 {
		return "anything (observed only)"
	}
	return strings.Join(parts, ", ")
}

// Outcome is how a run compares with its expectation.
type Outcome int

// Outcomes, with the exit status of `isrlab run`.
const (
	// Met: the run shows what the scenario expects (exit 0).
	Met Outcome = iota
	// NotMet: it does not (exit 1).
	NotMet
	// Undecided: the checker could not decide what the expectation needs
	// (exit 2).
	Undecided
	// NotSetUp: a fault's condition did not hold in time, so the run
	// never reached the state its story needs; undecided, never met
	// (exit 2).
	NotSetUp
)

func (o Outcome) String() string {
	switch o {
	case Met:
		return "met"
	case NotMet:
		return "not met"
	case NotSetUp:
		return "not set up"
	}
	return "undecided"
}

// MarshalText writes the outcome's name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads an outcome's name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for _, x := range []Outcome{Met, NotMet, Undecided, NotSetUp} {
		if x.String() == string(b) {
			*o = x
			return nil
		}
	}
	return fmt.Errorf("outcome %q: want met, not met, undecided or not set up", b)
}

// Judgement is an outcome with its reasons.
type Judgement struct {
	Outcome Outcome  `json:"outcome"`
	Expect  string   `json:"expect"`
	Reasons []string `json:"reasons,omitempty"`
	// Measured is what the run measured for each term of the expectation
	// that states a bound (Expect.Bounds' names): the count, fraction,
	// seconds or ratio the bound was compared with. Over many runs it
	// shows how close a claim came to failing (scenarios tally).
	Measured map[string]float64 `json:"measured,omitempty"`
	// found: the expectation was missed on an anomaly the history shows
	// (invalid where valid was expected, an anomaly counted past its
	// bound), which no longer run could undo. A run that did not run its
	// course (cut short, its client died) stays not met only then:
	// otherwise what it missed was not put to the test.
	found bool
}

// measure records x as the run's value of term.
func (j *Judgement) measure(term string, x float64) {
	if j.Measured == nil {
		j.Measured = map[string]float64{}
	}
	j.Measured[term] = x
}

// Bounds are the expectation's terms that state a bound, by the names
// Judgement.Measured gives them: each anomaly's own name, availability,
// unavailability (seconds), throughput.during-faults and
// throughput.after-heal (ratios), isr-shrinks, collateral-isr-drops and
// read-lock-wait.
func (e Expect) Bounds() map[string]Cond {
	out := map[string]Cond{}
	for k, c := range e.Anomalies {
		out[k] = c
	}
	for k, c := range map[string]Cond{"availability": e.Availability, "unavailability": e.Unavailability,
		"throughput.during-faults": e.Throughput.DuringFaults, "throughput.after-heal": e.Throughput.AfterHeal,
		"isr-shrinks": e.IsrShrinks, "collateral-isr-drops": e.CollateralIsrDrops, "read-lock-wait": e.ReadLockWait} {
		if !c.IsZero() {
			out[k] = c
		}
	}
	return out
}

// Bounds are Expect.Bounds and, for each fault that waits for a state
// within a time, how long the wait may take: "wait NAME" (the fault's
// name, or its kind and number in the scenario) "<=within". A run
// measures how long each wait took (measureWaits), so the closest calls
// show a timeline about to outgrow its window before a run is not set
// up.
func (s Scenario) Bounds() map[string]Cond {
	out := s.Expect.Bounds()
	for i, f := range s.Faults {
		if f.When == nil || f.When.Within <= 0 {
			continue
		}
		w := time.Duration(f.When.Within)
		out[s.waitTerm(i)] = Cond{Op: "<=", Value: w.Seconds(), Dur: true, src: "<=" + w.String()}
	}
	return out
}

// waitTerm names fault i's wait among the bounds.
func (s Scenario) waitTerm(i int) string {
	f := s.Faults[i]
	if f.Name != "" {
		return "wait " + f.Name
	}
	return fmt.Sprintf("wait %s (fault %d)", f.Spec.Fault.Kind(), i+1)
}

// measureWaits records in j how long each of the scenario's waits took,
// from waited by fault key (fault i's key is i+1).
func (s Scenario) measureWaits(j *Judgement, waited map[int]float64) {
	for key, secs := range waited {
		if i := key - 1; i >= 0 && i < len(s.Faults) && s.Faults[i].When != nil && s.Faults[i].When.Within > 0 {
			j.measure(s.waitTerm(i), secs)
		}
	}
}

// setIn records the judgement in a run's outcome.json.
func (j Judgement) setIn(o *results.Outcome) {
	o.Outcome, o.Expect, o.Reasons, o.Measured = j.Outcome.String(), j.Expect, j.Reasons, j.Measured
}

// Judge compares a verdict with the expectation, as if the run had run
// its course; Judgement.settle then accounts for how it went (cut short,
// its workload stopped early, a fault not set up). Claims across seeds
// are not judged: one run can neither meet nor miss a claim about a set
// (JudgeSeeds does).
func (e Expect) Judge(v *checker.Verdict) Judgement {
	j := Judgement{Expect: e.String()}
	fail := func(format string, a ...any) {
		j.Outcome = NotMet
		j.Reasons = append(j.Reasons, fmt.Sprintf(format, a...))
	}
	undecided := false
	switch want := e.valid(); {
	case want == "any":
	case v.Valid == checker.Unknown:
		undecided = true
		j.Reasons = append(j.Reasons, "the checker could not decide validity")
	case (want == "true") != (v.Valid == checker.Valid):
		fail("expected valid=%s, got valid=%s", want, v.Valid)
		j.found = j.found || v.Valid == checker.Invalid
	}
	for _, k := range slices.Sorted(maps.Keys(e.Anomalies)) {
		c := e.Anomalies[k]
		n := v.Anomalies[anomalyName(k)]
		j.measure(k, float64(n))
		if !c.Holds(float64(n)) {
			fail("expected %s %s, got %d", k, c, n)
			j.found = j.found || c.exceeded(float64(n))
		}
	}
	if c := e.Availability; !c.IsZero() {
		a := v.Availability.Overall
		if a.Total == 0 {
			undecided = true
			j.Reasons = append(j.Reasons, "no operations to measure availability")
		} else if j.measure("availability", a.Fraction); !c.Holds(a.Fraction) {
			fail("expected availability %s, got %.3f", c, a.Fraction)
		}
	}
	if c := e.Unavailability; !c.IsZero() {
		got := maxUnavailable(v)
		j.measure("unavailability", got.Seconds())
		if !c.Holds(got.Seconds()) {
			fail("expected unavailability %s, got %.1fs", c, got.Seconds())
		}
	}
	if undecided && j.Outcome != NotMet {
		j.Outcome = Undecided
	}
	return j
}
