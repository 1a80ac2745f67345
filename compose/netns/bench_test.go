package netns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// BenchmarkUpDown measures the time from Up to every node ready and from
// Down to nothing left, for 3 coordinators + 3 brokers + 1 client host:
// with echo processes (the backend's own cost) and with the isrlab binary.
func BenchmarkUpDown(b *testing.B) {
	if !canNetns() {
		b.Skip("needs root to create network namespaces")
	}
	bench := func(b *testing.B, build func(runDir string) compose.Topology) {
		var up, down time.Duration
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			l := lab{dir + "/state", dir + "/netns", dir + "/run"}
			top := build(l.runDir)
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			begin := time.Now()
			be := l.backend()
			be.ReadyTimeout = 15 * time.Second
			c, err := be.Up(ctx, top)
			if err != nil {
				cancel()
				b.Fatal(err)
			}
			up += time.Since(begin)
			begin = time.Now()
			if err := c.Down(ctx); err != nil {
				cancel()
				b.Fatal(err)
			}
			down += time.Since(begin)
			cancel()
			if left := l.leftovers(top.RunID, nil); len(left) > 0 {
				b.Fatalf("leftovers: %v", left)
			}
		}
		b.ReportMetric(up.Seconds()/float64(b.N), "s-ready/op")
		b.ReportMetric(down.Seconds()/float64(b.N), "s-clean/op")
	}
	b.Run("echo-3c3b", func(b *testing.B) {
		bench(b, func(runDir string) compose.Topology {
			top, err := compose.Build(compose.Options{Name: "bench", RunDir: runDir, Coordinators: 3, Brokers: 3, Clients: 1})
			if err != nil {
				b.Fatal(err)
			}
			for i := range top.Nodes {
				n := &top.Nodes[i]
				if n.Role != compose.RoleClient {
					n.Argv = []string{exePath(), "-test.run=^$"}
					n.Env = []string{envEcho + "=" + fmt.Sprintf("%s:%d", n.Addr, echoPort)}
					n.Files, n.Probe, n.Port = nil, compose.ProbeTCP, echoPort
				}
			}
			return top
		})
	})
	for _, size := range []struct{ c, b int }{{3, 0}, {3, 1}, {3, 3}} {
		b.Run(fmt.Sprintf("isrlab-%dc%db", size.c, size.b), func(b *testing.B) {
			bin := proctest.Binary(b)
			bench(b, func(runDir string) compose.Topology {
				top, err := compose.Build(compose.Options{Name: "bench", RunDir: runDir, Binary: bin, Coordinators: size.c, Brokers: size.b, Clients: 1, NoDefaults: true})
				if err != nil {
					b.Fatal(err)
				}
				return top
			})
		})
	}
}
