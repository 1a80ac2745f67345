package group

import (
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/internal/scripttest"
)

// fakeTopics is the broker metadata of consumer group scripts: topic t
// has id t padded with zeros.
type fakeTopics struct{ parts map[string]int32 }

func newFakeTopics() *fakeTopics { return &fakeTopics{parts: map[string]int32{}} }

func (f *fakeTopics) set(name string, n int32) {
	if n <= 0 {
		delete(f.parts, name)
		return
	}
	f.parts[name] = n
}

func fakeID(name string) (id [16]byte) {
	copy(id[:], name)
	return id
}

func (f *fakeTopics) Topic(name string) ([16]byte, int32, bool) {
	n, ok := f.parts[name]
	return fakeID(name), n, ok
}

func (f *fakeTopics) Names() []string {
	out := make([]string, 0, len(f.parts))
	for t := range f.parts {
		out = append(out, t)
	}
	return out
}

func (f *fakeTopics) TopicName(id [16]byte) (string, bool) {
	name := strings.TrimRight(string(id[:]), "\x00")
	_, ok := f.parts[name]
	return name, ok
}

// parseOwned reads "t/0,t/1,u/2" ("-" is an empty list).
func parseOwned(s string) []kmsg.ConsumerGroupHeartbeatRequestTopic {
	out := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if s == "-" {
		return out
	}
	byTopic := map[string][]int32{}
	var names []string
	for _, tp := range strings.Split(s, ",") {
		t, p, _ := strings.Cut(tp, "/")
		if _, ok := byTopic[t]; !ok {
			names = append(names, t)
		}
		byTopic[t] = append(byTopic[t], int32(scripttest.Num(p, 0)))
	}
	for _, t := range names {
		out = append(out, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: fakeID(t), Partitions: byTopic[t]})
	}
	return out
}

func fmtParts(topics func(yield func(name string, ps []int32))) string {
	var out []string
	topics(func(name string, ps []int32) {
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%s/%d", name, p))
		}
	})
	sort.Strings(out)
	return "[" + strings.Join(out, " ") + "]"
}

// cgHeartbeat sends a ConsumerGroupHeartbeat. Arguments: member, epoch
// (default 0), topics (subscription, comma separated; on a join
// defaults to t), owned (the partitions the member reports, "-" none;
// absent: not reported), instance, assignor, rebalance (ms).
func (r *scriptRun) cgHeartbeat(label, group string, a scripttest.Args) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.SetVersion(1)
	req.Group, req.MemberID, req.MemberEpoch = group, a["member"], int32(a.Int("epoch", 0))
	req.RebalanceTimeoutMillis = -1
	if v, ok := a["rebalance"]; ok {
		req.RebalanceTimeoutMillis = int32(scripttest.Num(v, 0))
	} else if req.MemberEpoch == 0 {
		req.RebalanceTimeoutMillis = 30000
	}
	if re, ok := a["regex"]; ok {
		req.SubscribedTopicRegex = &re
	}
	if ts, ok := a["topics"]; ok {
		req.SubscribedTopicNames = strings.Split(ts, ",")
	} else if req.MemberEpoch == 0 && req.SubscribedTopicRegex == nil {
		req.SubscribedTopicNames = []string{"t"}
	}
	if o, ok := a["owned"]; ok {
		req.Topics = parseOwned(o)
	} else if req.MemberEpoch == 0 {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	if inst, ok := a["instance"]; ok {
		req.InstanceID = &inst
	}
	if as, ok := a["assignor"]; ok {
		req.ServerAssignor = &as
	}
	resp := r.h.m.ConsumerGroupHeartbeat(req, "client", "/127.0.0.1")
	if resp.ErrorCode != 0 {
		r.emit("hb%s %s: %s", label, req.MemberID, errName(resp.ErrorCode))
		return
	}
	line := fmt.Sprintf("hb%s %s: ok epoch=%d interval=%d", label, req.MemberID, resp.MemberEpoch, resp.HeartbeatIntervalMillis)
	if resp.Assignment != nil {
		line += " assignment=" + fmtParts(func(yield func(string, []int32)) {
			for _, t := range resp.Assignment.Topics {
				name, _ := r.topics.TopicName(t.TopicID)
				yield(name, t.Partitions)
			}
		})
	}
	r.emit("%s", line)
}

// cgDescribe prints ConsumerGroupDescribe's view and each member's
// reconciliation state.
func (r *scriptRun) cgDescribe(label, group string) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	d := r.h.m.ConsumerGroupDescribe(req).Groups[0]
	if d.ErrorCode != 0 {
		r.emit("cg-describe%s %s: %s", label, group, errName(d.ErrorCode))
		return
	}
	r.emit("cg-describe%s %s: state=%s epoch=%d assignment-epoch=%d assignor=%s", label, group, d.State, d.Epoch, d.AssignmentEpoch, d.AssignorName)
	states := map[string]string{}
	r.h.m.mu.Lock()
	if g := r.h.m.groups[group]; g != nil && g.cg != nil {
		for id, mem := range g.cg.members {
			states[id] = mem.state
			if mem.revoking.size() > 0 {
				states[id] += " revoking=" + fmtParts(func(yield func(string, []int32)) {
					for _, t := range mem.revoking.topics() {
						yield(t, mem.revoking[t])
					}
				})
			}
		}
	}
	r.h.m.mu.Unlock()
	for _, mem := range d.Members {
		as := func(x kmsg.Assignment) string {
			return fmtParts(func(yield func(string, []int32)) {
				for _, t := range x.TopicPartitions {
					yield(t.Topic, t.Partitions)
				}
			})
		}
		inst := ""
		if mem.InstanceID != nil {
			inst = " instance=" + *mem.InstanceID
		}
		if mem.SubscribedTopicRegex != nil {
			inst += " regex=" + *mem.SubscribedTopicRegex
		}
		r.emit("  %s%s epoch=%d %s assigned=%s target=%s", mem.MemberID, inst, mem.MemberEpoch, states[mem.MemberID], as(mem.Assignment), as(mem.TargetAssignment))
	}
}
