package clients

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// The exec client is a workloads.GroupClient when its driver names
// FeatureQueue in its hello (docs/client-protocol.md, "Consumer groups").

// GroupConsumer opens consumer process proc as a member of m.Group
// (open-group-consumer): the driver subscribes its client to the topic,
// joining in the background. The member's assignments and its client's
// own commits come as events in the completions of its operations and
// are told to m before the operation returns.
func (e *execClient) GroupConsumer(ctx context.Context, proc int, m workloads.GroupMember) (workloads.GroupConsumer, error) {
	if err := e.start(ctx, FeatureQueue); err != nil {
		return nil, err
	}
	if err := e.need(FeatureQueue); err != nil {
		return nil, err
	}
	op := execOp{Process: proc, F: "open-group-consumer", Group: m.Group, AutoCommit: m.AutoCommit}
	if m.AutoCommit {
		op.AutoCommitIntervalMs = m.AutoCommitInterval.Milliseconds()
	}
	g := &execGroup{execProcess: execProcess{e: e, proc: proc}, member: m}
	d, err := e.call(op, e.cfg.DeliveryTimeout)
	if err != nil {
		return nil, err
	}
	g.events(d.Events)
	if d.Type != "ok" {
		return nil, fmt.Errorf("client %s (%s): open-group-consumer: %s", e.Name(), e.argv(), d.Error)
	}
	return g, nil
}

// execGroup is a group member process of the driver.
type execGroup struct {
	execProcess
	member  workloads.GroupMember
	crashed bool
}

// events tells the member what the driver reported: assignments, and
// its client's own commits (none once the member crashed).
func (g *execGroup) events(evs []execEvent) {
	for _, ev := range evs {
		switch ev.Event {
		case "assigned":
			if g.member.Assigned != nil {
				g.member.Assigned(slices.Clone(ev.Partitions))
			}
		case "committed":
			if g.member.Committed != nil && !g.crashed {
				g.member.Committed(committedOf(ev.Type, ev.Committed, ev.Error))
			}
		}
	}
}

// committedOf is a commit's outcome as the driver reported it: for an
// info commit the offsets asked for, for an ok one those accepted.
func committedOf(typ string, offs []execOffset, errText string) workloads.Committed {
	t, ok := history.ParseType(typ)
	if !ok || t == history.Invoke {
		t = history.Info
	}
	c := workloads.Committed{Type: t, Offsets: []history.PartitionOffset{}, Error: errText}
	for _, o := range offs {
		c.Offsets = append(c.Offsets, history.PartitionOffset{Partition: o.Partition, Offset: o.Offset})
	}
	sort.Slice(c.Offsets, func(i, j int) bool { return c.Offsets[i].Partition < c.Offsets[j].Partition })
	return c
}

func (g *execGroup) Poll(_ context.Context, timeout time.Duration) (workloads.Polled, error) {
	d, err := g.e.call(execOp{Process: g.proc, F: "poll"}, timeout)
	if err != nil {
		return workloads.Polled{Type: history.Info, Error: err.Error()}, err
	}
	g.events(d.Events)
	return polledOf(d), nil
}

// Commit asks the driver to commit offs and waits at most
// request.timeout for the outcome; a driver that is gone leaves it
// unknown.
func (g *execGroup) Commit(_ context.Context, offs map[int32]int64) workloads.Committed {
	op := execOp{Process: g.proc, F: "commit"}
	asked := []history.PartitionOffset{}
	for _, p := range slices.Sorted(maps.Keys(offs)) {
		op.Offsets = append(op.Offsets, execOffset{Partition: p, Offset: offs[p]})
		asked = append(asked, history.PartitionOffset{Partition: p, Offset: offs[p]})
	}
	d, err := g.e.call(op, g.e.cfg.RequestTimeout)
	if err != nil {
		return workloads.Committed{Type: history.Info, Offsets: asked, Error: err.Error()}
	}
	g.events(d.Events)
	c := committedOf(d.Type, d.Committed, d.Error)
	if c.Type == history.Info && len(c.Offsets) == 0 {
		c.Offsets = asked // unknown: any of them may have been committed
	}
	return c
}

// Close leaves the group (with auto-commit, after the client's last
// commit, reported as an event).
func (g *execGroup) Close() error {
	d, err := g.e.call(execOp{Process: g.proc, F: "close"}, g.e.cfg.RequestTimeout)
	if err == nil {
		g.events(d.Events)
	}
	return err
}

// Crash ends the member without a commit (crash): the driver makes sure
// its client commits nothing more, then closes it; a commit reported
// from here on is not the member's any more.
func (g *execGroup) Crash() error {
	g.crashed = true
	d, err := g.e.call(execOp{Process: g.proc, F: "crash"}, g.e.cfg.RequestTimeout)
	if err == nil {
		g.events(d.Events)
	}
	return err
}
