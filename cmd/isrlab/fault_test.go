package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isrlab/isrlab/nemesis"
)

// runFault runs a fresh `fault` command tree with args and returns the exit
// code main would use and the error text.
func runFault(t *testing.T, args ...string) (int, string) {
	t.Helper()
	t.Setenv("ISRLAB_STATE_DIR", t.TempDir()) // no cluster: valid arguments end at "not found"
	cmd := newFaultCmd()
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.Execute()
	if err == nil {
		return 0, ""
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, err.Error()
	}
	return exitInternal, err.Error()
}

func TestFaultArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in the error; "" means the arguments were accepted
	}{
		{"inject without kind", []string{"inject"}, "name a fault kind"},
		{"bad spec", []string{"inject", "--spec", `{"kind":"meteor"}`}, "unknown kind"},
		{"spec accepted", []string{"inject", "--spec", `{"kind":"kill","nodes":["b1"]}`}, ""},
		{"spec unknown field", []string{"inject", "--spec", `{"kind":"kill","nodes":["b1"],"node":"b2"}`}, `unknown field "node"`},
		{"spec runtime field", []string{"inject", "--spec", `{"kind":"kill","nodes":["b1"],"resolved":["b2"]}`}, "set by the fault when it fires"},
		{"spec bad duration", []string{"inject", "--spec", `{"kind":"clock-bump","nodes":["b2"],"offset":"soon"}`}, `duration "soon"`},
		{"spec bad strobe", []string{"inject", "--spec", `{"kind":"clock-strobe","nodes":["b2"],"offset":"1s"}`}, "period 0s"},
		{"spec strobe accepted", []string{"inject", "--spec", `{"kind":"clock-strobe","nodes":["b2"],"offset":"200ms","period":"50ms"}`}, ""},
		{"spec bad percentage", []string{"inject", "--spec", `{"kind":"cpu-throttle","nodes":["b2"],"cpu":"150%"}`}, "cpu 150%"},
		{"spec cpu accepted", []string{"inject", "--spec", `{"kind":"cpu-throttle","nodes":["follower:t/0"],"cpu":"10%"}`}, ""},
		{"spec bad size", []string{"inject", "--spec", `{"kind":"memory-pressure","nodes":["b3"],"limit":"lots"}`}, `size "lots"`},
		{"spec bad packet", []string{"inject", "--spec", `{"kind":"packet","nodes":["b1"],"duplicate":"200%"}`}, "duplicate 200%"},
		{"spec packet accepted", []string{"inject", "--spec", `{"kind":"packet","nodes":["b1"],"duplicate":"20%","reorder":"20%","corrupt":"5%"}`}, ""},
		{"spec bad corrupt", []string{"inject", "--spec", `{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"melt"}`}, `mode "melt"`},
		{"spec corrupt accepted", []string{"inject", "--spec", `{"kind":"corrupt","nodes":["follower:t/0"],"file":"segment","mode":"bitflip"}`}, ""},
		{"spec memory accepted", []string{"inject", "--spec", `{"kind":"memory-pressure","nodes":["b3"],"limit":"64MiB"}`}, ""},
		{"kill without node", []string{"inject", "kill"}, "--node"},
		{"kill bad target", []string{"inject", "kill", "--node", "leader:t"}, "topic/partition"},
		{"kill accepted", []string{"inject", "kill", "--node", "leader:t/0"}, ""},
		{"partition without topology", []string{"inject", "partition"}, "exactly one"},
		{"partition two topologies", []string{"inject", "partition", "--isolate", "b1", "--scenario", "leader-brokers"}, "exactly one"},
		{"partition bad grudge", []string{"inject", "partition", "--grudge", "b1"}, "NODE=FROM"},
		{"partition isolate", []string{"inject", "partition", "--isolate", "leader:t/0", "--one-way"}, ""},
		{"loss without percent", []string{"inject", "loss", "--node", "b2"}, "--percent"},
		{"loss accepted", []string{"inject", "loss", "--node", "b2", "--percent", "20"}, ""},
		{"slow-net without rate or delay", []string{"inject", "slow-net", "--node", "b3"}, "--rate or --delay"},
		{"slow-net accepted", []string{"inject", "slow-net", "--node", "b3", "--rate", "1mbit", "--delay", "50ms"}, ""},
		{"bad control", []string{"inject", "slow-disk", "--node", "b2", "--latency", "20ms", "--control", "b2"}, "NODE=SOCKET"},
		{"power-loss accepted", []string{"inject", "power-loss", "--nodes", "b1,b2", "--torn"}, ""},
		{"heal without ids", []string{"heal"}, "ids or --all"},
		{"heal ids and all", []string{"heal", "f1", "--all"}, "ids or --all"},
		{"list", []string{"list"}, ""},
		{"run without schedule", []string{"run"}, "--schedule"},
		{"run missing file", []string{"run", "--schedule", "/nonexistent/s.json"}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := runFault(t, tt.args...)
			if code != exitBadArgs {
				t.Fatalf("exit %d (%s), want %d", code, msg, exitBadArgs)
			}
			if tt.want == "" {
				// Accepted: the command went on to look for the cluster.
				if !strings.Contains(msg, "cluster not found") {
					t.Fatalf("error %q, want the missing cluster", msg)
				}
				return
			}
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q, want it to mention %q", msg, tt.want)
			}
		})
	}
}

func TestParseGrudge(t *testing.T) {
	g, err := parseGrudge("b1=b2,b3; b2=b1")
	if err != nil {
		t.Fatal(err)
	}
	want := nemesis.Grudge{"b1": {"b2", "b3"}, "b2": {"b1"}}
	if len(g) != 2 || strings.Join(g["b1"], ",") != "b2,b3" || strings.Join(g["b2"], ",") != "b1" {
		t.Fatalf("got %v, want %v", g, want)
	}
	for _, bad := range []string{"", "b1", "=b2", "b1=", "b1=b2;x"} {
		if _, err := parseGrudge(bad); err == nil {
			t.Errorf("parseGrudge(%q) = nil error", bad)
		}
	}
}

func TestFaultRunDryRun(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	sched := `{"type":"once","at":"5s","hold":"3s","fault":{"kind":"kill","nodes":["leader:t/0"]}}`
	if err := os.WriteFile(p, []byte(sched), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newFaultCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"run", "--schedule", p, "--dry-run"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := "      5s start    1 {\"kind\":\"kill\",\"nodes\":[\"leader:t/0\"]}\n      8s stop     1\n"
	if out.String() != want {
		t.Fatalf("dry run printed\n%q\nwant\n%q", out.String(), want)
	}
	os.WriteFile(p, []byte(`{"type":"every"}`), 0o644)
	if code, msg := runFault(t, "run", "--schedule", p); code != exitBadArgs || !strings.Contains(msg, "interval") {
		t.Fatalf("bad schedule: exit %d, %s", code, msg)
	}
}
