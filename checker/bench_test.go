package checker

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
)

var benchLines = flag.Int64("bench-lines", 1_000_000, "history lines for BenchmarkCheckFile (10000000 for the 10M-operation benchmark)")

// writeSynthetic writes a generated history with every anomaly kind
// injected at a low rate, as `isrlab check gen --anomaly-every 1000000
// --faults` does.
func writeSynthetic(b *testing.B, path string, lines int64, partitions int) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := history.NewWriter(bw, history.Header{Run: "bench", Seed: 1, Partitions: partitions})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := history.Synthesize(w, history.SynthOptions{Ops: lines, Partitions: partitions, Seed: 1,
		InfoRate: 0.01, FailRate: 0.01, Faults: true, AnomalyEvery: 1_000_000}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCheckFile checks a generated history file for every anomaly (not
// linearizability): go test -run '^$' -bench CheckFile ./checker/ -args -bench-lines 10000000
func BenchmarkCheckFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "history.jsonl")
	writeSynthetic(b, path, *benchLines, 10)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ResetTimer()
	var v *Verdict
	for b.Loop() {
		v, err = Check(openFile(path), path, Options{Linearizable: LinOff})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, kind := range AnomalyNames {
		if v.Anomalies[kind] == 0 {
			b.Errorf("no %s found in the generated history", kind)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(v.Stats.Ops)/b.Elapsed().Seconds()*float64(b.N), "ops/s")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "MB-sys")
}

// BenchmarkLinearizability checks 100k client operations (200k history
// lines) over 10 partitions against the log model.
func BenchmarkLinearizability(b *testing.B) {
	var m history.Memory
	if _, err := history.Synthesize(&m, history.SynthOptions{Ops: 200_000, Partitions: 10, Seed: 1, InfoRate: 0.01, FailRate: 0.01}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		v := CheckOps(m.Ops, Options{Linearizable: LinOn, LinTimeout: 5 * time.Minute})
		if v.Linearizable.Result != "ok" {
			b.Fatalf("linearizable = %+v", v.Linearizable)
		}
	}
}
