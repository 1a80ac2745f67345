package broker

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/isrlab/isrlab/broker/partition"
	"github.com/isrlab/isrlab/clusterapi"
)

// PartitionStatus is one replica's state as the broker reports it on
// /v1/partitions, for the lab's cluster-state timeline (clusterapi is the
// side channel's contract).
type PartitionStatus = clusterapi.PartitionStatus

// StateEvent is a change of a replica's role, leader, leader epoch or ISR,
// as seen by this broker; Seq increases by one per event.
type StateEvent = clusterapi.StateEvent

var roleNames = map[partition.Role]string{partition.None: "none", partition.Leader: "leader", partition.Follower: "follower"}

func statusOf(p *partition.Partition) PartitionStatus {
	s := p.State()
	return PartitionStatus{Topic: p.Topic, Partition: p.Index, Role: roleNames[s.Role], Leader: s.Leader, LeaderEpoch: s.LeaderEpoch,
		ISR: s.ISR, Replicas: s.Replicas, HighWatermark: s.HighWatermark, LastStableOffset: s.LastStableOffset, LogEndOffset: s.LogEndOffset, LogStartOffset: s.LogStartOffset}
}

// sideChannel is the broker's /v1 HTTP side channel (clusterapi), served
// on the metrics listener: the replicas' state and its changes, the clock
// skew of clock faults, and the test hooks.
type sideChannel struct {
	id          int32
	partitions  func() []*partition.Partition
	brokerEpoch func() int64
	now         func() time.Time // the broker's clock, skew included
	skew        *atomic.Int64    // ms added to the broker's clock
	hooks       *testHooks       // nil unless test.hooks.enable
	log         *slog.Logger
	events      stateEvents
}

// stateEvents keeps the last maxStateEvents changes.
type stateEvents struct {
	mu     sync.Mutex
	seq    int64
	events []StateEvent
	last   map[tp]PartitionStatus
}

const maxStateEvents = 10000

// watch samples every replica every 100 ms and records changes of
// role, leader, epoch or ISR.
func (s *sideChannel) watch(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sideChannel) sample() {
	ev := &s.events
	now := time.Now().UnixMilli()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.last == nil {
		ev.last = map[tp]PartitionStatus{}
	}
	for _, p := range s.partitions() {
		st := statusOf(p)
		k := tp{p.Topic, p.Index}
		prev, ok := ev.last[k]
		ev.last[k] = st
		if ok && prev.Role == st.Role && prev.Leader == st.Leader && prev.LeaderEpoch == st.LeaderEpoch && slices.Equal(prev.ISR, st.ISR) {
			continue
		}
		ev.seq++
		ev.events = append(ev.events, StateEvent{Seq: ev.seq, TimeMs: now, Broker: s.id, PartitionStatus: st})
		if len(ev.events) > maxStateEvents {
			ev.events = slices.Clone(ev.events[len(ev.events)-maxStateEvents:])
		}
	}
}

// register serves /v1/partitions (a snapshot) and /v1/events?since=N
// (changes after sequence N), the clock and the test hooks.
func (s *sideChannel) register(mux *http.ServeMux) {
	s.registerClock(mux)
	if s.hooks != nil {
		s.hooks.registerHTTP(mux)
	}
	mux.HandleFunc(clusterapi.PartitionsPath, func(w http.ResponseWriter, r *http.Request) {
		var out []PartitionStatus
		for _, p := range s.partitions() {
			out = append(out, statusOf(p))
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Topic != out[j].Topic {
				return out[i].Topic < out[j].Topic
			}
			return out[i].Partition < out[j].Partition
		})
		writeJSON(w, clusterapi.Partitions{Broker: s.id, BrokerEpoch: s.brokerEpoch(), TimeMs: time.Now().UnixMilli(), Partitions: out})
	})
	mux.HandleFunc(clusterapi.EventsPath, func(w http.ResponseWriter, r *http.Request) {
		since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		s.events.mu.Lock()
		var out []StateEvent
		for _, e := range s.events.events {
			if e.Seq > since {
				out = append(out, e)
			}
		}
		s.events.mu.Unlock()
		writeJSON(w, clusterapi.Events{Broker: s.id, Events: out})
	})
}

// registerClock serves /v1/clock: GET returns the skew added to the
// broker's clock, POST {"offset_ms": N} sets it (the nemesis's clock fault;
// 0 heals). Only the broker's own clock moves: segment rolls, retention,
// replica lag and ISR decisions see the skewed time.
func (s *sideChannel) registerClock(mux *http.ServeMux) {
	mux.HandleFunc(clusterapi.ClockPath, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost, http.MethodPut:
			var body clusterapi.SetClock
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil || body.OffsetMs == nil {
				http.Error(w, `expected {"offset_ms": N}`, http.StatusBadRequest)
				return
			}
			s.skew.Store(*body.OffsetMs)
			s.log.Warn("clock skew set", "offset_ms", *body.OffsetMs)
		default:
			http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
			return
		}
		writeJSON(w, clusterapi.Clock{Broker: s.id, OffsetMs: s.skew.Load(), TimeMs: s.now().UnixMilli()})
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
