// Package backends picks a compose backend by name and reopens, takes down
// or cleans clusters recorded in state files, whichever backend started
// them. It is what `isrlab cluster`, `isrlab clean`, fault commands and the
// lab runner share.
package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/docker"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/compose/ssh"
)

// FaultCleaner heals every fault the fault store of c's run (in stateDir)
// holds, then removes what faults of the run left on remote hosts. The ssh
// backend runs it before its Down touches a process. It belongs to the
// fault layer above compose (nemesis.CleanFaults): lab and cmd pass it in.
// Nil leaves faults alone.
type FaultCleaner func(ctx context.Context, stateDir string, c *compose.Cluster) error

// ErrUnknown reports a backend name that is not netns, docker or ssh.
var ErrUnknown = errors.New("unknown backend")

// Names lists the backends, the default first.
func Names() []string { return []string{netns.Name, docker.Name, ssh.Name} }

// Options configure a backend; fields a backend does not use are ignored.
type Options struct {
	StateDir string // default compose.StateDir()
	Detach   bool   // the run outlives this process
	KeepData bool
	// KillOnDown: Down kills the nodes at once even when their data stays
	// (Docker always does).
	KillOnDown   bool
	ReadyTimeout time.Duration
	Grace        time.Duration
	Log          *slog.Logger
	// Docker only.
	System     string // docker.SystemIsrlab (default) or docker.SystemKafka
	KafkaImage string
	KafkaConf  []compose.KV
	// SSH only: the hosts (a scenario's cluster.ssh), and what heals the
	// run's faults on the way down.
	SSH         *ssh.Config
	CleanFaults FaultCleaner
}

// New returns the backend called name.
func New(name string, o Options) (compose.Backend, error) {
	switch name {
	case netns.Name, "":
		if o.System != "" && o.System != docker.SystemIsrlab {
			return nil, fmt.Errorf("system %s needs the docker backend", o.System)
		}
		return &netns.Backend{StateDir: o.StateDir, Detach: o.Detach, KeepData: o.KeepData, KillOnDown: o.KillOnDown,
			ReadyTimeout: o.ReadyTimeout, Grace: o.Grace, Log: o.Log}, nil
	case docker.Name:
		return &docker.Backend{StateDir: o.StateDir, Detach: o.Detach, KeepData: o.KeepData,
			ReadyTimeout: o.ReadyTimeout, Grace: o.Grace, Log: o.Log,
			System: o.System, KafkaImage: o.KafkaImage, KafkaConf: o.KafkaConf}, nil
	case ssh.Name:
		if o.SSH == nil {
			return nil, fmt.Errorf("the ssh backend needs its hosts (cluster.ssh in the scenario, or --cluster FILE)")
		}
		b := sshBackend(o.StateDir, o.CleanFaults)
		b.Config, b.Detach, b.ReadyTimeout, b.Grace, b.Log = o.SSH, o.Detach, o.ReadyTimeout, o.Grace, o.Log
		return b, nil
	}
	return nil, fmt.Errorf("%w %q: use %v", ErrUnknown, name, Names())
}

// sshBackend is an ssh backend whose Down runs clean (the run's stored
// faults healed, what faults left on the hosts swept) before it touches a
// process.
func sshBackend(stateDir string, clean FaultCleaner) *ssh.Backend {
	b := &ssh.Backend{StateDir: stateDir}
	if clean != nil {
		b.CleanFaults = func(ctx context.Context, c *compose.Cluster) error {
			dir := stateDir
			if dir == "" {
				dir = compose.StateDir()
			}
			return clean(ctx, dir, c)
		}
	}
	return b
}

// Open finds cluster name in stateDir ("" for the default) and returns a
// handle on it. close releases what the handle holds (a Docker client).
// clean is what an ssh cluster's Down runs first (FaultCleaner).
func Open(ctx context.Context, stateDir, name string, clean FaultCleaner) (st *compose.State, c *compose.Cluster, close func(), err error) {
	if stateDir == "" {
		stateDir = compose.StateDir()
	}
	st, err = compose.ReadState(stateDir, name)
	if err != nil {
		return nil, nil, nil, err
	}
	switch st.Backend {
	case netns.Name:
		c, err := (&netns.Backend{StateDir: stateDir}).Attach(st)
		return st, c, func() {}, err
	case docker.Name:
		cli, err := docker.Connect(ctx)
		if err != nil {
			return st, nil, nil, err
		}
		c, err := (&docker.Backend{StateDir: stateDir}).Attach(cli, st)
		if err != nil {
			cli.Close()
			return st, nil, nil, err
		}
		return st, c, func() { cli.Close() }, nil
	case ssh.Name:
		c, err := sshBackend(stateDir, clean).Attach(st)
		return st, c, func() {}, err
	}
	return st, nil, nil, fmt.Errorf("cluster %s: %w %q", name, ErrUnknown, st.Backend)
}

// Down takes cluster name down, whichever backend runs it; an ssh
// cluster's faults are cleaned first with clean.
func Down(ctx context.Context, stateDir, name string, grace time.Duration, clean FaultCleaner) error {
	if stateDir == "" {
		stateDir = compose.StateDir()
	}
	st, err := compose.ReadState(stateDir, name)
	if err != nil {
		return err
	}
	switch st.Backend {
	case netns.Name:
		return (&netns.Backend{StateDir: stateDir, Grace: grace}).Down(ctx, name)
	case docker.Name:
		return (&docker.Backend{StateDir: stateDir, Grace: grace}).Down(ctx, name)
	case ssh.Name:
		b := sshBackend(stateDir, clean)
		b.Grace = grace
		return b.Down(ctx, name)
	}
	return fmt.Errorf("cluster %s: %w %q", name, ErrUnknown, st.Backend)
}

// CleanReport is what Clean removed, over every backend.
type CleanReport struct {
	Runs       []string // "name/run" of dead runs removed
	Live       []string // "name/run" of live runs left alone
	Namespaces []string // orphan namespace files removed
	Containers int      // orphan containers removed
	Networks   int      // orphan networks removed
	Images     int      // unused lab images removed (with all)
}

// Removed counts what was removed.
func (r CleanReport) Removed() int {
	return len(r.Runs) + len(r.Namespaces) + r.Containers + r.Networks + r.Images
}

// Clean removes what dead runs of every backend left (see netns.Backend.Clean,
// docker.Backend.Clean and ssh.Backend.Clean); with all, live runs too. Docker
// is skipped when no daemon answers, and inside a rootless user namespace.
// clean heals the faults of the ssh runs taken down (FaultCleaner).
func Clean(ctx context.Context, stateDir string, all bool, clean FaultCleaner) (CleanReport, error) {
	return CleanBackend(ctx, stateDir, "", all, clean)
}

// CleanBackend is Clean for one backend only ("" for every one).
func CleanBackend(ctx context.Context, stateDir, backend string, all bool, clean FaultCleaner) (CleanReport, error) {
	var rep CleanReport
	var err error
	switch backend {
	case "", netns.Name, docker.Name, ssh.Name:
	default:
		return rep, fmt.Errorf("%w %q: use %v", ErrUnknown, backend, Names())
	}
	if backend == "" || backend == ssh.Name {
		srep, serr := sshBackend(stateDir, clean).Clean(ctx, all)
		rep.Runs, rep.Live, err = srep.Runs, srep.Live, serr
		if backend == ssh.Name {
			return rep, err
		}
	}
	if backend == "" || backend == netns.Name {
		nrep, nerr := (&netns.Backend{StateDir: stateDir}).Clean(ctx, all)
		rep.Runs = append(rep.Runs, nrep.Runs...)
		rep.Live = append(rep.Live, nrep.Live...)
		rep.Namespaces = nrep.Namespaces
		err = errors.Join(err, nerr)
	}
	if backend == netns.Name || netns.InUserNS() {
		return rep, err
	}
	drep, derr := (&docker.Backend{StateDir: stateDir}).Clean(ctx, all)
	if !errors.Is(derr, docker.ErrNoDaemon) {
		err = errors.Join(err, derr)
	}
	rep.Runs = append(rep.Runs, drep.Runs...)
	rep.Live = append(rep.Live, drep.Live...)
	rep.Containers, rep.Networks, rep.Images = drep.Containers, drep.Networks, drep.Images
	return rep, err
}
