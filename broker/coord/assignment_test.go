package coord

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestTopicAssignmentWithReassignment: the assignment with adding and
// removing replicas is written in Kafka's version 2 layout and read back;
// a stale expected version, a removed controller and unassigned adding
// replicas are refused.
func TestTopicAssignmentWithReassignment(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	l, err := c.Campaign(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, nil, TopicSpec{Name: "mv", Assignment: map[int32][]int32{0: {1, 2}, 1: {2, 3}}}, nil); err != nil {
		t.Fatal(err)
	}
	spec, err := c.Topic(ctx, "mv")
	if err != nil {
		t.Fatal(err)
	}
	spec.Assignment[0] = []int32{3, 2, 1}
	spec.Adding = map[int32][]int32{0: {3}}
	spec.Removing = map[int32][]int32{0: {1}}
	v, err := c.SetTopicAssignment(ctx, l, spec, spec.Version)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Topic(ctx, "mv")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != v || !reflect.DeepEqual(got.Assignment, spec.Assignment) || !reflect.DeepEqual(got.Adding, spec.Adding) || !reflect.DeepEqual(got.Removing, spec.Removing) {
		t.Fatalf("read back %+v, wrote %+v at %d", got, spec, v)
	}
	// The topic has an ID, so it is stored in version 3, which always
	// carries the adding and removing replicas.
	raw, err := c.cli.Get(ctx, topicKey("mv"))
	if err != nil || !strings.Contains(string(raw.Kvs[0].Value), `"version":3`) || !strings.Contains(string(raw.Kvs[0].Value), `"adding_replicas":{"0":[3]}`) {
		t.Fatalf("stored %s (%v)", raw.Kvs[0].Value, err)
	}
	if _, err := c.SetTopicAssignment(ctx, nil, spec, spec.Version); !errors.Is(err, ErrTopicChanged) {
		t.Fatalf("stale version: %v", err)
	}
	// Completion: no adding or removing left.
	done := got
	done.Assignment[0], done.Adding, done.Removing = []int32{3, 2}, nil, nil
	if _, err := c.SetTopicAssignment(ctx, l, done, got.Version); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Topic(ctx, "mv"); got.Adding != nil || got.Removing != nil || len(got.Assignment[0]) != 2 {
		t.Fatalf("after completion %+v", got)
	}
	bad := done
	bad.Adding = map[int32][]int32{7: {1}}
	if _, err := c.SetTopicAssignment(ctx, nil, bad, 0); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("adding replicas of an unassigned partition: %v", err)
	}
	l.Resign(ctx)
	if _, err := c.SetTopicAssignment(ctx, l, done, 0); !errors.Is(err, ErrNotController) {
		t.Fatalf("after resigning: %v", err)
	}
}

// TestClientQuotas: quotas are stored per entity under Kafka's paths,
// listed back, and an entity without values is deleted.
func TestClientQuotas(t *testing.T) {
	tc := startCluster(t, 1, false)
	ctx := context.Background()
	c := tc.dial(t)
	alice := []QuotaEntityPart{{Type: QuotaUser, Name: "alice/x"}}
	both := []QuotaEntityPart{{Type: QuotaClientID, Default: true}, {Type: QuotaUser, Name: "alice/x"}}
	if err := c.AlterClientQuota(ctx, alice, map[string]float64{"producer_byte_rate": 1024}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.AlterClientQuota(ctx, both, map[string]float64{"request_percentage": 12.5, "consumer_byte_rate": 10}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.AlterClientQuota(ctx, both, nil, []string{"consumer_byte_rate"}); err != nil {
		t.Fatal(err)
	}
	if err := c.AlterClientQuota(ctx, []QuotaEntityPart{{Type: QuotaIP, Name: "1.2.3.4"}, {Type: QuotaUser, Name: "x"}}, map[string]float64{"a": 1}, nil); !errors.Is(err, ErrBadQuotaEntity) {
		t.Fatalf("ip with user: %v", err)
	}
	qs, err := c.ClientQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []ClientQuota{
		{Entity: []QuotaEntityPart{{Type: QuotaUser, Name: "alice/x"}}, Values: map[string]float64{"producer_byte_rate": 1024}},
		{Entity: []QuotaEntityPart{{Type: QuotaUser, Name: "alice/x"}, {Type: QuotaClientID, Default: true}}, Values: map[string]float64{"request_percentage": 12.5}},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Fatalf("quotas %+v\nwant %+v", qs, want)
	}
	if raw, err := c.cli.Get(ctx, "/config/users/alice%2Fx/clients/<default>"); err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("user+client key: %v %v", raw, err)
	}
	if err := c.AlterClientQuota(ctx, alice, nil, []string{"producer_byte_rate"}); err != nil {
		t.Fatal(err)
	}
	if qs, _ := c.ClientQuotas(ctx); len(qs) != 1 {
		t.Fatalf("after removing alice's last value: %+v", qs)
	}
}
