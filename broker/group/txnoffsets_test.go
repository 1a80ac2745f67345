package group

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
)

func (h *harness) txnCommit(group string, pid int64, epoch int16, topic string, partition int32, offset int64) int16 {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.SetVersion(3)
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = "tx", group, pid, epoch, -1
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: partition, Offset: offset, LeaderEpoch: -1}}}}
	return h.m.TxnOffsetCommit(req).Topics[0].Partitions[0].ErrorCode
}

// fetchStable is OffsetFetch v8 with require_stable.
func (h *harness) fetchStable(group, topic string, partition int32) (int64, int16) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(8)
	req.RequireStable = true
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{partition}}}}}
	p := h.m.OffsetFetch(req).Groups[0].Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// marker appends the control batch a partition leader writes for a
// WriteTxnMarkers and tells the manager, as the broker's hook does.
func (h *harness) marker(pid int64, epoch int16, commit bool) {
	h.t.Helper()
	if _, err := h.log.Append(context.Background(), 0, coordlog.EncodeControl(coordlog.Producer{ID: pid, Epoch: epoch}, commit, 0, 1000)); err != nil {
		h.t.Fatal(err)
	}
	h.m.CompleteTxn(0, pid, epoch, commit)
}

func TestTxnOffsetCommitPendingUntilMarker(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	h.lead()
	if c := h.commit("g", "", -1, "t", 0, 3); c != 0 {
		t.Fatalf("plain commit: %v", kerr.ErrorForCode(c))
	}
	if c := h.txnCommit("g", 7, 0, "t", 0, 10); c != 0 {
		t.Fatalf("txn commit: %v", kerr.ErrorForCode(c))
	}
	if off, c := h.fetch("g", "t", 0); c != 0 || off != 3 {
		t.Fatalf("fetch while pending: %d %v, want the committed 3", off, kerr.ErrorForCode(c))
	}
	if off, c := h.fetchStable("g", "t", 0); c != kerr.UnstableOffsetCommit.Code || off != -1 {
		t.Fatalf("require_stable while pending: %d %v, want UNSTABLE_OFFSET_COMMIT", off, kerr.ErrorForCode(c))
	}
	h.marker(7, 0, true)
	if off, c := h.fetchStable("g", "t", 0); c != 0 || off != 10 {
		t.Fatalf("after the commit marker: %d %v, want 10", off, kerr.ErrorForCode(c))
	}

	// Aborted: dropped.
	if c := h.txnCommit("g", 7, 1, "t", 0, 20); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	h.marker(7, 1, false)
	if off, c := h.fetchStable("g", "t", 0); c != 0 || off != 10 {
		t.Fatalf("after the abort marker: %d %v, want 10", off, kerr.ErrorForCode(c))
	}

	// A plain commit appended after the transactional one wins when the
	// transaction commits later (Kafka keeps the later log offset).
	if c := h.txnCommit("g", 8, 0, "t", 1, 50); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	if c := h.commit("g", "", -1, "t", 1, 60); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	h.marker(8, 0, true)
	if off, _ := h.fetch("g", "t", 1); off != 60 {
		t.Fatalf("t/1: %d, want the later plain commit 60", off)
	}

	// A commit for another producer's marker does not release this one.
	if c := h.txnCommit("g", 9, 0, "t", 2, 70); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	h.marker(10, 0, true)
	if _, c := h.fetchStable("g", "t", 2); c != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("t/2 after another producer's marker: %v, want UNSTABLE_OFFSET_COMMIT", kerr.ErrorForCode(c))
	}
	if got := records(t, h.log, 0); !slices.Contains(got, "marker") {
		t.Fatalf("log %v has no marker", got)
	}
}

// TestTxnOffsetCommitReload: a new coordinator replays transactional
// batches and the control batches after them: committed transactions'
// offsets are visible, aborted ones gone, open ones still pending.
func TestTxnOffsetCommitReload(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	for _, step := range []struct {
		pid    int64
		tp     int32
		offset int64
	}{{1, 0, 10}, {2, 1, 20}, {3, 2, 30}} {
		if c := h.txnCommit("g", step.pid, 0, "t", step.tp, step.offset); c != 0 {
			t.Fatal(kerr.ErrorForCode(c))
		}
	}
	h.marker(1, 0, true)
	h.marker(2, 0, false)
	h.m.Close()

	h2 := newHarness(t, lg, testConfig())
	h2.lead()
	if off, c := h2.fetchStable("g", "t", 0); c != 0 || off != 10 {
		t.Fatalf("committed t/0 after reload: %d %v", off, kerr.ErrorForCode(c))
	}
	if off, c := h2.fetchStable("g", "t", 1); c != 0 || off != -1 {
		t.Fatalf("aborted t/1 after reload: %d %v, want none", off, kerr.ErrorForCode(c))
	}
	if _, c := h2.fetchStable("g", "t", 2); c != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("open t/2 after reload: %v, want UNSTABLE_OFFSET_COMMIT", kerr.ErrorForCode(c))
	}
	if p := h2.m.PendingTxn("g", 3); p[TopicPartition{"t", 2}].Offset != 30 {
		t.Fatalf("pending of producer 3: %+v", p)
	}
	h2.marker(3, 0, true)
	if off, c := h2.fetchStable("g", "t", 2); c != 0 || off != 30 {
		t.Fatalf("t/2 after its marker: %d %v", off, kerr.ErrorForCode(c))
	}
}

func TestTxnOffsetCommitErrors(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	if c := h.txnCommit("g", 1, 0, "t", 0, 1); c != kerr.NotCoordinator.Code {
		t.Fatalf("before lead: %v", kerr.ErrorForCode(c))
	}
	h.lead()
	// The partition's producer state refuses a stale epoch: the producer
	// hears it.
	lg.SetFail(kerr.ProducerFenced)
	if c := h.txnCommit("g", 1, 0, "t", 0, 1); c != kerr.ProducerFenced.Code {
		t.Fatalf("fenced append: %v", kerr.ErrorForCode(c))
	}
	lg.SetFail(kerr.NotEnoughReplicas)
	if c := h.txnCommit("g", 1, 0, "t", 0, 1); c != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("under-replicated append: %v", kerr.ErrorForCode(c))
	}
	lg.SetFail(nil)
	if _, c := h.fetchStable("g", "t", 0); c != 0 {
		t.Fatalf("a failed commit left a pending offset: %v", kerr.ErrorForCode(c))
	}
	// A member of the group commits in its generation (KIP-447).
	_, jr := h.joinNew("g2", "c")
	h.clock.Advance(testConfig().InitialRebalanceDelay)
	j := jr.get(t)
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.SetVersion(3)
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "tx", "g2", 1, 0
	req.Generation, req.MemberID = j.Generation+1, j.MemberID
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	if c := h.m.TxnOffsetCommit(req).Topics[0].Partitions[0].ErrorCode; c != kerr.IllegalGeneration.Code {
		t.Fatalf("wrong generation: %v", kerr.ErrorForCode(c))
	}
	req.Generation, req.MemberID = j.Generation, "nobody"
	if c := h.m.TxnOffsetCommit(req).Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member: %v", kerr.ErrorForCode(c))
	}
	req.MemberID = j.MemberID
	if c := h.m.TxnOffsetCommit(req).Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("member commit: %v", kerr.ErrorForCode(c))
	}
}

// TestTxnOffsetsSurviveExpiry: an Empty group whose only offsets are
// pending transactional ones is not removed by offset expiry.
func TestTxnOffsetsSurviveExpiry(t *testing.T) {
	cfg := testConfig()
	h := newHarness(t, newMemLog(), cfg)
	h.lead()
	if c := h.txnCommit("g", 4, 0, "t", 0, 11); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	h.clock.Advance(cfg.OffsetsRetention + 2*cfg.RetentionCheckInterval)
	h.marker(4, 0, true)
	if off, c := h.fetchStable("g", "t", 0); c != 0 || off != 11 {
		t.Fatalf("after expiry runs and the marker: %d %v, want 11", off, kerr.ErrorForCode(c))
	}
}

// TestTxnMarkerDuringLoad: a marker that arrives while the partition is
// loading (after the load read the log) still releases the offsets.
func TestTxnMarkerDuringLoad(t *testing.T) {
	lg := newMemLog()
	h := newHarness(t, lg, testConfig())
	h.lead()
	if c := h.txnCommit("g", 5, 0, "t", 0, 42); c != 0 {
		t.Fatal(kerr.ErrorForCode(c))
	}
	h.m.Close()
	h2 := newHarness(t, lg, testConfig())
	gate := make(chan struct{})
	lg.SetGate(gate)
	h2.m.OnBecomeLeader(0, 1)
	h2.m.CompleteTxn(0, 5, 0, true) // the marker itself is not in the log the load reads
	lg.SetGate(nil)
	close(gate)
	h2.waitLoaded()
	if off, c := h2.fetchStable("g", "t", 0); c != 0 || off != 42 {
		t.Fatalf("after load: %d %v, want 42", off, kerr.ErrorForCode(c))
	}
}

// TestTxnOffsetCommitGroupMetadata: TxnOffsetCommit v3's group metadata
// (KIP-447) is checked as Kafka 3.7's validateOffsetCommit checks it: a
// producer without any commits for any group; one with a generation, a
// member id or an instance id must be that member in that generation,
// also when the coordinator does not hold the group at all.
func TestTxnOffsetCommitGroupMetadata(t *testing.T) {
	h := newHarness(t, newMemLog(), testConfig())
	h.lead()
	_, jr := h.joinNew("g", "c")
	h.clock.Advance(testConfig().InitialRebalanceDelay)
	j := jr.get(t)
	h.m.mu.Lock()
	h.m.groups["g"].static["inst"] = j.MemberID
	h.m.mu.Unlock()
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name       string
		version    int16
		group      string
		generation int32
		member     string
		instance   *string
		want       int16
	}{
		{"no metadata, unknown group", 3, "none", -1, "", nil, 0},
		{"no metadata, member group", 3, "g", -1, "", nil, 0},
		{"v2 carries none", 2, "g", j.Generation + 5, "x", nil, 0},
		{"member in its generation", 3, "g", j.Generation, j.MemberID, nil, 0},
		{"member, generation -1", 3, "g", -1, j.MemberID, nil, kerr.IllegalGeneration.Code},
		{"member, old generation", 3, "g", j.Generation - 1, j.MemberID, nil, kerr.IllegalGeneration.Code},
		{"generation without member", 3, "g", j.Generation, "", nil, kerr.UnknownMemberID.Code},
		{"unknown member", 3, "g", j.Generation, "nobody", nil, kerr.UnknownMemberID.Code},
		{"metadata for a group the coordinator does not hold", 3, "gone", 1, "m-1", nil, kerr.UnknownMemberID.Code},
		{"static member", 3, "g", j.Generation, j.MemberID, str("inst"), 0},
		{"static instance of another member", 3, "g", j.Generation, "nobody", str("inst"), kerr.FencedInstanceID.Code},
		{"unknown static instance", 3, "g", j.Generation, j.MemberID, str("other"), kerr.UnknownMemberID.Code},
	} {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.SetVersion(tc.version)
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "tx", tc.group, 7, 0
		req.Generation, req.MemberID, req.InstanceID = tc.generation, tc.member, tc.instance
		req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
		if c := h.m.TxnOffsetCommit(req).Topics[0].Partitions[0].ErrorCode; c != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, kerr.ErrorForCode(c), kerr.ErrorForCode(tc.want))
		}
	}
}
