package group

import (
	"fmt"
	"path/filepath"
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
// command is a request or an action; its output is every answer delivered
// while it ran (answers to waiting JoinGroup and SyncGroup requests
// included), labelled with the number of the request they answer.
func TestScripts(t *testing.T) {
	scripttest.RunDir(t, filepath.Join("testdata", "scripts"), func(t *testing.T) func(*testing.T, *datadriven.TestData) string {
		r := &scriptRun{t: t, topics: newFakeTopics()}
		r.h = newHarness(t, newMemLog(), testConfig(), WithTopics(r.topics))
		return func(_ *testing.T, td *datadriven.TestData) string {
			return r.trace.During(func() { r.exec(td) })
		}
	})
}

type scriptRun struct {
	t      *testing.T
	topics *fakeTopics
	h      *harness
	trace  coordlogtest.Trace
	n      int
}

func (r *scriptRun) emit(format string, args ...any) { r.trace.Emit(format, args...) }

var errName = coordlogtest.ErrName

func (r *scriptRun) exec(td *datadriven.TestData) {
	w := scripttest.Words(td)
	t, h := r.t, r.h
	r.n++
	label := fmt.Sprintf("#%d", r.n)
	a := scripttest.ParseArgs(td)
	group := a["group"]
	if group == "" {
		group = "g"
	}
	switch td.Cmd {
	case "lead":
		h.m.OnBecomeLeader(0, int32(a.Int("epoch", 0)))
		h.waitLoaded()
	case "resign":
		h.m.OnResign(0)
	case "advance":
		d, err := time.ParseDuration(w[0])
		if err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(d)
	case "fail-appends":
		switch w[0] {
		case "none":
			h.log.SetFail(nil)
		default:
			h.log.SetFail(kerr.ErrorForCode(int16(scripttest.Num(w[0], 0))))
		}
	case "join":
		req := kmsg.NewPtrJoinGroupRequest()
		req.SetVersion(int16(a.Int("version", 5)))
		req.Group, req.MemberID, req.ProtocolType = group, a["member"], "consumer"
		if inst, ok := a["instance"]; ok {
			req.InstanceID = &inst
		}
		req.SessionTimeoutMillis = int32(a.Int("session", 10000))
		req.RebalanceTimeoutMillis = int32(a.Int("rebalance", 30000))
		protos := a["protocols"]
		if protos == "" {
			protos = "range"
		}
		for _, p := range strings.Split(protos, ",") {
			req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: consumerMeta(a["topics"])})
		}
		client := a["client"]
		h.m.JoinGroup(req, client, "/127.0.0.1", func(resp *kmsg.JoinGroupResponse) {
			if resp.ErrorCode != 0 {
				r.emit("join%s %s: %s member=%s", label, client, errName(resp.ErrorCode), resp.MemberID)
				return
			}
			var members []string
			for _, m := range resp.Members {
				members = append(members, m.MemberID)
			}
			r.emit("join%s %s: ok gen=%d member=%s leader=%s protocol=%s members=%v", label, client, resp.Generation, resp.MemberID, resp.LeaderID, *resp.Protocol, members)
		})
	case "sync":
		req := kmsg.NewPtrSyncGroupRequest()
		req.SetVersion(5)
		req.Group, req.MemberID, req.Generation = group, a["member"], int32(a.Int("gen", 0))
		if as := a["assign"]; as != "" {
			for _, kv := range strings.Split(as, ",") {
				id, v, _ := strings.Cut(kv, ":")
				req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(v)})
			}
		}
		member := a["member"]
		h.m.SyncGroup(req, func(resp *kmsg.SyncGroupResponse) {
			r.emit("sync%s %s: %s assignment=%q", label, member, errName(resp.ErrorCode), resp.MemberAssignment)
		})
	case "heartbeat":
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = group, a["member"], int32(a.Int("gen", 0))
		r.emit("heartbeat%s %s: %s", label, a["member"], errName(h.m.Heartbeat(req).ErrorCode))
	case "leave":
		req := kmsg.NewPtrLeaveGroupRequest()
		req.SetVersion(3)
		req.Group = group
		for _, id := range strings.Split(a["members"], ",") {
			req.Members = append(req.Members, kmsg.LeaveGroupRequestMember{MemberID: id})
		}
		resp := h.m.LeaveGroup(req)
		for _, m := range resp.Members {
			r.emit("leave%s %s: %s", label, m.MemberID, errName(m.ErrorCode))
		}
	case "commit":
		tp, off, _ := strings.Cut(a["offset"], "=")
		topic, part, _ := strings.Cut(tp, "/")
		code := h.commit(group, a["member"], int32(a.Int("gen", -1)), topic, int32(scripttest.Num(part, 0)), int64(scripttest.Num(off, 0)))
		r.emit("commit%s %s: %s", label, a["offset"], errName(code))
	case "fetch":
		topic, part, _ := strings.Cut(a["tp"], "/")
		off, code := h.fetch(group, topic, int32(scripttest.Num(part, 0)))
		r.emit("fetch%s %s: %s offset=%d", label, a["tp"], errName(code), off)
	case "describe":
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.SetVersion(5)
		req.Groups = []string{group}
		d := h.m.DescribeGroups(req).Groups[0]
		var members []string
		for _, m := range d.Members {
			members = append(members, fmt.Sprintf("%s:%q", m.MemberID, m.MemberAssignment))
		}
		info, _ := h.m.Group(group)
		r.emit("describe%s %s: %s state=%s gen=%d protocol=%q members=%v", label, group, errName(d.ErrorCode), d.State, info.Generation, d.Protocol, members)
	case "delete":
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = []string{group}
		r.emit("delete%s %s: %s", label, group, errName(h.m.DeleteGroups(req).Groups[0].ErrorCode))
	case "log":
		recs := records(t, h.log, 0)
		r.emit("log%s: %d records", label, len(recs))
		for _, rec := range recs {
			r.emit("  %s", rec)
		}
	case "reload":
		// A new coordinator on the same log (a failover).
		lg := h.log
		r.h = newHarness(t, lg, testConfig(), WithTopics(r.topics))
		r.h.ids = h.ids
		r.h.clock.Advance(h.clock.Now().Sub(r.h.clock.Now()))
		r.h.m.OnBecomeLeader(0, int32(a.Int("epoch", 1)))
		r.h.waitLoaded()
	case "cg-commit":
		tp, off, _ := strings.Cut(a["offset"], "=")
		topic, part, _ := strings.Cut(tp, "/")
		req := kmsg.NewPtrOffsetCommitRequest()
		req.SetVersion(int16(a.Int("version", 9)))
		req.Group, req.MemberID, req.Generation = group, a["member"], int32(a.Int("epoch", -1))
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: int32(scripttest.Num(part, 0)), Offset: scripttest.Num(off, 0), LeaderEpoch: -1}}}}
		code := h.m.OffsetCommit(req).Topics[0].Partitions[0].ErrorCode
		r.emit("cg-commit%s %s: %s", label, a["offset"], errName(code))
	case "topic":
		r.topics.set(a["name"], int32(a.Int("partitions", 1)))
	case "cg-heartbeat":
		r.cgHeartbeat(label, group, a)
	case "cg-describe":
		r.cgDescribe(label, group)
	default:
		t.Fatalf("unknown command %q", td.Cmd)
	}
}
