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
)

// ErrUnknown reports a backend name that is neither netns nor docker.
var ErrUnknown = errors.New("unknown backend")

// Names lists the backends, the default first.
func Names() []string { return []string{netns.Name, docker.Name} }

// Options configure a backend; fields a backend does not use are ignored.
type Options struct {
	StateDir     string // default compose.StateDir()
	Detach       bool   // the run outlives this process
	KeepData     bool
	ReadyTimeout time.Duration
	Grace        time.Duration
	Log          *slog.Logger
	// Docker only.
	System     string // docker.SystemIsrlab (default) or docker.SystemKafka
	KafkaImage string
	KafkaConf  []compose.KV
}

// New returns the backend called name.
func New(name string, o Options) (compose.Backend, error) {
	switch name {
	case netns.Name, "":
		if o.System != "" && o.System != docker.SystemIsrlab {
			return nil, fmt.Errorf("system %s needs the docker backend", o.System)
		}
		return &netns.Backend{StateDir: o.StateDir, Detach: o.Detach, KeepData: o.KeepData,
			ReadyTimeout: o.ReadyTimeout, Grace: o.Grace, Log: o.Log}, nil
	case docker.Name:
		return &docker.Backend{StateDir: o.StateDir, Detach: o.Detach, KeepData: o.KeepData,
			ReadyTimeout: o.ReadyTimeout, Grace: o.Grace, Log: o.Log,
			System: o.System, KafkaImage: o.KafkaImage, KafkaConf: o.KafkaConf}, nil
	}
	return nil, fmt.Errorf("%w %q: use %v", ErrUnknown, name, Names())
}

// Open finds cluster name in stateDir ("" for the default) and returns a
// handle on it. close releases what the handle holds (a Docker client).
func Open(ctx context.Context, stateDir, name string) (st *compose.State, c *compose.Cluster, close func(), err error) {
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
	}
	return st, nil, nil, fmt.Errorf("cluster %s: %w %q", name, ErrUnknown, st.Backend)
}

// Down takes cluster name down, whichever backend runs it.
func Down(ctx context.Context, stateDir, name string, grace time.Duration) error {
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

// Clean removes what dead runs of every backend left (see netns.Backend.Clean
// and docker.Backend.Clean); with all, live runs too. Docker is skipped when
// no daemon answers, and inside a rootless user namespace.
func Clean(ctx context.Context, stateDir string, all bool) (CleanReport, error) {
	var rep CleanReport
	nrep, err := (&netns.Backend{StateDir: stateDir}).Clean(ctx, all)
	rep.Runs, rep.Live, rep.Namespaces = nrep.Runs, nrep.Live, nrep.Namespaces
	if netns.InUserNS() {
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
