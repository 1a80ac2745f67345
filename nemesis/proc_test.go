package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// TestProcessFaults shows each process fault on the lab's server
// processes: the node stops answering, and answers again after the heal.
func TestProcessFaults(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	tests := []struct {
		name  string
		fault Fault
		nodes []string
	}{
		{"kill", &Kill{procNodes{Nodes: []string{"b2"}}}, []string{"b2"}},
		{"pause", &Pause{procNodes{Nodes: []string{"b3"}}}, []string{"b3"}},
		{"stop", &Stop{procNodes{Nodes: []string{"b1"}}}, []string{"b1"}},
		{"power loss of two nodes", &PowerLoss{procNodes: procNodes{Nodes: []string{"b1", "b2"}}}, []string{"b1", "b2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := l.nemesis(t)
			pids := map[string]int{}
			for _, name := range tt.nodes {
				pids[name] = l.c.Node(name).PID()
			}
			a, err := n.Inject(ctx, tt.fault)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.nodes {
				// A paused server accepts (the kernel does) but never answers.
				if err := l.echoFrom("client1", name, 300*time.Millisecond); err == nil {
					t.Fatalf("%s answered during %s", name, tt.name)
				}
			}
			if err := n.Heal(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.nodes {
				proctest.Eventually(t, 15*time.Second, name+" after the heal", func() error {
					return l.echoFrom("client1", name, time.Second)
				})
				restarted := l.c.Node(name).PID() != pids[name]
				if want := tt.name != "pause"; restarted != want {
					t.Fatalf("%s: new process = %v, want %v", name, restarted, want)
				}
			}
			// Healing again is harmless.
			if err := a.Fault.Run.Heal(ctx, n.Env); err != nil {
				t.Fatalf("second heal: %v", err)
			}
		})
	}
	t.Run("restart", func(t *testing.T) {
		n := l.nemesis(t)
		before := l.c.Node("b3").PID()
		if _, err := n.Inject(ctx, &Restart{procNodes{Nodes: []string{"b3"}}}); err != nil {
			t.Fatal(err)
		}
		proctest.Eventually(t, 15*time.Second, "b3 after the restart", func() error { return l.echoFrom("client1", "b3", time.Second) })
		if l.c.Node("b3").PID() == before {
			t.Fatal("restart kept the process")
		}
		if err := n.HealAll(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
