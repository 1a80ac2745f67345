package group

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
	"github.com/isrlab/isrlab/broker/coordlog/coordlogtest"
	"github.com/isrlab/isrlab/internal/proctest"
)

type fakeClock = coordlogtest.Clock

var newFakeClock = coordlogtest.NewClock

type memLog = coordlogtest.Log

var newMemLog = coordlogtest.NewLog

// keys lists the partition's records as "group-key" / "offset-key" with
// tombstones marked.
func records(t *testing.T, l *memLog, p int32) []string {
	t.Helper()
	data, _ := l.Read(context.Background(), p, 0)
	var out []string
	if _, err := coordlog.Decode(data, func(b coordlog.Batch, _ int64, r record) error {
		if b.Control {
			out = append(out, "marker")
			return nil
		}
		if c, err := parseCGKey(r.Key); err == nil && c.version >= cgMetadataKeyVersion {
			name := map[int16]string{cgMetadataKeyVersion: "cg-epoch", cgMemberKeyVersion: "cg-member", targetMetadataKeyVersion: "cg-target-epoch", targetMemberKeyVersion: "cg-target", currentAssignmentKeyVersion: "cg-current"}[c.version]
			s := name + " " + c.group
			if c.member != "" {
				s += " " + c.member
			}
			if r.Value == nil {
				s += " tombstone"
			}
			out = append(out, s)
			return nil
		}
		k, err := parseKey(r.Key)
		if err != nil {
			return err
		}
		s := "group " + k.group
		if k.isOffset {
			s = fmt.Sprintf("offset %s %s/%d", k.group, k.tp.Topic, k.tp.Partition)
		}
		if r.Value == nil {
			s += " tombstone"
		}
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// harness is a Manager leading every partition of a memLog.
type harness struct {
	t     *testing.T
	m     *Manager
	clock *fakeClock
	log   *memLog
	ids   int
}

func testConfig() Config {
	c := DefaultConfig()
	c.Partitions = 1 // every group on partition 0
	return c
}

func newHarness(t *testing.T, lg *memLog, cfg Config, opts ...Option) *harness {
	h := &harness{t: t, clock: newFakeClock(), log: lg}
	opts = append([]Option{WithClock(h.clock), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithMemberIDs(func(clientID string) string { h.ids++; return fmt.Sprintf("%s-%d", clientID, h.ids) })}, opts...)
	h.m = New(cfg, lg, opts...)
	t.Cleanup(h.m.Close)
	// Records are submitted where they were made, under the manager's
	// lock, or two state changes could reach the log the other way round.
	lg.ProbeSubmits(func() {
		if h.m.mu.TryLock() {
			h.m.mu.Unlock()
			t.Error("a record was submitted outside the manager's lock")
		}
	})
	return h
}

// lead makes the manager coordinator of partition 0 and waits for the load.
func (h *harness) lead() {
	h.m.OnBecomeLeader(0, 0)
	h.waitLoaded()
}

func (h *harness) waitLoaded() {
	h.t.Helper()
	proctest.Eventually(h.t, 5*time.Second, "partition 0 loaded", func() error {
		if loading, ok := h.m.Owned()[0]; !ok || loading {
			return fmt.Errorf("owned %v, loading %v", ok, loading)
		}
		return nil
	})
}

// joinResult is a JoinGroup answer that may arrive later.
type joinResult struct{ ch chan *kmsg.JoinGroupResponse }

func (r joinResult) get(t *testing.T) *kmsg.JoinGroupResponse {
	t.Helper()
	select {
	case resp := <-r.ch:
		return resp
	default:
		t.Fatal("JoinGroup not answered")
		return nil
	}
}

func (r joinResult) pending() bool { return len(r.ch) == 0 }

func consumerMeta(topics ...string) []byte {
	md := kmsg.ConsumerMemberMetadata{Version: 0, Topics: topics}
	return md.AppendTo(nil)
}

func (h *harness) join(group, memberID, client string, version int16) joinResult {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(version)
	req.Group, req.MemberID, req.ProtocolType = group, memberID, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: consumerMeta("t")}}
	r := joinResult{ch: make(chan *kmsg.JoinGroupResponse, 1)}
	h.m.JoinGroup(req, client, "/127.0.0.1", func(resp *kmsg.JoinGroupResponse) { r.ch <- resp })
	return r
}

// joinNew does the two-step join of a new member and returns its id.
func (h *harness) joinNew(group, client string) (string, joinResult) {
	h.t.Helper()
	first := h.join(group, "", client, 5).get(h.t)
	if first.ErrorCode != kerr.MemberIDRequired.Code {
		h.t.Fatalf("first join: error %d, want MEMBER_ID_REQUIRED", first.ErrorCode)
	}
	return first.MemberID, h.join(group, first.MemberID, client, 5)
}

type syncResult struct{ ch chan *kmsg.SyncGroupResponse }

func (r syncResult) get(t *testing.T) *kmsg.SyncGroupResponse {
	t.Helper()
	select {
	case resp := <-r.ch:
		return resp
	default:
		t.Fatal("SyncGroup not answered")
		return nil
	}
}

func (h *harness) sync(group, member string, gen int32, assign map[string]string) syncResult {
	req := kmsg.NewPtrSyncGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID, req.Generation = group, member, gen
	for id, a := range assign {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	r := syncResult{ch: make(chan *kmsg.SyncGroupResponse, 1)}
	h.m.SyncGroup(req, func(resp *kmsg.SyncGroupResponse) { r.ch <- resp })
	return r
}

func (h *harness) heartbeat(group, member string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.SetVersion(4)
	req.Group, req.MemberID, req.Generation = group, member, gen
	return h.m.Heartbeat(req).ErrorCode
}

func (h *harness) commit(group, member string, gen int32, topic string, partition int32, offset int64) int16 {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(8)
	req.Group, req.MemberID, req.Generation = group, member, gen
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: partition, Offset: offset, LeaderEpoch: -1}}}}
	return h.m.OffsetCommit(req).Topics[0].Partitions[0].ErrorCode
}

// fetch returns the committed offset (-1 none) and the group error.
func (h *harness) fetch(group, topic string, partition int32) (int64, int16) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(8)
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{partition}}}}}
	g := h.m.OffsetFetch(req).Groups[0]
	if g.ErrorCode != 0 {
		return -1, g.ErrorCode
	}
	return g.Topics[0].Partitions[0].Offset, 0
}

func (h *harness) state(group string) string {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.SetVersion(5)
	req.Groups = []string{group}
	return h.m.DescribeGroups(req).Groups[0].State
}
