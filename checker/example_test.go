package checker_test

import (
	"fmt"
	"io"
	"os"

	"github.com/isrlab/isrlab/checker"
	"github.com/isrlab/isrlab/history"
)

// Check a history file the way `isrlab check` does.
func ExampleCheck() {
	path := "testdata/lost-write.jsonl"
	v, err := checker.Check(func() (io.ReadCloser, error) { return os.Open(path) }, path, checker.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Valid, v.Anomalies)
	fmt.Println(v.Examples[checker.LostWrite][0].Note)
	// Output:
	// false map[lost-write:1]
	// value 2 acknowledged at offset 1 was never read, though offset 2 of partition 0 was
}

// Build a history in memory: a poll returns a value that nobody sent.
func ExampleCheckOps() {
	send := history.NewOp(0, history.Invoke, history.FSend)
	send.Value, send.HasValue, send.Partition = 7, true, 0
	ack := send
	ack.Type, ack.Offset = history.OK, 0
	poll := history.NewOp(1, history.OK, history.FPoll)
	poll.Reads = []history.PartitionRecords{{Partition: 0, Records: []history.Record{{Offset: 0, Value: 7}, {Offset: 1, Value: 8}}}}
	v := checker.CheckOps([]history.Op{send, ack, poll}, checker.Options{})
	fmt.Println(v.Valid, v.Anomalies)
	// Output: false map[unexpected:1]
}
