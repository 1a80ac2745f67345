package lab

import (
	"encoding/xml"
	"fmt"
	"os"
	"strings"
)

// JUnit XML, as CI systems read it: one testsuite per matrix, one testcase
// per cell; a cell whose expectation was not met is a failure naming the
// anomalies, one that could not run an error, one not run skipped.
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

// JUnit encodes a matrix result.
func JUnit(r *MatrixResult) ([]byte, error) {
	s := junitSuite{Name: "isrlab matrix " + r.Matrix, Tests: len(r.Cells), Time: fmt.Sprintf("%.1f", r.Seconds), Stamp: r.Started}
	for _, c := range r.Cells {
		tc := junitCase{Class: "isrlab." + r.Matrix + "." + c.Preset, Name: strings.TrimPrefix(c.Cell, c.Preset+"/"),
			Time: fmt.Sprintf("%.1f", c.Seconds)}
		detail := fmt.Sprintf("expect: %s\nvalid: %s\nanomalies: %v\navailability: %.3f\nmax unavailable: %.1fs\nrun: %s\n",
			c.Expect, c.Valid, c.Anomalies, c.Avail, c.MaxUnavS, c.Dir)
		switch {
		case c.State == "error":
			s.Errors++
			tc.Error = &junitProblem{Message: firstLine(c.Error), Type: "error", Text: c.Error + "\n" + detail}
		case c.State == "skipped":
			s.Skipped++
			tc.Skipped = &junitProblem{Message: "not run: the matrix was stopped"}
		case c.Outcome == NotMet.String():
			s.Failures++
			tc.Failure = &junitProblem{Message: strings.Join(c.Reasons, "; "), Type: "expectation", Text: detail}
		case c.Outcome == Undecided.String():
			s.Failures++
			tc.Failure = &junitProblem{Message: "undecided: " + strings.Join(c.Reasons, "; "), Type: "undecided", Text: detail}
		default:
			tc.SystemOut = detail
		}
		s.Cases = append(s.Cases, tc)
	}
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

func writeJUnitFile(path string, r *MatrixResult) error {
	b, err := JUnit(r)
	if err != nil {
		return fmt.Errorf("%w: junit: %v", ErrInternal, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrInternal, err)
	}
	return nil
}
