package nemesis

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNotActive reports a fault id the store does not know.
var ErrNotActive = errors.New("no such active fault")

// Active is one injected fault that has not been healed.
type Active struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	Fault   Fired     `json:"fault"`
}

type storeFile struct {
	Next   int      `json:"next"`
	Active []Active `json:"active"`
}

// Store keeps the active faults of one cluster. With a Path it is a JSON
// file shared by processes (`isrlab fault inject` in one, `fault heal` in
// another), updated under an flock; without one it lives in memory.
type Store struct {
	Path string

	mu  sync.Mutex
	mem storeFile
}

// FaultsFile is the store of cluster name under a compose state dir.
func FaultsFile(stateDir, name string) string { return filepath.Join(stateDir, name, "faults.json") }

// update runs fn on the current contents and saves what it leaves.
func (s *Store) update(fn func(*storeFile) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Path == "" {
		return fn(&s.mem)
	}
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o755); err != nil {
		return fmt.Errorf("fault store: %w", err)
	}
	lk, err := os.OpenFile(s.Path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("fault store: %w", err)
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("fault store lock: %w", err)
	}
	var f storeFile
	b, err := os.ReadFile(s.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("fault store: %w", err)
	default:
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("fault store %s: %w", s.Path, err)
		}
	}
	if err := fn(&f); err != nil {
		return err
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("fault store: %w", err)
	}
	tmp := s.Path + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("fault store: %w", err)
	}
	if err := os.Rename(tmp, s.Path); err != nil {
		return fmt.Errorf("fault store: %w", err)
	}
	return nil
}

// reserve returns a fresh fault id ("f1", "f2", ...); ids are never reused
// within a store.
func (s *Store) reserve() (string, error) {
	var id string
	err := s.update(func(f *storeFile) error {
		f.Next++
		id = "f" + strconv.Itoa(f.Next)
		return nil
	})
	return id, err
}

// put adds or replaces the active fault a.
func (s *Store) put(a Active) error {
	return s.update(func(f *storeFile) error {
		i := slices.IndexFunc(f.Active, func(x Active) bool { return x.ID == a.ID })
		if i >= 0 {
			f.Active[i] = a
		} else {
			f.Active = append(f.Active, a)
		}
		return nil
	})
}

// remove drops the fault id.
func (s *Store) remove(id string) error {
	return s.update(func(f *storeFile) error {
		f.Active = slices.DeleteFunc(f.Active, func(x Active) bool { return x.ID == id })
		return nil
	})
}

// List returns the active faults in injection order.
func (s *Store) List() ([]Active, error) {
	var out []Active
	err := s.update(func(f *storeFile) error {
		out = slices.Clone(f.Active)
		return nil
	})
	return out, err
}

// Get returns the active fault id.
func (s *Store) Get(id string) (Active, error) {
	as, err := s.List()
	if err != nil {
		return Active{}, err
	}
	for _, a := range as {
		if a.ID == id {
			return a, nil
		}
	}
	return Active{}, fmt.Errorf("%w: %s", ErrNotActive, id)
}
