package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/isrlab/isrlab/internal/proctest"
)

// corruptBroker is a standalone isrlab broker on loopback with one topic,
// t/0, holding committed records and an aborted transaction.
type corruptBroker struct {
	p    *proctest.Proc
	addr string
	data string
	// values maps the offset of each committed record to its value.
	values  map[int64]string
	aborted map[string]bool // values of the aborted transaction's records
}

func startCorruptBroker(t *testing.T) *corruptBroker {
	t.Helper()
	dir := t.TempDir()
	port := proctest.FreePorts(t, 1)[0]
	b := &corruptBroker{addr: "127.0.0.1:" + strconv.Itoa(port), data: filepath.Join(dir, "data"),
		values: map[int64]string{}, aborted: map[string]bool{}}
	b.p = proctest.Start(t, dir, "broker", "broker",
		"--override", "log.dirs="+b.data, "--override", "listeners=PLAINTEXT://"+b.addr,
		"--override", "log.segment.bytes=4096", "--override", "log.index.interval.bytes=256",
		"--override", "transaction.state.log.replication.factor=1", "--override", "transaction.state.log.min.isr=1",
		"--override", "offsets.topic.replication.factor=1",
		// Checkpoints of three partitions: t-0 and the two internal topics'.
		"--override", "offsets.topic.num.partitions=1", "--override", "transaction.state.log.num.partitions=1",
		// The log directory's checkpoints are written within a killed
		// broker's life.
		"--override", "replica.high.watermark.checkpoint.interval.ms=100",
		"--override", "log.flush.offset.checkpoint.interval.ms=100",
		"--override", "log.flush.start.offset.checkpoint.interval.ms=100")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := proctest.WaitTCP(ctx, b.addr); err != nil {
		t.Fatalf("%v\n%s", err, proctest.Tail(b.p.Log(), 20))
	}
	adm := kadm.NewClient(b.client(t))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	// Committed records from an idempotent producer, in many batches over
	// several segments.
	cl := b.client(t, kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := 0; i < 600; i += 20 {
		var rs []*kgo.Record
		for j := i; j < i+20; j++ {
			rs = append(rs, &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "committed-%06d", j)})
		}
		for _, r := range cl.ProduceSync(ctx, rs...) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			b.values[r.Record.Offset] = string(r.Record.Value)
		}
	}
	// An aborted transaction (the transaction index's entry), then more
	// committed records after it.
	tx := b.client(t, kgo.TransactionalID("corrupt-test"), kgo.TransactionTimeout(10*time.Second), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for j := range 5 {
		v := fmt.Sprintf("aborted-%06d", j)
		b.aborted[v] = true
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	for j := 600; j < 700; j += 20 {
		var rs []*kgo.Record
		for k := j; k < j+20; k++ {
			rs = append(rs, &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "committed-%06d", k)})
		}
		for _, r := range cl.ProduceSync(ctx, rs...) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			b.values[r.Record.Offset] = string(r.Record.Value)
		}
	}
	// EndTxn answers once PrepareAbort is written; the abort marker, and
	// with it the transaction index's entry, follows (as Kafka's). The
	// marker is in t/0 when its last stable offset reaches its high
	// watermark.
	proctest.Eventually(t, 30*time.Second, "the aborted transaction's marker in t/0", func() error {
		hw, err := adm.ListEndOffsets(ctx, "t")
		if err != nil {
			return err
		}
		lso, err := adm.ListCommittedOffsets(ctx, "t")
		if err != nil {
			return err
		}
		h, _ := hw.Lookup("t", 0)
		l, _ := lso.Lookup("t", 0)
		if h.Err != nil || l.Err != nil || l.Offset != h.Offset {
			return fmt.Errorf("last stable offset %d (%v), high watermark %d (%v)", l.Offset, l.Err, h.Offset, h.Err)
		}
		return nil
	})
	return b
}

func (b *corruptBroker) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addr), kgo.RequestRetries(2), kgo.RetryTimeout(5 * time.Second),
		kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// recoveryOutcome is what a restarted broker did with damaged files.
type recoveryOutcome struct {
	refused       string // the broker's last words when it did not start
	read, lost    int    // committed records read back and missing
	corrupt       int    // records served with other bytes than written
	crcRefused    bool   // a batch served whose CRC the client refused
	aborted       int    // aborted records served to read_committed
	readErr       string
	produceErr    string
	firstBadValue string
	said          string // the restarted broker's first warning
}

// firstWarning returns the first warning or error of a broker's log,
// without its time, cut short.
func firstWarning(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") || strings.Contains(l, "not shut down cleanly") {
			continue
		}
		if i := strings.Index(l, "level="); i >= 0 {
			l = l[i:]
		}
		if len(l) > 200 {
			l = l[:200] + "…"
		}
		return l
	}
	return ""
}

func (o recoveryOutcome) String() string {
	if o.refused != "" {
		return "refused to start: " + o.refused
	}
	s := fmt.Sprintf("started; read %d, lost %d", o.read, o.lost)
	if o.corrupt > 0 {
		s += fmt.Sprintf(", SERVED %d CORRUPT (%q)", o.corrupt, o.firstBadValue)
	}
	if o.aborted > 0 {
		s += fmt.Sprintf(", SERVED %d ABORTED", o.aborted)
	}
	if o.crcRefused {
		s += ", served a corrupt batch (the client's CRC check refused it)"
	}
	if o.readErr != "" {
		s += ", read: " + o.readErr
	}
	if o.produceErr != "" {
		s += ", produce after: " + o.produceErr
	}
	if o.said != "" {
		s += "; first warning: " + o.said
	}
	return s
}

// restart starts the broker again and reads t/0 back with read_committed.
func (b *corruptBroker) restart(t *testing.T) (o recoveryOutcome) {
	t.Helper()
	before := len(b.p.Log())
	b.p.Restart()
	defer func() { o.said = firstWarning(b.p.Log()[before:]) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := b.client(t, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
	adm := kadm.NewClient(cl)
	var end int64
	up := proctest.Until(ctx, func() error {
		if !b.p.Running() {
			return nil
		}
		offs, err := adm.ListEndOffsets(ctx, "t")
		if err != nil {
			return err
		}
		lo, ok := offs.Lookup("t", 0)
		if !ok || lo.Err != nil {
			return fmt.Errorf("end offset of t/0: %v", lo.Err)
		}
		end = lo.Offset
		return nil
	})
	if !b.p.Running() {
		lines := strings.Split(strings.TrimSpace(b.p.Log()[before:]), "\n")
		o.refused = lines[len(lines)-1]
		return o
	}
	if up != nil {
		t.Fatalf("the broker neither answers nor exits: %v\n%s", up, proctest.Tail(b.p.Log(), 20))
	}
	seen := map[int64]bool{}
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		progress := false
		fs.EachError(func(_ string, _ int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded):
			case strings.Contains(err.Error(), "does not match calculated crc"):
				o.crcRefused = true
			case o.readErr == "":
				o.readErr = err.Error()
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			progress = true
			v := string(r.Value)
			switch want, ok := b.values[r.Offset]; {
			case b.aborted[v]:
				o.aborted++
			case !ok || want != v:
				if o.corrupt == 0 {
					o.firstBadValue = v
				}
				o.corrupt++
			case !seen[r.Offset]:
				seen[r.Offset] = true
				o.read++
			}
		})
		if !progress || fs.NumRecords() == 0 && ctx.Err() != nil {
			break
		}
		if last := lastOffset(fs); last+1 >= end {
			break
		}
	}
	o.lost = len(b.values) - o.read
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("after")}).FirstErr(); err != nil {
		o.produceErr = err.Error()
	}
	return o
}

func lastOffset(fs kgo.Fetches) int64 {
	last := int64(-1)
	fs.EachRecord(func(r *kgo.Record) { last = max(last, r.Offset) })
	return last
}

// TestCorruptionRecovery damages each class of a stopped broker's files
// with each mode (the corrupt fault's own code), starts the broker again
// and reads its partition back with read_committed. What Kafka does is
// the reference (docs/faults.md): it truncates a segment at the first
// batch whose CRC fails when it recovers, rebuilds a bad index, producer
// snapshot or transaction index, and takes the log directory offline on a
// malformed checkpoint (a broker with one stops), as the broker here does. The
// broker here must never serve a record with other bytes than were
// written, nor an aborted one to read_committed; the rest (refusals,
// losses from this one copy) is logged as the outcome table.
func TestCorruptionRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker per case; skipped with -short")
	}
	type tc struct{ file, mode, stop, where string }
	var cases []tc
	for _, f := range FileClasses() {
		for _, m := range []string{"bitflip", "truncate", "zero"} {
			cases = append(cases, tc{f, m, "kill", ""})
		}
	}
	for _, f := range []string{"segment", "index", "timeindex", "txn-index", "producer-snapshot", "leader-epoch-checkpoint", "hw-checkpoint"} {
		cases = append(cases, tc{f, "bitflip", "graceful", ""})
	}
	cases = append(cases, tc{"segment", "bitflip", "kill", "middle"}, tc{"segment", "bitflip", "graceful", "middle"})
	var table []string
	t.Cleanup(func() { t.Logf("outcomes:\n%s", strings.Join(table, "\n")) })
	for i, c := range cases {
		name := c.file + "/" + c.mode + "/" + c.stop
		if c.where != "" {
			name += "/" + c.where
		}
		t.Run(name, func(t *testing.T) {
			b := startCorruptBroker(t)
			if c.stop == "graceful" {
				if err := b.p.Stop(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			} else {
				proctest.Eventually(t, 30*time.Second, "the log directory's checkpoints", func() error {
					for _, c := range []string{"hw-checkpoint", "recovery-checkpoint", "log-start-checkpoint"} {
						if fs, err := (&Corrupt{File: c}).files(b.data); err != nil || len(fs) == 0 {
							return fmt.Errorf("no %s yet (%v)", c, err)
						}
					}
					return nil
				})
				b.p.Kill()
			}
			f := &Corrupt{File: c.file, Mode: c.mode, Where: c.where}
			if fileClasses[c.file].perPartition {
				f.Partition = "t/0"
			}
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			if testing.Verbose() {
				groups, _ := f.files(b.data)
				t.Logf("%s files: %v", c.file, groups)
			}
			ds, err := f.damage(b.data, rand.New(rand.NewSource(int64(i))))
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == 0 {
				t.Fatalf("no %s file with data in %s", c.file, b.data)
			}
			o := b.restart(t)
			d := ds[0]
			line := fmt.Sprintf("%-42s %s @%d+%d of %d: %s", name, d.Path, d.Offset, d.Length, d.Size, o)
			table = append(table, line)
			t.Log(line)
			if o.corrupt > 0 || o.aborted > 0 {
				t.Errorf("the broker served what it must not: %s", o)
			}
			// Zeroed bytes never parse: the log directory goes offline and
			// the broker, with no other, does not start (as Kafka's).
			if strings.HasSuffix(c.file, "checkpoint") && c.mode == "zero" && !strings.Contains(o.refused, "log directory offline") {
				t.Errorf("a zeroed %s: %s; want the broker to refuse to start, its log directory offline", c.file, o)
			}
		})
	}
}

// TestCorruptFault: the fault stops its target, damages one file of the
// class in each partition and records what it did; the heal starts the
// node again, and healing twice is harmless. A class the node has no file
// of is refused before anything is stopped.
func TestCorruptFault(t *testing.T) {
	requireLab(t)
	l := newLab(t)
	ctx := context.Background()
	n := l.nemesis(t)
	b2 := l.c.Node("b2")
	seg := filepath.Join(b2.DataDir, "t-0", "00000000000000000000.log")
	orig := bytes.Repeat([]byte("record batch "), 100)
	if err := os.MkdirAll(filepath.Dir(seg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Inject(ctx, &Corrupt{procNodes: procNodes{Nodes: []string{"b2"}}, File: "txn-index", Mode: "zero"}); !errors.Is(err, ErrNoTarget) {
		t.Fatalf("a class b2 has no file of: %v", err)
	}
	if !b2.Proc.Running() {
		t.Fatal("a refused corrupt stopped b2")
	}
	pid := b2.PID()
	a, err := n.Inject(ctx, &Corrupt{procNodes: procNodes{Nodes: []string{"b2"}}, File: "segment", Mode: "bitflip", Where: "middle"})
	if err != nil {
		t.Fatal(err)
	}
	f := a.Fault.Run.(*corruptRun)
	if b2.Proc.Running() {
		t.Fatal("b2 runs during the corruption")
	}
	got, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range got {
		diff += bits.OnesCount8(got[i] ^ orig[i])
	}
	if want := (FileDamage{Node: "b2", Path: "t-0/00000000000000000000.log", Size: int64(len(orig)), Length: 1, Mode: "bitflip"}); diff != 1 || len(f.Damage) != 1 ||
		f.Damage[0].Node != want.Node || f.Damage[0].Path != want.Path || f.Damage[0].Size != want.Size || got[f.Damage[0].Offset] == orig[f.Damage[0].Offset] {
		t.Fatalf("%d bits differ; damage recorded %+v", diff, f.Damage)
	}
	if off := f.Damage[0].Offset; off < int64(len(orig))/4 || off >= int64(len(orig))-int64(len(orig))/4 {
		t.Fatalf("where: middle damaged byte %d of %d", off, len(orig))
	}
	if err := n.Heal(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 15*time.Second, "b2 after the heal", func() error { return l.echoFrom("client1", "b2", time.Second) })
	if b2.PID() == pid {
		t.Fatal("b2 was not restarted")
	}
	if err := f.Heal(ctx, n.Env); err != nil {
		t.Fatalf("second heal: %v", err)
	}
}
