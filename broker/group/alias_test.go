package group

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupKeepsItsOwnBytes: a decoded request's byte fields alias the
// connection's read buffer, which the next request on the connection
// overwrites. The member metadata of JoinGroup and the assignments of
// SyncGroup outlive their requests (DescribeGroups, a follower's later
// SyncGroup), so the group must hold copies. kafka-python decodes the
// metadata DescribeGroups returns and failed on the overwritten bytes.
func TestGroupKeepsItsOwnBytes(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	h.lead()
	const g = "grp"
	meta := consumerMeta("t")
	want := bytes.Clone(meta)
	first := h.join(g, "", "a", 5).get(t)
	if first.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: %d", first.ErrorCode)
	}
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID, req.ProtocolType = g, first.MemberID, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta}}
	joined := joinResult{ch: make(chan *kmsg.JoinGroupResponse, 1)}
	h.m.JoinGroup(req, "a", "/127.0.0.1", func(resp *kmsg.JoinGroupResponse) { joined.ch <- resp })
	h.clock.Advance(10 * time.Second)
	if r := joined.get(t); r.ErrorCode != 0 {
		t.Fatalf("join: %d", r.ErrorCode)
	}
	assignment := []byte("assignment of a")
	sreq := kmsg.NewPtrSyncGroupRequest()
	sreq.SetVersion(5)
	sreq.Group, sreq.MemberID, sreq.Generation = g, first.MemberID, 1
	sreq.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: first.MemberID, MemberAssignment: assignment}}
	synced := syncResult{ch: make(chan *kmsg.SyncGroupResponse, 1)}
	h.m.SyncGroup(sreq, func(resp *kmsg.SyncGroupResponse) { synced.ch <- resp })
	if r := synced.get(t); r.ErrorCode != 0 {
		t.Fatalf("sync: %d", r.ErrorCode)
	}

	// The next requests reuse the buffer.
	for i := range meta {
		meta[i] = 'X'
	}
	for i := range assignment {
		assignment[i] = 'X'
	}
	dreq := kmsg.NewPtrDescribeGroupsRequest()
	dreq.Groups = []string{g}
	resp := h.m.DescribeGroups(dreq)
	if len(resp.Groups) != 1 || len(resp.Groups[0].Members) != 1 {
		t.Fatalf("describe: %+v", resp)
	}
	m := resp.Groups[0].Members[0]
	if !bytes.Equal(m.ProtocolMetadata, want) {
		t.Errorf("member metadata %q after its request's buffer was reused, want %q", m.ProtocolMetadata, want)
	}
	if string(m.MemberAssignment) != "assignment of a" {
		t.Errorf("member assignment %q after its request's buffer was reused", m.MemberAssignment)
	}
}
