package lab

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/results"
)

// SeedCond is a claim across a matrix's seeds as written under
// expect.across-seeds: "<per-run condition> in <seeds condition> of <M>".
// Under an anomaly, ">0 in >=1 of 5" says the count was >0 in at least 1
// of the 5 seeds; under valid the per-run condition is true or false
// ("false in >=1 of 5"). A trailing "seeds" is allowed, as String writes
// it.
//
// M is the number of seeds the claim is about, and a matrix must run
// exactly M seeds (LoadMatrix refuses another number): ">=1 of 5" and
// ">=1 of 10" are different claims, so judging a claim over another
// number of runs, or over groups of M, would change what it says.
type SeedCond string

// UnmarshalYAML accepts a scalar; ParseSeedClaim (through the scenario's
// validation) says what is wrong with it, naming the field.
func (c *SeedCond) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a claim across seeds like \">0 in >=1 of 5\"", v.Line)
	}
	*c = SeedCond(v.Value)
	return nil
}

// SeedClaim is a parsed SeedCond.
type SeedClaim struct {
	// Name is the anomaly as written (G1a too), or valid.
	Name string
	// Run is what one run must show: a count, or for valid =1 (true)
	// or =0 (false).
	Run Cond
	// Seeds is the condition on the number of seeds where Run held.
	Seeds Cond
	// Of is M, the number of seeds the claim is about.
	Of int
}

// ParseSeedClaim parses the claim s under the key name (an anomaly or
// valid). A claim that no number of the M seeds could meet, or that any
// number meets, is an error: it could not fail or not pass.
func ParseSeedClaim(name string, s SeedCond) (SeedClaim, error) {
	src := strings.TrimSpace(string(s))
	form := func() error {
		return fmt.Errorf("%q: want \"<per run> in <how many seeds> of <M>\", like \">0 in >=1 of 5\"", src)
	}
	body := strings.TrimSpace(strings.TrimSuffix(src, "seeds"))
	run, rest, ok := strings.Cut(body, " in ")
	seeds, of, ok2 := strings.Cut(rest, " of ")
	if !ok || !ok2 {
		return SeedClaim{}, form()
	}
	c := SeedClaim{Name: name}
	run = strings.TrimSpace(run)
	if name == "valid" {
		switch run {
		case "true":
			c.Run = Cond{Op: "=", Value: 1, src: run}
		case "false":
			c.Run = Cond{Op: "=", Value: 0, src: run}
		default:
			return SeedClaim{}, fmt.Errorf("%q: valid is true or false in each run, like \"false in >=1 of 5\"", src)
		}
	} else {
		if !slices.Contains(checker.AnomalyNames, anomalyName(name)) {
			return SeedClaim{}, fmt.Errorf("unknown anomaly %q (known: valid, %s)", name, strings.Join(checker.AnomalyNames, ", "))
		}
		r, err := ParseCond(run)
		if err != nil || r.Dur || r.Ratio {
			return SeedClaim{}, fmt.Errorf("%q: the per-run condition %q is not a count like \">0\"", src, run)
		}
		c.Run = r
	}
	m, err := strconv.Atoi(strings.TrimSpace(of))
	if err != nil || m < 1 {
		return SeedClaim{}, fmt.Errorf("%q: M (after \"of\") is the number of seeds, a whole number >= 1", src)
	}
	c.Of = m
	sc, err := ParseCond(seeds)
	if err != nil || sc.Dur || sc.Ratio {
		return SeedClaim{}, fmt.Errorf("%q: %q is not a number of seeds like \">=1\"", src, strings.TrimSpace(seeds))
	}
	c.Seeds = sc
	some, all := false, true
	for k := 0; k <= m; k++ {
		if sc.Holds(float64(k)) {
			some = true
		} else {
			all = false
		}
	}
	switch {
	case !some:
		return SeedClaim{}, fmt.Errorf("%q: no number of seeds from 0 to %d is %s: the claim could never be met", src, m, sc)
	case all:
		return SeedClaim{}, fmt.Errorf("%q: every number of seeds from 0 to %d is %s: the claim could never fail", src, m, sc)
	}
	return c, nil
}

func (c SeedClaim) String() string {
	return fmt.Sprintf("%s %s in %s of %d seeds", c.Name, c.Run, c.Seeds, c.Of)
}

// acrossString says the claims across seeds, or "".
func (e Expect) acrossString() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(e.AcrossSeeds)) {
		if c, err := ParseSeedClaim(k, e.AcrossSeeds[k]); err == nil {
			parts = append(parts, c.String())
		} else {
			parts = append(parts, k+" "+string(e.AcrossSeeds[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// PerRun is the expectation without its claims across seeds: what each
// run alone is judged on. The validity asked for is kept ("any" when the
// expectation only claimed across seeds, never the empty expectation's
// "valid").
func (e Expect) PerRun() Expect {
	if len(e.AcrossSeeds) == 0 {
		return e
	}
	e.Valid, e.AcrossSeeds = e.valid(), nil
	return e
}

// SeedOutcome is one seed's run as a claim across seeds reads it.
type SeedOutcome struct {
	Seed int64
	// Outcome is the run's own judgement (of everything but across-seeds).
	Outcome   Outcome
	Valid     checker.Validity
	Anomalies map[string]int64
	// Missing, if set, says why the seed has no judged run ("error",
	// "skipped"); it counts as undecided.
	Missing string
}

// decided reports a run whose facts a claim may count: it ran to the
// end and was judged. An undecided or not-set-up run (cut short, the
// fault's condition never held) might have gone either way.
func (r SeedOutcome) decided() bool {
	return r.Missing == "" && (r.Outcome == Met || r.Outcome == NotMet)
}

func (r SeedOutcome) status() string {
	if r.Missing != "" {
		return r.Missing
	}
	return r.Outcome.String()
}

// fact is what run r showed for the claim: the value and whether the
// per-run condition held ("yes", "no", or "unknown" when r is not decided
// or its validity is unknown).
func (c SeedClaim) fact(r SeedOutcome) results.SeedFact {
	f := results.SeedFact{Name: c.Name, Held: "unknown"}
	var x float64
	if c.Name == "valid" {
		f.Value = r.Valid.String()
		if r.Valid == checker.Unknown {
			return f
		}
		if r.Valid == checker.Valid {
			x = 1
		}
	} else {
		n := r.Anomalies[anomalyName(c.Name)]
		f.Value, x = strconv.FormatInt(n, 10), float64(n)
	}
	if r.Missing != "" {
		f.Value = ""
	}
	if !r.decided() {
		return f
	}
	f.Held = "no"
	if c.Run.Holds(x) {
		f.Held = "yes"
	}
	return f
}

// JudgeSeeds judges the claims across seeds of the expectation on the
// runs of its seeds, one run per seed. Each claim is met when its
// condition on the number of seeds holds whatever the undecided seeds
// would have shown, not met when it fails whatever they would have
// shown, and undecided otherwise: ">0 in >=1 of 5" with one hit among
// four decided runs is met though the fifth was not set up, and with no
// hit it is undecided. The set is not met when a run did not meet its
// own expectation or a claim is not met, undecided when a claim is, and
// met otherwise. A run's own undecided or not-set-up outcome stays its
// own (its cell's): the set judges only what is claimed about the set.
// A claim about M seeds judged on another number of runs is undecided.
func (e Expect) JudgeSeeds(runs []SeedOutcome) Judgement {
	j, _ := e.judgeSeeds(runs)
	return j
}

// judgeSeeds is JudgeSeeds with, per run, what it showed for each claim
// (in the order of the claims' names).
func (e Expect) judgeSeeds(runs []SeedOutcome) (Judgement, [][]results.SeedFact) {
	j := Judgement{Outcome: Met, Expect: e.acrossString()}
	facts := make([][]results.SeedFact, len(runs))
	worse := func(o Outcome) {
		if o == NotMet || (o == Undecided && j.Outcome == Met) {
			j.Outcome = o
		}
	}
	for _, r := range runs {
		if r.Missing == "" && r.Outcome == NotMet {
			worse(NotMet)
			j.Reasons = append(j.Reasons, fmt.Sprintf("seed %d did not meet its per-run expectation", r.Seed))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.AcrossSeeds)) {
		c, err := ParseSeedClaim(k, e.AcrossSeeds[k])
		if err != nil {
			worse(Undecided)
			j.Reasons = append(j.Reasons, fmt.Sprintf("across-seeds %s: %v", k, err))
			for i := range runs {
				facts[i] = append(facts[i], results.SeedFact{Name: k, Held: "unknown"})
			}
			continue
		}
		held, decided := 0, 0
		var each []string
		for i, r := range runs {
			f := c.fact(r)
			facts[i] = append(facts[i], f)
			switch {
			case f.Held == "unknown" && r.decided():
				each = append(each, fmt.Sprintf("%d (%s unknown)", r.Seed, c.Name))
			case f.Held == "unknown":
				each = append(each, fmt.Sprintf("%d (%s)", r.Seed, r.status()))
			default:
				each = append(each, fmt.Sprintf("%d (%s)", r.Seed, f.Value))
				decided++
				if f.Held == "yes" {
					held++
				}
			}
		}
		line := fmt.Sprintf("%s %s held in %d of %d seeds", c.Name, c.Run, held, len(runs))
		if u := len(runs) - decided; u > 0 {
			line = fmt.Sprintf("%s %s held in %d of %d decided seeds, %d undecided", c.Name, c.Run, held, decided, u)
		}
		line += fmt.Sprintf(" (claimed: %s of %d)", c.Seeds, c.Of)
		if len(each) > 0 {
			line += ": " + strings.Join(each, ", ")
		}
		if len(runs) != c.Of {
			worse(Undecided)
			j.Reasons = append(j.Reasons, fmt.Sprintf("%s; the claim is about %d seeds, %d ran", line, c.Of, len(runs)))
			continue
		}
		// The undecided seeds may each count either way: the number of
		// seeds where the condition held lies in [held, held+undecided].
		some, all := false, true
		for n := held; n <= held+len(runs)-decided; n++ {
			if c.Seeds.Holds(float64(n)) {
				some = true
			} else {
				all = false
			}
		}
		switch {
		case all:
		case !some:
			worse(NotMet)
		default:
			worse(Undecided)
			line += "; the undecided seeds decide it"
		}
		j.Reasons = append(j.Reasons, line)
	}
	return j, facts
}
