package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckExitCodes(t *testing.T) {
	golden := filepath.Join("..", "..", "checker", "testdata")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"valid", []string{"check", filepath.Join(golden, "clean.jsonl")}, exitValid, "valid:        true"},
		{"available", []string{"check", filepath.Join(golden, "clean.jsonl")}, exitValid, "unavailable:  no partition over 1s\n"},
		{"outage", []string{"check", filepath.Join(golden, "outage.jsonl")}, exitValid,
			"availability: overall 100.00% (49/49), during faults 100.00% (30/30), after heal 100.00% (10/10) (1 faults)\n" +
				"unavailable:  longest 15s on partition 1 (from 2.01s to 17.01s; windows over 1s)\n"},
		{"outage above threshold", []string{"check", "--unavailable-after", "20s", filepath.Join(golden, "outage.jsonl")}, exitValid, "unavailable:  no partition over 20s\n"},
		{"bad threshold", []string{"check", "--unavailable-after", "0s", filepath.Join(golden, "clean.jsonl")}, exitBadArgs, ""},
		{"invalid", []string{"check", filepath.Join(golden, "lost-write.jsonl")}, exitInvalid, "lost-write"},
		{"truncated is unknown", []string{"check", filepath.Join(golden, "torn.jsonl")}, exitUnknown, "truncated:"},
		{"json", []string{"check", "--json", filepath.Join(golden, "unseen.jsonl")}, exitInvalid, `"unseen": 1`},
		{"missing file", []string{"check", filepath.Join(golden, "no-such.jsonl")}, exitInternal, ""},
		{"bad flag value", []string{"check", "--linearizable=maybe", filepath.Join(golden, "clean.jsonl")}, exitBadArgs, ""},
		{"no argument", []string{"check"}, exitBadArgs, ""},
		{"gen without --out", []string{"check", "gen", "--ops", "10"}, exitBadArgs, ""},
		{"future read", []string{"check", filepath.Join(golden, "future-read.jsonl")}, exitInvalid,
			"  future-read                       1  e.g. value 1 was read by a poll that completed at 0.00000004 s, before its send was invoked at 0.0000001 s\n"},
		{"pieces", []string{"check", filepath.Join(golden, "send-below-read.jsonl")}, exitInvalid,
			"linearizable: illegal (4 ops, 1 partitions, 4 pieces, largest 1 ops; 2 illegal); illegal partitions [0]; first illegal: partition 0 piece 0 (1 ops, 0.00000001 s to 0.00000002 s)\n"},
		{"queue", []string{"check", filepath.Join(golden, "unseen.jsonl")}, exitInvalid,
			"unseen:       1 acknowledged values never read (peak 2 at 0.00000004 s); realtime lag p50 100ns, p99 100ns, max 100ns\n"},
		{"bad piece limit", []string{"check", "--lin-max-piece-ops", "-1", filepath.Join(golden, "clean.jsonl")}, exitBadArgs, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestCheckRunDirWritesVerdictAndVisualization(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "checker", "testdata", "future-read.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "history.jsonl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, "check", dir)
	if code != exitInvalid {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "verdict.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Valid        any `json:"valid"`
		Linearizable struct {
			Result        string `json:"result"`
			Visualization string `json:"visualization"`
		} `json:"linearizable"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Valid != false || v.Linearizable.Result != "illegal" || v.Linearizable.Visualization != "linearizability.html" {
		t.Errorf("verdict.json = %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "linearizability.html")); err != nil {
		t.Error(err)
	}
}

func TestCheckGenIsReproducible(t *testing.T) {
	dir := t.TempDir()
	var files [2][]byte
	for i := range files {
		path := filepath.Join(dir, "h.jsonl")
		code, out := runCLI(t, "check", "gen", "--ops", "2000", "--partitions", "3", "--seed", "4", "--anomaly-every", "500", "--out", path)
		if code != 0 {
			t.Fatalf("gen exit %d: %s", code, out)
		}
		files[i], _ = os.ReadFile(path)
	}
	if len(files[0]) == 0 || !bytes.Equal(files[0], files[1]) {
		t.Fatal("gen is not deterministic")
	}
	code, out := runCLI(t, "check", "--linearizable=off", filepath.Join(dir, "h.jsonl"))
	if code != exitInvalid || !strings.Contains(out, "poll-skip") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
