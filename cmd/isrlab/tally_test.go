package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/lab"
	"github.com/isrlab/isrlab/results"
)

// TestScenariosTally: `isrlab scenarios tally` adds up sweeps per
// scenario, exits 1 when a counted run missed, names the scenarios with
// the fewest runs, and refuses a directory that is not there.
func TestScenariosTally(t *testing.T) {
	scs, err := lab.SelectLibrary([]string{"leader-kill"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "verify", "s1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(outcome string) {
		b, _ := json.Marshal(lab.VerifyResult{Started: "2026-12-07T00:00:00Z", Hog: 2, HogCPUSeconds: 100, Scenarios: []lab.Tally{{
			Scenario: "leader-kill", Digest: lab.ScenarioDigest(scs[0]),
			Runs: []lab.SeedRun{{Seed: 11, Outcome: results.Met}, {Seed: 12, Outcome: outcome}},
		}}})
		if err := os.WriteFile(filepath.Join(dir, lab.VerifyFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(results.Met)
	root := filepath.Dir(dir)
	code, out := runCLI(t, "scenarios", "tally", root, "--name", "leader-kill", "--name", "zombie-leader/")
	if code != 0 || !strings.Contains(out, "leader-kill") || !strings.Contains(out, "2 of 2") {
		t.Errorf("all met: exit %d:\n%s", code, out)
	}
	write(results.NotMet)
	code, out = runCLI(t, "scenarios", "tally", root, "--markdown")
	if code != 1 || !strings.Contains(out, "| `leader-kill` | - | 1 of 2 (1 not met) |") || !strings.Contains(out, "12 (hog)") {
		t.Errorf("a miss: exit %d:\n%s", code, out)
	}
	code, out = runCLI(t, "scenarios", "tally", root, "--fewest", "3", "--hog", "--name", "leader-kill", "--name", "zombie-leader/")
	if code != 0 || strings.TrimSpace(out) != "zombie-leader/acks1\nzombie-leader/safe\nleader-kill" {
		t.Errorf("--fewest: exit %d:\n%s", code, out)
	}
	if code, out := runCLI(t, "scenarios", "tally", filepath.Join(root, "nowhere")); code != 254 || !strings.Contains(out, "nowhere") {
		t.Errorf("a missing directory: exit %d:\n%s", code, out)
	}
	if code, out := runCLI(t, "scenarios", "tally", root, "--name", "no-such-scenario"); code != 254 || !strings.Contains(out, "no-such-scenario") {
		t.Errorf("an unknown scenario: exit %d:\n%s", code, out)
	}
}
