package nemesis

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/isrlab/isrlab/clusterapi"
	"github.com/isrlab/isrlab/compose"
)

func init() {
	register(func() Fault { return &ClockSkew{} })
}

// ClockSkew moves the clock of isrlab brokers by OffsetMs (negative goes
// back), through each broker's /v1/clock on its metrics listener; Heal sets
// the skew back to 0. Only the broker's own time moves (replica lag, ISR
// shrink checks, segment rolls, retention); clients keep their clocks.
// On an ssh host that allows it (clock: true) it sets the host's system
// clock instead, with date, for whatever role the node has; Heal moves it
// back by the same offset.
type ClockSkew struct {
	procNodes
	OffsetMs int64 `json:"offset_ms"`
}

// Kind implements Fault.
func (f *ClockSkew) Kind() string { return "clock-skew" }

// Resolve implements Fault: the targets must be brokers.
func (f *ClockSkew) Resolve(ctx context.Context, env *Env) error {
	ns, err := env.ResolveTargets(ctx, f.Nodes)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("%w: clock-skew needs nodes", ErrBadFault)
	}
	for _, name := range ns {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if systemClock(n) {
			continue // the host's clock: any node, with or without a process
		}
		if n.Role != compose.RoleBroker || n.Proc == nil {
			return fmt.Errorf("%w: clock-skew: %s is not a broker", ErrBadFault, name)
		}
	}
	f.Resolved = ns
	return nil
}

// Inject implements Fault.
func (f *ClockSkew) Inject(ctx context.Context, env *Env) error { return f.set(ctx, env, f.OffsetMs) }

// Heal implements Fault.
func (f *ClockSkew) Heal(ctx context.Context, env *Env) error { return f.set(ctx, env, 0) }

// hostClock moves (offset != 0) or moves back a host's system clock.
func (f *ClockSkew) hostClock(ctx context.Context, env *Env, n *compose.Node, offset int64) error {
	m := clockMarker(tableName(env.runID(), env.id), n.Name)
	argv := []string{"sh", "-c", clockUndoScript, "sh", "one", m}
	if offset != 0 {
		argv = []string{"sh", "-c", clockSkewScript, "sh", m, strconv.FormatInt(offset, 10)}
	}
	if _, err := n.Remote.Command(ctx, argv, nil); err != nil {
		return fmt.Errorf("clock-skew %s: %w", n.Name, err)
	}
	return nil
}

func (f *ClockSkew) set(ctx context.Context, env *Env, offset int64) error {
	dial := env.Cluster.Dial()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return dial(ctx, network, addr) },
	}}
	return f.each(env, func(n *compose.Node) error {
		if systemClock(n) {
			return f.hostClock(ctx, env, n, offset)
		}
		api := clusterapi.Client{Base: clusterapi.BaseURL(n.Addr.String(), compose.MetricsPort), HTTP: client}
		if _, err := api.SetClock(ctx, offset); err != nil {
			return fmt.Errorf("clock-skew %s: %w", n.Name, err)
		}
		return nil
	})
}
