package broker

import (
	"context"
	"fmt"
	"github.com/isrlab/isrlab/internal/proctest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/wire"
)

// sessionFetch sends one Fetch v12 for topic with the given session id and
// epoch, the partitions (with their fetch offsets) and the partitions to
// forget.
func sessionFetch(t *testing.T, cl *wire.Client, topic string, id, epoch int32, parts map[int32]int64, forget []int32) *kmsg.FetchResponse {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 20, 1, 1<<20
	req.SessionID, req.SessionEpoch = id, epoch
	if len(parts) > 0 {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < 8; p++ {
			off, ok := parts[p]
			if !ok {
				continue
			}
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	if len(forget) > 0 {
		ft := kmsg.NewFetchRequestForgottenTopic()
		ft.Topic, ft.Partitions = topic, forget
		req.ForgottenTopics = append(req.ForgottenTopics, ft)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*kmsg.FetchResponse)
}

// answered lists the partitions a fetch response carries, with their
// record bytes.
func answered(resp *kmsg.FetchResponse) map[int32]int {
	out := map[int32]int{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out[rp.Partition] = len(rp.RecordBatches)
		}
	}
	return out
}

// TestFetchSessions drives KIP-227 over the raw protocol: a full fetch
// opens a session; incremental fetches carry only changed partitions;
// wrong epochs and unknown ids get their errors; forgetting every
// partition or a final-epoch fetch closes the session; the slot limit
// holds; and a kgo consumer ends up fetching incrementally.
func TestFetchSessions(t *testing.T) {
	tb := startBroker(t, t.TempDir(), "max.incremental.fetch.session.cache.slots=2")
	cl := tb.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("fs"))
	createTopic(t, cl, "fs", 2, nil)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("a")}, &kgo.Record{Partition: 1, Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	wc := wire.NewClient(tb.Addrs()[0], "fs-test", nil)
	defer wc.Close()

	full := sessionFetch(t, wc, "fs", 0, 0, map[int32]int64{0: 0, 1: 0}, nil)
	if full.ErrorCode != 0 || full.SessionID == 0 {
		t.Fatalf("full fetch: error %d session %d", full.ErrorCode, full.SessionID)
	}
	if got := answered(full); len(got) != 2 || got[0] == 0 || got[1] == 0 {
		t.Fatalf("full fetch answered %v", got)
	}
	id := full.SessionID

	// Nothing changed: the incremental answer is empty. Both partitions
	// move on to offset 1 (their parameters changed, so the client sends
	// them).
	inc := sessionFetch(t, wc, "fs", id, 1, map[int32]int64{0: 1, 1: 1}, nil)
	if inc.ErrorCode != 0 || inc.SessionID != id || len(answered(inc)) != 0 {
		t.Fatalf("incremental fetch 1: error %d session %d answered %v", inc.ErrorCode, inc.SessionID, answered(inc))
	}
	// New data on partition 1 only: only partition 1 is answered, though
	// the request names no partition.
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("c")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	inc = sessionFetch(t, wc, "fs", id, 2, nil, nil)
	if got := answered(inc); inc.ErrorCode != 0 || len(got) != 1 || got[1] == 0 {
		t.Fatalf("incremental fetch 2: error %d answered %v", inc.ErrorCode, got)
	}
	// The same epoch again, and an unknown session.
	if r := sessionFetch(t, wc, "fs", id, 2, nil, nil); r.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("repeated epoch: error %d", r.ErrorCode)
	}
	if r := sessionFetch(t, wc, "fs", id+1, 1, nil, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: error %d", r.ErrorCode)
	}
	// Forget partition 0, then partition 1: the session closes and the
	// fetch is sessionless.
	if r := sessionFetch(t, wc, "fs", id, 3, nil, []int32{0}); r.ErrorCode != 0 || r.SessionID != id {
		t.Fatalf("forget 0: error %d session %d", r.ErrorCode, r.SessionID)
	}
	if r := sessionFetch(t, wc, "fs", id, 4, nil, []int32{1}); r.ErrorCode != 0 || r.SessionID != 0 {
		t.Fatalf("forget all: error %d session %d", r.ErrorCode, r.SessionID)
	}
	if r := sessionFetch(t, wc, "fs", id, 5, nil, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: error %d", r.ErrorCode)
	}

	// Two slots: two sessions fit, a third consumer's does not (the others
	// are neither stale nor older than two minutes); a final-epoch fetch
	// closes one and frees its slot.
	s1 := sessionFetch(t, wc, "fs", 0, 0, map[int32]int64{0: 0}, nil).SessionID
	s2 := sessionFetch(t, wc, "fs", 0, 0, map[int32]int64{1: 0}, nil).SessionID
	s3 := sessionFetch(t, wc, "fs", 0, 0, map[int32]int64{0: 0, 1: 0}, nil).SessionID
	if s1 == 0 || s2 == 0 || s3 != 0 {
		t.Fatalf("sessions with 2 slots: %d %d %d", s1, s2, s3)
	}
	if n, parts := tb.fetchSessions.Size(); n != 2 || parts != 2 {
		t.Fatalf("cache holds %d sessions, %d partitions", n, parts)
	}
	if r := sessionFetch(t, wc, "fs", s1, -1, map[int32]int64{0: 0}, nil); r.SessionID != 0 || r.ErrorCode != 0 {
		t.Fatalf("final epoch: session %d error %d", r.SessionID, r.ErrorCode)
	}
	if s := sessionFetch(t, wc, "fs", 0, 0, map[int32]int64{0: 0}, nil).SessionID; s == 0 {
		t.Fatal("no session after a slot was freed")
	}
	sessionFetch(t, wc, "fs", s2, -1, map[int32]int64{1: 0}, nil)

	// A kgo consumer opens a session and fetches incrementally: its
	// session's epoch climbs past 1.
	cons := tb.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"fs": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(50*time.Millisecond))
	seen := 0
	proctest.Eventually(t, 20*time.Second, "kgo fetching incrementally", func() error {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		seen += cons.PollFetches(pctx).NumRecords()
		cancel()
		sessions := tb.fetchSessions.Sessions()
		for _, s := range sessions {
			if s.Partitions == 2 && s.Epoch > 3 && seen == 3 {
				return nil
			}
		}
		return fmt.Errorf("%d sessions, %d records seen", len(sessions), seen)
	})
}
