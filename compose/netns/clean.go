package netns

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/isrlab/isrlab/compose"
)

// CleanReport lists what Clean removed.
type CleanReport struct {
	Runs       []string // "name/run" of state files whose runs were removed
	Namespaces []string // orphan namespace files removed (no state at all)
	Live       []string // "name/run" of runs left alone
}

// Clean removes what dead runs left: runs whose state says their owner is
// gone (or, with all, every run of this backend), and namespaces carrying a
// run id that no state file knows. A run whose state lives in another state
// directory is found through the run registry and judged the same way. Live runs and runs whose lock is held are
// left alone, so it is safe to call at any time.
func (b *Backend) Clean(ctx context.Context, all bool) (CleanReport, error) {
	o := b.defaults()
	var rep CleanReport
	var errs []error

	// Namespaces first, states second: a run writes its state before it
	// creates a namespace, so every namespace seen here has its state on
	// disk by the time the states are listed.
	nsFiles := listNS(o.NSDir)
	states, serrs := compose.ListStates(o.StateDir)
	errs = append(errs, serrs...)

	known := map[string]bool{}
	for _, st := range states {
		known[st.RunID] = true
	}
	removed, live, cerrs := compose.CleanDead(ctx, o.StateDir, states, Name, all, func(ctx context.Context, cur *compose.State) error {
		known[cur.RunID] = true
		return attach(o, cur).teardown(ctx)
	})
	rep.Runs, rep.Live, errs = append(rep.Runs, removed...), append(rep.Live, live...), append(errs, cerrs...)

	orphans := map[string][]string{}
	for _, name := range nsFiles {
		run, ok := ParseNSName(name)
		if !ok || known[run] {
			continue
		}
		orphans[run] = append(orphans[run], filepath.Join(o.NSDir, name))
	}
	for run, paths := range orphans {
		// A run recorded in another state directory is judged by its state.
		if st, dir, ok := compose.LookupRun(run); ok {
			id := st.Name + "/" + run
			switch {
			case st.Live() && !all:
				rep.Live = append(rep.Live, id)
			case st.Backend != Name:
			default:
				unlock, err := compose.Lock(dir, st.Name)
				if errors.Is(err, compose.ErrBusy) {
					rep.Live = append(rep.Live, id)
					continue
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				other := o
				other.StateDir = dir
				if err := attach(other, st).teardown(ctx); err != nil {
					errs = append(errs, fmt.Errorf("clean %s: %w", id, err))
				} else {
					rep.Runs = append(rep.Runs, id)
				}
				unlock()
			}
			continue
		}
		// The switch goes last, as in teardown.
		slices.SortFunc(paths, func(a, b string) int {
			return btoi(filepath.Base(a) == NSName(run, SwitchName)) - btoi(filepath.Base(b) == NSName(run, SwitchName))
		})
		inodes := map[uint64]bool{}
		for _, p := range paths {
			if ino := nsInode(p); ino != 0 {
				inodes[ino] = true
			}
		}
		if err := killAll(ctx, procsInNetNS(inodes)); err != nil {
			errs = append(errs, err)
		}
		for _, p := range paths {
			if err := removeNS(p); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Namespaces = append(rep.Namespaces, p)
		}
		if err := compose.Unregister(run); err != nil {
			errs = append(errs, err)
		}
	}
	slices.Sort(rep.Namespaces)
	return rep, errors.Join(errs...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
