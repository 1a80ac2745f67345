package workloads_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/workloads"
)

// A run in miniature: record a Log workload against a cluster (here
// franz-go's in-memory fake), drain it, and check the history.
func ExampleLog() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "example"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	var ops history.Memory // a history.Writer on a file in a real run
	start := time.Now()
	rec := history.NewRecorder(&ops, func() time.Duration { return time.Since(start) })

	w, err := workloads.NewLog(workloads.Config{Topic: "example", Partitions: 3, Sends: 50}, rec, cluster.ListenAddrs())
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	if err := w.Drain(ctx); err != nil { // after the faults healed
		panic(err)
	}

	v := checker.CheckOps(ops.Ops, checker.Options{})
	fmt.Println("valid:", v.Valid, "sends ok:", v.Stats.SendsOK, "values read:", v.Stats.ReadValues, "linearizable:", v.Linearizable.Result)
	// Output: valid: true sends ok: 50 values read: 50 linearizable: ok
}
