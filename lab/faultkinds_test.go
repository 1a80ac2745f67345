package lab

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestFaultKindSpecs: the clock, limping-broker and packet faults are
// written in a scenario's faults and a schedule's mix as `isrlab fault
// inject --spec` takes them; a bad value fails the scenario's load with
// its file and line.
func TestFaultKindSpecs(t *testing.T) {
	good := `duration: 40s
faults:
  - {kind: clock-bump, nodes: [b2], offset: 30s, at: 5s, heal.after: 5s}
  - {kind: clock-strobe, nodes: [leader:isrlab/0], offset: 200ms, period: 50ms, at: 5s, heal.after: 5s}
  - {kind: cpu-throttle, nodes: [follower:isrlab/0], cpu: 10%, at: 10s, heal.after: 5s}
  - {kind: memory-pressure, nodes: [b3], limit: 64MiB, at: 10s, heal.after: 5s}
  - {kind: packet, nodes: [b1], duplicate: 20%, reorder: 20%, corrupt: 5%, at: 20s, heal.after: 5s}
  - {kind: corrupt, nodes: [follower:isrlab/0], file: segment, mode: bitflip, at: 25s, heal.after: 5s}
schedule:
  type: every
  interval: 10s
  hold: 4s
  mix:
    - {weight: 1, fault: {kind: clock-strobe, nodes: [random-broker], offset: 1s, period: 100ms}}
    - {weight: 1, fault: {kind: cpu-throttle, nodes: [random-broker], cpu: 5%}}
    - {weight: 1, fault: {kind: packet, nodes: [random-broker], corrupt: 10%, checksum: fix}}
`
	sc, err := Parse("x.yaml", "x", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range sc.Faults {
		kinds = append(kinds, f.Spec.Fault.Kind())
	}
	if got := strings.Join(kinds, " "); got != "clock-bump clock-strobe cpu-throttle memory-pressure packet corrupt" {
		t.Fatalf("faults %s", got)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"bump-duration", "faults:\n  - kind: clock-bump\n    nodes: [b2]\n    offset: soon\n", `x.yaml:2: fault: bad fault: clock-bump: duration "soon"`},
		{"bump-no-offset", "faults:\n  - kind: clock-bump\n    nodes: [b2]\n", "x.yaml:2: fault: clock-bump: bad fault: clock-bump needs a non-zero offset"},
		{"strobe-period", "faults:\n  - kind: clock-strobe\n    nodes: [b2]\n    offset: 1s\n    period: 1ms\n", "x.yaml:2: fault: clock-strobe: bad fault: clock-strobe period 1ms"},
		{"strobe-unknown-field", "faults:\n  - kind: clock-strobe\n    nodes: [b2]\n    offset: 1s\n    period: 50ms\n    jitter: 5ms\n", `clock-strobe: unknown field "jitter"`},
		{"cpu-percent", "faults:\n  - kind: cpu-throttle\n    nodes: [b1]\n    cpu: 150%\n", "x.yaml:2: fault: cpu-throttle: bad fault: cpu 150%: want a percentage in (0%, 100%]"},
		{"cpu-not-percent", "faults:\n  - kind: cpu-throttle\n    nodes: [b1]\n    cpu: lots\n", `percentage "lots"`},
		{"memory-size", "faults:\n  - kind: memory-pressure\n    nodes: [b1]\n    limit: 64 parsecs\n", `size "64 parsecs"`},
		{"memory-small", "faults:\n  - kind: memory-pressure\n    nodes: [b1]\n    limit: 1KiB\n", "limit 1KiB: want at least 4MiB"},
		{"memory-target", "cluster:\n  brokers: 3\nfaults:\n  - kind: memory-pressure\n    nodes: [b7]\n    limit: 64MiB\n", "memory-pressure: target b7"},
		{"packet-percent", "faults:\n  - kind: packet\n    nodes: [b1]\n    duplicate: 101%\n", "x.yaml:2: fault: packet: bad fault: duplicate 101%: want a percentage in [0%, 100%]"},
		{"packet-none", "faults:\n  - kind: packet\n    nodes: [b1]\n", "packet needs duplicate, reorder or corrupt"},
		{"packet-gap", "faults:\n  - kind: packet\n    nodes: [b1]\n    reorder: 5%\n    gap: later\n", `duration "later"`},
		{"packet-checksum", "faults:\n  - kind: packet\n    nodes: [b1]\n    corrupt: 5%\n    checksum: maybe\n", `checksum "maybe": want keep or fix`},
		{"packet-field", "faults:\n  - kind: packet\n    nodes: [b1]\n    duplicates: 5%\n", `packet: unknown field "duplicates"`},
		{"corrupt-file", "faults:\n  - kind: corrupt\n    nodes: [b1]\n    file: journal\n    mode: bitflip\n", `x.yaml:2: fault: corrupt: bad fault: corrupt file "journal": want one of`},
		{"corrupt-mode", "faults:\n  - kind: corrupt\n    nodes: [b1]\n    file: index\n    mode: scramble\n", `corrupt mode "scramble": want bitflip, truncate or zero`},
		{"mix-cpu", "schedule:\n  type: every\n  interval: 5s\n  hold: 2s\n  mix:\n    - weight: 1\n      fault: {kind: cpu-throttle, nodes: [b1], cpu: 0%}\n", "x.yaml:2: schedule: mix 1: cpu-throttle: bad fault: cpu 0%"},
	} {
		_, err := Parse("x.yaml", "x", []byte(tc.body))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant ErrScenario containing %q", tc.name, err, tc.want)
		}
	}
}

// TestReplaySpecNewKinds: a recorded fault replays on the nodes it hit
// without what it filled in when it fired; corrupt keeps its mode, which
// for it is the user's (bitflip), not a runtime field.
func TestReplaySpecNewKinds(t *testing.T) {
	for _, tc := range []struct{ recorded, want string }{
		{`{"kind":"corrupt","nodes":["follower:isrlab/0"],"resolved":["b2"],"file":"segment","mode":"bitflip","damage":[{"node":"b2","path":"isrlab-0/0.log","size":9,"offset":3,"length":1,"mode":"bitflip"}]}`,
			`{"kind":"corrupt","nodes":["b2"],"file":"segment","mode":"bitflip"}`},
		{`{"kind":"packet","nodes":["random-broker"],"duplicate":"20%","resolved":["b3"],"mode":"nfqueue","table":"isrlab-r-f1","queue":1,"delayer_pid":7,"delayer_start":9}`,
			`{"kind":"packet","nodes":["b3"],"duplicate":"20%"}`},
		{`{"kind":"cpu-throttle","nodes":["leader:isrlab/0"],"resolved":["b1"],"cpu":"10%","cgroups":[{"node":"b1","version":1,"path":"/x","from":"/","pids":[1]}]}`,
			`{"kind":"cpu-throttle","nodes":["b1"],"cpu":"10%"}`},
		{`{"kind":"clock-strobe","nodes":["b2"],"resolved":["b2"],"offset":"200ms","period":"50ms","strober_pid":5,"strober_start":6}`,
			`{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms","period":"50ms"}`},
	} {
		specs, note, err := replaySpec([]byte(tc.recorded))
		if err != nil || note != "" || len(specs) != 1 {
			t.Fatalf("%s: %v %q %v", tc.recorded, specs, note, err)
		}
		got, _ := json.Marshal(specs[0])
		if string(got) != tc.want {
			t.Errorf("replays as %s\n        want %s", got, tc.want)
		}
	}
}
