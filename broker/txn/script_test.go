package txn

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog/coordlogtest"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestScripts runs the coordinator scripts in testdata/scripts (see
// internal/scripttest; -rewrite regenerates the expected outputs). A
// command is a request or an action; its output is its answer
// ("name#n id: error ...") and, indented, every effect it caused: records
// written to __transaction_state and WriteTxnMarkers requests sent to
// partition leaders (which the script answers with "reply").
func TestScripts(t *testing.T) {
	scripttest.RunDir(t, filepath.Join("testdata", "scripts"), func(t *testing.T) func(*testing.T, *datadriven.TestData) string {
		r := &scriptRun{t: t}
		r.h = newHarness(t, testConfig(), r.emit)
		return func(_ *testing.T, td *datadriven.TestData) string {
			return r.trace.During(func() { r.exec(td) })
		}
	})
}

type scriptRun struct {
	t     *testing.T
	h     *harness
	trace coordlogtest.Trace
	n     int
}

func (r *scriptRun) emit(format string, args ...any) { r.trace.Emit(format, args...) }

var errName = coordlogtest.ErrName

// tps parses "t/0,t/1".
func tps(s string) []TopicPartition {
	var out []TopicPartition
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		topic, p, _ := strings.Cut(f, "/")
		out = append(out, TopicPartition{topic, int32(scripttest.Num(p, 0))})
	}
	return out
}

// codeNamed parses an error name ("NOT_LEADER_OR_FOLLOWER") or number.
func codeNamed(s string) int16 {
	if n, err := strconv.Atoi(s); err == nil {
		return int16(n)
	}
	for c := int16(-1); c < 130; c++ {
		if e, ok := kerr.ErrorForCode(c).(*kerr.Error); ok && e.Message == s {
			return c
		}
	}
	panic("unknown error " + s)
}

func (r *scriptRun) exec(td *datadriven.TestData) {
	w := scripttest.Words(td)
	t, h := r.t, r.h
	r.n++
	n := r.n
	a := scripttest.ParseArgs(td)
	id := a["id"]
	if id == "" {
		id = "tx"
	}
	version := int16(a.Int("version", -1))
	pid, epoch := a.Int("pid", -1), int16(a.Int("epoch", -1))
	switch td.Cmd {
	case "transaction-version":
		// transaction-version 2: the coordinator's transaction.version,
		// from now on and after a failover.
		h.cfg.TransactionVersion = int16(scripttest.Num(w[0], 0))
		h.m.mu.Lock()
		h.m.cfg.TransactionVersion = h.cfg.TransactionVersion
		h.m.mu.Unlock()
	case "force":
		// force id=tx epoch=32766: set the id's epoch in memory, to reach
		// an exhausted epoch without 32766 transactions.
		h.m.mu.Lock()
		h.m.txns[id].epoch = epoch
		h.m.mu.Unlock()
	case "lead":
		h.lead(int32(a.Int("epoch", 0)))
	case "resign":
		h.m.OnResign(0)
	case "failover":
		h.failover(int32(a.Int("epoch", 1)))
	case "advance":
		d, err := time.ParseDuration(w[0])
		if err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(d)
	case "fail-appends":
		if w[0] == "none" {
			h.log.SetFail(nil)
		} else {
			h.log.SetFail(kerr.ErrorForCode(codeNamed(w[0])))
		}
	case "leader":
		// leader t/0=2 (t/0=-1: none, t/0=gone: no such partition)
		for k, v := range a {
			tp := tps(k)[0]
			l := int32(-2)
			if v != "gone" {
				l = int32(scripttest.Num(v, 0))
			}
			h.sender.mu.Lock()
			h.sender.leaders[tp] = l
			h.sender.mu.Unlock()
		}
	case "init":
		req := kmsg.NewPtrInitProducerIDRequest()
		req.SetVersion(int16(a.Int("version", 4)))
		if _, ok := a["id"]; ok || a["noid"] == "" {
			req.TransactionalID = &id
		}
		if a["empty"] != "" {
			empty := ""
			req.TransactionalID = &empty
		}
		req.TransactionTimeoutMillis = int32(a.Int("timeout", 60000))
		req.ProducerID, req.ProducerEpoch = pid, epoch
		resp := h.m.InitProducerID(context.Background(), req)
		r.emit("init#%d %s: %s pid=%d epoch=%d", n, id, errName(resp.ErrorCode), resp.ProducerID, resp.ProducerEpoch)
	case "add", "verify":
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		if version < 0 {
			version = 3
			if td.Cmd == "verify" {
				version = 4
			}
		}
		req.SetVersion(version)
		byTopic := map[string][]int32{}
		var order []string
		for _, tp := range tps(a["tp"]) {
			if _, ok := byTopic[tp.Topic]; !ok {
				order = append(order, tp.Topic)
			}
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		if version < 4 {
			req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
			for _, topic := range order {
				req.Topics = append(req.Topics, kmsg.AddPartitionsToTxnRequestTopic{Topic: topic, Partitions: byTopic[topic]})
			}
			resp := h.m.AddPartitionsToTxn(req)
			r.emit("%s#%d %s: %s", td.Cmd, n, id, partErrs(resp.Topics))
			return
		}
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = id, pid, epoch, td.Cmd == "verify"
		for _, topic := range order {
			tx.Topics = append(tx.Topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: topic, Partitions: byTopic[topic]})
		}
		req.Transactions = append(req.Transactions, tx)
		resp := h.m.AddPartitionsToTxn(req)
		for _, rt := range resp.Transactions {
			var ts []kmsg.AddPartitionsToTxnResponseTopic
			for _, t := range rt.Topics {
				tt := kmsg.AddPartitionsToTxnResponseTopic{Topic: t.Topic}
				for _, p := range t.Partitions {
					tt.Partitions = append(tt.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p.Partition, ErrorCode: p.ErrorCode})
				}
				ts = append(ts, tt)
			}
			r.emit("%s#%d %s: %s", td.Cmd, n, rt.TransactionalID, partErrs(ts))
		}
	case "offsets":
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.SetVersion(int16(a.Int("version", 3)))
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = id, pid, epoch, a["group"]
		resp := h.m.AddOffsetsToTxn(req, TopicPartition{"__consumer_offsets", int32(a.Int("offsets", 0))})
		r.emit("offsets#%d %s: %s", n, id, errName(resp.ErrorCode))
	case "end":
		req := kmsg.NewPtrEndTxnRequest()
		req.SetVersion(int16(a.Int("version", 3)))
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, a["commit"] == "true"
		resp := h.m.EndTxn(req)
		if req.Version >= 5 {
			r.emit("end#%d %s: %s next pid=%d epoch=%d", n, id, errName(resp.ErrorCode), resp.ProducerID, resp.ProducerEpoch)
			return
		}
		r.emit("end#%d %s: %s", n, id, errName(resp.ErrorCode))
	case "reply":
		// reply b=1 [err=CODE | t/0=CODE ...] [disconnect]
		b := int32(a.Int("b", 1))
		s, ok := h.sender.take(b)
		if !ok {
			r.emit("reply#%d: nothing sent to b%d", n, b)
			return
		}
		if _, ok := a["disconnect"]; ok {
			r.emit("reply#%d b%d: connection lost", n, b)
			s.done(nil, fmt.Errorf("connection to b%d lost", b))
			return
		}
		errs := map[string]int16{}
		for k, v := range a {
			switch {
			case k == "err":
				errs["*"] = codeNamed(v)
			case strings.Contains(k, "/"):
				errs[k] = codeNamed(v)
			}
		}
		r.emit("reply#%d b%d: %s", n, b, markerString(s.req))
		s.done(answer(s, errs), nil)
	case "pending":
		h.sender.mu.Lock()
		for _, s := range h.sender.queue {
			r.emit("  pending b%d %s", s.broker, markerString(s.req))
		}
		h.sender.mu.Unlock()
	case "describe":
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		s := h.m.DescribeTransactions(req).TransactionStates[0]
		var parts []string
		for _, t := range s.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, fmt.Sprintf("%s/%d", t.Topic, p))
			}
		}
		r.emit("describe#%d %s: %s state=%s pid=%d epoch=%d timeout=%d parts=[%s]", n, id, errName(s.ErrorCode), s.State, s.ProducerID, s.ProducerEpoch, s.TimeoutMillis, strings.Join(parts, ","))
	case "list":
		req := kmsg.NewPtrListTransactionsRequest()
		if a["states"] != "" {
			req.StateFilters = strings.Split(a["states"], ",")
		}
		if a["pids"] != "" {
			for _, p := range strings.Split(a["pids"], ",") {
				req.ProducerIDFilters = append(req.ProducerIDFilters, scripttest.Num(p, 0))
			}
		}
		if a["min-duration"] != "" {
			d, err := time.ParseDuration(a["min-duration"])
			if err != nil {
				r.t.Fatalf("list min-duration: %v", err)
			}
			req.SetVersion(1)
			req.DurationFilterMillis = d.Milliseconds()
		}
		resp := h.m.ListTransactions(req)
		var s []string
		for _, ts := range resp.TransactionStates {
			s = append(s, fmt.Sprintf("%s:%d:%s", ts.TransactionalID, ts.ProducerID, ts.TransactionState))
		}
		r.emit("list#%d: %s [%s] unknown=%v", n, errName(resp.ErrorCode), strings.Join(s, " "), resp.UnknownStateFilters)
	case "log":
		data, _ := h.log.Read(context.Background(), 0, 0)
		for _, s := range describeRecords(data) {
			r.emit("  %s", s)
		}
	default:
		t.Fatalf("unknown command %q", td.Cmd)
	}
}

func partErrs(ts []kmsg.AddPartitionsToTxnResponseTopic) string {
	var s []string
	for _, t := range ts {
		for _, p := range t.Partitions {
			s = append(s, fmt.Sprintf("%s/%d=%s", t.Topic, p.Partition, errName(p.ErrorCode)))
		}
	}
	return strings.Join(s, " ")
}
