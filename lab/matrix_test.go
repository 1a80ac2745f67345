package lab

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/results"
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
	missing := pythonMissing()
	for _, e := range ents {
		if e.Name() == "clients.yaml" && missing != "" {
			t.Logf("not loading clients.yaml: %s", missing)
			continue
		}
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
		{"bad-client", "presets: [safe]\nschedules: [{name: a}]\nclients: [kafka-js]\n", "workload.client: client \"kafka-js\": use franz-go, sarama, kafka-go, librdkafka, kafka-python, kafkajs or exec"},
		{"client-presets", "presets: [safe, acks1]\nschedules: [{name: a}]\nclients: [{name: kg, client: kafka-go, presets: [safe+acks1]}]\n", "clients: kg: presets: \"safe+acks1\" is none of the matrix's presets (safe, acks1)"},
		{"client-preset-cannot", "presets: [safe]\nschedules: [{name: a}]\nclients: [kafka-go]\n", "client kafka-go: kafka-go has no idempotent producer (enable.idempotence)"},
		{"client-preset-in-flight", "presets: [[safe, in-flight-5-no-idempotence]]\nschedules: [{name: a}]\nclients: [kafka-go]\n", "client kafka-go: max.in.flight.requests.per.connection: kafka-go's Writer sends one request at a time per partition"},
		{"client-expect-skipped", "presets: [safe, acks1]\nschedules: [{name: a}]\nclients: [{name: kg, client: kafka-go, presets: [acks1]}]\nexpect: {safe@kg: {valid: any}}\n", "\"safe@kg\" names no preset"},
		{"dup-client", "presets: [safe]\nschedules: [{name: a}]\nclients: [sarama, sarama]\n", "clients: \"sarama\": each client needs a distinct name"},
		{"client-field", "presets: [safe]\nschedules: [{name: a}]\nclients: [{name: x, client: exec, exe: [a]}]\n", "clients: field exe not found"},
		{"client-cannot", "presets: [safe]\nschedules: [{name: a}]\nclients: [kafka-go]\nbase: {workload: {type: txn}}\n", "client kafka-go: the txn workload runs on franz-go and sarama only"},
		{"client-expect", "presets: [safe]\nschedules: [{name: a}]\nclients: [sarama]\nexpect: {safe@kafka: {valid: any}}\n", "\"safe@kafka\" names no preset"},
	} {
		p := filepath.Join(t.TempDir(), "m.yaml")
		os.WriteFile(p, []byte(tc.body), 0o644)
		if _, err := LoadMatrix(p); !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
}

// TestMatrixClients: a clients axis runs every preset once per client,
// cells named PRESET@CLIENT, each scenario with its client, and the most
// specific expectation wins (preset@client over preset).
func TestMatrixClients(t *testing.T) {
	if missing := pythonMissing(); missing != "" {
		t.Skip(missing)
	}
	m, err := LoadMatrix("clients")
	if err != nil {
		t.Fatal(err)
	}
	// franz-go, sarama and librdkafka run the 3 presets, kafka-go and
	// kafka-python the 2 without idempotence.
	if len(m.Cells) != 3*3*4+2*2*4 {
		t.Fatalf("%d cells, want 3 clients x 3 presets + 2 clients x 2 presets, x 4 schedules", len(m.Cells))
	}
	byID := map[string]Cell{}
	for _, c := range m.Cells {
		byID[c.ID()] = c
	}
	if _, ok := byID["clients/safe@kafka-go/leader-kill"]; ok {
		t.Error("kafka-go runs safe, which needs an idempotent producer")
	}
	if c := byID["clients/safe+retries-no-idempotence@kafka-python/leader-kill"]; c.Scenario.Workload.Idempotent || c.Scenario.Workload.MaxInFlight != 1 ||
		c.Scenario.Workload.Acks != "all" || c.Scenario.Expect.valid() != "any" || c.Scenario.Expect.Anomalies["lost-write"].String() != "0" {
		t.Errorf("safe+retries-no-idempotence@kafka-python: %+v %+v", c.Scenario.Workload.Config, c.Scenario.Expect)
	}
	c, ok := byID["clients/safe@sarama/leader-kill"]
	if !ok || c.Preset != "safe@sarama" || c.Scenario.Workload.ClientSpec.Name() != "sarama" || !c.Scenario.Workload.Idempotent {
		t.Errorf("safe@sarama/leader-kill: %+v", c)
	}
	if c := byID["clients/acks1-retries@franz-go/random-halves"]; c.Scenario.Workload.ClientSpec.Name() != "franz-go" || c.Scenario.Workload.Acks != "1" {
		t.Errorf("acks1-retries@franz-go/random-halves: %+v", c.Scenario.Workload)
	}
	body := "presets: [safe]\nschedules: [{name: a}]\nclients: [franz-go, {name: own, client: exec, exec: [./drv]}]\n" +
		"expect: {safe: {valid: true}, safe@own: {valid: any}}\n"
	p := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(p, []byte(body), 0o644)
	m, err = LoadMatrix(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cells {
		want := map[string]string{"safe@franz-go": "true", "safe@own": "any"}[c.Preset]
		if got := c.Scenario.Expect.valid(); got != want {
			t.Errorf("%s: expect valid %s, want %s", c.ID(), got, want)
		}
		if c.Preset == "safe@own" && (c.Scenario.Workload.Client != "exec" || len(c.Scenario.Workload.Exec) != 1) {
			t.Errorf("%s: workload %+v", c.ID(), c.Scenario.Workload.ClientSpec)
		}
	}
}

// TestMatrixCommitPresets: the client presets auto-commit and
// manual-commit set the queue workload's commit mode, and a client's
// presets: can name them; sarama runs the queue workload, kafka-go is
// refused it.
func TestMatrixCommitPresets(t *testing.T) {
	body := "presets: [[safe, auto-commit], [safe, manual-commit]]\nschedules: [{name: a}]\n" +
		"clients: [franz-go, {name: sarama, client: sarama, presets: [safe+manual-commit]}]\n" +
		"base: {workload: {type: queue, crash.every: 4s}}\nexpect: {safe+manual-commit: {anomalies: {skipped: 0}}}\n"
	p := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(p, []byte(body), 0o644)
	m, err := LoadMatrix(p)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range m.Cells {
		ids = append(ids, c.Preset)
		manual := strings.Contains(c.Preset, "manual-commit")
		if c.Scenario.Workload.ManualCommit != manual || c.Scenario.Workload.Type != "queue" {
			t.Errorf("%s: manual.commit %v, type %s", c.ID(), c.Scenario.Workload.ManualCommit, c.Scenario.Workload.Type)
		}
	}
	if want := []string{"safe+auto-commit@franz-go", "safe+manual-commit@franz-go", "safe+manual-commit@sarama"}; !slices.Equal(ids, want) {
		t.Errorf("cells %v, want %v", ids, want)
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

// fakeRuns stands in for Run: acks1 cells lose lost[seed] writes, every
// other cell none; the cell of seed notSetUp was not set up.
func fakeRuns(lost map[int64]int64, notSetUp int64) func(context.Context, Scenario, Options) (Result, error) {
	return func(_ context.Context, sc Scenario, _ Options) (Result, error) {
		v := &checker.Verdict{Valid: checker.Valid, Anomalies: map[string]int64{},
			Availability: checker.Availability{Overall: checker.Ratio{Total: 10, OK: 10, Fraction: 1}}}
		if n := lost[sc.Seed]; n > 0 && sc.Workload.Acks == "1" {
			v.Valid, v.Anomalies[checker.LostWrite] = checker.Invalid, n
		}
		j := sc.Expect.Judge(v)
		if sc.Seed == notSetUp {
			j = Judgement{Outcome: NotSetUp, Expect: sc.Expect.String(), Reasons: []string{"kill: its condition did not hold within 10s"}}
		}
		return Result{Verdict: v, Judgement: j}, nil
	}
}

// TestMatrixAcrossSeeds: a preset/schedule whose expectation claims
// something across seeds is judged on the set of its seeds, besides its
// cells; table.txt, table.json, junit.xml, report.html and the exit code
// show it.
func TestMatrixAcrossSeeds(t *testing.T) {
	m, err := LoadMatrix("testdata/across-seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type junitCase struct {
		Class   string `xml:"classname,attr"`
		Name    string `xml:"name,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Type    string `xml:"type,attr"`
		} `xml:"failure"`
		Out string `xml:"system-out"`
	}
	for _, tc := range []struct {
		name     string
		lost     map[int64]int64
		notSetUp int64
		outcome  string
		code     int
		reason   string
		failures []string // failing testcases, class.name
		text     string   // in the group's testcase text (failure or system-out)
	}{
		{"possible-and-seen", map[int64]int64{2: 17}, 0, results.Met, 0,
			"lost-write >0 held in 1 of 3 seeds (claimed: >=1 of 3): 1 (0), 2 (17), 3 (0)", nil,
			"seed 2: met; lost-write 17 (held: yes) [acks1/leader-kill/seed-2]"},
		// A seed that merely did not show the possible loss fails no testcase
		// of its own; the group fails when no seed shows it.
		{"never-seen", nil, 0, results.NotMet, 1,
			"lost-write >0 held in 0 of 3 seeds (claimed: >=1 of 3): 1 (0), 2 (0), 3 (0)",
			[]string{"isrlab.across.acks1.leader-kill/across-seeds"}, ""},
		{"not-set-up-undecides", nil, 3, results.Undecided, 2,
			"lost-write >0 held in 0 of 2 decided seeds, 1 undecided (claimed: >=1 of 3): 1 (0), 2 (0), 3 (not set up); the undecided seeds decide it",
			[]string{"isrlab.across.acks1.leader-kill/seed-3", "isrlab.across.safe.leader-kill/seed-3", "isrlab.across.acks1.leader-kill/across-seeds"},
			"seed 3: not set up; lost-write 0 (held: unknown)"},
		{"seen-despite-not-set-up", map[int64]int64{1: 4}, 3, results.Met, 2, "lost-write >0 held in 1 of 2 decided seeds, 1 undecided",
			[]string{"isrlab.across.acks1.leader-kill/seed-3", "isrlab.across.safe.leader-kill/seed-3"}, ""},
	} {
		var out bytes.Buffer
		res, err := RunMatrix(context.Background(), m, MatrixOptions{Options: Options{ResultsDir: t.TempDir(), Out: &out},
			run: fakeRuns(tc.lost, tc.notSetUp)})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(res.Groups) != 1 {
			t.Fatalf("%s: groups %+v, want acks1/leader-kill's only", tc.name, res.Groups)
		}
		g := res.Groups[0]
		if g.Group != "acks1/leader-kill" || g.Outcome != tc.outcome || g.Expect != "lost-write >0 in >=1 of 3 seeds" ||
			!strings.Contains(strings.Join(g.Reasons, "\n"), tc.reason) || len(g.Seeds) != 3 || g.Seeds[1].Cell != "acks1/leader-kill/seed-2" {
			t.Errorf("%s: group %+v\nwant %s with reason %q", tc.name, g, tc.outcome, tc.reason)
		}
		if c := res.Code(); c != tc.code {
			t.Errorf("%s: code %d, want %d", tc.name, c, tc.code)
		}
		for _, c := range res.Cells {
			want := "valid"
			if c.Preset == "acks1" {
				want = "anything (observed only)" // the claim is the group's
			}
			if c.Expect != want {
				t.Errorf("%s: %s expects %q, want %q", tc.name, c.Cell, c.Expect, want)
			}
		}
		txt, err := os.ReadFile(filepath.Join(res.Dir, "table.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"across seeds       expect                           outcome",
			"acks1/leader-kill  lost-write >0 in >=1 of 3 seeds  " + strings.ToUpper(tc.outcome), "  " + tc.reason} {
			if !strings.Contains(string(txt), want) || !strings.Contains(out.String(), want) {
				t.Errorf("%s: table lacks %q:\n%s", tc.name, want, txt)
			}
		}
		tab, err := results.ReadTable(os.DirFS(res.Dir))
		if err != nil || len(tab.Groups) != 1 || tab.Groups[0].Seeds[2].Facts[0].Held != map[bool]string{true: "unknown", false: "no"}[tc.notSetUp == 3] {
			t.Errorf("%s: table.json groups %+v %v", tc.name, tab, err)
		}
		b, err := os.ReadFile(filepath.Join(res.Dir, "junit.xml"))
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Suites []struct {
				Tests    int         `xml:"tests,attr"`
				Failures int         `xml:"failures,attr"`
				Cases    []junitCase `xml:"testcase"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		var failing []string
		var group *junitCase
		for i, c := range s.Suites[0].Cases {
			if c.Failure != nil {
				failing = append(failing, c.Class+"."+c.Name)
			}
			if c.Name == "leader-kill/across-seeds" {
				group = &s.Suites[0].Cases[i]
			}
		}
		if s.Suites[0].Tests != 7 || !slices.Equal(failing, tc.failures) {
			t.Errorf("%s: %d testcases, failing %q, want 7 and %q", tc.name, s.Suites[0].Tests, failing, tc.failures)
		}
		if group == nil || group.Class != "isrlab.across.acks1" {
			t.Fatalf("%s: no group testcase: %s", tc.name, b)
		}
		text := group.Out
		if group.Failure != nil {
			text = group.Failure.Message + "\n" + string(b)
		}
		if tc.text != "" && !strings.Contains(text, tc.text) {
			t.Errorf("%s: group testcase lacks %q:\n%s", tc.name, tc.text, b)
		}
		page, err := os.ReadFile(filepath.Join(res.Dir, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`data-group="acks1/leader-kill" data-status="` + tc.outcome + `"`, `<section id="across-seeds">`,
			`seed 2: met</a>`} {
			if !strings.Contains(string(page), want) {
				t.Errorf("%s: report.html lacks %s", tc.name, want)
			}
		}
	}
}

// TestMatrixAcrossSeedsCount: a claim about M seeds in a matrix of
// another number of seeds is refused when the matrix is loaded.
func TestMatrixAcrossSeedsCount(t *testing.T) {
	base := "presets: [acks1]\nschedules: [{name: a}]\n"
	for _, tc := range []struct{ name, body, want string }{
		{"fewer", base + "seeds: [1, 2]\nexpect: {acks1: {across-seeds: {lost-write: \">0 in >=1 of 3\"}}}\n",
			`cell m/acks1/a/seed-1: expect acks1: across-seeds.lost-write ">0 in >=1 of 3" is about 3 seeds, and the matrix runs 2 (seeds:)`},
		{"no-seeds", base + "expect: {acks1/a: {across-seeds: {valid: \"false in >=1 of 3\"}}}\n",
			`expect acks1/a: across-seeds.valid "false in >=1 of 3" is about 3 seeds, and the matrix runs 1`},
		{"bad-claim", base + "seeds: [1, 2]\nexpect: {acks1: {across-seeds: {lost-write: \">0 in >=1\"}}}\n",
			`expect.across-seeds.lost-write: ">0 in >=1": want`},
	} {
		p := filepath.Join(t.TempDir(), "m.yaml")
		os.WriteFile(p, []byte(tc.body), 0o644)
		if _, err := LoadMatrix(p); !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant ErrScenario containing %s", tc.name, err, tc.want)
		}
	}
}

// TestTxnUncleanMatrix: the txn-unclean matrix's cells are the library
// scenario txn/unclean-lost-commits (whose seeds were measured with
// isrlab run), only named, seeded and expected otherwise.
func TestTxnUncleanMatrix(t *testing.T) {
	m, err := LoadMatrix("txn-unclean")
	if err != nil {
		t.Fatal(err)
	}
	lib, err := Lookup("txn/unclean-lost-commits")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) != 8 {
		t.Fatalf("%d cells, want the eight seeds the claim is about", len(m.Cells))
	}
	for i, c := range m.Cells {
		sc := c.Scenario
		if sc.Seed != int64(i+1) || sc.Expect.String() != "lost-write >0 in >=1 of 8 seeds" {
			t.Errorf("%s: seed %d, expect %q", c.ID(), sc.Seed, sc.Expect)
		}
		sc.Name, sc.Description, sc.Seed, sc.Expect = lib.Name, lib.Description, lib.Seed, lib.Expect
		sc.file, sc.root = lib.file, lib.root
		a, _ := yaml.Marshal(sc)
		b, _ := yaml.Marshal(lib)
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the library scenario:\n%s\nlibrary:\n%s", c.ID(), a, b)
		}
	}
}

// TestMatrixOnly: --only keeps the cells whose id matches, and a pattern
// that matches none, or a bad one, is an error naming the matrix.
func TestMatrixOnly(t *testing.T) {
	m, err := LoadMatrix("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	all := len(m.Cells)
	sched := m.Cells[0].ID()[strings.LastIndex(m.Cells[0].ID(), "/")+1:]
	if err := m.Only("quickstart/*/" + sched); err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) == 0 || len(m.Cells) >= all {
		t.Fatalf("%d of %d cells kept for schedule %s", len(m.Cells), all, sched)
	}
	for _, c := range m.Cells {
		if !strings.HasSuffix(c.ID(), "/"+sched) {
			t.Errorf("kept %s", c.ID())
		}
	}
	if err := m.Only("quickstart/none/*"); err == nil || !strings.Contains(err.Error(), "matches no cell of matrix quickstart") {
		t.Errorf("no match: %v", err)
	}
	if err := m.Only("[bad"); err == nil {
		t.Error("a bad pattern was accepted")
	}
}
