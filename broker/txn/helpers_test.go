package txn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/broker/coordlog"
	"github.com/isrlab/isrlab/broker/coordlog/coordlogtest"
)

// tracedLog is an in-memory __transaction_state that reports every
// record appended.
type tracedLog struct {
	*coordlogtest.Log
	emit func(format string, args ...any)
}

func (l *tracedLog) Append(ctx context.Context, p int32, batch []byte) (int64, error) {
	off, err := l.Log.Append(ctx, p, batch)
	if err != nil {
		l.emit("  write failed: %v", err)
		return off, err
	}
	for _, s := range describeRecords(batch) {
		l.emit("  write %s", s)
	}
	return off, nil
}

// describeRecords renders the records of __transaction_state batches.
func describeRecords(data []byte) []string {
	var out []string
	_, err := coordlog.Decode(data, func(_ coordlog.Batch, _ int64, r coordlog.Record) error {
		id, err := parseKey(r.Key)
		if err != nil {
			out = append(out, "bad key: "+err.Error())
			return nil
		}
		if r.Value == nil {
			out = append(out, id+" tombstone")
			return nil
		}
		v, err := parseValue(r.Value)
		if err != nil {
			out = append(out, id+" bad value: "+err.Error())
			return nil
		}
		s := fmt.Sprintf("%s %s pid=%d epoch=%d timeout=%d parts=%s", id, v.state, v.producerID, v.epoch, v.timeoutMs, partsString(v.partitions))
		if v.tv2 {
			s += fmt.Sprintf(" tv2 prev=%d", v.lastProducerID)
		}
		if v.nextProducerID >= 0 {
			s += fmt.Sprintf(" next=%d", v.nextProducerID)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		out = append(out, "bad batch: "+err.Error())
	}
	return out
}

func partsString(m map[TopicPartition]bool) string {
	var s []string
	for _, tp := range sortedPartitions(m) {
		s = append(s, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// seqIDs hands out producer ids from 1000 on.
type seqIDs struct {
	mu   sync.Mutex
	next int64
	fail error
}

func (s *seqIDs) NewProducerID(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return 0, s.fail
	}
	id := 1000 + s.next
	s.next++
	return id, nil
}

// sent is a WriteTxnMarkers request waiting for the test to answer it.
type sent struct {
	broker int32
	req    *kmsg.WriteTxnMarkersRequest
	done   func(*kmsg.WriteTxnMarkersResponse, error)
}

// fakeSender is the partition leaders: a leader table the test edits,
// and requests held until the test answers them.
type fakeSender struct {
	mu      sync.Mutex
	leaders map[TopicPartition]int32 // absent: leader 1; -1: none; -2: no such partition
	queue   []sent
	emit    func(format string, args ...any)
}

func (f *fakeSender) Leader(topic string, partition int32) (int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.leaders[TopicPartition{topic, partition}]
	switch {
	case !ok:
		return 1, true
	case l == -2:
		return -1, false
	}
	return l, true
}

func (f *fakeSender) Send(broker int32, req *kmsg.WriteTxnMarkersRequest, done func(*kmsg.WriteTxnMarkersResponse, error)) {
	f.mu.Lock()
	f.queue = append(f.queue, sent{broker, req, done})
	f.mu.Unlock()
	f.emit("  send b%d %s", broker, markerString(req))
}

func markerString(req *kmsg.WriteTxnMarkersRequest) string {
	var s []string
	for _, mk := range req.Markers {
		var tps []string
		for _, t := range mk.Topics {
			for _, p := range t.Partitions {
				tps = append(tps, fmt.Sprintf("%s/%d", t.Topic, p))
			}
		}
		s = append(s, fmt.Sprintf("v%d pid=%d epoch=%d commit=%v coordinator_epoch=%d [%s]", req.Version, mk.ProducerID, mk.ProducerEpoch, mk.Committed, mk.CoordinatorEpoch, strings.Join(tps, ",")))
	}
	return strings.Join(s, "; ")
}

// take removes the oldest request sent to broker.
func (f *fakeSender) take(broker int32) (sent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.queue {
		if s.broker == broker {
			f.queue = append(f.queue[:i], f.queue[i+1:]...)
			return s, true
		}
	}
	return sent{}, false
}

// answer is a response to s with code for the partitions in errs (by
// "topic/partition", "*" for all) and NONE for the others.
func answer(s sent, errs map[string]int16) *kmsg.WriteTxnMarkersResponse {
	resp := s.req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for _, mk := range s.req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = mk.ProducerID
		for _, t := range mk.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				c, ok := errs[fmt.Sprintf("%s/%d", t.Topic, p)]
				if !ok {
					c = errs["*"]
				}
				rt.Partitions = append(rt.Partitions, kmsg.WriteTxnMarkersResponseMarkerTopicPartition{Partition: p, ErrorCode: c})
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp
}

// harness is a Manager on an in-memory log with fake leaders.
type harness struct {
	t      *testing.T
	m      *Manager
	clock  *coordlogtest.Clock
	log    *tracedLog
	ids    *seqIDs
	sender *fakeSender
	cfg    Config
}

func testConfig() Config {
	c := DefaultConfig()
	c.Partitions = 1 // every transactional id on partition 0
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(t *testing.T, cfg Config, emit func(string, ...any)) *harness {
	h := &harness{t: t, clock: coordlogtest.NewClock(), ids: &seqIDs{}, cfg: cfg}
	h.log = &tracedLog{Log: coordlogtest.NewLog(), emit: emit}
	h.sender = &fakeSender{leaders: map[TopicPartition]int32{}, emit: emit}
	h.m = New(cfg, h.log, h.ids, h.sender, WithClock(h.clock), WithLogger(quiet()),
		WithTopicCheck(func(topic string, _ int32) bool { return topic != "missing" }))
	t.Cleanup(func() { h.m.Close() })
	return h
}

// lead makes the manager coordinator of partition 0 at epoch and waits
// for the load (and the marker sends it resumes).
func (h *harness) lead(epoch int32) {
	h.m.OnBecomeLeader(0, epoch)
	h.m.owned.Wait()
}

// failover replaces the manager by a new one on the same log and the
// same clock, as a newly elected coordinator; the old one resigns.
func (h *harness) failover(epoch int32) {
	h.m.OnResign(0)
	h.m.Close()
	h.sender.mu.Lock()
	h.sender.queue = nil
	h.sender.mu.Unlock()
	h.m = New(h.cfg, h.log, h.ids, h.sender, WithClock(h.clock), WithLogger(quiet()),
		WithTopicCheck(func(topic string, _ int32) bool { return topic != "missing" }))
	h.t.Cleanup(func() { h.m.Close() })
	h.lead(epoch)
}
