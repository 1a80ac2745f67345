package lab

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLibraryMatrices(t *testing.T) {
	m, err := LoadMatrix("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) != 4 {
		t.Fatalf("quickstart: %d cells, want acks1 and safe x leader-kill and leader-isolated", len(m.Cells))
	}
	want := map[string]string{
		"quickstart/acks1/leader-kill":     "anything (observed only)",
		"quickstart/acks1/leader-isolated": "lost-write >0",
		"quickstart/safe/leader-kill":      "valid",
		"quickstart/safe/leader-isolated":  "valid",
	}
	for _, c := range m.Cells {
		if got := c.Scenario.Expect.String(); got != want[c.ID()] {
			t.Errorf("%s: expect %q, want %q", c.ID(), got, want[c.ID()])
		}
		if c.Scenario.Cluster.Coordinators != 3 || c.Scenario.Topic.Partitions != 3 || len(c.Scenario.Faults) != 1 {
			t.Errorf("%s: base not applied: %+v", c.ID(), c.Scenario)
		}
	}
	if a := m.Cells[0].Scenario; a.Workload.Acks != "1" || a.Workload.Idempotent {
		t.Errorf("acks1 preset not applied: %+v", a.Workload)
	}
	ents, _ := os.ReadDir("../scenarios/matrices")
	for _, e := range ents {
		if _, err := LoadMatrix(filepath.Join("../scenarios/matrices", e.Name())); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
}

func TestBadMatrices(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "name: m\n", "a matrix needs presets and schedules"},
		{"unknown-key", "name: m\npresets: [safe]\nschedules: [{name: a}]\nbogus: 1\n", "m.yaml:4: field bogus not found"},
		{"dup-schedule", "presets: [safe]\nschedules: [{name: a}, {name: a}]\n", "distinct name"},
		{"bad-preset", "presets: [safest]\nschedules: [{name: a}]\n", "no preset \"safest\""},
		{"bad-expect-key", "presets: [safe]\nschedules: [{name: a}]\nexpect: {acks1: {valid: any}}\n", "\"acks1\" names no preset"},
		{"base-faults", "presets: [safe]\nschedules: [{name: a}]\nbase: {faults: []}\n", "base: faults is set by the matrix"},
		{"cell-target", "presets: [safe]\nschedules: [{name: a, faults: [{kind: kill, nodes: [b9]}]}]\n", "target b9"},
		{"from-missing", "presets: [safe]\nschedules: [{name: a, from: seed999/x}]\n", "no scenario \"seed999/x\""},
	} {
		p := filepath.Join(t.TempDir(), "m.yaml")
		os.WriteFile(p, []byte(tc.body), 0o644)
		if _, err := LoadMatrix(p); !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
}

func TestMatrixCodeAndJUnit(t *testing.T) {
	r := &MatrixResult{Matrix: "m", Seconds: 12, Cells: []CellResult{
		{Cell: "safe/kill", Preset: "safe", State: "done", Outcome: "met", Valid: "true"},
		{Cell: "acks1/kill", Preset: "acks1", State: "done", Outcome: "not met", Valid: "false",
			Anomalies: map[string]int64{"lost-write": 12}, Reasons: []string{"expected lost-write 0, got 12"}},
		{Cell: "safe/part", Preset: "safe", State: "skipped"},
	}}
	if c := r.Code(); c != 1 {
		t.Errorf("code %d, want 1 (a cell did not meet its expectation)", c)
	}
	b, err := JUnit(r)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Skipped  int `xml:"skipped,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	su := s.Suites[0]
	if su.Tests != 3 || su.Failures != 1 || su.Skipped != 1 {
		t.Errorf("suite %+v", su)
	}
	f := su.Cases[1].Failure
	if f == nil || f.Message != "expected lost-write 0, got 12" || !strings.Contains(f.Text, "lost-write:12") || su.Cases[1].Class != "isrlab.m.acks1" || su.Cases[1].Name != "kill" {
		t.Errorf("failing case: %+v %+v", su.Cases[1], f)
	}
	r.Cells[1].Outcome, r.Cells[1].State = "", "error"
	if c := r.Code(); c != 255 {
		t.Errorf("code %d, want 255 (a cell could not run)", c)
	}
	r.Cells[1].State, r.Cells[1].Outcome = "done", "met"
	if c := r.Code(); c != 2 {
		t.Errorf("code %d, want 2 (a cell was skipped)", c)
	}
}

// TestMatrixStopped: a matrix stopped before its cells run marks them
// skipped and still writes its table and JUnit.
func TestMatrixStopped(t *testing.T) {
	m, err := LoadMatrix("smoke")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	res, err := RunMatrix(ctx, m, MatrixOptions{Options: Options{ResultsDir: dir, Binary: "/bin/false"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cells {
		if c.State != "skipped" {
			t.Errorf("%s: %s", c.Cell, c.State)
		}
	}
	if res.Code() != 2 {
		t.Errorf("code %d", res.Code())
	}
	for _, f := range []string{"table.json", "table.txt", "junit.xml"} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestMatrixGeneratedSchedule: a matrix schedule may be a generated one.
func TestMatrixGeneratedSchedule(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(p, []byte(`presets: [safe]
schedules:
  - name: halves
    schedule:
      type: every
      interval: 10s
      hold: 4s
      mix:
        - {weight: 1, fault: {kind: partition, topology: random-halves}}
`), 0o644)
	m, err := LoadMatrix(p)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := m.Cells[0].Scenario.ScheduleEvents()
	if err != nil || m.Cells[0].Scenario.Schedule == nil || len(ev) != 5 { // starts at 10s and 20s, their stops, the final heal-all
		t.Errorf("schedule %+v, events %d, %v", m.Cells[0].Scenario.Schedule, len(ev), err)
	}
}
