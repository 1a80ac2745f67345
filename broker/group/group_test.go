package group

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
	klog "github.com/isrlab/isrlab/broker/log"
	"github.com/isrlab/isrlab/internal/proctest"
)

func TestBatchEncoding(t *testing.T) {
	recs := []record{
		{Key: offsetKey("g", "t", 3), Value: offsetValue(Offset{Offset: 42, LeaderEpoch: 7, Metadata: "m", CommitTimestamp: 5})},
		{Key: groupKey("g")},
	}
	batch := coordlog.Encode(recs, 1000, coordlog.NoProducer)
	// The broker's own parser accepts it, CRC included.
	infos, err := klog.ParseBatches(batch, 1<<20)
	if err != nil || len(infos) != 1 || infos[0].LastOffset != 1 {
		t.Fatalf("ParseBatches: %v %+v", err, infos)
	}
	var got []record
	next, err := coordlog.Decode(batch, func(_ coordlog.Batch, _ int64, r record) error { got = append(got, r); return nil })
	if err != nil || next != 2 || len(got) != 2 {
		t.Fatalf("decode: next %d err %v records %d", next, err, len(got))
	}
	k, err := parseKey(got[0].Key)
	if err != nil || !k.isOffset || k.group != "g" || k.tp != (TopicPartition{"t", 3}) {
		t.Fatalf("offset key %+v %v", k, err)
	}
	o, err := parseOffsetValue(got[0].Value)
	if err != nil || o.Offset != 42 || o.LeaderEpoch != 7 || o.Metadata != "m" || o.CommitTimestamp != 5 {
		t.Fatalf("offset value %+v %v", o, err)
	}
	if k, err := parseKey(got[1].Key); err != nil || k.isOffset || k.group != "g" || got[1].Value != nil {
		t.Fatalf("group tombstone %+v %v %v", k, err, got[1].Value)
	}
}

// TestRebalanceLifecycle walks a group through its states: two-step join,
// the initial delay extended by a second member, sync, a third member's
// rebalance, a session expiry and a clean leave.
func TestRebalanceLifecycle(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	h.lead()
	const g = "grp"

	a, ja := h.joinNew(g, "a")
	if !ja.pending() || h.state(g) != string(PreparingRebalance) {
		t.Fatalf("first member answered before the initial delay; state %s", h.state(g))
	}
	h.clock.Advance(2 * time.Second)
	b, jb := h.joinNew(g, "b")
	h.clock.Advance(1 * time.Second) // the delay ends, but b extends it
	if !ja.pending() || !jb.pending() {
		t.Fatal("join completed although a member joined during the delay")
	}
	h.clock.Advance(3 * time.Second)
	ra, rb := ja.get(t), jb.get(t)
	if ra.ErrorCode != 0 || rb.ErrorCode != 0 || ra.Generation != 1 || rb.Generation != 1 {
		t.Fatalf("join: %+v %+v", ra, rb)
	}
	if ra.LeaderID != a || len(ra.Members) != 2 || len(rb.Members) != 0 || *ra.Protocol != "range" {
		t.Fatalf("leader %s members %d/%d protocol %v", ra.LeaderID, len(ra.Members), len(rb.Members), *ra.Protocol)
	}

	for _, tc := range []struct {
		name   string
		member string
		gen    int32
		want   int16
	}{
		{"current generation", b, 1, 0},
		{"stale generation", b, 0, kerr.IllegalGeneration.Code},
		{"unknown member", "nobody", 1, kerr.UnknownMemberID.Code},
	} {
		if got := h.heartbeat(g, tc.member, tc.gen); got != tc.want {
			t.Errorf("heartbeat %s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if code := h.commit(g, a, 1, "t", 0, 5); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit while CompletingRebalance: %d", code)
	}

	sb := h.sync(g, b, 1, nil)
	sa := h.sync(g, a, 1, map[string]string{a: "A", b: "B"})
	if got := sa.get(t); got.ErrorCode != 0 || string(got.MemberAssignment) != "A" {
		t.Fatalf("leader sync %+v", got)
	}
	if got := sb.get(t); got.ErrorCode != 0 || string(got.MemberAssignment) != "B" {
		t.Fatalf("follower sync %+v", got)
	}
	if h.state(g) != string(Stable) {
		t.Fatalf("state %s after sync", h.state(g))
	}
	if code := h.commit(g, a, 1, "t", 0, 5); code != 0 {
		t.Fatalf("commit: %d", code)
	}

	// A third member: the group rebalances; members learn it from heartbeats.
	c, jc := h.joinNew(g, "c")
	if got := h.heartbeat(g, a, 1); got != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat during rebalance: %d", got)
	}
	if code := h.commit(g, a, 1, "t", 0, 6); code != 0 {
		t.Fatalf("commit of the current generation while PreparingRebalance: %d", code)
	}
	ja2, jb2 := h.join(g, a, "a", 5), h.join(g, b, "b", 5)
	r := []*kmsg.JoinGroupResponse{ja2.get(t), jb2.get(t), jc.get(t)}
	for _, x := range r {
		if x.ErrorCode != 0 || x.Generation != 2 {
			t.Fatalf("rejoin: %+v", x)
		}
	}
	h.sync(g, a, 2, map[string]string{a: "A2", b: "B2", c: "C2"}).get(t)

	// c stops heartbeating: after its session it is removed.
	for i := 0; i < 4; i++ {
		h.clock.Advance(3 * time.Second)
		h.heartbeat(g, a, 2)
		h.heartbeat(g, b, 2)
	}
	if got := h.heartbeat(g, c, 2); got != kerr.UnknownMemberID.Code {
		t.Fatalf("expired member heartbeat: %d", got)
	}
	if h.state(g) != string(PreparingRebalance) {
		t.Fatalf("state %s after expiry", h.state(g))
	}
	ja3, jb3 := h.join(g, a, "a", 5), h.join(g, b, "b", 5)
	if x := ja3.get(t); x.Generation != 3 || len(x.Members) != 2 {
		t.Fatalf("after expiry: %+v", x)
	}
	jb3.get(t)

	// Everyone leaves: the group is Empty, its offsets stay.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.SetVersion(3)
	leave.Group = g
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a}, {MemberID: b}, {MemberID: "ghost"}}
	resp := h.m.LeaveGroup(leave)
	if codes := []int16{resp.Members[0].ErrorCode, resp.Members[1].ErrorCode, resp.Members[2].ErrorCode}; !slices.Equal(codes, []int16{0, 0, kerr.UnknownMemberID.Code}) {
		t.Fatalf("leave codes %v", codes)
	}
	if h.state(g) != string(Empty) {
		t.Fatalf("state %s after everyone left", h.state(g))
	}
	if off, _ := h.fetch(g, "t", 0); off != 6 {
		t.Fatalf("committed %d, want 6", off)
	}
	want := []string{"group grp", "offset grp t/0", "offset grp t/0", "group grp", "group grp"}
	if got := records(t, h.log, 0); !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
}

func TestJoinErrors(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	for _, tc := range []struct {
		name   string
		mutate func(*kmsg.JoinGroupRequest)
		want   int16
	}{
		{"empty group id", func(r *kmsg.JoinGroupRequest) { r.Group = "" }, kerr.InvalidGroupID.Code},
		{"session too short", func(r *kmsg.JoinGroupRequest) { r.SessionTimeoutMillis = 1000 }, kerr.InvalidSessionTimeout.Code},
		{"no protocols", func(r *kmsg.JoinGroupRequest) { r.Protocols = nil }, kerr.InconsistentGroupProtocol.Code},
		{"unknown member of an unknown group", func(r *kmsg.JoinGroupRequest) { r.MemberID = "x" }, kerr.UnknownMemberID.Code},
		{"v3 joins at once", func(r *kmsg.JoinGroupRequest) { r.SetVersion(3) }, -1},
		{"v4 needs a member id", func(r *kmsg.JoinGroupRequest) {}, kerr.MemberIDRequired.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(h.m.Owned()) == 0 {
				req := kmsg.NewPtrJoinGroupRequest()
				req.Group = "g"
				var got int16 = -2
				h.m.JoinGroup(req, "c", "/h", func(r *kmsg.JoinGroupResponse) { got = r.ErrorCode })
				if got != kerr.NotCoordinator.Code {
					t.Fatalf("before leading: %d, want NOT_COORDINATOR", got)
				}
				h.lead()
			}
			req := kmsg.NewPtrJoinGroupRequest()
			req.SetVersion(5)
			req.Group, req.ProtocolType, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = "g-"+tc.name, "consumer", 10000, 10000
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{}}}
			tc.mutate(req)
			got := int16(-1) // -1: no answer yet
			h.m.JoinGroup(req, "c", "/h", func(r *kmsg.JoinGroupResponse) { got = r.ErrorCode })
			if got != tc.want {
				t.Fatalf("code %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCommitOnlyAfterAppend: a failed append changes nothing and maps to
// the coordinator error Kafka answers with (KAFKA-SPEC §9.3).
func TestCommitOnlyAfterAppend(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	if code := h.commit("simple", "", -1, "t", 0, 10); code != 0 {
		t.Fatalf("commit: %d", code)
	}
	for _, tc := range []struct {
		err  error
		want int16
	}{
		{kerr.NotEnoughReplicas, kerr.CoordinatorNotAvailable.Code},
		{kerr.NotEnoughReplicasAfterAppend, kerr.CoordinatorNotAvailable.Code},
		{kerr.RequestTimedOut, kerr.CoordinatorNotAvailable.Code},
		{kerr.KafkaStorageError, kerr.NotCoordinator.Code},
		{kerr.MessageTooLarge, kerr.InvalidCommitOffsetSize.Code},
		{kerr.NotLeaderForPartition, kerr.NotCoordinator.Code}, // last: it resigns
	} {
		lg.SetFail(tc.err)
		if code := h.commit("simple", "", -1, "t", 0, 20); code != tc.want {
			t.Errorf("append error %v: code %d, want %d", tc.err, code, tc.want)
		}
		if tc.err == kerr.NotLeaderForPartition {
			break
		}
		if off, _ := h.fetch("simple", "t", 0); off != 10 {
			t.Fatalf("after a failed append (%v) the cache says %d", tc.err, off)
		}
	}
	lg.SetFail(nil)
	if off, code := h.fetch("simple", "t", 0); code != kerr.NotCoordinator.Code {
		t.Fatalf("after NOT_LEADER the manager still answers (offset %d, code %d)", off, code)
	}
	h.m.OnBecomeLeader(0, 1)
	h.waitLoaded()
	if code := h.commit("simple", "", 3, "t", 0, 20); code != kerr.UnknownMemberID.Code {
		t.Fatalf("generation 3 commit to an Empty group: %d", code)
	}
	if code := h.commit("nogroup", "m", 3, "t", 0, 20); code != kerr.IllegalGeneration.Code {
		t.Fatalf("generation 3 commit to an unknown group: %d", code)
	}
}

// TestReload: a new coordinator answers COORDINATOR_LOAD_IN_PROGRESS until
// it has replayed the partition, then has the offsets and the Stable
// group; tombstones delete.
func TestReload(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	a, ja := h.joinNew("live", "a")
	h.clock.Advance(3 * time.Second)
	ja.get(t)
	h.sync("live", a, 1, map[string]string{a: "A"}).get(t)
	h.commit("live", a, 1, "t", 0, 7)
	h.commit("gone", "", -1, "t", 1, 9)
	h.commit("gone", "", -1, "t", 2, 11)
	del := kmsg.NewPtrOffsetDeleteRequest()
	del.Group = "gone"
	del.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}}}
	if r := h.m.OffsetDelete(del); r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset delete %+v", r)
	}
	h.m.OnResign(0)
	if _, code := h.fetch("live", "t", 0); code != kerr.NotCoordinator.Code {
		t.Fatalf("after resign: %d", code)
	}

	h2 := newHarness(t, lg, testConfig())
	gate := make(chan struct{})
	lg.SetGate(gate)
	h2.m.OnBecomeLeader(0, 1)
	if _, code := h2.fetch("live", "t", 0); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("while loading: %d", code)
	}
	close(gate)
	h2.waitLoaded()
	for _, tc := range []struct {
		group string
		p     int32
		want  int64
	}{{"live", 0, 7}, {"gone", 1, -1}, {"gone", 2, 11}} {
		if off, code := h2.fetch(tc.group, "t", tc.p); code != 0 || off != tc.want {
			t.Errorf("%s t/%d: %d (code %d), want %d", tc.group, tc.p, off, code, tc.want)
		}
	}
	if st := h2.state("live"); st != string(Stable) {
		t.Fatalf("reloaded state %s", st)
	}
	if got := h2.heartbeat("live", a, 1); got != 0 {
		t.Fatalf("heartbeat to the new coordinator: %d", got)
	}
	// The reloaded member still expires if it stops heartbeating.
	h2.clock.Advance(11 * time.Second)
	if got := h2.heartbeat("live", a, 1); got != kerr.UnknownMemberID.Code {
		t.Fatalf("after the session: %d", got)
	}
}

// TestReloadAfterRebalancesCommittedOutOfOrder: a group's records reach
// the log in the order of the state changes they record, whatever order
// their commits are acknowledged in, so a new coordinator reloads the
// latest generation. (Generation 1's record written after generation 2's
// made the new coordinator forget the member that joined in generation 2;
// its next join got UNKNOWN_MEMBER_ID and the group rebalanced twice.)
func TestReloadAfterRebalancesCommittedOutOfOrder(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	a, ja := h.joinNew("g", "a")
	h.clock.Advance(3 * time.Second)
	if r := ja.get(t); r.ErrorCode != 0 || r.Generation != 1 {
		t.Fatalf("a's join: %+v", r)
	}
	release := lg.HoldCommits()
	// a's generation-1 assignment: its record is submitted, its commit
	// held (a slow follower), so SyncGroup waits.
	firstSync := make(chan syncResult, 1)
	go func() { firstSync <- h.sync("g", a, 1, map[string]string{a: "A1"}) }()
	waitRecords := func(n int) {
		t.Helper()
		proctest.Eventually(t, 5*time.Second, "the sync's record submitted", func() error {
			if got := records(t, lg, 0); len(got) < n {
				return fmt.Errorf("records %v, want %d", got, n)
			}
			return nil
		})
	}
	waitRecords(1)
	// b joins, a rejoins: generation 2 with both.
	b, jb := h.joinNew("g", "b")
	ja2 := h.join("g", a, "a", 5)
	if r := ja2.get(t); r.ErrorCode != 0 || r.Generation != 2 || r.LeaderID != a {
		t.Fatalf("a's rejoin: %+v", r)
	}
	if r := jb.get(t); r.ErrorCode != 0 || r.Generation != 2 {
		t.Fatalf("b's join: %+v", r)
	}
	syncB := h.sync("g", b, 2, nil)
	secondSync := make(chan syncResult, 1)
	go func() { secondSync <- h.sync("g", a, 2, map[string]string{a: "A2", b: "B2"}) }()
	waitRecords(2)
	release()
	if r := (<-secondSync).get(t); r.ErrorCode != 0 || string(r.MemberAssignment) != "A2" {
		t.Fatalf("a's generation-2 sync: %+v", r)
	}
	if r := syncB.get(t); r.ErrorCode != 0 || string(r.MemberAssignment) != "B2" {
		t.Fatalf("b's generation-2 sync: %+v", r)
	}
	if r := (<-firstSync).get(t); r.ErrorCode != kerr.RebalanceInProgress.Code {
		t.Fatalf("a's generation-1 sync, overtaken by b's join: %+v", r)
	}

	h.m.OnResign(0)
	h2 := newHarness(t, lg, testConfig())
	h2.m.OnBecomeLeader(0, 1)
	h2.waitLoaded()
	for _, id := range []string{a, b} {
		if got := h2.heartbeat("g", id, 2); got != 0 {
			t.Errorf("%s's generation-2 heartbeat to the new coordinator: error %d", id, got)
		}
	}
}

func TestDeleteGroups(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	a, ja := h.joinNew("busy", "a")
	h.clock.Advance(3 * time.Second)
	ja.get(t)
	h.commit("idle", "", -1, "t", 0, 1)
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{"busy", "idle", "unknown"}
	resp := h.m.DeleteGroups(req)
	got := []int16{resp.Groups[0].ErrorCode, resp.Groups[1].ErrorCode, resp.Groups[2].ErrorCode}
	if want := []int16{kerr.NonEmptyGroup.Code, 0, kerr.GroupIDNotFound.Code}; !slices.Equal(got, want) {
		t.Fatalf("codes %v, want %v", got, want)
	}
	if off, _ := h.fetch("idle", "t", 0); off != -1 {
		t.Fatalf("deleted group still has offset %d", off)
	}
	_ = a
	list := h.m.ListGroups(kmsg.NewPtrListGroupsRequest())
	if len(list.Groups) != 1 || list.Groups[0].Group != "busy" {
		t.Fatalf("list %+v", list.Groups)
	}
	// v5 (KIP-848) names and filters groups by type.
	for _, tc := range []struct {
		types []string
		want  int
	}{{[]string{"consumer"}, 0}, {[]string{"Classic"}, 1}, {[]string{"share", "classic"}, 1}} {
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(5)
		req.TypesFilter = tc.types
		got := h.m.ListGroups(req).Groups
		if len(got) != tc.want || tc.want == 1 && got[0].GroupType != "classic" {
			t.Fatalf("ListGroups types %v: %+v", tc.types, got)
		}
	}
	if recs := records(t, h.log, 0); !slices.Contains(recs, "group idle tombstone") || !slices.Contains(recs, "offset idle t/0 tombstone") {
		t.Fatalf("no tombstones: %v", recs)
	}
}

func TestCommitToUnknownTopic(t *testing.T) {
	h := &harness{t: t, clock: newFakeClock(), log: newMemLog()}
	h.m = New(testConfig(), h.log, WithClock(h.clock), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithTopicCheck(func(topic string, p int32) bool { return topic == "known" && p < 2 }))
	t.Cleanup(h.m.Close)
	h.lead()
	for _, tc := range []struct {
		topic string
		p     int32
		want  int16
	}{{"known", 1, 0}, {"known", 2, kerr.UnknownTopicOrPartition.Code}, {"other", 0, kerr.UnknownTopicOrPartition.Code}} {
		if code := h.commit("g", "", -1, tc.topic, tc.p, 3); code != tc.want {
			t.Errorf("%s/%d: code %d, want %d", tc.topic, tc.p, code, tc.want)
		}
	}
	if recs := records(t, h.log, 0); len(recs) != 1 {
		t.Fatalf("log %v: only the known partition's commit belongs there", recs)
	}
}

// TestStaticMembership: a restarted static member (KIP-345) takes its
// predecessor's place without a rebalance, and the old member id is fenced.
func TestStaticMembership(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	h.lead()
	const g = "static"
	join := func(member, instance string) joinResult {
		req := kmsg.NewPtrJoinGroupRequest()
		req.SetVersion(9)
		req.Group, req.MemberID, req.InstanceID, req.ProtocolType = g, member, &instance, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: consumerMeta("t")}}
		r := joinResult{ch: make(chan *kmsg.JoinGroupResponse, 1)}
		h.m.JoinGroup(req, "client", "/h", func(resp *kmsg.JoinGroupResponse) { r.ch <- resp })
		return r
	}
	ja, jb := join("", "ia"), join("", "ib") // no MEMBER_ID_REQUIRED for static members
	h.clock.Advance(6 * time.Second)         // the second member extended the initial delay
	ra, rb := ja.get(t), jb.get(t)
	if ra.ErrorCode != 0 || rb.ErrorCode != 0 || ra.Generation != 1 {
		t.Fatalf("join %+v %+v", ra, rb)
	}
	a, b := ra.MemberID, rb.MemberID
	h.sync(g, b, 1, nil)
	h.sync(g, a, 1, map[string]string{a: "A", b: "B"}).get(t)

	// ia restarts: same instance, no member id.
	r := join("", "ia").get(t)
	if r.ErrorCode != 0 || r.Generation != 1 || r.MemberID == a || r.LeaderID != r.MemberID || !r.SkipAssignment {
		t.Fatalf("rejoin of a static member: %+v", r)
	}
	if h.state(g) != string(Stable) {
		t.Fatalf("state %s: the replacement rebalanced", h.state(g))
	}
	a2 := r.MemberID
	ia := "ia"
	hb := func(member string, instance *string) int16 {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation, req.InstanceID = g, member, 1, instance
		return h.m.Heartbeat(req).ErrorCode
	}
	if code := hb(a, &ia); code != kerr.FencedInstanceID.Code {
		t.Fatalf("old member id: %d, want FENCED_INSTANCE_ID", code)
	}
	if code := hb(a2, &ia); code != 0 {
		t.Fatalf("new member id: %d", code)
	}
	if got := h.sync(g, a2, 1, nil).get(t); string(got.MemberAssignment) != "A" {
		t.Fatalf("assignment after the restart: %q", got.MemberAssignment)
	}

	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.SetVersion(4)
	leave.Group = g
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a, InstanceID: &ia}}
	if code := h.m.LeaveGroup(leave).Members[0].ErrorCode; code != kerr.FencedInstanceID.Code {
		t.Fatalf("leave with the old member id: %d", code)
	}
	leave.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: &ia}}
	if code := h.m.LeaveGroup(leave).Members[0].ErrorCode; code != 0 || h.state(g) != string(PreparingRebalance) {
		t.Fatalf("leave by instance: %d, state %s", code, h.state(g))
	}
}

// TestOffsetExpiry: Kafka 2.1+ retention (KIP-211), checked every
// RetentionCheckInterval.
func TestOffsetExpiry(t *testing.T) {
	cfg := testConfig()
	cfg.OffsetsRetention, cfg.RetentionCheckInterval = time.Minute, 10*time.Second
	h := newHarness(t, newMemLog(), cfg)
	h.lead()

	// A consumer that assigns partitions itself: per offset, from its commit.
	h.commit("simple", "", -1, "t", 0, 1)
	h.clock.Advance(30 * time.Second)
	h.commit("simple", "", -1, "t", 1, 2)

	// A consumer group: a member subscribed to t commits to t and to u.
	a, ja := h.joinNew("cg", "a")
	h.clock.Advance(3 * time.Second)
	ja.get(t)
	h.sync("cg", a, 1, map[string]string{a: "A"}).get(t)
	h.commit("cg", a, 1, "t", 0, 5)
	h.commit("cg", a, 1, "u", 0, 6)

	// 65 s after the first commit: only simple t/0 is that old.
	for i := 0; i < 4; i++ {
		h.clock.Advance(8 * time.Second)
		h.heartbeat("cg", a, 1)
	}
	if off, _ := h.fetch("simple", "t", 0); off != -1 {
		t.Fatalf("simple t/0 not expired: %d", off)
	}
	if off, _ := h.fetch("simple", "t", 1); off != 2 {
		t.Fatalf("simple t/1 expired early: %d", off)
	}
	// Keep the member alive; a minute after its commits, u (not
	// subscribed) expires and t stays.
	for i := 0; i < 8; i++ {
		h.clock.Advance(8 * time.Second)
		h.heartbeat("cg", a, 1)
	}
	if off, _ := h.fetch("cg", "u", 0); off != -1 {
		t.Fatalf("unsubscribed u/0 not expired: %d", off)
	}
	if off, _ := h.fetch("cg", "t", 0); off != 5 {
		t.Fatalf("subscribed t/0 expired: %d", off)
	}
	if st := h.state("simple"); st != string(Dead) {
		t.Fatalf("simple group without offsets is %s", st)
	}

	// The member leaves: the Empty group keeps t/0 for the retention
	// period from then, then is gone.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.SetVersion(3)
	leave.Group, leave.Members = "cg", []kmsg.LeaveGroupRequestMember{{MemberID: a}}
	h.m.LeaveGroup(leave)
	h.clock.Advance(50 * time.Second)
	if off, _ := h.fetch("cg", "t", 0); off != 5 {
		t.Fatalf("t/0 expired before the group was Empty for the retention: %d", off)
	}
	h.clock.Advance(20 * time.Second)
	if off, _ := h.fetch("cg", "t", 0); off != -1 || h.state("cg") != string(Dead) {
		t.Fatalf("after the retention: t/0 %d, state %s", off, h.state("cg"))
	}
	recs := records(t, h.log, 0)
	for _, want := range []string{"offset simple t/0 tombstone", "offset cg u/0 tombstone", "offset cg t/0 tombstone", "group cg tombstone", "group simple tombstone"} {
		if !slices.Contains(recs, want) {
			t.Errorf("no %q in %v", want, recs)
		}
	}
}
