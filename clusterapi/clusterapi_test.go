package clusterapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClient: each call reaches its path with its method and body and
// decodes the answer; a non-200 answer is an error naming the URL.
func TestClient(t *testing.T) {
	var gotClock *int64
	mux := http.NewServeMux()
	mux.HandleFunc(PartitionsPath, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Partitions{Broker: 2, BrokerEpoch: 7, Partitions: []PartitionStatus{{Topic: "t", Partition: 1, Role: "leader", ISR: []int32{2, 3}, HighWatermark: 42}}})
	})
	mux.HandleFunc(EventsPath, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("since") != "5" {
			http.Error(w, "want since=5", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(Events{Broker: 2, Events: []StateEvent{{Seq: 6, PartitionStatus: PartitionStatus{Topic: "t", LeaderEpoch: 3}}}})
	})
	mux.HandleFunc(ClockPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var body SetClock
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.OffsetMs == nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			gotClock = body.OffsetMs
		}
		json.NewEncoder(w).Encode(Clock{Broker: 2, OffsetMs: -1500})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &Client{Base: srv.URL}
	ctx := context.Background()

	p, err := c.Partitions(ctx)
	if err != nil || p.Broker != 2 || len(p.Partitions) != 1 || p.Partitions[0].HighWatermark != 42 || p.Partitions[0].ISR[1] != 3 {
		t.Fatalf("partitions: %+v, %v", p, err)
	}
	ev, err := c.Events(ctx, 5)
	if err != nil || len(ev.Events) != 1 || ev.Events[0].Seq != 6 || ev.Events[0].LeaderEpoch != 3 {
		t.Fatalf("events: %+v, %v", ev, err)
	}
	k, err := c.SetClock(ctx, -1500)
	if err != nil || gotClock == nil || *gotClock != -1500 || k.OffsetMs != -1500 {
		t.Fatalf("set clock: %+v, %v (server got %v)", k, err, gotClock)
	}
	if _, err := c.Events(ctx, 4); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), EventsPath) {
		t.Fatalf("a refused request: %v", err)
	}
	if _, err := (&Client{Base: srv.URL + "/nothing"}).Clock(ctx); err == nil {
		t.Fatal("a 404 read as an answer")
	}
}
