package log

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestScripts runs the data-driven scripts in testdata/scripts (see
// internal/scripttest; -rewrite regenerates the expected outputs).
//
// Commands (key=value arguments; sizes in bytes, times in ms):
//
//	open [segment.bytes=N] [index.interval.bytes=N] [retention.ms=N] [retention.bytes=N]
//	append [epoch=E] [records=R] [batches=B] [value=V] [ts=T]   leader append
//	follow base=O epoch=E [records=R]                            follower append
//	read offset=O [max=M] [hw=H] [min-one]
//	truncate O | truncate-fully O | log-start O
//	retain [hw=H]            DeleteOldSegments at the clock's now
//	clock +D                 advance the clock
//	time T                   OffsetForTimestamp
//	epochs | end-offset E    epoch cache, OffsetsForLeaderEpoch
//	crash [garbage=N]        stop without Close, append N garbage bytes, recover
//	reopen                   Close and open cleanly
//	state                    log start, LEO, recovery point, segment bases
func TestScripts(t *testing.T) {
	scripttest.RunDir(t, filepath.Join("testdata", "scripts"), func(t *testing.T) func(*testing.T, *datadriven.TestData) string {
		env := &scriptEnv{t: t, clk: newFakeClock()}
		t.Cleanup(func() {
			if env.l != nil {
				env.l.Close()
			}
		})
		return func(_ *testing.T, td *datadriven.TestData) string { return env.run(td) }
	})
}

type scriptEnv struct {
	t   *testing.T
	dir string
	cfg Config
	clk *fakeClock
	l   *Log
}

// run executes one command and returns its output, one or more lines.
func (e *scriptEnv) run(td *datadriven.TestData) string {
	cmd := td.FullCmd()
	num := scripttest.ParseArgs(td).Int
	pos := scripttest.Words(td)
	arg := func() int64 {
		if len(pos) != 1 {
			e.t.Fatalf("%s: want one argument", cmd)
		}
		return scripttest.Num(strings.TrimPrefix(pos[0], "+"), 0)
	}
	result := func(err error) string {
		if err != nil {
			return "error: " + errorName(err) + "\n"
		}
		return e.state()
	}
	if td.Cmd != "open" && e.l == nil {
		e.t.Fatalf("%s before open", cmd)
	}
	switch td.Cmd {
	case "open":
		e.dir = e.t.TempDir()
		e.cfg = DefaultConfig()
		e.cfg.FileDeleteDelayMs = 0
		e.cfg.SegmentBytes = num("segment.bytes", e.cfg.SegmentBytes)
		e.cfg.IndexIntervalBytes = int(num("index.interval.bytes", int64(e.cfg.IndexIntervalBytes)))
		e.cfg.RetentionMs = num("retention.ms", e.cfg.RetentionMs)
		e.cfg.RetentionBytes = num("retention.bytes", e.cfg.RetentionBytes)
		return result(e.open(WithCleanShutdown(true)))
	case "append":
		var data []byte
		for i := int64(0); i < num("batches", 1); i++ {
			data = append(data, makeBatch(e.t, batchSpec{records: int(num("records", 1)), valueSize: int(num("value", 10)), ts: num("ts", e.clk.Now().UnixMilli())})...)
		}
		res, err := e.l.AppendAsLeader(data, int32(num("epoch", 0)))
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("appended %s\n", ranges(res.Batches)) + e.state()
	case "follow":
		data := makeBatch(e.t, batchSpec{records: int(num("records", 1)), valueSize: 10, base: num("base", 0), epoch: int32(num("epoch", 0)), ts: e.clk.Now().UnixMilli()})
		res, err := e.l.AppendAsFollower(data)
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("appended %s\n", ranges(res.Batches)) + e.state()
	case "read":
		hw := num("hw", e.l.LogEndOffset())
		res, err := e.l.Read(num("offset", 0), int(num("max", 1<<20)), hw, len(pos) > 0 && pos[0] == "min-one")
		if err != nil {
			return result(err)
		}
		if len(res.Records) == 0 {
			return "empty\n"
		}
		bs, err := ParseBatches(res.Records, 0)
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("batches %s (%d bytes)\n", ranges(bs), len(res.Records))
	case "truncate":
		return result(e.l.TruncateTo(arg()))
	case "truncate-fully":
		return result(e.l.TruncateFullyAndStartAt(arg()))
	case "log-start":
		return result(e.l.IncrementLogStartOffset(arg()))
	case "retain":
		n, err := e.l.DeleteOldSegments(e.clk.Now(), num("hw", e.l.LogEndOffset()))
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("deleted %d segments\n", n) + e.state()
	case "clock":
		e.clk.Advance(time.Duration(arg()) * time.Millisecond)
		return fmt.Sprintf("now %d\n", e.clk.Now().UnixMilli())
	case "time":
		off, ts, ok := e.l.OffsetForTimestamp(arg())
		if !ok {
			return "none\n"
		}
		return fmt.Sprintf("offset %d timestamp %d\n", off, ts)
	case "epochs":
		return fmt.Sprintf("%v\n", e.l.Epochs().Entries())
	case "end-offset":
		ep, off := e.l.Epochs().EndOffsetForEpoch(int32(arg()), e.l.LogEndOffset())
		return fmt.Sprintf("epoch %d end offset %d\n", ep, off)
	case "crash":
		start := e.l.LogStartOffset()
		e.l.abandon()
		if n := num("garbage", 0); n > 0 {
			logs := segmentFiles(e.t, e.dir, LogFileSuffix)
			appendToFile(e.t, logs[len(logs)-1], []byte(strings.Repeat("\xab", int(n))))
		}
		if err := e.open(WithRecoveryPoint(0), WithLogStartOffset(start)); err != nil {
			return result(err)
		}
		return fmt.Sprintf("recovery scanned %d bytes\n", e.l.recoveredBytes) + e.state()
	case "reopen":
		start := e.l.LogStartOffset()
		if err := e.l.Close(); err != nil {
			return result(err)
		}
		if err := e.open(WithCleanShutdown(true), WithLogStartOffset(start)); err != nil {
			return result(err)
		}
		return fmt.Sprintf("recovery scanned %d bytes\n", e.l.recoveredBytes) + e.state()
	case "state":
		return e.state()
	}
	e.t.Fatalf("unknown command %q", cmd)
	return ""
}

func (e *scriptEnv) open(opts ...Option) error {
	l, err := Open(e.dir, e.cfg, append(opts, WithClock(e.clk.Now))...)
	if err != nil {
		return err
	}
	e.l = l
	return nil
}

func (e *scriptEnv) state() string {
	e.l.wg.Wait() // background fsyncs of rolled segments: make the recovery point deterministic
	var bases []string
	for _, s := range e.l.segments() {
		bases = append(bases, strconv.FormatInt(s.base, 10))
	}
	return fmt.Sprintf("log start %d, leo %d, recovery point %d, segments [%s]\n",
		e.l.LogStartOffset(), e.l.LogEndOffset(), e.l.RecoveryPoint(), strings.Join(bases, " "))
}

func ranges(bs []BatchInfo) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("[%d-%d e%d]", b.BaseOffset, b.LastOffset, b.LeaderEpoch))
	}
	return strings.Join(parts, " ")
}

func errorName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{ErrOffsetOutOfRange, "OFFSET_OUT_OF_RANGE"},
		{ErrOffsetMismatch, "offset mismatch"},
		{ErrCorruptMessage, "CORRUPT_MESSAGE"},
		{ErrRecordTooLarge, "MESSAGE_TOO_LARGE"},
		{ErrRecordListTooLarge, "RECORD_LIST_TOO_LARGE"},
		{ErrClosed, "closed"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return err.Error()
}
