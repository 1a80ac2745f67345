package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/proctest"
	"github.com/isrlab/isrlab/workloads"
)

// TestLibrdkafkaQueueWithCrashes: the queue workload through librdkafka
// (confluent-kafka-python, over the exec protocol's "queue" feature)
// with both commit modes, members crashing (queueWithCrashes).
func TestLibrdkafkaQueueWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, Librdkafka)
	queueWithCrashes(t, workloads.ClientSpec{Client: Librdkafka})
}

// TestKafkaPythonQueueWithCrashes: the queue workload through
// kafka-python's KafkaConsumer with group_id (over the exec protocol's
// "queue" feature) with both commit modes, members crashing
// (queueWithCrashes).
func TestKafkaPythonQueueWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, KafkaPython)
	queueWithCrashes(t, workloads.ClientSpec{Client: KafkaPython})
}

// TestKafkajsQueueWithCrashes: the queue workload through kafkajs's
// consumer with groupId (over the exec protocol's "queue" feature; its
// pushed batches handed out per poll) with both commit modes, members
// crashing (queueWithCrashes).
func TestKafkajsQueueWithCrashes(t *testing.T) {
	needKafkajsCluster(t)
	queueWithCrashes(t, workloads.ClientSpec{Client: Kafkajs})
}

// TestKafkajsCrashCommitsNothing: the same for a kafkajs member (the
// driver refuses the crashed member's OffsetCommits before they are
// written; the close's commit is the driver's commitOffsets of what was
// handed out, reported as the member's).
func TestKafkajsCrashCommitsNothing(t *testing.T) {
	needKafkajsCluster(t)
	crashCommitsNothing(t, Kafkajs)
}

// TestKafkajsCommitOutcome runs the kafkajs driver's own table test
// (js/test_outcomes.js): a commit's attempts map to ok, fail and info as
// docs/clients-under-faults.md says.
func TestKafkajsCommitOutcome(t *testing.T) {
	needKafkajs(t)
	cmd := exec.Command(SystemNode, "test_outcomes.js")
	cmd.Dir = "js"
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("node test_outcomes.js: %v", err)
	}
}

// TestJsDriverQuit runs js/test_quit.js: the JavaScript drivers' serve,
// sent SIGQUIT as the lab does to a driver it takes for hung, names each
// process's operation in flight on stderr (it needs node, not kafkajs).
func TestJsDriverQuit(t *testing.T) {
	if _, err := os.Stat(SystemNode); err != nil {
		t.Skipf("needs %s (Debian nodejs)", SystemNode)
	}
	cmd := exec.Command(SystemNode, "test_quit.js")
	cmd.Dir = "js"
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("node test_quit.js: %v", err)
	}
}

// needKafkajsCluster skips a kafkajs test that starts a cluster in
// -short mode, and without kafkajs (needKafkajs).
func needKafkajsCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needKafkajs(t)
}

// needKafkajs skips the test without kafkajs: it is not a Debian
// package, so it is found in compat/js/node_modules (npm ci there by
// hand), which NODE_PATH is pointed at.
func needKafkajs(t *testing.T) {
	t.Helper()
	mods, _ := filepath.Abs("../../compat/js/node_modules")
	if _, err := os.Stat(filepath.Join(mods, "kafkajs")); err != nil {
		t.Skipf("kafkajs is not in %s (no Debian package; npm ci in compat/js by hand to run this part)", mods)
	}
	t.Setenv("NODE_PATH", mods)
	needPython(t, Kafkajs)
}

// TestExecDriverQueueWithCrashes: the queue workload through the
// reference exec driver (examples/exec-driver: kgo group members in a
// process of its own, over the protocol's "queue" feature), with both
// commit modes, members crashing (queueWithCrashes).
func TestExecDriverQueueWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	driver := proctest.Build(t, "./examples/exec-driver")
	queueWithCrashes(t, workloads.ClientSpec{Client: Exec, Exec: []string{driver}})
}

// TestLibrdkafkaCrashCommitsNothing: a librdkafka member with
// auto-commit (its interval far beyond the test, so that only a revoke
// or a close commits) that crashes after polling leaves the group's
// offsets as they were, and one that closes commits the offsets after
// what it delivered, reported as its own commit.
func TestLibrdkafkaCrashCommitsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, Librdkafka)
	crashCommitsNothing(t, Librdkafka)
}

// TestKafkaPythonCrashCommitsNothing: the same for a kafka-python
// member (close(autocommit=False) for the crash; the close's commit is
// kafka-python's commit_offsets_sync, reported by the driver's wrapper).
func TestKafkaPythonCrashCommitsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	needPython(t, KafkaPython)
	crashCommitsNothing(t, KafkaPython)
}

// crashCommitsNothing runs the crash-then-close check for the Python
// driver of client.
func crashCommitsNothing(t *testing.T, client string) {
	t.Helper()
	c := proctest.StartCluster(t, proctest.ClusterOptions{Brokers: 1})
	c.CreateTopic("crash", 1, 1, nil)
	cfg := workloads.Config{Topic: "crash", Partitions: 1}
	cl, err := New(workloads.ClientSpec{Client: client}, cfg, Env{Seeds: c.Bootstrap()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.(interface{ Close() error }).Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := cl.Producer(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= 5; v++ {
		if s, err := p.Send(ctx, workloads.Record{Partition: 0, Key: "k", Value: v}); err != nil || s.Type != history.OK {
			t.Fatalf("send: %+v %v", s, err)
		}
	}
	p.Close()
	adm := kadm.NewClient(mustClient(t, c.Bootstrap()))
	committed := func() (int64, bool) {
		offs, err := adm.FetchOffsets(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		o, ok := offs.Lookup("crash", 0)
		return o.At, ok && o.At >= 0
	}
	// member opens a member and polls until it was delivered every
	// record; it returns the member and the commits it reported.
	member := func(proc int) (workloads.GroupConsumer, *[]workloads.Committed) {
		var own []workloads.Committed
		gc, err := cl.(workloads.GroupClient).GroupConsumer(ctx, proc, workloads.GroupMember{Group: "crash", AutoCommit: true,
			AutoCommitInterval: time.Hour, Assigned: func([]int32) {}, Committed: func(c workloads.Committed) { own = append(own, c) }})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for n < 5 {
			polled, err := gc.Poll(ctx, time.Second)
			if err != nil || ctx.Err() != nil {
				t.Fatalf("poll: %v %v", err, ctx.Err())
			}
			for _, pr := range polled.Reads {
				n += len(pr.Records)
			}
		}
		return gc, &own
	}
	gc, own := member(1)
	if err := gc.Crash(); err != nil {
		t.Fatal(err)
	}
	if at, ok := committed(); ok || len(*own) != 0 {
		t.Fatalf("after the crash: committed %d (%v), commits reported %+v; want none", at, ok, *own)
	}
	gc, own = member(2)
	if err := gc.Close(); err != nil {
		t.Fatal(err)
	}
	if at, ok := committed(); !ok || at != 5 {
		t.Fatalf("after the close: committed %d (%v), want 5", at, ok)
	}
	want := workloads.Committed{Type: history.OK, Offsets: []history.PartitionOffset{{Partition: 0, Offset: 5}}}
	if len(*own) != 1 || (*own)[0].Type != want.Type || !slices.Equal((*own)[0].Offsets, want.Offsets) {
		t.Errorf("the close's commit was reported as %+v, want %+v", *own, want)
	}
}

// TestKafkaGoQueueWithCrashes: the queue workload through kafka-go's
// Reader with GroupID, both commit modes, members crashing
// (queueWithCrashes).
func TestKafkaGoQueueWithCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	queueWithCrashes(t, workloads.ClientSpec{Client: KafkaGo})
}
