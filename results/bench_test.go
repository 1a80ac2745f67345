package results

import (
	"bufio"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

var benchLines = flag.Int64("bench-lines", 1_000_000, "history lines for BenchmarkRunReport (10000000 for the 10M-entry figure in docs/PERFORMANCE.md)")

// BenchmarkRunReport builds the report of a run whose history is
// generated (the checker benchmark's: 10 partitions, faults, cluster-state
// events, every anomaly kind), with its verdict.json written first as a
// run writes it. It reports entries per second, the memory the process got
// from the OS, and the heap in use at the end of the last report:
//
//	go test -run '^$' -bench RunReport -benchtime 2x ./results/ -args -bench-lines 10000000
func BenchmarkRunReport(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, HistoryFile)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, _ := history.NewWriter(bw, history.Header{Run: "bench", Seed: 1, Topic: "isrlab", Partitions: 10})
	if _, err := history.Synthesize(w, history.SynthOptions{Ops: *benchLines, Partitions: 10, Seed: 1,
		InfoRate: 0.01, FailRate: 0.01, Faults: true, AnomalyEvery: 1_000_000}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(path) }, path, checker.Options{Linearizable: checker.LinOff})
	if err != nil {
		b.Fatal(err)
	}
	if err := WriteJSON(filepath.Join(dir, VerdictFile), v); err != nil {
		b.Fatal(err)
	}
	v = nil
	runtime.GC()
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ResetTimer()
	var page []byte
	for b.Loop() {
		if page, err = RunReport(os.DirFS(dir), "bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(*benchLines)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "MB-sys")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MB-heap")
	b.ReportMetric(float64(len(page))/1024, "KB-report")
}
