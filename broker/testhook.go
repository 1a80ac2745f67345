package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/isrlab/isrlab/clusterapi"
)

// testHooks hold or delay chosen requests before a handler sees them, so
// a test can wait for the state it needs ("the follower has not fetched
// yet": hold its fetch) instead of sleeping past it, as kfake's ControlKey
// and KeepControl do in process. Tests drive them over HTTP, on the
// metrics.listen side channel, because the brokers they test run as
// separate processes:
//
//	POST   /v1/testhooks        {"api": "Fetch", "from": 2, "topic": "t", "partition": 0}       hold until removed
//	POST   /v1/testhooks        {"api": "AlterPartition", "delay_ms": 2000}                    delay each by 2 s
//	GET    /v1/testhooks        the rules, with how many requests each matched and holds now
//	DELETE /v1/testhooks?id=N   remove rule N and let what it holds through (no id: every rule)
//
// They exist only under test.hooks.enable=true; otherwise b.testHooks is
// nil and a request costs one nil check more.
type testHooks struct {
	b *Broker

	mu    sync.Mutex
	next  int
	rules []*hookRule
}

// HookRule and HookState are the side channel's (clusterapi).
type (
	HookRule  = clusterapi.HookRule
	HookState = clusterapi.HookState
)

type hookRule struct {
	HookState
	key      int16
	released chan struct{} // closed when the rule is removed
}

func newTestHooks(b *Broker) *testHooks { return &testHooks{b: b} }

// admit returns once rq may go to a handler: at once unless a rule
// matches it, after the rule's delay or removal if one does. It returns
// false when ctx ends first (the broker stops; the connection closes).
func (h *testHooks) admit(ctx context.Context, rq *request) bool {
	r := h.match(rq)
	if r == nil {
		return true
	}
	defer func() {
		h.mu.Lock()
		r.Held--
		h.mu.Unlock()
	}()
	var delay <-chan time.Time
	if r.DelayMs > 0 {
		t := time.NewTimer(time.Duration(r.DelayMs) * time.Millisecond)
		defer t.Stop()
		delay = t.C
	}
	select {
	case <-delay:
	case <-r.released:
	case <-ctx.Done():
		return false
	}
	return true
}

// match returns the first rule matching rq, counted as holding it.
func (h *testHooks) match(rq *request) *hookRule {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.rules) == 0 {
		return nil
	}
	from, parts := h.b.requestTargets(rq.req)
	for _, r := range h.rules {
		if r.key != rq.hdr.Key || r.From != nil && *r.From != from {
			continue
		}
		if r.Topic != "" || r.Partition != nil {
			if !slices.ContainsFunc(parts, func(t tp) bool {
				return (r.Topic == "" || t.topic == r.Topic) && (r.Partition == nil || t.partition == *r.Partition)
			}) {
				continue
			}
		}
		r.Matched++
		r.Held++
		return r
	}
	return nil
}

// requestTargets returns the broker a request comes from (-1 when it does
// not say) and the partitions it names, for the requests rules look into.
func (b *Broker) requestTargets(req kmsg.Request) (int32, []tp) {
	var parts []tp
	add := func(topic string, id [16]byte, ps ...int32) {
		if topic == "" && id != ([16]byte{}) {
			topic, _ = b.meta.topicByID(id)
		}
		for _, p := range ps {
			parts = append(parts, tp{topic, p})
		}
	}
	switch r := req.(type) {
	case *kmsg.FetchRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, t.TopicID, p.Partition)
			}
		}
		if r.Version >= 15 {
			return r.ReplicaState.ID, parts
		}
		return r.ReplicaID, parts
	case *kmsg.OffsetForLeaderEpochRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, [16]byte{}, p.Partition)
			}
		}
		return r.ReplicaID, parts
	case *kmsg.ListOffsetsRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, [16]byte{}, p.Partition)
			}
		}
		return r.ReplicaID, parts
	case *kmsg.ProduceRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, [16]byte{}, p.Partition)
			}
		}
		return -1, parts
	case *kmsg.AlterPartitionRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, t.TopicID, p.Partition)
			}
		}
		return r.BrokerID, parts
	case *kmsg.LeaderAndISRRequest:
		return r.ControllerID, nil
	case *kmsg.UpdateMetadataRequest:
		return r.ControllerID, nil
	case *kmsg.StopReplicaRequest:
		return r.ControllerID, nil
	}
	return -1, nil
}

// apiKey returns the key of the API kmsg names name.
func apiKey(name string) (int16, bool) {
	for k := int16(0); k < 200; k++ {
		if kmsg.NameForKey(k) == name {
			return k, true
		}
	}
	return 0, false
}

func (h *testHooks) add(rule HookRule) (HookState, error) {
	key, ok := apiKey(rule.API)
	if !ok {
		return HookState{}, fmt.Errorf("unknown api %q (kmsg's names: Fetch, AlterPartition, ...)", rule.API)
	}
	if rule.DelayMs < 0 {
		return HookState{}, errors.New("delay_ms must be >= 0")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	r := &hookRule{HookState: HookState{ID: h.next, HookRule: rule}, key: key, released: make(chan struct{})}
	h.rules = append(h.rules, r)
	h.b.log.Warn("test hook added", "id", r.ID, "api", rule.API, "delay_ms", rule.DelayMs)
	return r.HookState, nil
}

// remove deletes rule id (every rule when all) and lets its requests go.
func (h *testHooks) remove(id int, all bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	found := false
	h.rules = slices.DeleteFunc(h.rules, func(r *hookRule) bool {
		if all || r.ID == id {
			close(r.released)
			found = true
			return true
		}
		return false
	})
	return found
}

func (h *testHooks) states() []HookState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []HookState{}
	for _, r := range h.rules {
		out = append(out, r.HookState)
	}
	return out
}

// registerHTTP serves /v1/testhooks (see testHooks).
func (h *testHooks) registerHTTP(mux *http.ServeMux) {
	mux.HandleFunc(clusterapi.TestHooksPath, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, map[string]any{"broker": h.b.id, "rules": h.states()})
		case http.MethodPost:
			var rule HookRule
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rule); err != nil {
				http.Error(w, "rule: "+err.Error(), http.StatusBadRequest)
				return
			}
			st, err := h.add(rule)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			writeJSON(w, st)
		case http.MethodDelete:
			q := r.URL.Query().Get("id")
			id, err := strconv.Atoi(q)
			if q != "" && err != nil {
				http.Error(w, "id: "+err.Error(), http.StatusBadRequest)
				return
			}
			if !h.remove(id, q == "") && q != "" {
				http.Error(w, "no rule "+q, http.StatusNotFound)
				return
			}
			writeJSON(w, map[string]any{"broker": h.b.id, "rules": h.states()})
		default:
			http.Error(w, "GET, POST or DELETE", http.StatusMethodNotAllowed)
		}
	})
}
