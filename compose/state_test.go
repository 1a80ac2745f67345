package compose

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestStateRoundTripAndList(t *testing.T) {
	dir := t.TempDir()
	top, err := Build(Options{Name: "a", RunID: "r1", RunDir: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "a"} {
		s := &State{Name: name, RunID: "r-" + name, Backend: "netns", Status: StatusUp, Topology: top,
			Nodes: []NodeState{{Name: "b1", PID: 42, NetNS: "/run/netns/x"}}}
		if err := WriteState(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	// A broken file is reported and skipped.
	if err := os.MkdirAll(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(StatePath(dir, "broken"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	states, errs := ListStates(dir)
	if len(states) != 2 || states[0].Name != "a" || states[1].Name != "b" || len(errs) != 1 {
		t.Fatalf("ListStates: %d states, errs %v", len(states), errs)
	}
	got, err := ReadState(dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node("b1").PID != 42 || got.Topology.Nodes[0].Argv[1] != "coordinator" || got.Version != StateVersion {
		t.Errorf("round trip lost data: %+v", got)
	}
	if err := RemoveState(dir, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(dir, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadState after RemoveState: %v, want ErrNotFound", err)
	}
}

func TestStateLive(t *testing.T) {
	self := &State{}
	self.SetOwner()
	dead := deadPID(t)
	tests := []struct {
		name string
		s    State
		want bool
	}{
		{"owner alive", State{Owner: self.Owner, OwnerStart: self.OwnerStart, Status: StatusStarting}, true},
		{"owner dead", State{Owner: dead, Status: StatusUp}, false},
		{"owner pid reused", State{Owner: self.Owner, OwnerStart: self.OwnerStart + 1, Status: StatusUp}, false},
		{"detached and up", State{Owner: dead, Detached: true, Status: StatusUp}, true},
		{"detached but stopping", State{Owner: dead, Detached: true, Status: StatusStopping}, false},
	}
	for _, tt := range tests {
		if got := tt.s.Live(); got != tt.want {
			t.Errorf("%s: Live() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to open file descriptions: a second open conflicts.
	if _, err := Lock(dir, "x"); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Lock: %v, want ErrBusy", err)
	}
	unlock()
	unlock2, err := Lock(dir, "x")
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
}

func TestProcStart(t *testing.T) {
	start, ok := ProcStart(os.Getpid())
	if !ok || start == 0 {
		t.Fatalf("ProcStart(self) = %d, %v", start, ok)
	}
	if !Alive(os.Getpid(), start) || Alive(os.Getpid(), start+1) {
		t.Error("Alive does not tell this process from a reused pid")
	}
	if _, ok := ProcStart(deadPID(t)); ok {
		t.Error("ProcStart of a reaped process succeeded")
	}
}

func TestRegistry(t *testing.T) {
	t.Setenv("ISRLAB_REGISTRY_DIR", t.TempDir())
	dir := t.TempDir()
	s := &State{Name: "x", RunID: "run1", Backend: "netns", Status: StatusUp}
	if err := WriteState(dir, s); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := LookupRun("run1"); ok {
		t.Fatal("unregistered run found")
	}
	if err := Register("run1", StatePath(dir, "x")); err != nil {
		t.Fatal(err)
	}
	got, gotDir, ok := LookupRun("run1")
	if !ok || got.Name != "x" || gotDir != dir {
		t.Fatalf("LookupRun = %v, %q, %v", got, gotDir, ok)
	}
	// The name now belongs to another run: the registration is stale.
	s.RunID = "run2"
	if err := WriteState(dir, s); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := LookupRun("run1"); ok {
		t.Error("stale registration resolved")
	}
	if err := Unregister("run1"); err != nil {
		t.Fatal(err)
	}
	if err := Unregister("run1"); err != nil {
		t.Errorf("second Unregister: %v", err)
	}
}
