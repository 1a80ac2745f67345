package checker

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
)

// sendOp is one send for the unavailability tests: times in milliseconds,
// partitions -1 where a line does not name one, done -1 for a send that
// never completes.
type sendOp struct {
	proc          int
	invPart, part int32
	inv, done     int64
	typ           history.Type
}

func ok(proc int, part int32, inv, done int64) sendOp {
	return sendOp{proc, part, part, inv, done, history.OK}
}

func failed(proc int, part int32, inv, done int64) sendOp {
	return sendOp{proc, part, part, inv, done, history.Info}
}

func pendingSend(proc int, part int32, inv int64) sendOp {
	return sendOp{proc, part, part, inv, -1, history.Info}
}

// sendHistory lays the sends out in time order, as a recorder would.
func sendHistory(sends ...sendOp) []history.Op {
	type line struct {
		at int64
		op history.Op
	}
	var lines []line
	for i, s := range sends {
		inv := history.NewOp(s.proc, history.Invoke, history.FSend)
		inv.Value, inv.HasValue, inv.Partition, inv.Time = int64(i), true, s.invPart, s.inv*1e6
		lines = append(lines, line{s.inv, inv})
		if s.done >= 0 {
			done := inv
			done.Type, done.Partition, done.Time = s.typ, s.part, s.done*1e6
			lines = append(lines, line{s.done, done})
		}
	}
	// Insertion sort keeps equal times in the order given.
	for i := 1; i < len(lines); i++ {
		for j := i; j > 0 && lines[j].at < lines[j-1].at; j-- {
			lines[j], lines[j-1] = lines[j-1], lines[j]
		}
	}
	ops := make([]history.Op, len(lines))
	for i, l := range lines {
		ops[i] = l.op
		ops[i].Index = int64(i)
	}
	return ops
}

// none is a partition with no window above the threshold.
func none(p int32, sends, ok, pending int64) PartitionUnavailability {
	return PartitionUnavailability{Partition: p, Sends: sends, SendsOK: ok, SendsPending: pending}
}

func TestUnavailability(t *testing.T) {
	tests := []struct {
		name       string
		opt        Options
		ops        []history.Op
		want       []PartitionUnavailability
		max        float64
		maxPart    int32
		threshold  float64
		wantOKFrac float64 // availability.overall, to show what it misses; -1: no sends
	}{
		{
			// Sends on partition 1 hang from 2.01 s (retried) and all end ok
			// at 17.01 s; partition 0 keeps working.
			name: "outage on one partition with retries that end ok",
			opt:  Options{Partitions: 2},
			ops: sendHistory(
				ok(0, 0, 1000, 1010), ok(1, 1, 1000, 1010), ok(1, 1, 2000, 2010),
				ok(1, 1, 2010, 17010), ok(2, 1, 3000, 17012), ok(0, 0, 2000, 2010),
				ok(0, 0, 3000, 3010), ok(0, 0, 9000, 9010), ok(0, 0, 17000, 17010),
				ok(1, 1, 17100, 17110)),
			want: []PartitionUnavailability{none(0, 5, 5, 0),
				{Partition: 1, Sends: 5, SendsOK: 5, Windows: 1, Longest: 15, LongestStart: 2.01, LongestEnd: 17.01, Total: 15}},
			max: 15, maxPart: 1, wantOKFrac: 1,
		},
		{
			// Partition 1 is tried from 1 s on, every try times out, and the
			// last is still pending when the send phase ends at 25.01 s.
			name: "partition never available, last send pending",
			opt:  Options{Partitions: 2},
			ops: sendHistory(
				ok(0, 0, 1000, 1010), failed(1, 1, 1000, 11000), failed(1, 1, 11000, 21000),
				pendingSend(1, 1, 21000), ok(0, 0, 5000, 5010), ok(0, 0, 25000, 25010)),
			want: []PartitionUnavailability{none(0, 3, 3, 0),
				{Partition: 1, Sends: 2, SendsPending: 1, Windows: 1, Longest: 24.01, LongestStart: 1, LongestEnd: 25.01, Total: 24.01}},
			max: 24.01, maxPart: 1, wantOKFrac: 0.6,
		},
		{
			// The tries stop at 21 s, but nothing shows the partition
			// recovered: it is unavailable to the end of the send phase.
			name: "partition never available, tries stop",
			opt:  Options{Partitions: 2},
			ops: sendHistory(
				ok(0, 0, 1000, 1010), failed(1, 1, 1000, 11000), failed(1, 1, 11000, 21000),
				ok(0, 0, 25000, 25010)),
			want: []PartitionUnavailability{none(0, 2, 2, 0),
				{Partition: 1, Sends: 2, Windows: 1, Longest: 24.01, LongestStart: 1, LongestEnd: 25.01, Total: 24.01}},
			max: 24.01, maxPart: 1, wantOKFrac: 0.5,
		},
		{
			name: "no sends, partitions from options",
			opt:  Options{Partitions: 3},
			ops: []history.Op{
				history.NewOp(history.Nemesis, history.Invoke, "start-partition"),
				history.NewOp(3, history.Invoke, history.FPoll),
				history.NewOp(3, history.OK, history.FPoll),
			},
			want: []PartitionUnavailability{none(0, 0, 0, 0), none(1, 0, 0, 0), none(2, 0, 0, 0)},
			max:  0, maxPart: -1, wantOKFrac: 1,
		},
		{
			name: "no sends, no partitions",
			ops:  []history.Op{},
			want: []PartitionUnavailability{},
			max:  0, maxPart: -1, wantOKFrac: -1,
		},
		{
			// Gaps of 1 s (not above the threshold) and 0.95 s do not count;
			// 1.001 s does.
			name: "gaps at or below the threshold",
			ops: sendHistory(
				ok(0, 0, 1000, 1010), ok(0, 0, 1100, 2100), ok(0, 0, 2200, 3150),
				ok(0, 0, 4000, 5001)),
			want: []PartitionUnavailability{{Partition: 0, Sends: 4, SendsOK: 4, Windows: 1, Longest: 1.001, LongestStart: 4, LongestEnd: 5.001, Total: 1.001}},
			max:  1.001, maxPart: 0, wantOKFrac: 1,
		},
		{
			name: "threshold option",
			opt:  Options{UnavailableAfter: 2 * time.Second},
			ops: sendHistory(
				ok(0, 0, 1000, 1010), ok(0, 0, 1010, 2510), ok(0, 0, 3000, 6000)),
			want: []PartitionUnavailability{{Partition: 0, Sends: 3, SendsOK: 3, Windows: 1, Longest: 3, LongestStart: 3, LongestEnd: 6, Total: 3}},
			max:  3, maxPart: 0, threshold: 2, wantOKFrac: 1,
		},
		{
			name: "default threshold counts both gaps",
			ops: sendHistory(
				ok(0, 0, 1000, 1010), ok(0, 0, 1010, 2510), ok(0, 0, 3000, 6000)),
			want: []PartitionUnavailability{{Partition: 0, Sends: 3, SendsOK: 3, Windows: 2, Longest: 3, LongestStart: 3, LongestEnd: 6, Total: 4.5}},
			max:  3, maxPart: 0, wantOKFrac: 1,
		},
		{
			// Nobody sent to the partition between 1.01 s and 10 s.
			name: "idle time is not unavailability",
			ops:  sendHistory(ok(0, 0, 1000, 1010), ok(0, 0, 10000, 10010)),
			want: []PartitionUnavailability{none(0, 2, 2, 0)},
			max:  0, maxPart: -1, wantOKFrac: 1,
		},
		{
			// The window starts when the first failing try was invoked.
			name: "failed tries between successes",
			ops: sendHistory(
				ok(0, 0, 500, 1000), failed(0, 0, 1500, 1600), failed(0, 0, 2000, 2100),
				failed(1, 0, 2050, 4000), ok(0, 0, 5900, 6000)),
			want: []PartitionUnavailability{{Partition: 0, Sends: 5, SendsOK: 2, Windows: 1, Longest: 4.5, LongestStart: 1.5, LongestEnd: 6, Total: 4.5}},
			max:  4.5, maxPart: 0, wantOKFrac: 0.4,
		},
		{
			name: "partition named only by the completion",
			ops: sendHistory(ok(0, 1, 500, 600),
				sendOp{proc: 0, invPart: -1, part: 1, inv: 1000, done: 6000, typ: history.OK}),
			want: []PartitionUnavailability{
				{Partition: 1, Sends: 2, SendsOK: 2, Windows: 1, Longest: 5, LongestStart: 1, LongestEnd: 6, Total: 5}},
			max: 5, maxPart: 1, wantOKFrac: 1,
		},
		{
			name: "partition named only by the invocation",
			ops: sendHistory(ok(0, 1, 500, 600),
				sendOp{proc: 0, invPart: 1, part: -1, inv: 1000, done: 6000, typ: history.OK}),
			want: []PartitionUnavailability{
				{Partition: 1, Sends: 2, SendsOK: 2, Windows: 1, Longest: 5, LongestStart: 1, LongestEnd: 6, Total: 5}},
			max: 5, maxPart: 1, wantOKFrac: 1,
		},
		{
			name: "partition named by neither line is not counted",
			ops:  sendHistory(sendOp{proc: 0, invPart: -1, part: -1, inv: 1000, done: 6000, typ: history.OK}),
			want: []PartitionUnavailability{},
			max:  0, maxPart: -1, wantOKFrac: 1,
		},
		{
			// After the last ok on partition 0, a try from 2 s times out at
			// 12 s; partition 1 works on to 20 s, the end of the send phase.
			name: "window after the last ok runs to the end of the send phase",
			ops: sendHistory(
				ok(0, 0, 500, 1000), failed(0, 0, 2000, 12000), ok(1, 1, 1000, 1010),
				ok(1, 1, 19000, 20000)),
			want: []PartitionUnavailability{
				{Partition: 0, Sends: 2, SendsOK: 1, Windows: 1, Longest: 18, LongestStart: 2, LongestEnd: 20, Total: 18},
				none(1, 2, 2, 0)},
			max: 18, maxPart: 0, wantOKFrac: 0.75,
		},
		{
			name: "pending send after the last ok",
			ops: sendHistory(
				ok(0, 0, 500, 1000), pendingSend(0, 0, 3000), ok(1, 1, 1000, 1010),
				ok(1, 1, 19000, 20000)),
			want: []PartitionUnavailability{
				{Partition: 0, Sends: 1, SendsOK: 1, SendsPending: 1, Windows: 1, Longest: 17, LongestStart: 3, LongestEnd: 20, Total: 17},
				none(1, 2, 2, 0)},
			max: 17, maxPart: 0, wantOKFrac: 1,
		},
		{
			// Equal longest windows: the lower partition is the max. The
			// options name partitions 0 and 1; 2 is listed because a send
			// named it.
			name: "max across partitions",
			opt:  Options{Partitions: 2},
			ops: sendHistory(
				ok(0, 2, 1000, 6000), ok(1, 0, 1000, 4000), ok(1, 0, 4000, 9000)),
			want: []PartitionUnavailability{
				{Partition: 0, Sends: 2, SendsOK: 2, Windows: 2, Longest: 5, LongestStart: 4, LongestEnd: 9, Total: 8},
				none(1, 0, 0, 0),
				{Partition: 2, Sends: 1, SendsOK: 1, Windows: 1, Longest: 5, LongestStart: 1, LongestEnd: 6, Total: 5}},
			max: 5, maxPart: 0, wantOKFrac: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckOps(tc.ops, tc.opt)
			u := v.Unavailability
			threshold := tc.threshold
			if threshold == 0 {
				threshold = 1
			}
			if u.ThresholdSeconds != threshold || u.MaxWindow != tc.max || u.MaxPartition != tc.maxPart {
				t.Errorf("threshold %v max %v on %d, want %v, %v on %d", u.ThresholdSeconds, u.MaxWindow, u.MaxPartition, threshold, tc.max, tc.maxPart)
			}
			if fmt.Sprintf("%+v", u.Partitions) != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("partitions\n got  %+v\n want %+v", u.Partitions, tc.want)
			}
			if a := v.Availability.Overall; tc.wantOKFrac >= 0 && a.Total > 0 && a.Fraction != tc.wantOKFrac {
				t.Errorf("availability %v, want %v", a.Fraction, tc.wantOKFrac)
			}
		})
	}
}

// TestUnavailabilityGolden: in testdata/outage.jsonl partition 1 is cut off
// from 2.05 s to 16.95 s and both sends stuck on it retry and end ok (one
// names its partition only on completion). Every send is ok, so
// availability says 1; unavailability shows the 15 s.
func TestUnavailabilityGolden(t *testing.T) {
	path := filepath.Join("testdata", "outage.jsonl")
	v, err := Check(openFile(path), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a := v.Availability.Overall; a.Fraction != 1 || a.OK != a.Total {
		t.Errorf("availability %+v, want all ok", a)
	}
	u := v.Unavailability
	want := []PartitionUnavailability{none(0, 21, 21, 0),
		{Partition: 1, Sends: 8, SendsOK: 8, Windows: 1, Longest: 15, LongestStart: 2.01, LongestEnd: 17.01, Total: 15},
		none(2, 19, 19, 0)}
	if u.MaxWindow != 15 || u.MaxPartition != 1 || fmt.Sprintf("%+v", u.Partitions) != fmt.Sprintf("%+v", want) {
		t.Errorf("unavailability %+v\nwant partitions %+v", u, want)
	}
}

// TestUnavailabilityPartitionsFromHeader: Check lists the header's
// partitions even when no send went to them.
func TestUnavailabilityPartitionsFromHeader(t *testing.T) {
	text := `{"isrlab_history":1,"partitions":3}
{"index":0,"time":1000000000,"process":0,"type":"invoke","f":"send","value":1,"partition":1}
{"index":1,"time":3000000000,"process":0,"type":"ok","f":"send","value":1,"partition":1,"offset":0}
`
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil }
	v, err := Check(open, "h.jsonl", Options{Linearizable: LinOff})
	if err != nil {
		t.Fatal(err)
	}
	want := []PartitionUnavailability{none(0, 0, 0, 0),
		{Partition: 1, Sends: 1, SendsOK: 1, Windows: 1, Longest: 2, LongestStart: 1, LongestEnd: 3, Total: 2},
		none(2, 0, 0, 0)}
	if got := v.Unavailability.Partitions; fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("partitions\n got  %+v\n want %+v", got, want)
	}
	// Options.Partitions, when set, wins over the header.
	v, err = Check(open, "h.jsonl", Options{Linearizable: LinOff, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(v.Unavailability.Partitions); n != 2 {
		t.Errorf("%d partitions listed, want 2", n)
	}
}
