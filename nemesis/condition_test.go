package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/history"
)

// timeline is a cluster state that changes at given offsets: views[i]
// holds from at[i] on.
type timeline struct {
	clk   *fakeClock
	at    []time.Duration
	views []PartitionView
	lost  time.Duration // from then on no state is read (0: never)
}

func (tl *timeline) state() (View, bool) {
	now := tl.clk.now.Sub(time.Unix(0, 0))
	if tl.lost > 0 && now >= tl.lost {
		return View{}, false
	}
	cur := -1
	for i, a := range tl.at {
		if now >= a {
			cur = i
		}
	}
	if cur < 0 {
		return View{}, false
	}
	return View{Controller: 1, Partitions: map[string]PartitionView{"t/0": tl.views[cur]}}, true
}

func intp(n int) *int { return &n }

// played runs events against a timeline and returns the nemesis ops as
// "time type f" lines, and Play's error.
func played(t *testing.T, tl *timeline, ev []Event) ([]string, error) {
	t.Helper()
	mem := &history.Memory{}
	clk := tl.clk
	rec := history.NewRecorder(mem, func() time.Duration { return clk.now.Sub(time.Unix(0, 0)) })
	n := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Recorder: rec, Store: &Store{Path: filepath.Join(t.TempDir(), "faults.json")}}
	err := Play(context.Background(), n, ev, PlayOptions{Clock: clk, State: tl.state})
	var got []string
	for _, op := range mem.Ops {
		if op.Type == history.Invoke {
			continue
		}
		got = append(got, time.Duration(op.Time).String()+" "+op.Type.String()+" "+op.F)
	}
	if as, _ := n.Active(); len(as) != 0 {
		t.Fatalf("still active after Play: %+v", as)
	}
	return got, err
}

func fault(nodes ...string) Spec { return Spec{&RecordingFault{Nodes: nodes}} }

func TestConditionISRSize(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0, 5 * time.Second, 7250 * time.Millisecond},
		views: []PartitionView{{Leader: 1, ISR: []int32{1, 2, 3}}, {Leader: 1, ISR: []int32{1, 2}}, {Leader: 1, ISR: []int32{1}}}}
	got, err := played(t, tl, []Event{
		// Waits from 2 s for an ISR of one, held 2 s from its injection.
		{At: 2 * time.Second, Action: ActStart, Key: 1, Fault: fault("b1"), When: &Condition{Partition: "t/0", ISRSize: intp(1)}},
		{At: 4 * time.Second, Action: ActStop, Key: 1},
		// A timed event goes on while the other waits.
		{At: 3 * time.Second, Action: ActStart, Key: 2, Fault: fault("b2")},
		{At: 20 * time.Second, Action: ActHealAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "3s ok start-test-fault|7.3s info condition|7.3s ok start-test-fault|9.3s ok stop-test-fault|20s ok heal"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

func TestConditionNotSetUp(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0}, views: []PartitionView{{Leader: 1, ISR: []int32{1, 2, 3}}}}
	got, err := played(t, tl, []Event{
		{At: time.Second, Action: ActStart, Key: 1, Fault: fault("b1")},
		{At: 2 * time.Second, Action: ActStart, Key: 2, Name: "kill-leader", Fault: fault("b1"), When: &Condition{Partition: "t/0", ISRSize: intp(1), Within: 3e9}},
		{At: 9 * time.Second, Action: ActStart, Key: 3, Fault: fault("b3")},
		{At: 10 * time.Second, Action: ActHealAll},
	})
	var nsu *NotSetUpError
	if !errors.As(err, &nsu) || !errors.Is(err, ErrNotSetUp) {
		t.Fatalf("err = %v, want a NotSetUpError", err)
	}
	msg := nsu.Error()
	for _, s := range []string{"could not set up", "kill-leader", "the ISR of t/0 has 1 member", "within 3s", "ISR [1 2 3]"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	// The schedule stops there: the fault at 9 s never comes, and the
	// one at 1 s is healed on the way out.
	want := "1s ok start-test-fault|5s info not-set-up|5s ok stop-test-fault"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

// TestConditionNotSetUpSaysLastSeen: reads of the cluster's state that
// fail late in the wait leave the reason naming the state last seen.
func TestConditionNotSetUpSaysLastSeen(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0}, views: []PartitionView{{Leader: 1, ISR: []int32{1, 2}}}, lost: 4 * time.Second}
	_, err := played(t, tl, []Event{
		{At: 2 * time.Second, Action: ActStart, Key: 1, Fault: fault("b1"), When: &Condition{Partition: "t/0", ISRSize: intp(1), Within: 3e9}},
	})
	var nsu *NotSetUpError
	if !errors.As(err, &nsu) || !strings.Contains(nsu.Error(), "last seen: leader 1, ISR [1 2]") {
		t.Fatalf("err = %v, want a NotSetUpError naming the state last seen", err)
	}
}

func TestConditionAfterAndDelay(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk}
	got, err := played(t, tl, []Event{
		{At: time.Second, Action: ActStart, Key: 1, Name: "a", Fault: fault("b1")},
		{At: 6 * time.Second, Action: ActStop, Key: 1},
		// 3 s after a went in, whatever its time.
		{At: 0, Action: ActStart, Key: 2, Name: "b", Fault: fault("b2"), When: &Condition{After: "a", Delay: 3e9}},
		{At: 5 * time.Second, Action: ActStop, Key: 2},
		// Once a is healed.
		{At: 0, Action: ActStart, Key: 3, Fault: fault("b3"), When: &Condition{AfterHeal: "a"}},
		{At: 12 * time.Second, Action: ActHealAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "1s ok start-test-fault|1s info condition|4s ok start-test-fault|6s ok stop-test-fault|6s info condition|6s ok start-test-fault|9s ok stop-test-fault|12s ok heal"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

func TestConditionNotInISROfNamedFault(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0, 4 * time.Second, 6 * time.Second},
		views: []PartitionView{{Leader: 1, ISR: []int32{1, 2, 3}}, {Leader: 1, ISR: []int32{1, 2}}, {Leader: 1, ISR: []int32{1, 3}}}}
	got, err := played(t, tl, []Event{
		// "cut" hits b2: the wait is for broker 2, not broker 3, to leave.
		{At: time.Second, Action: ActStart, Key: 1, Name: "cut", Fault: Spec{&ResolvingFault{RecordingFault{Nodes: []string{"b2"}}}}},
		{At: 0, Action: ActStart, Key: 2, Fault: fault("b1"), When: &Condition{Partition: "t/0", NotInISR: "cut"}},
		{At: 10 * time.Second, Action: ActHealAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "1s ok start-resolving-fault|6s info condition|6s ok start-test-fault|10s ok heal"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

func TestConditionLeaderChanged(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0, 3 * time.Second, 5 * time.Second},
		views: []PartitionView{{Leader: 1, ISR: []int32{1, 2}}, {Leader: -1, ISR: []int32{1}}, {Leader: 2, ISR: []int32{2}}}}
	got, err := played(t, tl, []Event{
		// No leader is not a new leader: it fires at 5 s, not 3 s.
		{At: time.Second, Action: ActStart, Key: 1, Fault: fault("b2"), When: &Condition{Partition: "t/0", LeaderChanged: true, InISR: "b2"}},
		{At: 8 * time.Second, Action: ActHealAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "5s info condition|5s ok start-test-fault|8s ok heal"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

// TestConditionRunEnds: a condition still waiting when the run ends (ctx)
// is not set up, never silently skipped.
func TestConditionRunEnds(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0}, views: []PartitionView{{Leader: 1, ISR: []int32{1, 2}}}}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Nemesis{Env: &Env{Cluster: fakeCluster()}}
	calls := 0
	state := func() (View, bool) {
		if calls++; calls > 5 {
			cancel()
		}
		return tl.state()
	}
	err := Play(ctx, n, []Event{{At: 0, Action: ActStart, Key: 1, Fault: fault("b1"), When: &Condition{Partition: "t/0", ISRSize: intp(1)}}},
		PlayOptions{Clock: clk, State: state})
	if !errors.Is(err, ErrNotSetUp) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestConditionValidate(t *testing.T) {
	names := []string{"cut"}
	for _, tt := range []struct {
		c    Condition
		want string
	}{
		{Condition{ISRSize: intp(1)}, "need a partition"},
		{Condition{Partition: "t/0"}, "nothing to wait for"},
		{Condition{}, "nothing to wait for"},
		{Condition{After: "nope"}, `no fault is named "nope"`},
		{Condition{Partition: "t/0", NotInISR: "leeder:t/0"}, "neither a fault's name nor a target"},
		{Condition{Partition: "t", ISRSize: intp(1)}, "partition"},
		{Condition{Partition: "t/0", ISRSize: intp(-1)}, "negative"},
	} {
		err := tt.c.Validate(names)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want %q", tt.c, err, tt.want)
		}
	}
	for _, c := range []Condition{
		{Partition: "t/0", NotInISR: "cut"},
		{Partition: "t/0", NotInISR: "follower:t/0", Within: 5e9},
		{After: "cut", Delay: 1e9},
		{AfterHeal: "cut"},
	} {
		if err := c.Validate(names); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// ResolvingFault records the nodes it resolved, as real faults do.
type ResolvingFault struct {
	RecordingFault
}

type resolvingRun struct {
	ResolvingFault `json:"-"`
	recordingRun
	nodesRun
}

func (*ResolvingFault) Kind() string { return "resolving-fault" }
func (f *ResolvingFault) NewRun() Run {
	return &resolvingRun{ResolvingFault: *f, recordingRun: recordingRun{f.RecordingFault}}
}
func (r *resolvingRun) Kind() string { return r.ResolvingFault.Kind() }
func (r *resolvingRun) Resolve(context.Context, *Env) error {
	r.Resolved = r.ResolvingFault.Nodes
	return nil
}

func init() { register(func() Fault { return &ResolvingFault{} }) }

// TestConditionWaited: the condition's record names its start event's
// key and how long the wait took from its start: what a run reports
// against the wait's within (lab's closest calls).
func TestConditionWaited(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tl := &timeline{clk: clk, at: []time.Duration{0, 7250 * time.Millisecond},
		views: []PartitionView{{Leader: 1, ISR: []int32{1, 2, 3}}, {Leader: 1, ISR: []int32{1}}}}
	mem := &history.Memory{}
	rec := history.NewRecorder(mem, func() time.Duration { return clk.now.Sub(time.Unix(0, 0)) })
	n := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Recorder: rec, Store: &Store{Path: filepath.Join(t.TempDir(), "faults.json")}}
	err := Play(context.Background(), n, []Event{
		{At: 2 * time.Second, Action: ActStart, Key: 4, Fault: fault("b1"), When: &Condition{Partition: "t/0", ISRSize: intp(1), Within: 10e9}},
		{At: 20 * time.Second, Action: ActHealAll},
	}, PlayOptions{Clock: clk, State: tl.state})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Key    int      `json:"key"`
		Waited *float64 `json:"waited_s"`
	}
	for _, op := range mem.Ops {
		if op.F == history.FCondition {
			if err := json.Unmarshal(op.RawValue, &got); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Armed at 2 s; the ISR is one from 7.25 s, seen at the next look.
	if got.Key != 4 || got.Waited == nil || *got.Waited < 5.25 || *got.Waited > 5.5 {
		w := -1.0
		if got.Waited != nil {
			w = *got.Waited
		}
		t.Errorf("condition record: key %d, waited %v s; want 4, 5.25-5.5 s", got.Key, w)
	}
}
