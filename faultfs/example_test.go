package faultfs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/isrlab/isrlab/faultfs"
)

// A nemesis slows a broker's disk, then cuts the power of two brokers at
// once. Each broker's data dir is a faultfs started with
// "isrlab faultfs --backing ... --mount ... --control <socket>".
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b1 := faultfs.NewClient("/run/isrlab/r42/b1-faultfs.sock")
	b2 := faultfs.NewClient("/run/isrlab/r42/b2-faultfs.sock")

	// 20-25 ms on every write and fsync under the topic's directories.
	for _, op := range []faultfs.Op{faultfs.OpWrite, faultfs.OpFsync} {
		if err := b1.Latency(ctx, op, "orders-0/", 20*time.Millisecond, 5*time.Millisecond); err != nil {
			fmt.Println(err)
		}
	}
	if err := b1.Heal(ctx); err != nil {
		fmt.Println(err)
	}

	// Power loss: SIGKILL both brokers, wait until they are gone, then
	// drop every write they had not fsynced.
	brokerPIDs := []int{4242, 4243}
	reps, err := faultfs.PowerLoss(ctx, brokerPIDs, []*faultfs.Client{b1, b2})
	if err != nil {
		fmt.Println(err)
	}
	for i, rep := range reps {
		fmt.Printf("broker %d lost %d bytes in %d files\n", i+1, rep.BytesLost, rep.Files)
	}
}
