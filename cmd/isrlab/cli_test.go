package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runCLI runs `isrlab <args>` in-process, as main would, with every flag
// reset to its default first (flags keep their values between in-process
// runs), and returns the exit code and what it printed to stdout and
// stderr.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var reset func(c *cobra.Command)
	reset = func(c *cobra.Command) {
		r := func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				sv.Replace(nil)
			} else {
				f.Value.Set(f.DefValue)
			}
			f.Changed = false
		}
		c.Flags().VisitAll(r)
		c.PersistentFlags().VisitAll(r)
		for _, cc := range c.Commands() {
			reset(cc)
		}
	}
	reset(rootCmd)
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&out)
	defer rootCmd.SetOut(nil)
	defer rootCmd.SetErr(nil)
	code := run(args)
	return code, out.String()
}

func TestScenariosCommand(t *testing.T) {
	code, out := runCLI(t, "scenarios")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"leader-kill ", "expect valid", "SIGKILLed"} {
		if !strings.Contains(out, want) {
			t.Errorf("isrlab scenarios lacks %q:\n%s", want, out)
		}
	}
}

// TestScenariosAliases: the library lists each scenario once under its
// name, its old name in its description, and the old names still work.
func TestScenariosAliases(t *testing.T) {
	_, out := runCLI(t, "scenarios")
	if strings.Contains(out, "\nseed000/") || !strings.Contains(out, "\nzombie-leader/acks1 ") || !strings.Contains(out, "(was seed000/partition-4-acks1)") {
		t.Errorf("isrlab scenarios:\n%s", out)
	}
	for _, name := range []string{"zombie-leader/acks1", "seed000/partition-4-acks1"} {
		code, out := runCLI(t, "scenarios", "show", name)
		if code != 0 || !strings.HasPrefix(out, "# scenarios/zombie-leader/acks1.yaml\n") || !strings.Contains(out, "\nname: zombie-leader/acks1\n") {
			t.Errorf("isrlab scenarios show %s: exit %d\n%s", name, code, out)
		}
	}
	if code, out := runCLI(t, "scenarios", "show", "seed000/partition-9"); code != exitBadArgs || !strings.Contains(out, `no scenario "seed000/partition-9"`) {
		t.Errorf("show of an unknown name: exit %d\n%s", code, out)
	}
	if code, out := runCLI(t, "scenarios", "verify", "--seeds", "0", "seed000/"); code != exitBadArgs || !strings.Contains(out, "--seeds must be positive") {
		t.Errorf("verify of an old directory: exit %d\n%s", code, out)
	}
	if code, out := runCLI(t, "scenarios", "verify", "--parallel", "0", "leader-kill"); code != exitBadArgs || !strings.Contains(out, "--parallel must be positive") {
		t.Errorf("--parallel 0: exit %d: %s", code, out)
	}
	if code, out := runCLI(t, "scenarios", "verify", "--preset", "kafka-9", "leader-kill"); code != exitBadArgs || !strings.Contains(out, `--preset: `) || !strings.Contains(out, `no preset "kafka-9"`) {
		t.Errorf("verify with an unknown preset: exit %d\n%s", code, out)
	}
}

func TestRunArguments(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("cluster:\n  config:\n    min.insync.replica: \"2\"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "no/such/scenario"}, exitBadArgs, "no scenario \"no/such/scenario\" in the library"},
		{[]string{"run", broken}, exitBadArgs, broken + ":3: cluster.config.min.insync.replica: unknown broker config key (did you mean min.insync.replicas?)"},
		{[]string{"run", "--bogus"}, exitBadArgs, "unknown flag: --bogus"},
		{[]string{"run", "leader-kill", "--backend", "vm"}, exitBadArgs, "cluster.backend: \"vm\": use netns, docker or ssh"},
		{[]string{"run", "a", "b"}, exitBadArgs, "accepts at most 1 arg"},
		{[]string{"matrix", "no-such-matrix"}, exitBadArgs, "no library matrix matrices/no-such-matrix"},
		{[]string{"matrix", "smoke", "--parallel", "0"}, exitBadArgs, "--parallel 0"},
		{[]string{"matrix"}, exitBadArgs, "accepts 1 arg"},
		{[]string{"matrix", "smoke", "--shard", "0/2"}, exitBadArgs, `--shard "0/2": I must be between 1 and N (2)`},
		{[]string{"matrix", "smoke", "--shard", "3/2"}, exitBadArgs, `--shard "3/2": I must be between 1 and N (2)`},
		{[]string{"matrix", "smoke", "--shard", "x"}, exitBadArgs, `--shard "x": want I/N`},
		{[]string{"matrix", "merge"}, exitBadArgs, "requires at least 1 arg"},
		{[]string{"matrix", "merge", dir}, exitBadArgs, "matrix merge: " + dir + " is not a matrix directory (no table.json)"},
		{[]string{"version", "x"}, exitBadArgs, "unknown command"},
	} {
		code, out := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("isrlab %v: exit %d, want %d containing %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// TestRunResultsUnwritable: a run whose results cannot be written fails
// with the internal-error status, never a silent 0.
func TestRunResultsUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "results")
	os.WriteFile(file, []byte("a file where the results directory should be"), 0o644)
	code, out := runCLI(t, "run", "leader-kill", "--results", file)
	if code != exitInternal || !strings.Contains(out, "not a directory") {
		t.Errorf("exit %d, want %d naming the error:\n%s", code, exitInternal, out)
	}
}
