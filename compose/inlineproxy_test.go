package compose

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCleanStaleSockets: the control sockets of runs that are gone go,
// those of a live run and files of other kinds stay.
func TestCleanStaleSockets(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ISRLAB_STATE_DIR", dir)
	for _, f := range []string{"kproxy-dead1234-b1.sock", "faultfs-dead1234-b2.sock", "kproxy-live5678-b1.sock", "lab-live5678.json", "kproxy-odd.sock"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CleanStaleSockets(func(run string) bool { return run == "live5678" })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{filepath.Join(dir, "faultfs-dead1234-b2.sock"), filepath.Join(dir, "kproxy-dead1234-b1.sock")}
	if !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 3 {
		t.Fatalf("left %v", left)
	}
}
