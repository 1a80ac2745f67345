package results

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strings"
)

// JUnit XML, as CI systems read it (Jenkins, GitLab, GitHub test
// reporters): one testsuite per run or matrix, one testcase per run or
// cell, and one per matrix group of claims across seeds (named
// schedule/across-seeds, its seeds' outcomes in its text). An expectation not met is a failure whose message gives the
// reasons and the anomaly counts, an undecided one a failure of type
// "undecided", a cell that could not run an error, one not run skipped.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Stamp    string      `xml:"timestamp,attr,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class     string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *junitProblem `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// junitCell is what a testcase is made of, for a run or a cell.
type junitCell struct {
	class, name string
	seconds     float64
	status      string // Cell.Status
	err         string
	reasons     []string
	anomalies   map[string]int64
	detail      string
	shrunk      string // what the smallest failing scenario is, if shrunk
}

func (c junitCell) testcase(s *junitSuite) junitCase {
	tc := junitCase{Class: c.class, Name: c.name, Time: fmt.Sprintf("%.1f", c.seconds)}
	// The reasons, then the anomalies they do not already name, with
	// their counts.
	msg := strings.Join(c.reasons, "; ")
	var unnamed []string
	for _, k := range anomalyKinds(c.anomalies) {
		if !strings.Contains(msg, k) {
			unnamed = append(unnamed, fmt.Sprintf("%s=%d", k, c.anomalies[k]))
		}
	}
	if len(unnamed) > 0 {
		if msg != "" {
			msg += "; "
		}
		msg += "anomalies: " + strings.Join(unnamed, ", ")
	}
	if c.shrunk != "" {
		msg += " (shrunk: " + c.shrunk + ")"
	}
	switch c.status {
	case "error":
		s.Errors++
		tc.Error = &junitProblem{Message: firstLine(c.err), Type: "error", Text: c.err + "\n" + c.detail}
	case "skipped":
		s.Skipped++
		m := "not run: the matrix was stopped"
		if len(c.reasons) > 0 {
			m = strings.Join(c.reasons, "; ")
		}
		tc.Skipped = &junitProblem{Message: m}
	case NotMet:
		s.Failures++
		tc.Failure = &junitProblem{Message: msg, Type: "expectation", Text: c.detail}
	case Undecided:
		s.Failures++
		tc.Failure = &junitProblem{Message: "undecided: " + msg, Type: "undecided", Text: c.detail}
	case NotSetUp:
		s.Failures++
		tc.Failure = &junitProblem{Message: msg, Type: "not-set-up", Text: c.detail}
	default:
		tc.SystemOut = c.detail
	}
	s.Tests++
	return tc
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func encodeJUnit(s junitSuite) ([]byte, error) {
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("junit: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// MatrixJUnit encodes a matrix: a testcase per cell, named by its schedule
// (and seed) in the class of its preset.
func MatrixJUnit(t *Table) ([]byte, error) {
	s := junitSuite{Name: "isrlab matrix " + t.Matrix, Time: fmt.Sprintf("%.1f", t.Seconds), Stamp: t.Started}
	for _, c := range t.Cells {
		detail := fmt.Sprintf("expect: %s\nvalid: %s\nanomalies: %v\navailability: %.3f\nmax unavailable: %.1fs\nrun: %s\n",
			c.Expect, c.Valid, c.Anomalies, c.Avail, c.MaxUnavS, c.Dir)
		if sh := c.Shrunk; sh != nil {
			// The smallest failing scenario first: what a reader of the
			// failure wants to know.
			detail = fmt.Sprintf("fails with: %s%s\nreproducer: %s\n", sh.FailsWith, rateNote(sh.Rate), filepath.Join(c.Dir, sh.Reproducer)) + detail
		}
		jc := junitCell{class: "isrlab." + t.Matrix + "." + c.Preset, name: strings.TrimPrefix(c.Cell, c.Preset+"/"),
			seconds: c.Seconds, status: c.Status(), err: c.Error, reasons: c.Reasons, anomalies: c.Anomalies, detail: detail}
		if sh := c.Shrunk; sh != nil {
			jc.shrunk = "fails with: " + sh.FailsWith + rateNote(sh.Rate)
		}
		s.Cases = append(s.Cases, jc.testcase(&s))
	}
	for _, g := range t.Groups {
		jc := junitCell{class: "isrlab." + t.Matrix + "." + g.Preset, name: g.Schedule + "/across-seeds",
			status: g.Status(), reasons: g.Reasons, detail: groupDetail(g)}
		s.Cases = append(s.Cases, jc.testcase(&s))
	}
	return encodeJUnit(s)
}

// groupDetail lists a group's seeds: each one's own outcome and what it
// showed for every claim (held: yes, no or unknown).
func groupDetail(g Group) string {
	var b strings.Builder
	fmt.Fprintf(&b, "expect: %s\n", g.Expect)
	for _, r := range g.Reasons {
		fmt.Fprintf(&b, "%s\n", r)
	}
	for _, sd := range g.Seeds {
		fmt.Fprintf(&b, "seed %d: %s", sd.Seed, sd.Status)
		for _, f := range sd.Facts {
			fmt.Fprintf(&b, "; %s %s (held: %s)", f.Name, orDash(f.Value), f.Held)
		}
		fmt.Fprintf(&b, " [%s]\n", sd.Cell)
	}
	return b.String()
}

// rateNote is "; " and the rate, when there is one.
func rateNote(rate string) string {
	if rate == "" {
		return ""
	}
	return "; " + rate
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RunJUnit encodes a single run: one testcase, named by the scenario.
func RunJUnit(o *Outcome) ([]byte, error) {
	class, name := "isrlab.run", o.Scenario
	if i := strings.LastIndex(o.Scenario, "/"); i >= 0 {
		class, name = "isrlab."+strings.ReplaceAll(o.Scenario[:i], "/", "."), o.Scenario[i+1:]
	}
	status := o.Outcome
	if status == "" {
		status = Undecided
	}
	detail := fmt.Sprintf("expect: %s\nvalid: %s\nanomalies: %v\nseed: %d\nrun id: %s\n",
		o.Expect, o.Valid, o.Anomalies, o.Seed, o.RunID)
	if o.Incomplete {
		detail += "incomplete: the run was cut short\n"
	}
	s := junitSuite{Name: "isrlab run " + o.Scenario, Time: fmt.Sprintf("%.1f", o.Seconds), Stamp: o.Started}
	jc := junitCell{class: class, name: name, seconds: o.Seconds, status: status, reasons: o.Reasons, anomalies: o.Anomalies, detail: detail}
	s.Cases = append(s.Cases, jc.testcase(&s))
	return encodeJUnit(s)
}
