package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/checker"
)

func TestScenarioFiles(t *testing.T) {
	files, _ := filepath.Glob("../scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, f := range files {
		sc, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if sc.Name != strings.TrimSuffix(filepath.Base(f), ".yaml") {
			t.Errorf("%s: name %q does not match the file", f, sc.Name)
		}
	}
	def := Default()
	if err := def.Validate(); err != nil {
		t.Fatalf("default scenario: %v", err)
	}
	file, err := Load("../scenarios/leader-kill.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if file.Faults[0] != def.Faults[0] || file.Duration != def.Duration || file.Topic.Config["min.insync.replicas"] != "2" {
		t.Errorf("scenarios/leader-kill.yaml and Default() differ: %+v vs %+v", file, def)
	}
}

func TestBadScenarios(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown-key": "name: x\nbogus: 1\n",
		"bad-kind":    "name: x\nfaults:\n  - kind: explode\n    target: b1\n",
		"no-target":   "name: x\nfaults:\n  - kind: kill\n",
		"late-fault":  "name: x\nduration: 5s\nfaults:\n  - kind: kill\n    target: b1\n    at: 10s\n",
		"rf":          "name: x\ncluster:\n  brokers: 1\ntopic:\n  replication.factor: 3\n",
		"bad-leader":  "name: x\nfaults:\n  - kind: kill\n    target: leader:t\n",
		"not-yaml":    "name: [\n",
	} {
		p := filepath.Join(dir, name+".yaml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want ErrScenario naming the file", name, err)
		}
	}
}

// TestRunDefaultScenario runs the embedded default end to end on the netns
// backend (root needed): cluster up, workload, leader kill and restart,
// drain, verdict.
func TestRunDefaultScenario(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
	bin := os.Getenv("ISRLAB_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "isrlab")
		_, file, _, _ := runtime.Caller(0)
		build := exec.Command("go", "build", "-o", bin, "./cmd/isrlab")
		build.Dir = filepath.Join(filepath.Dir(file), "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	sc := Default()
	sc.Duration = 20 * time.Second
	sc.Seed = 7
	results := t.TempDir()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, sc, Options{ResultsDir: results, Binary: bin, Out: &out})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if res.Verdict.Valid != checker.Valid {
		t.Fatalf("verdict %v, anomalies %v", res.Verdict.Valid, res.Verdict.Anomalies)
	}
	for _, f := range []string{"scenario.yaml", "history.jsonl", "verdict.json", "nodes/b1/b1.log"} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("run dir lacks %s: %v", f, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(results, "latest")); err != nil || !strings.HasSuffix(res.Dir, target) {
		t.Errorf("results/latest -> %q (%v), run dir %s", target, err, res.Dir)
	}
	if !strings.Contains(out.String(), "kill b") || res.Verdict.Availability.Faults != 1 {
		t.Errorf("the fault did not run: %s", out.String())
	}
	// The history replays: the seed is in the resolved scenario.
	again, err := Load(filepath.Join(res.Dir, "scenario.yaml"))
	if err != nil || again.Seed != 7 {
		t.Errorf("resolved scenario: seed %d, %v", again.Seed, err)
	}
}
