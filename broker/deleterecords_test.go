package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// TestDeleteRecords: kadm's DeleteRecords moves a partition's start on
// the leader and answers with the new low watermark only once every
// replica's log start has followed (Kafka's DelayedDeleteRecords), so
// ListOffsets earliest, consumers and each replica's log already start
// there; -1 is the HW, an offset above the HW is OFFSET_OUT_OF_RANGE, a
// follower answers NOT_LEADER_OR_FOLLOWER, and a follower that does not
// fetch makes the request time out with REQUEST_TIMED_OUT.
func TestDeleteRecords(t *testing.T) {
	tc := startCluster(t, 3, "test.hooks.enable=true", "metrics.listen=127.0.0.1:0")
	tc.waitBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := tc.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("del"))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if r, err := adm.CreateTopic(ctx, 1, 3, nil, "del"); err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	for i := range 10 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	leaders, _, err := tc.describe("del")
	if err != nil {
		t.Fatal(err)
	}
	leader := leaders[0]
	deleteTo := func(at int64) kadm.DeleteRecordsResponse {
		t.Helper()
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: "del", Partition: 0, At: at})
		rs, err := adm.DeleteRecords(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := rs.Lookup("del", 0)
		if !ok {
			t.Fatalf("no answer for del/0 in %+v", rs)
		}
		return r
	}
	// The answer comes when every replica starts there: no waiting here.
	everyReplicaStartsAt := func(want int64) {
		t.Helper()
		for id, tb := range tc.brokers {
			if got := tb.partition("del", 0).Log().LogStartOffset(); got != want {
				t.Fatalf("b%d's replica of del/0 starts at %d, want %d", id, got, want)
			}
		}
		starts, err := adm.ListStartOffsets(ctx, "del")
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := starts.Lookup("del", 0); s.Err != nil || s.Offset != want {
			t.Fatalf("ListOffsets earliest: %d (%v), want %d", s.Offset, s.Err, want)
		}
	}

	if r := deleteTo(5); r.Err != nil || r.LowWatermark != 5 {
		t.Fatalf("delete to 5: low watermark %d, %v", r.LowWatermark, r.Err)
	}
	everyReplicaStartsAt(5)
	// A consumer from the start reads from 5 on; one asking for 0 is out
	// of range and resets to the start.
	for _, at := range []kgo.Offset{kgo.NewOffset().AtStart(), kgo.NewOffset().At(0)} {
		cons := tc.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"del": {0: at}}), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []int64
		for len(got) < 5 && ctx.Err() == nil {
			cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r.Offset) })
		}
		cons.Close()
		if fmt.Sprint(got) != "[5 6 7 8 9]" {
			t.Fatalf("consumed from %v after deleting to 5: offsets %v", at, got)
		}
	}
	// Below the start: nothing moves.
	if r := deleteTo(3); r.Err != nil || r.LowWatermark != 5 {
		t.Fatalf("delete to 3: low watermark %d, %v", r.LowWatermark, r.Err)
	}
	if r := deleteTo(11); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete above the HW: %d, %v", r.LowWatermark, r.Err)
	}
	everyReplicaStartsAt(5)

	// Sent to a follower: NOT_LEADER_OR_FOLLOWER.
	request := func(id int32, offset int64, timeoutMs int32) kmsg.DeleteRecordsResponseTopicPartition {
		t.Helper()
		one := wire.NewClient(fmt.Sprintf("127.0.0.1:%d", tc.ports[id]), "deleterecords-test", nil)
		defer one.Close()
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = timeoutMs
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "del"
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := one.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]
	}
	follower := int32(1)
	if follower == leader {
		follower = 2
	}
	if r := request(follower, 7, 5000); r.ErrorCode != kerr.NotLeaderForPartition.Code || r.LowWatermark != -1 {
		t.Fatalf("delete on follower b%d: error %d, low watermark %d", follower, r.ErrorCode, r.LowWatermark)
	}

	// A live follower whose fetches are held keeps its start: the request
	// times out, though the leader's start has moved.
	hooks := "http://" + tc.brokers[leader].MetricsAddr() + "/v1/testhooks"
	body, _ := json.Marshal(HookRule{API: "Fetch", From: &follower})
	hr, err := http.Post(hooks, "application/json", bytes.NewReader(body))
	if err != nil || hr.StatusCode != http.StatusOK {
		t.Fatalf("hold b%d's fetches: %v %v", follower, err, hr)
	}
	hr.Body.Close()
	if r := request(leader, 7, 1000); r.ErrorCode != kerr.RequestTimedOut.Code || r.LowWatermark != -1 {
		t.Fatalf("delete with b%d not fetching: error %d, low watermark %d", follower, r.ErrorCode, r.LowWatermark)
	}
	if got := tc.brokers[leader].partition("del", 0).Log().LogStartOffset(); got != 7 {
		t.Fatalf("leader starts at %d after the timed-out delete, want 7", got)
	}
	del, _ := http.NewRequest(http.MethodDelete, hooks, nil)
	if hr, err := http.DefaultClient.Do(del); err != nil {
		t.Fatal(err)
	} else {
		hr.Body.Close()
	}

	// -1 is the HW (10).
	if r := deleteTo(-1); r.Err != nil || r.LowWatermark != 10 {
		t.Fatalf("delete to the HW: low watermark %d, %v", r.LowWatermark, r.Err)
	}
	everyReplicaStartsAt(10)
}
