package lab

import (
	"errors"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/checker"
)

// TestAcrossSeedsExpect: a claim across seeds is part of the expectation
// in words, makes it non-empty (each run alone: valid any) and is not
// judged on one run.
func TestAcrossSeedsExpect(t *testing.T) {
	sc, err := Parse("x.yaml", "x", []byte("expect:\n  across-seeds:\n    lost-write: \">0 in >=1 of 5\"\n    valid: false in >=1 of 5 seeds\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := sc.Expect
	if e.IsZero() || e.valid() != "any" {
		t.Errorf("IsZero %v, valid %q: want a non-empty expectation asking any validity of a run", e.IsZero(), e.valid())
	}
	if got, want := e.String(), "lost-write >0 in >=1 of 5 seeds, valid false in >=1 of 5 seeds"; got != want {
		t.Errorf("String %q, want %q", got, want)
	}
	if got := e.PerRun().String(); got != "anything (observed only)" {
		t.Errorf("per run: %q, want anything: dropping the claims must not make it 'valid'", got)
	}
	clean := &checker.Verdict{Valid: checker.Valid, Anomalies: map[string]int64{}}
	lossy := &checker.Verdict{Valid: checker.Invalid, Anomalies: map[string]int64{"lost-write": 3}}
	for _, v := range []*checker.Verdict{clean, lossy} {
		if j := e.Judge(v); j.Outcome != Met {
			t.Errorf("one run judged on a claim across seeds: %+v", j)
		}
	}
	// With per-run conditions too, those are judged and the claim is not.
	sc, err = Parse("x.yaml", "x", []byte("expect:\n  anomalies: {duplicate: 0}\n  across-seeds: {lost-write: \">0 in >=1 of 5\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if j := sc.Expect.Judge(&checker.Verdict{Valid: checker.Invalid, Anomalies: map[string]int64{"duplicate": 1}}); j.Outcome != NotMet {
		t.Errorf("per-run condition not judged: %+v", j)
	}
	if got := sc.Expect.PerRun().String(); got != "duplicate 0" {
		t.Errorf("per run: %q", got)
	}
}

// TestBadAcrossSeeds: parse errors name the file, line and field.
func TestBadAcrossSeeds(t *testing.T) {
	for _, tc := range []struct{ name, claim, want string }{
		{"no-in", `lost-write: ">0 of 5"`, `x.yaml:3: expect.across-seeds.lost-write: ">0 of 5": want "<per run> in <how many seeds> of <M>"`},
		{"no-of", `lost-write: ">0 in >=1"`, `expect.across-seeds.lost-write: ">0 in >=1": want`},
		{"unknown-anomaly", `lost-writes: ">0 in >=1 of 5"`, `x.yaml:3: expect.across-seeds.lost-writes: unknown anomaly "lost-writes" (known: valid, lost-write,`},
		{"run-cond", `lost-write: "lots in >=1 of 5"`, `expect.across-seeds.lost-write: "lots in >=1 of 5": the per-run condition "lots" is not a count`},
		{"run-duration", `lost-write: ">1s in >=1 of 5"`, `the per-run condition ">1s" is not a count`},
		{"seeds-cond", `lost-write: ">0 in some of 5"`, `"some" is not a number of seeds`},
		{"seeds-ratio", `lost-write: ">0 in >0.5x of 5"`, `">0.5x" is not a number of seeds`},
		{"m", `lost-write: ">0 in >=1 of five"`, `M (after "of") is the number of seeds`},
		{"m-zero", `lost-write: ">0 in 0 of 0"`, `M (after "of") is the number of seeds`},
		{"never", `lost-write: ">0 in >=6 of 5"`, `no number of seeds from 0 to 5 is >=6: the claim could never be met`},
		{"always", `lost-write: ">0 in >=0 of 5"`, `every number of seeds from 0 to 5 is >=0: the claim could never fail`},
		{"valid", `valid: "maybe in >=1 of 5"`, `expect.across-seeds.valid: "maybe in >=1 of 5": valid is true or false`},
		{"not-scalar", `lost-write: {in: 1}`, `x.yaml:3: want a claim across seeds like ">0 in >=1 of 5"`},
	} {
		body := "expect:\n  across-seeds:\n    " + tc.claim + "\n"
		_, err := Parse("x.yaml", "x", []byte(body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %s", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{">0 in >=1 of 5", "0 in 3 of 3 seeds", ">=10 in <=1 of 4", "> 0 in >= 2 of 2"} {
		if _, err := ParseSeedClaim("lost-write", SeedCond(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if c, err := ParseSeedClaim("G1a", ">0 in >=1 of 2"); err != nil || c.String() != "G1a >0 in >=1 of 2 seeds" {
		t.Errorf("alias: %+v %v", c, err)
	}
}

// TestJudgeSeeds: a set of seeds is met when the claim holds whatever
// the undecided seeds would have shown, not met when it fails whatever
// they would have shown, undecided otherwise.
func TestJudgeSeeds(t *testing.T) {
	lost := func(seed int64, o Outcome, n int64) SeedOutcome {
		v := checker.Valid
		if n > 0 {
			v = checker.Invalid
		}
		return SeedOutcome{Seed: seed, Outcome: o, Valid: v, Anomalies: map[string]int64{"lost-write": n}}
	}
	five := func(ns ...int64) []SeedOutcome {
		var out []SeedOutcome
		for i, n := range ns {
			out = append(out, lost(int64(11+i), Met, n))
		}
		return out
	}
	possible := Expect{AcrossSeeds: map[string]SeedCond{"lost-write": ">0 in >=1 of 5"}}
	never := Expect{AcrossSeeds: map[string]SeedCond{"lost-write": "0 in 5 of 5"}}
	rare := Expect{AcrossSeeds: map[string]SeedCond{"lost-write": ">0 in <=1 of 3"}}
	invalidOnce := Expect{AcrossSeeds: map[string]SeedCond{"valid": "false in >=1 of 3"}}
	aborted := Expect{AcrossSeeds: map[string]SeedCond{"G1a": ">0 in >=1 of 2"}}
	with := func(runs []SeedOutcome, i int, f func(*SeedOutcome)) []SeedOutcome {
		f(&runs[i])
		return runs
	}
	for _, tc := range []struct {
		name   string
		e      Expect
		runs   []SeedOutcome
		want   Outcome
		reason string // a reason that must be among the judgement's
	}{
		{"one-hit", possible, five(0, 3, 0, 0, 0), Met,
			"lost-write >0 held in 1 of 5 seeds (claimed: >=1 of 5): 11 (0), 12 (3), 13 (0), 14 (0), 15 (0)"},
		{"no-hit", possible, five(0, 0, 0, 0, 0), NotMet,
			"lost-write >0 held in 0 of 5 seeds (claimed: >=1 of 5): 11 (0), 12 (0), 13 (0), 14 (0), 15 (0)"},
		{"no-hit-one-not-set-up", possible, with(five(0, 0, 0, 0, 0), 2, func(r *SeedOutcome) { r.Outcome = NotSetUp }), Undecided,
			"lost-write >0 held in 0 of 4 decided seeds, 1 undecided (claimed: >=1 of 5): 11 (0), 12 (0), 13 (not set up), 14 (0), 15 (0); the undecided seeds decide it"},
		{"hit-one-not-set-up", possible, with(five(0, 7, 0, 0, 0), 2, func(r *SeedOutcome) { r.Outcome = NotSetUp }), Met,
			"lost-write >0 held in 1 of 4 decided seeds, 1 undecided (claimed: >=1 of 5)"},
		// An undecided run's count is not counted, even a hit: the run was cut short.
		{"hit-only-in-undecided", possible, with(five(0, 0, 9, 0, 0), 2, func(r *SeedOutcome) { r.Outcome = Undecided }), Undecided,
			"13 (undecided)"},
		{"error-and-skipped", possible, with(with(five(0, 0, 0, 0, 0), 0, func(r *SeedOutcome) { r.Missing = "error" }), 4, func(r *SeedOutcome) { r.Missing = "skipped" }), Undecided,
			"11 (error), 12 (0), 13 (0), 14 (0), 15 (skipped)"},
		{"own-not-met", possible, with(five(0, 3, 0, 0, 0), 0, func(r *SeedOutcome) { r.Outcome = NotMet }), NotMet,
			"seed 11 did not meet its per-run expectation"},
		// A not-met run's counts are facts: it ran to the end.
		{"own-not-met-counts", possible, with(five(0, 0, 0, 0, 0), 1, func(r *SeedOutcome) { r.Outcome = NotMet; r.Anomalies["lost-write"] = 4 }), NotMet,
			"lost-write >0 held in 1 of 5 seeds"},
		{"never-fails-despite-undecided", never, with(five(0, 2, 0, 0, 0), 4, func(r *SeedOutcome) { r.Outcome = Undecided }), NotMet,
			"lost-write 0 held in 3 of 4 decided seeds, 1 undecided (claimed: 5 of 5)"},
		{"never-holds", never, five(0, 0, 0, 0, 0), Met, "lost-write 0 held in 5 of 5 seeds"},
		{"rare-too-often", rare, five(1, 1, 0), NotMet, "lost-write >0 held in 2 of 3 seeds (claimed: <=1 of 3)"},
		{"rare-ok", rare, five(0, 1, 0), Met, ""},
		{"rare-undecided", rare, with(five(0, 1, 0), 2, func(r *SeedOutcome) { r.Outcome = NotSetUp }), Undecided, ""},
		{"valid-false-once", invalidOnce, five(0, 5, 0), Met, "valid false held in 1 of 3 seeds (claimed: >=1 of 3): 11 (true), 12 (false), 13 (true)"},
		{"valid-unknown", invalidOnce, with(five(0, 0, 0), 1, func(r *SeedOutcome) { r.Valid = checker.Unknown }), Undecided,
			"12 (valid unknown)"},
		{"alias", aborted, []SeedOutcome{{Seed: 1, Outcome: Met, Anomalies: map[string]int64{checker.AbortedRead: 2}}, {Seed: 2, Outcome: Met}}, Met,
			"G1a >0 held in 1 of 2 seeds"},
		{"fewer-runs", possible, five(0, 0, 0), Undecided, "the claim is about 5 seeds, 3 ran"},
		{"more-runs", possible, five(0, 0, 0, 0, 0, 1), Undecided, "the claim is about 5 seeds, 6 ran"},
	} {
		j := tc.e.JudgeSeeds(tc.runs)
		if j.Outcome != tc.want {
			t.Errorf("%s: %v, want %v (%q)", tc.name, j.Outcome, tc.want, j.Reasons)
		}
		if tc.reason != "" && !strings.Contains(strings.Join(j.Reasons, "\n"), tc.reason) {
			t.Errorf("%s: reasons %q lack %q", tc.name, j.Reasons, tc.reason)
		}
		if j.Expect != tc.e.acrossString() || j.Expect == "" {
			t.Errorf("%s: expect %q", tc.name, j.Expect)
		}
	}
	// The facts per seed, as table.json keeps them.
	_, facts := possible.judgeSeeds(with(five(0, 3, 0, 0, 0), 4, func(r *SeedOutcome) { r.Missing = "error" }))
	var got []string
	for _, fs := range facts {
		for _, f := range fs {
			got = append(got, f.Name+"="+f.Value+":"+f.Held)
		}
	}
	if want := "lost-write=0:no lost-write=3:yes lost-write=0:no lost-write=0:no lost-write=:unknown"; strings.Join(got, " ") != want {
		t.Errorf("facts %s, want %s", strings.Join(got, " "), want)
	}
}
