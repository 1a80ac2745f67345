package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
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

// stateEvents keeps the last maxStateEvents changes.
type stateEvents struct {
	mu     sync.Mutex
	seq    int64
	events []StateEvent
	last   map[tp]PartitionStatus
}

const maxStateEvents = 10000

// watchState samples every replica every 100 ms and records changes of
// role, leader, epoch or ISR.
func (b *Broker) watchState(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		b.sampleState()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *Broker) sampleState() {
	ev := &b.events
	now := time.Now().UnixMilli()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.last == nil {
		ev.last = map[tp]PartitionStatus{}
	}
	for _, p := range b.partitionList() {
		s := statusOf(p)
		k := tp{p.Topic, p.Index}
		prev, ok := ev.last[k]
		ev.last[k] = s
		if ok && prev.Role == s.Role && prev.Leader == s.Leader && prev.LeaderEpoch == s.LeaderEpoch && slices.Equal(prev.ISR, s.ISR) {
			continue
		}
		ev.seq++
		ev.events = append(ev.events, StateEvent{Seq: ev.seq, TimeMs: now, Broker: b.id, PartitionStatus: s})
		if len(ev.events) > maxStateEvents {
			ev.events = slices.Clone(ev.events[len(ev.events)-maxStateEvents:])
		}
	}
}

// handleStateHTTP serves /v1/partitions (a snapshot) and /v1/events?since=N
// (changes after sequence N).
func (b *Broker) registerStateHTTP(mux *http.ServeMux) {
	b.registerClockHTTP(mux)
	if b.testHooks != nil {
		b.testHooks.registerHTTP(mux)
	}
	mux.HandleFunc(clusterapi.PartitionsPath, func(w http.ResponseWriter, r *http.Request) {
		var out []PartitionStatus
		for _, p := range b.partitionList() {
			out = append(out, statusOf(p))
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Topic != out[j].Topic {
				return out[i].Topic < out[j].Topic
			}
			return out[i].Partition < out[j].Partition
		})
		writeJSON(w, clusterapi.Partitions{Broker: b.id, BrokerEpoch: b.BrokerEpoch(), TimeMs: time.Now().UnixMilli(), Partitions: out})
	})
	mux.HandleFunc(clusterapi.EventsPath, func(w http.ResponseWriter, r *http.Request) {
		since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		b.events.mu.Lock()
		var out []StateEvent
		for _, e := range b.events.events {
			if e.Seq > since {
				out = append(out, e)
			}
		}
		b.events.mu.Unlock()
		writeJSON(w, clusterapi.Events{Broker: b.id, Events: out})
	})
}

// registerClockHTTP serves /v1/clock: GET returns the skew added to the
// broker's clock, POST {"offset_ms": N} sets it (the nemesis's clock fault;
// 0 heals). Only the broker's own clock moves: segment rolls, retention,
// replica lag and ISR decisions see the skewed time.
func (b *Broker) registerClockHTTP(mux *http.ServeMux) {
	mux.HandleFunc(clusterapi.ClockPath, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost, http.MethodPut:
			var body clusterapi.SetClock
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil || body.OffsetMs == nil {
				http.Error(w, `expected {"offset_ms": N}`, http.StatusBadRequest)
				return
			}
			b.clockSkew.Store(*body.OffsetMs)
			b.log.Warn("clock skew set", "offset_ms", *body.OffsetMs)
		default:
			http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
			return
		}
		writeJSON(w, clusterapi.Clock{Broker: b.id, OffsetMs: b.clockSkew.Load(), TimeMs: b.now().UnixMilli()})
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
