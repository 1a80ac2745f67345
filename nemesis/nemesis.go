package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/isrlab/isrlab/history"
)

// Nemesis injects and heals faults in one cluster, keeps the active set in
// its Store and records every step in its Recorder. It is safe for
// concurrent use: faults are applied one at a time, like Jepsen's nemesis
// process.
type Nemesis struct {
	mu sync.Mutex

	Env *Env
	// Store keeps the active faults; nil keeps them in memory.
	Store *Store
	// Recorder, if set, receives start-<kind>, stop-<kind> and heal ops.
	Recorder *history.Recorder
	// Now stamps Active.Started; nil uses time.Now.
	Now func() time.Time
}

func (n *Nemesis) store() *Store {
	if n.Store == nil {
		n.Store = &Store{}
	}
	return n.Store
}

func (n *Nemesis) now() time.Time {
	if n.Now == nil {
		return time.Now()
	}
	return n.Now()
}

// record writes one nemesis op; value is the fault's JSON (nil for none).
func (n *Nemesis) record(t history.Type, f string, value []byte, err error) {
	if n.Recorder == nil {
		return
	}
	op := history.NewOp(history.Nemesis, t, f)
	if value != nil {
		op.RawValue = value
	}
	if err != nil {
		op.Error = err.Error()
	}
	n.Recorder.Record(op)
}

// recordValue writes one nemesis op whose value is v as JSON.
func (n *Nemesis) recordValue(t history.Type, f string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = nil
	}
	n.record(t, f, b, nil)
}

// firedJSON is the record of r: its spec and its run.
func firedJSON(r Run) []byte {
	b, err := json.Marshal(fired(r))
	if err != nil {
		return nil
	}
	return b
}

// Inject resolves a run of f against the cluster as it is now, injects it
// and stores it as active. It returns the active fault (with its id and
// run). A fault whose injection failed is healed at once; if that heal
// fails too it stays active so that a later HealAll retries it.
func (n *Nemesis) Inject(ctx context.Context, f Fault) (Active, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, err := n.store().reserve()
	if err != nil {
		return Active{}, err
	}
	env := n.Env.forFault(id)
	start := "start-" + f.Kind()
	r := f.NewRun()
	if err := r.Resolve(ctx, env); err != nil {
		// Nothing was touched: the fault definitely did not happen.
		n.record(history.Invoke, start, firedJSON(r), nil)
		n.record(history.Fail, start, firedJSON(r), err)
		return Active{}, fmt.Errorf("%s: resolve: %w", f.Kind(), err)
	}
	a := Active{ID: id, Started: n.now(), Fault: fired(r)}
	value := firedJSON(r)
	n.record(history.Invoke, start, value, nil)
	// Stored before it is applied, so that a crash mid-way leaves a record
	// for `fault heal` to act on.
	if err := n.store().put(a); err != nil {
		n.record(history.Fail, start, value, err)
		return Active{}, err
	}
	begin := time.Now()
	if err := r.Inject(ctx, env); err != nil {
		herr := r.Heal(context.WithoutCancel(ctx), env)
		if herr == nil {
			n.store().remove(id) //nolint:errcheck // best effort; heal is idempotent
		}
		n.record(history.Info, start, firedJSON(r), err)
		return Active{}, errors.Join(fmt.Errorf("%s: inject: %w", f.Kind(), err), herr)
	}
	// Inject may add facts (power-loss reports, the delay mode): stored
	// again.
	if err := n.store().put(a); err != nil {
		return a, err
	}
	n.record(history.OK, start, firedJSON(r), nil)
	env.log().Info("fault injected", "fault", f.Kind(), "id", id, "targets", string(firedJSON(r)), "took", time.Since(begin))
	return a, nil
}

// Heal heals the active fault id and forgets it.
func (n *Nemesis) Heal(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, err := n.store().Get(id)
	if err != nil {
		return err
	}
	return n.heal(ctx, a, true)
}

func (n *Nemesis) heal(ctx context.Context, a Active, rec bool) error {
	r := a.Fault.Run
	stop := "stop-" + r.Kind()
	value := firedJSON(r)
	if rec {
		n.record(history.Invoke, stop, value, nil)
	}
	err := r.Heal(ctx, n.Env.forFault(a.ID))
	if err != nil {
		if rec {
			n.record(history.Info, stop, value, err)
		}
		return fmt.Errorf("heal %s (%s): %w", a.ID, r.Kind(), err)
	}
	if err := n.store().remove(a.ID); err != nil {
		return err
	}
	if rec {
		// What the heal learned (a kafka fault's count of the messages
		// it acted on) goes with the completion.
		n.record(history.OK, stop, firedJSON(r), nil)
	}
	n.Env.log().Info("fault healed", "fault", r.Kind(), "id", a.ID)
	return nil
}

// HealAll heals every active fault, newest first, recorded as one "heal"
// op. It goes on past errors and returns them joined.
func (n *Nemesis) HealAll(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	as, err := n.store().List()
	if err != nil {
		return err
	}
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	value, _ := json.Marshal(ids)
	n.record(history.Invoke, history.FHeal, value, nil)
	var errs []error
	for _, a := range slices.Backward(as) {
		errs = append(errs, n.heal(ctx, a, false))
	}
	err = errors.Join(errs...)
	if err != nil {
		n.record(history.Info, history.FHeal, value, err)
		return err
	}
	n.record(history.OK, history.FHeal, value, nil)
	return nil
}

// Active lists the active faults.
func (n *Nemesis) Active() ([]Active, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.store().List()
}
