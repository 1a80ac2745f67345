package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/isrlab/isrlab/units"
)

// BenchmarkInjectHeal measures the latency of injecting and of healing each
// fault type in a lab of namespaces (4 server nodes and a client), through
// a Nemesis with a file store, as `isrlab fault` and the lab runner use it.
// inject-ms and heal-ms are per operation; ns/op is both together.
func BenchmarkInjectHeal(b *testing.B) {
	requireLab(b)
	l := newLab(b)
	_, sock := mountFaultfs(b)
	ctx := context.Background()
	faults := []struct {
		name string
		f    func() Fault
	}{
		{"partition-isolate", func() Fault { return &Partition{Topology: TopoIsolate, Targets: []string{"b1"}} }},
		{"partition-halves", func() Fault { return &Partition{Topology: TopoRandomHalves, Nodes: []string{"all"}} }},
		{"loss", func() Fault { return &Loss{Nodes: []string{"b2"}, Percent: 10} }},
		{"slow-net-rate", func() Fault { return &SlowNet{Nodes: []string{"b2"}, Rate: "10mbit"} }},
		{"slow-net-delay", func() Fault {
			return &SlowNet{Nodes: []string{"b2"}, Delay: units.Duration(10 * time.Millisecond)}
		}},
		{"slow-disk", func() Fault {
			f := &SlowDisk{Latency: units.Duration(time.Millisecond)}
			f.Nodes = []string{"b1"}
			return f
		}},
		{"pause", func() Fault { return &Pause{procNodes{Nodes: []string{"b3"}}} }},
		{"kill", func() Fault { return &Kill{procNodes{Nodes: []string{"b3"}}} }},
		{"power-loss-2", func() Fault { return &PowerLoss{procNodes: procNodes{Nodes: []string{"b2", "b3"}}} }},
	}
	for _, fc := range faults {
		b.Run(fc.name, func(b *testing.B) {
			n := l.nemesis(b)
			n.Env.Disks = map[string]string{"b1": sock}
			var inject, heal time.Duration
			for b.Loop() {
				t0 := time.Now()
				a, err := n.Inject(ctx, fc.f())
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := n.Heal(ctx, a.ID); err != nil {
					b.Fatal(err)
				}
				inject += t1.Sub(t0)
				heal += time.Since(t1)
			}
			b.ReportMetric(float64(inject.Microseconds())/1000/float64(b.N), "inject-ms")
			b.ReportMetric(float64(heal.Microseconds())/1000/float64(b.N), "heal-ms")
		})
	}
	l.noLeftovers(b)
}
