package compose

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The run registry maps each run id to its state file, whatever state
// directory that file is in, so that `clean` working from one state directory
// never takes another directory's live run (a test's, say) for an orphan.

// RegistryDir is /run/isrlab-runs where it can be created (root), else
// .runs in the state directory.
func RegistryDir() string {
	if d := os.Getenv("ISRLAB_REGISTRY_DIR"); d != "" {
		return d
	}
	const global = "/run/isrlab-runs"
	if err := os.MkdirAll(global, 0o755); err == nil {
		if f, err := os.CreateTemp(global, ".probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return global
		}
	}
	// Per user (inside a rootless user namespace every user is uid 0, but
	// the state directory is still the outer user's).
	return filepath.Join(StateDir(), ".runs")
}

// Register records that run's state lives at statePath.
func Register(run, statePath string) error {
	abs, err := filepath.Abs(statePath)
	if err != nil {
		return fmt.Errorf("register run %s: %w", run, err)
	}
	dir := RegistryDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("register run %s: %w", run, err)
	}
	if err := os.WriteFile(filepath.Join(dir, run), []byte(abs+"\n"), 0o644); err != nil {
		return fmt.Errorf("register run %s: %w", run, err)
	}
	return nil
}

// Unregister forgets run. It is idempotent.
func Unregister(run string) error {
	err := os.Remove(filepath.Join(RegistryDir(), run))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unregister run %s: %w", run, err)
	}
	return nil
}

// LookupRun returns the state of run as registered, with the state
// directory it lives in. ok is false if run is not registered or its state
// file is gone or belongs to another run now.
func LookupRun(run string) (st *State, stateDir string, ok bool) {
	b, err := os.ReadFile(filepath.Join(RegistryDir(), run))
	if err != nil {
		return nil, "", false
	}
	p := strings.TrimSpace(string(b))
	dir, name := filepath.Dir(filepath.Dir(p)), filepath.Base(filepath.Dir(p))
	st, err = ReadState(dir, name)
	if err != nil || st.RunID != run {
		return nil, "", false
	}
	return st, dir, true
}
