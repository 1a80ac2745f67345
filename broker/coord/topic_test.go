package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/isrlab/isrlab/internal/scripttest"
)

// TestTopicIDEncoding: the topic znode carries the ID the way Kafka 2.8+
// writes it (version 3, URL-safe base64), and a version 1 znode (written
// before topic IDs) reads with the zero ID.
func TestTopicIDEncoding(t *testing.T) {
	id := [16]byte{0: 0xfb, 15: 0x7e}
	v, err := encodeTopicSpec(TopicSpec{ID: id, Assignment: map[int32][]int32{0: {1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":3,"topic_id":"-wAAAAAAAAAAAAAAAAAAfg","partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}`
	if v != want {
		t.Fatalf("encoded %s\nwant    %s", v, want)
	}
	if spec, err := decodeTopic("t", []byte(v)); err != nil || spec.ID != id {
		t.Fatalf("decoded %x, %v", spec.ID, err)
	}
	old, err := decodeTopic("t", []byte(`{"version":1,"partitions":{"0":[1]}}`))
	if err != nil || old.ID != ([16]byte{}) {
		t.Fatalf("version 1: %x, %v", old.ID, err)
	}
	if _, err := decodeTopic("t", []byte(`{"version":3,"topic_id":"short","partitions":{}}`)); err == nil {
		t.Fatal("a malformed topic id decoded")
	}
	if FormatTopicID(NewTopicID()) == FormatTopicID([16]byte{}) {
		t.Fatal("NewTopicID returned the zero ID")
	}
}

func TestTopicLifecycle(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	watch := c.WatchTopics(ctx)
	if ev := recv(t, watch, 5*time.Second); len(ev.Topics) != 0 {
		t.Fatalf("initial topics %+v", ev.Topics)
	}

	spec := TopicSpec{Name: "orders", Assignment: map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}, Configs: map[string]string{"min.insync.replicas": "2"}}
	if err := c.CreateTopic(ctx, l, spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, l, spec, nil); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("second create: %v, want ErrTopicExists", err)
	}
	// An admin-style create (no leadership) for a second topic.
	if err := c.CreateTopic(ctx, nil, TopicSpec{Name: "audit", Assignment: map[int32][]int32{0: {3}}}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.Topic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Assignment, spec.Assignment) || !reflect.DeepEqual(got.Configs, spec.Configs) || got.Version == 0 || got.ID == ([16]byte{}) {
		t.Fatalf("Topic(orders) = %+v", got)
	}
	if ps := got.Partitions(); !reflect.DeepEqual(ps, []int32{0, 1}) {
		t.Fatalf("partitions %v", ps)
	}
	waitTopics(t, watch, "audit orders")

	if err := c.SetTopicConfig(ctx, nil, "orders", map[string]string{"min.insync.replicas": "3"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := c.TopicConfig(ctx, "orders"); err != nil || cfg["min.insync.replicas"] != "3" {
		t.Fatalf("config after set: %v, %v", cfg, err)
	}
	if err := c.SetTopicConfig(ctx, nil, "nope", nil); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("config of a missing topic: %v", err)
	}

	// Deletion: mark, list, delete with the partition states.
	if _, err := c.SetPartitionStates(ctx, l, []PartitionStateUpdate{{Topic: "orders", Partition: 0, State: PartitionState{Leader: 1, ISR: []int32{1}}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkTopicForDeletion(ctx, "nope"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("mark a missing topic: %v", err)
	}
	if err := c.MarkTopicForDeletion(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if pd, err := c.PendingDeletions(ctx); err != nil || !reflect.DeepEqual(pd, []string{"orders"}) {
		t.Fatalf("pending deletions %v, %v", pd, err)
	}
	if got, _ := c.Topic(ctx, "orders"); !got.MarkedForDeletion {
		t.Fatal("orders not marked for deletion")
	}
	if err := c.DeleteTopic(ctx, nil, "orders"); !errors.Is(err, ErrNotController) {
		t.Fatalf("delete without leadership: %v", err)
	}
	if err := c.DeleteTopic(ctx, l, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Topic(ctx, "orders"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := c.PartitionState(ctx, "orders", 0); !errors.Is(err, ErrPartitionNotFound) {
		t.Fatalf("state after delete: %v", err)
	}
	if pd, _ := c.PendingDeletions(ctx); len(pd) != 0 {
		t.Fatalf("pending after delete: %v", pd)
	}
	if err := c.DeleteTopic(ctx, l, "orders"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	waitTopics(t, watch, "audit")
}

func TestCreateTopicInvalid(t *testing.T) {
	tc := startCluster(t, 1, false)
	c := tc.dial(t)
	tests := []struct {
		name    string
		spec    TopicSpec
		initial map[int32]PartitionState
	}{
		{"empty name", TopicSpec{Assignment: map[int32][]int32{0: {1}}}, nil},
		{"slash", TopicSpec{Name: "a/b", Assignment: map[int32][]int32{0: {1}}}, nil},
		{"dot", TopicSpec{Name: ".", Assignment: map[int32][]int32{0: {1}}}, nil},
		{"too long", TopicSpec{Name: strings.Repeat("x", 250), Assignment: map[int32][]int32{0: {1}}}, nil},
		{"no partitions", TopicSpec{Name: "t"}, nil},
		{"gap", TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1}, 2: {1}}}, nil},
		{"no replicas", TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {}}}, nil},
		{"duplicate replica", TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1, 1}}}, nil},
		{"state for unassigned", TopicSpec{Name: "t", Assignment: map[int32][]int32{0: {1}}}, map[int32]PartitionState{1: {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CreateTopic(context.Background(), nil, tt.spec, tt.initial)
			if !errors.Is(err, ErrInvalidTopic) {
				t.Fatalf("got %v, want ErrInvalidTopic", err)
			}
		})
	}
	if ts, err := c.Topics(context.Background()); err != nil || len(ts) != 0 {
		t.Fatalf("topics after invalid creates: %v, %v", ts, err)
	}
}

func TestISRChangeNotifications(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	watch := c.WatchISRChangeNotifications(ctx)
	if ev := recv(t, watch, 5*time.Second); len(ev.Notifications) != 0 {
		t.Fatalf("initial %+v", ev)
	}
	batches := [][]TopicPartition{{{"a", 0}, {"a", 1}}, {{"b", 3}}}
	for _, b := range batches {
		if err := c.NotifyISRChange(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var ev ISRChangesEvent
	for len(ev.Notifications) < 2 {
		ev = recv(t, watch, 5*time.Second)
	}
	for i, n := range ev.Notifications {
		if !reflect.DeepEqual(n.Partitions, batches[i]) {
			t.Fatalf("notification %d: %+v, want %+v", i, n.Partitions, batches[i])
		}
	}
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	keys := []string{ev.Notifications[0].Key, ev.Notifications[1].Key}
	if err := c.DeleteISRChangeNotifications(ctx, l, keys); err != nil {
		t.Fatal(err)
	}
	if ns, err := c.ISRChangeNotifications(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("after delete: %+v, %v", ns, err)
	}
	if err := c.DeleteISRChangeNotifications(ctx, l, []string{topicKey("a")}); err == nil {
		t.Fatal("deleting a non-notification key was accepted")
	}
}

// TestLayoutGolden pins the key layout and JSON formats, the contract with
// anything that reads the coordinator directly.
func TestLayoutGolden(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	r, err := c.RegisterBroker(ctx, BrokerInfo{ID: 1, Host: "10.1.0.1", Port: 9092, Endpoints: []string{"PLAINTEXT://10.1.0.1:9092"}, Rack: "r1", Timestamp: 1700000000000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := r.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := TopicSpec{Name: "t1", ID: [16]byte{0: 1, 15: 1}, Assignment: map[int32][]int32{0: {1, 2, 3}, 1: {2, 3, 1}}, Configs: map[string]string{"unclean.leader.election.enable": "false"}}
	init := map[int32]PartitionState{
		0: {ControllerEpoch: 5, Leader: 1, LeaderEpoch: 0, ISR: []int32{1, 2, 3}},
		1: {ControllerEpoch: 5, Leader: -1, LeaderEpoch: 3, ISR: nil},
	}
	if err := c.CreateTopic(ctx, l, spec, init); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, l, TopicSpec{Name: "t2", ID: [16]byte{0: 2, 15: 2}, Assignment: map[int32][]int32{0: {1}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkTopicForDeletion(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if err := c.NotifyISRChange(ctx, []TopicPartition{{"t1", 0}}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int32{1, 3} {
		if _, err := c.ReserveProducerIDs(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	// Read the raw keys from the etcd root, outside the chroot.
	raw, err := clientv3.New(clientv3.Config{Endpoints: tc.endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	resp, err := raw.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	lease := regexp.MustCompile(`^(/isrlab/controller/)[0-9a-f]+$`)
	seq := regexp.MustCompile(`((?:/isrlab)?/isr_change_notification/isr_change_)[0-9a-f]{16}`)
	for _, kv := range resp.Kvs {
		k := lease.ReplaceAllString(string(kv.Key), "${1}<lease>")
		k = seq.ReplaceAllString(k, "${1}<seq>")
		fmt.Fprintf(&b, "%s\t%s\n", k, kv.Value)
	}
	scripttest.Golden(t, filepath.Join("testdata", "layout.golden"), b.String())

	// The snapshot of the same state, as `isrlab coordinator dump --json`
	// prints it.
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(snap, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	scripttest.Golden(t, filepath.Join("testdata", "snapshot.golden.json"), seq.ReplaceAllString(string(js), "${1}<seq>")+"\n")
}

func waitTopics(t *testing.T, ch <-chan TopicsEvent, names string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("topics watch closed")
			}
			var got []string
			for _, s := range ev.Topics {
				got = append(got, s.Name)
			}
			if strings.Join(got, " ") == names {
				return
			}
		case <-deadline:
			t.Fatalf("no topics snapshot with %q", names)
		}
	}
}
