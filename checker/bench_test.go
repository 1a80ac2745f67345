package checker

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
)

var benchLines = flag.Int64("bench-lines", 1_000_000, "history lines for BenchmarkCheckFile (10000000 for the 10M-entry benchmark)")

// writeSynthetic writes a generated history as `isrlab check gen --faults`
// does, with every anomaly kind the generator knows injected about once per
// anomalyEvery sends (0: a valid history), and returns what it injected.
func writeSynthetic(b *testing.B, path string, lines int64, partitions int, anomalyEvery int64) map[string]int64 {
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
	st, err := history.Synthesize(w, history.SynthOptions{Ops: lines, Partitions: partitions, Seed: 1,
		InfoRate: 0.01, FailRate: 0.01, Faults: true, AnomalyEvery: anomalyEvery})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	return st.Injected
}

// BenchmarkCheckFile checks a generated history file of -bench-lines lines
// over 10 partitions (8 producers, 4 consumers):
//
//   - default: every anomaly kind the generator knows (those of a log, the
//     real-time ones included; not transactions' or consumer groups')
//     injected about once per million sends, checked with the default
//     options; every kind injected must be found, and linearizability must
//     run (illegal).
//   - valid: no anomaly, default options; none may be found, and
//     linearizability must say ok.
//   - lin-off: the anomalies history without linearizability.
//
// MB-sys is the process's memory from the OS, the high mark of every case
// so far; peak-MB the case's own (sampled every 10 ms: the memory the
// runtime holds, less what it gave back, after a case that gave back all).
//
// go test -run '^$' -bench CheckFile -benchtime 1x ./checker/ -args -bench-lines 10000000
func BenchmarkCheckFile(b *testing.B) {
	cases := []struct {
		name         string
		anomalyEvery int64
		opt          Options
		lin          string
	}{
		{"default", 1_000_000, Options{}, "illegal"},
		{"valid", 0, Options{}, "ok"},
		{"lin-off", 1_000_000, Options{Linearizable: LinOff}, "skipped"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "history.jsonl")
			injected := writeSynthetic(b, path, *benchLines, 10, tc.anomalyEvery)
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			debug.FreeOSMemory()
			b.SetBytes(st.Size())
			b.ResetTimer()
			peak := samplePeak()
			var v *Verdict
			for b.Loop() {
				v, err = Check(openFile(path), path, tc.opt)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			peakMB := peak()
			if v.Linearizable.Result != tc.lin {
				b.Errorf("linearizable %+v, want %s", v.Linearizable, tc.lin)
			}
			if tc.anomalyEvery == 0 && len(v.Anomalies) > 0 {
				b.Errorf("anomalies %v in a valid history", v.Anomalies)
			}
			for kind := range injected {
				if v.Anomalies[kind] == 0 {
					b.Errorf("%s injected %d times, none found", kind, injected[kind])
				}
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(v.Stats.Ops)/b.Elapsed().Seconds()*float64(b.N), "ops/s")
			b.ReportMetric(float64(ms.Sys)/(1<<20), "MB-sys")
			b.ReportMetric(peakMB, "peak-MB")
			b.ReportMetric(float64(v.Linearizable.Pieces), "pieces")
		})
	}
}

// samplePeak samples the memory the runtime holds from the OS (less what it
// gave back) every 10 ms until the function it returns is called, which
// returns the highest sample in MB.
func samplePeak() func() float64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	held := func() float64 {
		metrics.Read(samples)
		return float64(samples[0].Value.Uint64()-samples[1].Value.Uint64()) / (1 << 20)
	}
	stop, done := make(chan struct{}), make(chan float64)
	go func() {
		high := held()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				high = max(high, held())
			case <-stop:
				done <- max(high, held())
				return
			}
		}
	}()
	return func() float64 {
		close(stop)
		return <-done
	}
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
