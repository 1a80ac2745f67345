package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestScripts drives one Partition through Kafka's replication rules with
// a fake clock and a fake ISR writer, by the scripts in testdata/scripts
// (see internal/scripttest; -rewrite regenerates the expected outputs):
//
//	make-leader epoch=0 replicas=1,2,3 isr=1,2,3
//	----
//	leader epoch=0 isr=[1 2 3] hw=0 leo=0
func TestScripts(t *testing.T) {
	scripttest.RunDir(t, filepath.Join("testdata", "scripts"), func(t *testing.T) func(*testing.T, *datadriven.TestData) string {
		env := &scriptEnv{t: t, dir: t.TempDir(), now: time.UnixMilli(1_000_000), w: &fakeWriter{}, stats: &counts{}, self: 1, meta: make(chan struct{}),
			sw:  Switches{Truncation: TruncateEpoch, ISRUpdate: ISRAsync, ExpandNeedsEpochStart: true, ReplicaLagTimeMaxMs: 10000},
			cfg: Config{MinInsyncReplicas: 1, MaxMessageBytes: 1 << 20}}
		return func(_ *testing.T, td *datadriven.TestData) string { return env.run(td) }
	})
}

// fakeWriter plays the coordinator (sync modes) and the controller (async).
type fakeWriter struct {
	version  int64
	writes   []string
	pending  []alterCall
	mismatch bool // the next sync write finds a newer version
}

type alterCall struct {
	p     *Partition
	epoch int32
	isr   []int32
	ver   int64
}

func (w *fakeWriter) WriteISR(topic string, p int32, st LeaderAndISR, expected int64) (int64, error) {
	if w.mismatch || expected != w.version {
		w.mismatch = false
		w.writes = append(w.writes, fmt.Sprintf("write isr=%v expected=%d -> version mismatch", st.ISR, expected))
		return 0, ErrVersionMismatch
	}
	w.version++
	w.writes = append(w.writes, fmt.Sprintf("write isr=%v version=%d", st.ISR, w.version))
	return w.version, nil
}

func (w *fakeWriter) NotifyISRChange(string, int32) {}

func (w *fakeWriter) AlterPartition(p *Partition, epoch int32, isr []int32, ver int64) {
	w.pending = append(w.pending, alterCall{p, epoch, slices.Clone(isr), ver})
	w.writes = append(w.writes, fmt.Sprintf("alter-partition isr=%v partition-epoch=%d", isr, ver))
}

type counts struct{ shrinks, expands, failed int }

func (c *counts) IsrShrink()       { c.shrinks++ }
func (c *counts) IsrExpand()       { c.expands++ }
func (c *counts) FailedIsrUpdate() { c.failed++ }

// scriptEnv is one script's world.
type scriptEnv struct {
	t      *testing.T
	dir    string
	now    time.Time
	p      *Partition
	w      *fakeWriter
	stats  *counts
	sw     Switches
	cfg    Config
	self   int32
	nextTS int64
	meta   chan struct{} // closed by new-metadata
}

func ids(s string) []int32 {
	if s == "" {
		return nil
	}
	var out []int32
	for _, x := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(x)
		out = append(out, int32(n))
	}
	return out
}

func (e *scriptEnv) ensure() {
	if e.p != nil {
		return
	}
	lg, err := klog.Open(e.dir, klog.DefaultConfig(), klog.WithClock(func() time.Time { return e.now }))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { lg.Close() })
	e.p = New("t", 0, e.self, lg, e.cfg, func() time.Time { return e.now }, Options{Switches: e.sw, Writer: e.w, Stats: e.stats,
		MetadataChanged: func() <-chan struct{} { return e.meta }})
}

// run executes one command and returns its output.
func (e *scriptEnv) run(td *datadriven.TestData) (res string) {
	defer func() {
		if r := recover(); r != nil {
			res = fmt.Sprintf("panic: %v", r)
		}
	}()
	a := scripttest.ParseArgs(td)
	switch td.Cmd {
	case "switches":
		if v, ok := a["isr.update"]; ok {
			e.sw.ISRUpdate = v
		}
		if v, ok := a["truncation"]; ok {
			e.sw.Truncation = v
		}
		if v, ok := a["lag"]; ok {
			e.sw.ReplicaLagTimeMaxMs = scripttest.Num(v, 0)
		}
		if v, ok := a["hw-requires-min-isr"]; ok {
			e.sw.HWRequiresMinISR = v == "true"
		}
		if v, ok := a["expand-needs-epoch-start"]; ok {
			e.sw.ExpandNeedsEpochStart = v == "true"
		}
		if v, ok := a["txn-verification"]; ok {
			e.sw.TxnVerification = v == "true"
		}
		if v, ok := a["min.insync.replicas"]; ok {
			e.cfg.MinInsyncReplicas = int(scripttest.Num(v, 1))
		}
		if e.p != nil {
			e.p.sw = e.sw
			e.p.SetConfig(e.cfg)
		}
		return "ok"
	case "make-leader":
		e.ensure()
		st := LeaderAndISR{Leader: e.self, LeaderEpoch: int32(a.Int("epoch", 0)), ISR: ids(a["isr"])}
		if err := e.p.MakeLeader(st, ids(a["replicas"]), a.Int("version", e.w.version), a.Int("checkpoint-hw", 0)); err != nil {
			return "error: " + err.Error()
		}
		return e.state()
	case "make-follower":
		e.ensure()
		st := LeaderAndISR{Leader: int32(a.Int("leader", 2)), LeaderEpoch: int32(a.Int("epoch", 0)), ISR: ids(a["isr"])}
		changed := e.p.MakeFollower(st, ids(a["replicas"]), a.Int("version", 0), a.Int("checkpoint-hw", 0))
		return fmt.Sprintf("changed=%v %s", changed, e.state())
	case "append":
		n := int(a.Int("records", 1))
		acks := int16(a.Int("acks", -1))
		// coordinator=true appends as the group coordinator writes a
		// TxnOffsetCommit.
		o := AppendOptions{RequiredAcks: acks, Coordinator: a["coordinator"] == "true"}
		data := e.producerBatch(n, a)
		if a["verify"] != "" {
			// The leader asks the coordinator first: verify=yes is its
			// confirmation, verify=late a marker racing the answer.
			// verify=late markers=N marker-epoch=E: N markers (1) at
			// producer epoch E (0) land between them.
			g, needed := e.p.TxnVerificationNeeded(data)
			if needed && a["verify"] == "late" {
				for i := 0; i < int(a.Int("markers", 1)); i++ {
					if _, err := e.p.AppendMarker(g.ProducerID, int16(a.Int("marker-epoch", 0)), klog.Marker{CoordinatorEpoch: int32(a.Int("coordinator-epoch", 0))}); err != nil {
						return "marker error: " + err.Error()
					}
				}
			}
			if needed && a["verify"] != "no" {
				o.TxnGuard = &g
			}
		}
		r, err := e.p.AppendAsLeaderWith(data, o)
		if err != nil {
			return "error: " + err.Error()
		}
		if r.Duplicate {
			return fmt.Sprintf("duplicate of offsets %d..%d, not appended %s", r.FirstOffset, r.LastOffset, e.state())
		}
		return fmt.Sprintf("offsets %d..%d %s", r.FirstOffset, r.LastOffset, e.state())
	case "marker":
		// WriteTxnMarkers on the leader: marker pid=.. epoch=.. commit=.. coordinator-epoch=..
		m := klog.Marker{Commit: a["commit"] == "true", CoordinatorEpoch: int32(a.Int("coordinator-epoch", 0))}
		r, err := e.p.AppendMarker(a.Int("pid", 0), int16(a.Int("epoch", 0)), m)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("marker at %d %s", r.LastOffset, e.state())
	case "follower-marker":
		// A follower replicates a control batch: follower-marker from=.. pid=.. commit=.. batch-epoch=.. leader-hw=.. epoch=..
		m := klog.Marker{Commit: a["commit"] == "true", CoordinatorEpoch: int32(a.Int("coordinator-epoch", 0))}
		b := klog.ControlBatch(a.Int("pid", 0), int16(a.Int("producer-epoch", 0)), m, e.now.UnixMilli())
		binary.BigEndian.PutUint64(b[0:], uint64(a.Int("from", 0)))
		binary.BigEndian.PutUint32(b[12:], uint32(a.Int("batch-epoch", 0)))
		if err := e.p.AppendAsFollower(b, a.Int("leader-hw", 0), 0, int32(a.Int("epoch", 0))); err != nil {
			return "error: " + err.Error()
		}
		return e.state()
	case "txns":
		// The open transactions and the aborted-transaction index.
		ongoing := e.p.OngoingTxns()
		pids := slices.Sorted(maps.Keys(ongoing))
		var parts []string
		for _, pid := range pids {
			parts = append(parts, fmt.Sprintf("%d@%d", pid, ongoing[pid]))
		}
		var ab []string
		for _, t := range e.p.Log().AbortedTxns(0, e.p.Log().LogEndOffset()) {
			ab = append(ab, fmt.Sprintf("%d:%d..%d(lso %d)", t.ProducerID, t.FirstOffset, t.LastOffset, t.LastStableOffset))
		}
		return fmt.Sprintf("ongoing=[%s] aborted=[%s] lso=%d hw=%d", strings.Join(parts, " "), strings.Join(ab, " "), e.p.LastStableOffset(), e.p.HighWatermark())
	case "restart":
		// The broker stops (clean=true: closes the log; else a crash) and
		// the replica comes back as a follower with the checkpointed HW.
		hw := e.p.HighWatermark()
		lg := e.p.Log()
		if a["clean"] == "true" {
			if err := lg.Close(); err != nil {
				return "close: " + err.Error()
			}
		} else {
			klog.Abandon(lg)
		}
		e.p = nil
		e.ensure()
		e.p.mu.Lock()
		e.p.hw = min(hw, e.p.log.LogEndOffset())
		e.p.mu.Unlock()
		return e.state()
	case "follower-append":
		// A follower appends batches it fetched: offsets from=..records=..epoch=..
		// records=0 is an empty fetch response: only the leader's HW and
		// log start (leader-log-start=..).
		var b []byte
		if n := int(a.Int("records", 1)); n > 0 {
			b = e.producerBatch(n, a)
			binary.BigEndian.PutUint64(b[0:], uint64(a.Int("from", 0)))
			binary.BigEndian.PutUint32(b[12:], uint32(a.Int("batch-epoch", 0)))
		}
		err := e.p.AppendAsFollower(b, a.Int("leader-hw", 0), a.Int("leader-log-start", 0), int32(a.Int("epoch", 0)))
		if err != nil {
			return "error: " + err.Error()
		}
		return e.state()
	case "fetch":
		// A follower fetch at its LEO.
		r, err := e.p.Read(FetchRequest{ReplicaID: int32(a.Int("replica", 2)), Offset: a.Int("offset", 0), MaxBytes: 1 << 20,
			CurrentLeaderEpoch: int32(a.Int("current-epoch", -1)), LastFetchedEpoch: int32(a.Int("last-fetched-epoch", -1)),
			LogStartOffset: a.Int("log-start", 0)})
		var errs string
		if err != nil {
			errs = " error: " + err.Error()
		}
		div := ""
		if r.DivergingEpoch >= 0 {
			div = fmt.Sprintf(" diverging=(%d,%d)", r.DivergingEpoch, r.DivergingEndOffset)
		}
		return fmt.Sprintf("bytes=%d response-hw=%d%s%s %s", len(r.Records), r.HighWatermark, div, errs, e.state())
	case "consume":
		iso := int8(0)
		if a["isolation"] == "read_committed" {
			iso = 1
		}
		r, err := e.p.Read(FetchRequest{ReplicaID: -1, Offset: a.Int("offset", 0), MaxBytes: 1 << 20, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, Isolation: iso})
		if err != nil {
			return "error: " + err.Error()
		}
		n := 0
		for rest := r.Records; len(rest) >= 61; {
			sz := int(binary.BigEndian.Uint32(rest[8:])) + 12
			n += int(int32(binary.BigEndian.Uint32(rest[23:]))) + 1
			rest = rest[sz:]
		}
		out := fmt.Sprintf("records=%d hw=%d", n, r.HighWatermark)
		if iso == 1 {
			var ab []string
			for _, t := range r.AbortedTxns {
				ab = append(ab, fmt.Sprintf("%d@%d", t.ProducerID, t.FirstOffset))
			}
			out += fmt.Sprintf(" lso=%d aborted=[%s]", r.LastStableOffset, strings.Join(ab, " "))
		}
		return out
	case "tick":
		e.now = e.now.Add(time.Duration(a.Int("ms", 0)) * time.Millisecond)
		return fmt.Sprintf("now=+%dms", e.now.UnixMilli()-1_000_000)
	case "stalled":
		// The followers a leader reports as stalled (live, not fetching).
		return fmt.Sprintf("stalled=%v", e.p.StalledFollowers())
	case "shrink":
		e.p.MaybeShrinkISR()
		return e.state()
	case "delete-records":
		// DeleteRecords on the leader, then whether it would complete.
		off, err := e.p.DeleteRecords(a.Int("offset", 0))
		if err != nil {
			return "error: " + err.Error()
		}
		done, lw, _ := e.p.DeleteRecordsStatus(off)
		return fmt.Sprintf("log-start=%d complete=%v low-watermark=%d", off, done, lw)
	case "delete-records-status":
		done, lw, err := e.p.DeleteRecordsStatus(a.Int("offset", 0))
		if err != nil {
			return fmt.Sprintf("complete=%v error: %v", done, err)
		}
		return fmt.Sprintf("complete=%v low-watermark=%d", done, lw)
	case "acks-all":
		done, err := e.p.AcksAllStatus(a.Int("offset", 0))
		if err != nil {
			return fmt.Sprintf("complete=%v error: %v", done, err)
		}
		return fmt.Sprintf("complete=%v", done)
	case "complete-alter":
		if len(e.w.pending) == 0 {
			return "no AlterPartition in flight"
		}
		c := e.w.pending[0]
		e.w.pending = e.w.pending[1:]
		if a["error"] != "" {
			// A Kafka error by name (INELIGIBLE_REPLICA), else a transport error.
			var err error = errors.New(a["error"])
			for code := int16(1); code < 200; code++ {
				if ke, ok := kerr.ErrorForCode(code).(*kerr.Error); ok && ke.Message == a["error"] {
					err = ke
				}
			}
			c.p.CompleteAlterPartition(c.epoch, nil, 0, err)
			if c.p.AwaitingMetadata() {
				return e.state() + " (awaiting new metadata)"
			}
		} else {
			e.w.version++
			c.p.CompleteAlterPartition(c.epoch, c.isr, e.w.version, nil)
		}
		return e.state()
	case "new-metadata":
		// An UpdateMetadata reaches the broker.
		close(e.meta)
		e.meta = make(chan struct{})
		return "ok"
	case "coordinator-moves":
		// The coordinator's state changes under the leader (the controller
		// wrote it): the next conditional write fails.
		e.w.mismatch = true
		return "ok"
	case "writes":
		out := strings.Join(e.w.writes, "\n")
		e.w.writes = nil
		if out == "" {
			return "none"
		}
		return out
	case "stats":
		return fmt.Sprintf("shrinks=%d expands=%d failed=%d", e.stats.shrinks, e.stats.expands, e.stats.failed)
	case "offset-for-epoch":
		ep, off, err := e.p.EndOffsetForEpoch(int32(a.Int("epoch", 0)), -1, true)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("epoch=%d end=%d", ep, off)
	case "truncation-point":
		off, done, next := e.p.TruncationPoint(int32(a.Int("requested", 0)), int32(a.Int("leader-epoch", 0)), a.Int("leader-end", 0))
		if !done {
			return fmt.Sprintf("ask again about epoch %d", next)
		}
		return fmt.Sprintf("truncate to %d", off)
	case "truncate":
		if err := e.p.TruncateTo(a.Int("offset", 0)); err != nil {
			return "error: " + err.Error()
		}
		return e.state()
	case "epochs":
		var parts []string
		for _, en := range e.p.Log().Epochs().Entries() {
			parts = append(parts, fmt.Sprintf("%d@%d", en.Epoch, en.StartOffset))
		}
		return "epochs " + strings.Join(parts, " ")
	case "state":
		return e.state()
	case "log-start":
		return fmt.Sprintf("log-start=%d", e.p.Log().LogStartOffset())
	}
	return "unknown command " + td.Cmd
}

func (e *scriptEnv) state() string {
	s := e.p.State()
	role := map[Role]string{None: "none", Leader: "leader", Follower: "follower"}[s.Role]
	out := fmt.Sprintf("%s epoch=%d isr=%v hw=%d leo=%d", role, s.LeaderEpoch, s.ISR, s.HighWatermark, s.LogEndOffset)
	if !slices.Equal(s.ISR, s.MaximalISR) {
		out += fmt.Sprintf(" maximal-isr=%v", s.MaximalISR)
	}
	return out
}

// producerBatch is batch with the idempotent producer fields pid and seq
// when the command gives them.
func (e *scriptEnv) producerBatch(n int, a scripttest.Args) []byte {
	b := e.batch(n)
	if pid, ok := a["pid"]; ok {
		binary.BigEndian.PutUint64(b[43:], uint64(scripttest.Num(pid, 0)))
		binary.BigEndian.PutUint16(b[51:], uint16(a.Int("producer-epoch", 0)))
		binary.BigEndian.PutUint32(b[53:], uint32(a.Int("seq", 0)))
		if a["txn"] == "true" {
			binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|klog.AttrTransactional)
		}
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	}
	return b
}

// batch builds a v2 record batch of n records (offsets from 0, no epoch).
func (e *scriptEnv) batch(n int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte("v" + strconv.Itoa(i))}
		body := r.AppendTo(nil)
		r.Length = int32(len(body) - 1)
		recs = r.AppendTo(recs)
	}
	e.nextTS++
	ts := e.now.UnixMilli()
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: recs}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
