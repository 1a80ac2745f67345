package log

import (
	"context"
	"errors"
	"github.com/isrlab/isrlab/internal/proctest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTopicPartitionNames(t *testing.T) {
	tests := []struct {
		dir  string
		tp   TopicPartition
		want bool
	}{
		{"orders-0", TopicPartition{"orders", 0}, true},
		{"my-topic-12", TopicPartition{"my-topic", 12}, true},
		{"__consumer_offsets-49", TopicPartition{"__consumer_offsets", 49}, true},
		{"orders", TopicPartition{}, false},
		{"orders-", TopicPartition{}, false},
		{"-3", TopicPartition{}, false},
		{"orders--1", TopicPartition{"orders-", 1}, true},
		{"orders-x", TopicPartition{}, false},
		{"orders-99999999999", TopicPartition{}, false},
		{"bad topic-1", TopicPartition{}, false},
		{"orders-1.abc-delete", TopicPartition{}, false},
	}
	for _, tt := range tests {
		tp, ok := ParseTopicPartition(tt.dir)
		if ok != tt.want || tp != tt.tp {
			t.Errorf("ParseTopicPartition(%q) = %v %v, want %v %v", tt.dir, tp, ok, tt.tp, tt.want)
		}
		if ok && tp.String() != tt.dir {
			t.Errorf("%v.String() = %q", tp, tp.String())
		}
	}
}

func TestManagerLifecycle(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	cfg := smallConfig()
	m, err := OpenManager(dirs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	leos := map[TopicPartition]int64{}
	for p := int32(0); p < 4; p++ {
		l, err := m.GetOrCreate("events", p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 5+int(p)*5, 3, 100, 1, 1000)
		leos[TopicPartition{"events", p}] = l.LogEndOffset()
		if err := l.IncrementLogStartOffset(int64(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "a b", ".."} {
		if _, err := m.GetOrCreate(bad, 0, cfg); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}
	// Partitions spread over the dirs, two each.
	for _, d := range dirs {
		if n := len(partitionDirs(t, d)); n != 2 {
			t.Fatalf("%s holds %d partitions, want 2", d, n)
		}
	}
	hw := map[TopicPartition]int64{{"events", 0}: 9, {"events", 3}: 42}
	if err := m.WriteReplicationOffsets(hw); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, CleanShutdownFile)); err != nil {
			t.Fatalf("no clean shutdown marker in %s: %v", d, err)
		}
	}
	// Checkpoint format: version, count, "topic partition offset" lines.
	rp, err := os.ReadFile(filepath.Join(dirs[0], RecoveryPointCheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(rp)), "\n")
	if len(lines) != 4 || lines[0] != "0" || lines[1] != "2" || !strings.HasPrefix(lines[2], "events ") {
		t.Fatalf("recovery point checkpoint:\n%s", rp)
	}

	m, err = OpenManager(dirs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, CleanShutdownFile)); !os.IsNotExist(err) {
			t.Fatalf("marker still in %s while running", d)
		}
	}
	logs := m.Logs()
	if len(logs) != 4 {
		t.Fatalf("%d logs loaded", len(logs))
	}
	for tp, l := range logs {
		if l.LogStartOffset() != int64(tp.Partition) {
			t.Fatalf("%v: log start %d not restored from the checkpoint", tp, l.LogStartOffset())
		}
		if l.LogEndOffset() != leos[tp] || l.recoveredBytes != 0 {
			t.Fatalf("%v: LEO %d want %d, recovery scanned %d bytes after a clean shutdown", tp, l.LogEndOffset(), leos[tp], l.recoveredBytes)
		}
	}
	got, err := m.ReadReplicationOffsets()
	if err != nil || len(got) != 2 || got[TopicPartition{"events", 0}] != 9 || got[TopicPartition{"events", 3}] != 42 {
		t.Fatalf("replication offsets %v %v", got, err)
	}
	// Existing logs come back from GetOrCreate with the new topic config.
	cfg2 := cfg
	cfg2.RetentionMs = 1234
	l, err := m.GetOrCreate("events", 1, cfg2)
	if err != nil || l != logs[TopicPartition{"events", 1}] || l.Config().RetentionMs != 1234 {
		t.Fatalf("GetOrCreate of an existing log: %v", err)
	}
	if err := m.Delete("events", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("events", 1); ok {
		t.Fatal("deleted log still there")
	}
	if _, err := os.Stat(l.Dir()); !os.IsNotExist(err) {
		t.Fatalf("deleted log dir remains: %v", err)
	}
}

func partitionDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, ok := ParseTopicPartition(e.Name()); ok && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestManagerUncleanRecovery(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	m, err := OpenManager([]string{dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.GetOrCreate("t", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, 3, 100, 1, 1000)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := l.LogEndOffset()
	if err := m.CheckpointRecoveryPoints(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3, 3, 100, 1, 1000)
	leo := l.LogEndOffset()
	segs := l.segments()
	active := segs[len(segs)-1].path(LogFileSuffix)
	m.crash() // no Close, no marker
	appendToFile(t, active, []byte("torn write torn write torn write torn write torn write torn write"))

	m, err = OpenManager([]string{dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, ok := m.Get("t", 0)
	if !ok {
		t.Fatal("log not loaded")
	}
	if l.LogEndOffset() != leo {
		t.Fatalf("LEO %d, want %d", l.LogEndOffset(), leo)
	}
	// Recovery started at the segment of the recovery point, not at 0.
	if l.recoveredBytes == 0 || l.recoveredBytes >= l.Size() {
		t.Fatalf("recovery scanned %d of %d bytes (recovery point %d)", l.recoveredBytes, l.Size(), flushed)
	}
	if l.RecoveryPoint() != leo {
		t.Fatalf("recovery point %d after recovery, want %d", l.RecoveryPoint(), leo)
	}
}

func TestManagerRun(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionMs = 1000
	cfg.RetentionCheckIntervalMs = 1
	cfg.FlushSchedulerIntervalMs = 1
	cfg.FlushOffsetCheckpointIntervalMs = 1
	cfg.FlushIntervalMs = 1
	clk := newFakeClock()
	m, err := OpenManager([]string{dir}, cfg, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.GetOrCreate("t", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 30, 3, 100, 1, clk.Now().UnixMilli())
	segs := l.NumSegments()
	const hw = 45
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, func(TopicPartition) int64 { return hw }) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	clk.Advance(time.Hour)
	proctest.EventuallyTrue(t, 10*time.Second, "retention to delete segments and checkpoint the start offset", func() bool {
		offs, _ := readOffsets(filepath.Join(dir, LogStartOffsetCheckpointFile))
		return l.NumSegments() < segs && l.RecoveryPoint() == l.LogEndOffset() && offs[TopicPartition{"t", 0}] == l.LogStartOffset()
	})
	cancel()
	stopped = true
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Only segments wholly below the high watermark went.
	if s := l.segments()[0]; s.base > hw || l.LogStartOffset() > hw {
		t.Fatalf("retention passed the high watermark: first segment %d, start %d", s.base, l.LogStartOffset())
	}
}

func TestManagerCorruptCheckpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	m, err := OpenManager([]string{dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.GetOrCreate("t", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, 3, 100, 1, 1000)
	if err := l.IncrementLogStartOffset(7); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// A recovery point or log start checkpoint that cannot be read takes
	// the log directory offline (Kafka: an IOException from the checkpoint
	// read, LogDirFailureChannel): with one directory, nothing opens.
	for _, c := range []struct{ file, body string }{
		{RecoveryPointCheckpointFile, "0\n1\nt 0\n"},
		{LogStartOffsetCheckpointFile, "zzz"},
		{ReplicationOffsetCheckpointFile, "0\n2\nt 0 5\n"},
	} {
		path := filepath.Join(dir, c.file)
		good, _ := os.ReadFile(path)
		os.WriteFile(path, []byte(c.body), 0o644)
		m, err = OpenManager([]string{dir}, cfg)
		if c.file == ReplicationOffsetCheckpointFile {
			// Read by the replica manager, after the logs are open.
			if err == nil {
				_, err = m.ReadReplicationOffsets()
				m.Close()
			}
		}
		if !errors.Is(err, ErrLogDirOffline) || !strings.Contains(err.Error(), c.file) {
			t.Fatalf("%s malformed: %v, want the log directory offline naming the file", c.file, err)
		}
		if good == nil {
			os.Remove(path)
		} else {
			os.WriteFile(path, good, 0o644)
		}
	}
	m, err = OpenManager([]string{dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, _ = m.Get("t", 0)
	if l.LogEndOffset() != 60 || l.LogStartOffset() != 7 {
		t.Fatalf("with the checkpoints repaired: LEO %d, log start %d", l.LogEndOffset(), l.LogStartOffset())
	}
}

func TestManagerDirLock(t *testing.T) {
	dir := t.TempDir()
	m, err := OpenManager([]string{dir}, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenManager([]string{t.TempDir(), dir}, smallConfig()); !errors.Is(err, ErrDirLocked) {
		t.Fatalf("second manager on a locked dir: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m, err = OpenManager([]string{dir}, smallConfig())
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	m.Close()
}
