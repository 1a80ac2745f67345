package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/internal/proctest"
)

// BenchmarkUpDown measures, like compose/netns's benchmark of the same name,
// the time from Up to every node ready and from Down to nothing left, for 3
// coordinators + 3 brokers + 1 client host. The lab image is imported
// before the clock starts (it is cached by content across runs).
func BenchmarkUpDown(b *testing.B) {
	cli := requireDocker(b)
	bench := func(b *testing.B, bk *Backend, build func(runDir string) compose.Topology) {
		bin := bk.Binary
		if bin == "" {
			bin = build(b.TempDir()).Nodes[0].Argv[0]
		}
		if _, err := EnsureImage(context.Background(), cli, bin); err != nil {
			b.Fatal(err)
		}
		var up, down time.Duration
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			bk.StateDir = filepath.Join(dir, "state")
			top := build(filepath.Join(dir, "run"))
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			begin := time.Now()
			c, err := bk.Up(ctx, top)
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
		}
		b.ReportMetric(up.Seconds()/float64(b.N), "s-ready/op")
		b.ReportMetric(down.Seconds()/float64(b.N), "s-clean/op")
	}
	b.Run("echo-3c3b", func(b *testing.B) {
		bk := testBackend("")
		bench(b, bk, func(runDir string) compose.Topology {
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
			bench(b, &Backend{ReadyTimeout: 20 * time.Second}, func(runDir string) compose.Topology {
				top, err := compose.Build(compose.Options{Name: "bench", RunDir: runDir, Binary: bin, Coordinators: size.c, Brokers: size.b, Clients: 1, NoDefaults: true})
				if err != nil {
					b.Fatal(err)
				}
				return top
			})
		})
	}
}
