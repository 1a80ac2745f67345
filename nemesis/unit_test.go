package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/history"
	"github.com/isrlab/isrlab/internal/scripttest"
)

// fakeCluster is a cluster description with no processes or namespaces.
func fakeCluster() *compose.Cluster {
	var nodes []*compose.Node
	add := func(role compose.Role, prefix string, n int) {
		for i := 1; i <= n; i++ {
			name := prefix + string(rune('0'+i))
			nodes = append(nodes, &compose.Node{NodeSpec: compose.NodeSpec{Name: name, Role: role, ID: i,
				Addr: netip.MustParseAddr("10.0.0.1")}, SwitchPort: "p-" + name})
		}
	}
	add(compose.RoleCoordinator, "c", 3)
	add(compose.RoleBroker, "b", 3)
	add(compose.RoleClient, "client", 1)
	c := compose.NewCluster(compose.Topology{Name: "t", RunID: "r1"}, "netns", nodes, nil)
	c.SwitchNS = "/nonexistent/isrlab-r1-sw"
	return c
}

type fixedView View

func (f fixedView) View(context.Context, []string) (View, error) { return View(f), nil }

var view = View{
	Controller: 3,
	Partitions: map[string]PartitionView{
		"t/0": {Leader: 2, Replicas: []int32{2, 3, 1}, ISR: []int32{2, 3, 1}},
		"t/1": {Leader: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1}},
		"t/2": {Leader: -1, Replicas: []int32{3}, ISR: nil},
	},
	CoordinatorLeader: "c2",
}

func TestResolveTargets(t *testing.T) {
	env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view)}
	tests := []struct {
		exprs []string
		want  string
		err   error
	}{
		{[]string{"b2"}, "b2", nil},
		{[]string{"leader:t/0"}, "b2", nil},
		{[]string{"leader:t/1", "b1", "controller"}, "b1 b3", nil},
		{[]string{"last-isr:t/0"}, "b1", nil},
		{[]string{"last-isr:t/1"}, "b1", nil},
		{[]string{"coordinator-leader"}, "c2", nil},
		{[]string{"controller"}, "b3", nil},
		{[]string{"brokers"}, "b1 b2 b3", nil},
		{[]string{"coordinators", "clients"}, "c1 c2 c3 client1", nil},
		{[]string{"follower:t/1"}, "b2 b3", nil}, // no in-sync follower: any replica (either)
		{[]string{"followers:t/0"}, "b1 b3", nil},
		{[]string{"followers:t/1"}, "b2 b3", nil},
		{[]string{"non-replicas:t/2"}, "b1 b2", nil},
		{[]string{"non-replicas:t/0"}, "", ErrNoTarget},
		{[]string{"leader:t/2"}, "", ErrNoTarget},
		{[]string{"leader:t/9"}, "", ErrNoTarget},
		{[]string{"b9"}, "", ErrNoTarget},
		{[]string{"leader:t"}, "", ErrBadFault},
		{[]string{"boss:t/0"}, "", ErrBadFault},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.exprs, ","), func(t *testing.T) {
			got, err := env.ResolveTargets(context.Background(), tt.exprs)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.exprs[0] == "follower:t/1" {
				if len(got) != 1 || !strings.Contains(tt.want, got[0]) {
					t.Fatalf("got %v, want one of %s", got, tt.want)
				}
				return
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Fatalf("got %q, want %q", s, tt.want)
			}
		})
	}
	// The in-sync follower of t/0 is never the leader.
	for range 20 {
		got, err := env.ResolveTargets(context.Background(), []string{"follower:t/0"})
		if err != nil || got[0] == "b2" {
			t.Fatalf("follower:t/0 = %v, %v", got, err)
		}
	}
}

func TestResolveNeedsResolver(t *testing.T) {
	env := &Env{Cluster: fakeCluster()}
	if _, err := env.ResolveTargets(context.Background(), []string{"b1", "brokers"}); err != nil {
		t.Fatalf("names and groups need no resolver: %v", err)
	}
	if _, err := env.ResolveTargets(context.Background(), []string{"leader:t/0"}); !errors.Is(err, ErrBadFault) {
		t.Fatalf("leader without a resolver: err = %v", err)
	}
}

func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"b1", "leader:t/0", "follower:a/b/3", "last-isr:t/12", "followers:t/0", "non-replicas:t/1", "controller", "all", "random-broker"} {
		if err := CheckTarget(ok); err != nil {
			t.Errorf("CheckTarget(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "leader:", "leader:t/-1", "x:t/0", "B1!", "leader:t/x"} {
		if err := CheckTarget(bad); err == nil {
			t.Errorf("CheckTarget(%q) = nil", bad)
		}
	}
}

func TestGrudges(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	rng := func() *rand.Rand { return rand.New(rand.NewSource(7)) }
	tests := []struct {
		name string
		g    Grudge
		want string
	}{
		{"isolate", Isolate("n2", nodes), "n1>n2 n2>n1 n2>n3 n2>n4 n2>n5 n3>n2 n4>n2 n5>n2"},
		{"halves", Halves(nodes[:4]), "n1>n3 n1>n4 n2>n3 n2>n4 n3>n1 n3>n2 n4>n1 n4>n2"},
		{"cut", Cut([]string{"n1"}, []string{"n1", "n2"}), "n1>n2 n2>n1"},
		{"one-way", Cut([]string{"n1"}, []string{"n2", "n3"}).OneWay([]string{"n1"}), "n2>n1 n3>n1"},
		{"complete3", Complete([]string{"n1"}, []string{"n2"}, []string{"n3"}), "n1>n2 n1>n3 n2>n1 n2>n3 n3>n1 n3>n2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pairs(tt.g); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("majorities-ring", func(t *testing.T) {
		g := MajoritiesRing(rng(), nodes)
		seen := map[string]bool{}
		for _, n := range nodes {
			visible := len(nodes) - len(g[n])
			if visible < 3 {
				t.Fatalf("%s sees %d nodes, not a majority: %v", n, visible, g)
			}
			key := strings.Join(g[n], ",")
			if seen[key] {
				t.Fatalf("two nodes see the same majority: %v", g)
			}
			seen[key] = true
		}
		if !reflect.DeepEqual(g, MajoritiesRing(rng(), nodes)) {
			t.Fatal("same seed, different ring")
		}
	})
	t.Run("bridge", func(t *testing.T) {
		g := Bridge(rng(), nodes)
		var bridge []string
		for _, n := range nodes {
			if len(g[n]) == 0 {
				bridge = append(bridge, n)
			}
		}
		if len(bridge) != 1 || len(g.Pairs()) != 8 {
			t.Fatalf("bridge %v, links %v", bridge, g.Pairs())
		}
	})
	t.Run("random-halves", func(t *testing.T) {
		a, b := RandomHalves(rng(), nodes), RandomHalves(rng(), nodes)
		if !reflect.DeepEqual(a, b) || len(a.Pairs()) != 12 {
			t.Fatalf("random halves: %v vs %v", a, b)
		}
	})
}

func pairs(g Grudge) string {
	var s []string
	for _, p := range g.Pairs() {
		s = append(s, p[0]+">"+p[1])
	}
	return strings.Join(s, " ")
}

// TestSeedScenarios resolves seed 000's partition scenarios 1–8 against a
// fixed view: partition t/0 is led by b2 with followers b3, b1; b3 is the
// controller.
func TestSeedScenarios(t *testing.T) {
	tests := []struct {
		topo string
		want string // from>to links, both ways
	}{
		{SeedFollowerLeader, "F>b2 b2>F"},
		{SeedFollowerCoordinators, "F>c1 F>c2 F>c3 c1>F c2>F c3>F"},
		{SeedLeaderFollowers, "b1>b2 b2>b1 b2>b3 b3>b2"},
		{SeedLeaderCoordinators, "b2>c1 b2>c2 b2>c3 c1>b2 c2>b2 c3>b2"},
		{SeedLeaderBrokers, "b1>b2 b2>b1 b2>b3 b3>b2"},
		{SeedLeaderAllButClients, "b1>b2 b2>b1 b2>b3 b2>c1 b2>c2 b2>c3 b3>b2 c1>b2 c2>b2 c3>b2"},
		{SeedControllerBrokers, "b1>b3 b2>b3 b3>b1 b3>b2"},
		{SeedControllerCoordinators, "b3>c1 b3>c2 b3>c3 c1>b3 c2>b3 c3>b3"},
	}
	for _, tt := range tests {
		t.Run(tt.topo, func(t *testing.T) {
			env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view), id: "f1"}
			p := (&Partition{Topology: tt.topo, Partition: "t/0"}).NewRun().(*partitionRun)
			if err := p.Resolve(context.Background(), env); err != nil {
				t.Fatal(err)
			}
			got := pairs(p.Cut)
			want := tt.want
			if strings.Contains(want, "F") {
				// The follower is b1 or b3, whichever was drawn.
				f := "b3"
				if strings.Contains(got, "b1") {
					f = "b1"
				}
				want = strings.ReplaceAll(want, "F", f)
				want = pairs(gr(want))
			}
			if got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if p.Table != "isrlab-r1-f1" {
				t.Fatalf("table %q", p.Table)
			}
			if strings.Contains(got, "client") {
				t.Fatal("a seed scenario cut a client link")
			}
		})
	}
	env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view)}
	if err := (&Partition{Topology: SeedLeaderBrokers}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrBadFault) {
		t.Fatalf("scenario without a partition: %v", err)
	}
}

// gr parses "a>b c>d" into a grudge (b drops a, d drops c).
func gr(s string) Grudge {
	g := Grudge{}
	for _, p := range strings.Fields(s) {
		from, to, _ := strings.Cut(p, ">")
		g.add(to, from)
	}
	return g
}

func TestPartitionResolve(t *testing.T) {
	tests := []struct {
		name string
		p    Partition
		want string
		err  error
	}{
		{"isolate leader includes clients", Partition{Topology: TopoIsolate, Targets: []string{"leader:t/0"}},
			"b1>b2 b2>b1 b2>b3 b2>c1 b2>c2 b2>c3 b2>client1 b3>b2 c1>b2 c2>b2 c3>b2 client1>b2", nil},
		{"isolate one way", Partition{Topology: TopoIsolate, Targets: []string{"b1"}, Others: []string{"b2", "b3"}, OneWay: true},
			"b2>b1 b3>b1", nil},
		{"cut client from brokers", Partition{Topology: TopoCut, Targets: []string{"clients"}, Others: []string{"brokers"}},
			"b1>client1 b2>client1 b3>client1 client1>b1 client1>b2 client1>b3", nil},
		{"halves of brokers", Partition{Topology: TopoHalves, Nodes: []string{"brokers"}},
			"b1>b2 b1>b3 b2>b1 b3>b1", nil},
		{"grudge", Partition{Topology: TopoGrudge, Grudge: Grudge{"leader:t/0": {"b1"}}}, "b1>b2", nil},
		{"isolate without targets", Partition{Topology: TopoIsolate}, "", ErrBadFault},
		{"unknown", Partition{Topology: "moon"}, "", ErrBadFault},
		{"halves of one", Partition{Topology: TopoHalves, Nodes: []string{"b1"}}, "", ErrBadFault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view)}
			r := tt.p.NewRun().(*partitionRun)
			err := r.Resolve(context.Background(), env)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pairs(r.Cut); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestSpecRoundTrip(t *testing.T) {
	tests := []string{
		`{"kind":"kill","nodes":["leader:t/0"]}`,
		`{"kind":"partition","topology":"isolate","targets":["b1"],"one_way":true}`,
		`{"kind":"slow-net","nodes":["b3"],"rate":"1mbit","delay":"50ms"}`,
		`{"kind":"loss","nodes":["b2"],"percent":20}`,
		`{"kind":"slow-disk","nodes":["b2"],"latency":"20ms"}`,
		`{"kind":"power-loss","nodes":["b1","b2"]}`,
		`{"kind":"pause","nodes":["controller"]}`,
		`{"kind":"clock-skew","nodes":["leader:t/0"],"offset_ms":-30000}`,
	}
	for _, in := range tests {
		var s Spec
		if err := json.Unmarshal([]byte(in), &s); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != in {
			t.Errorf("round trip\n got %s\nwant %s", out, in)
		}
	}
	for _, bad := range []string{`{"kind":"meteor"}`, `{"kind":"kill","nodes":3}`, `[]`} {
		var s Spec
		if err := json.Unmarshal([]byte(bad), &s); !errors.Is(err, ErrBadFault) {
			t.Errorf("%s: err = %v, want ErrBadFault", bad, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"1mbit", 125000}, {"10Mbit", 1250000}, {"800bit", 100}, {"64kbps", 64000}, {"1.5gbit", 187500000}, {"100bps", 100},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "fast", "1", "-1mbit", "1mb", "0kbit", "1bit"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = nil error", bad)
		}
	}
}

func mix() []Weighted {
	must := func(s string) Spec {
		var sp Spec
		if err := json.Unmarshal([]byte(s), &sp); err != nil {
			panic(err)
		}
		return sp
	}
	return []Weighted{
		{Weight: 3, Fault: must(`{"kind":"kill","nodes":["leader:t/0"]}`)},
		{Weight: 1, Fault: must(`{"kind":"partition","topology":"random-halves"}`)},
		{Weight: 1, Fault: must(`{"kind":"pause","nodes":["random-broker"]}`)},
	}
}

// TestEveryGolden pins the schedule a seed produces: the same seed gives
// the same events on every machine and Go version.
func TestEveryGolden(t *testing.T) {
	g := Every{Seed: 42, Interval: 10 * time.Second, Hold: 4 * time.Second, Duration: 60 * time.Second, Mix: mix()}
	ev, err := g.Events()
	if err != nil {
		t.Fatal(err)
	}
	got := formatEvents(t, ev)
	scripttest.Golden(t, filepath.Join("testdata", "every-seed42.txt"), got)
	again, _ := g.Events()
	if formatEvents(t, again) != got {
		t.Fatal("same seed, different schedule")
	}
	g.Seed = 43
	other, _ := g.Events()
	if formatEvents(t, other) == got {
		t.Fatal("seeds 42 and 43 give the same schedule")
	}
}

func formatEvents(t *testing.T, ev []Event) string {
	var b strings.Builder
	for _, e := range ev {
		f := ""
		if e.Fault.Fault != nil {
			j, err := json.Marshal(e.Fault)
			if err != nil {
				t.Fatal(err)
			}
			f = " " + string(j)
		}
		b.WriteString(e.At.String() + " " + string(e.Action) + " " + itoa(e.Key) + f + "\n")
	}
	return b.String()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestScheduleErrors(t *testing.T) {
	tests := []struct {
		name string
		g    Generator
	}{
		{"no interval", Every{Hold: time.Second, Duration: time.Minute, Mix: mix()}},
		{"hold > interval", Every{Interval: time.Second, Hold: 2 * time.Second, Duration: time.Minute, Mix: mix()}},
		{"empty mix", Every{Interval: time.Second, Hold: time.Second, Duration: time.Minute}},
		{"zero weights", Every{Interval: time.Second, Hold: time.Second, Duration: time.Minute,
			Mix: []Weighted{{Weight: 0, Fault: mix()[0].Fault}}}},
		{"once without fault", Once{At: time.Second}},
	}
	for _, tt := range tests {
		if _, err := tt.g.Events(); !errors.Is(err, ErrBadFault) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

func TestOnceAndFixed(t *testing.T) {
	ev, err := Once{At: 5 * time.Second, Hold: 3 * time.Second, Fault: &Kill{procNodes{Nodes: []string{"b1"}}}}.Events()
	if err != nil {
		t.Fatal(err)
	}
	if got := formatEvents(t, ev); got != "5s start 1 {\"kind\":\"kill\",\"nodes\":[\"b1\"]}\n8s stop 1\n" {
		t.Fatalf("once: %q", got)
	}
	fx, _ := Fixed{{At: 3 * time.Second, Action: ActHealAll}, {At: time.Second, Action: ActStart, Key: 1, Fault: ev[0].Fault}}.Events()
	if fx[0].At != time.Second || fx[1].Action != ActHealAll {
		t.Fatalf("fixed not sorted: %+v", fx)
	}
}

// RecordingFault counts its calls; it needs no cluster.
type RecordingFault struct {
	Nodes    []string `json:"nodes"`
	FailWith string   `json:"fail_with,omitempty"`
	// SlowMs moves slowClock on by that much while injecting.
	SlowMs   int `json:"slow_ms,omitempty"`
	injected *int
	healed   *int
	// ids gets the fault id each Inject and Heal saw in its Env.
	ids *[]string
}

// recordingRun is a RecordingFault's run: the counters are shared.
type recordingRun struct {
	RecordingFault `json:"-"`
}

func (*RecordingFault) Kind() string                        { return "test-fault" }
func (f *RecordingFault) NewRun() Run                       { return &recordingRun{*f} }
func (r *recordingRun) Resolve(context.Context, *Env) error { return nil }
func (r *recordingRun) Inject(ctx context.Context, env *Env) error {
	if r.ids != nil {
		*r.ids = append(*r.ids, env.id)
	}
	if slowClock != nil {
		slowClock.now = slowClock.now.Add(time.Duration(r.SlowMs) * time.Millisecond)
	}
	if r.FailWith != "" {
		return errors.New(r.FailWith)
	}
	if r.injected != nil {
		*r.injected++
	}
	return nil
}
func (r *recordingRun) Heal(_ context.Context, env *Env) error {
	if r.ids != nil {
		*r.ids = append(*r.ids, env.id)
	}
	if r.healed != nil {
		*r.healed++
	}
	return nil
}

func init() { register(func() Fault { return &RecordingFault{} }) }

// slowClock is the clock a slow RecordingFault moves on.
var slowClock *fakeClock

// fakeClock jumps forward whenever Run waits.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// TestRunRecords runs a schedule on a fake clock and checks the nemesis
// ops it records and that nothing stays active.
func TestRunRecords(t *testing.T) {
	mem := &history.Memory{}
	clk := &fakeClock{now: time.Unix(0, 0)}
	rec := history.NewRecorder(mem, func() time.Duration { return clk.now.Sub(time.Unix(0, 0)) })
	n := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Recorder: rec, Store: &Store{Path: filepath.Join(t.TempDir(), "faults.json")}}
	ev := Fixed{
		{At: time.Second, Action: ActStart, Key: 1, Fault: Spec{&RecordingFault{Nodes: []string{"b1"}}}},
		{At: 2 * time.Second, Action: ActStart, Key: 2, Fault: Spec{&RecordingFault{Nodes: []string{"b2"}, FailWith: "boom"}}},
		{At: 3 * time.Second, Action: ActStop, Key: 1},
		{At: 4 * time.Second, Action: ActStart, Key: 3, Fault: Spec{&RecordingFault{Nodes: []string{"b3"}}}},
		{At: 5 * time.Second, Action: ActHealAll},
	}
	err := Play(context.Background(), n, ev, PlayOptions{Clock: clk})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Run err = %v, want the failed injection", err)
	}
	var got []string
	for _, op := range mem.Ops {
		if op.Process != history.Nemesis {
			t.Fatalf("op by process %d", op.Process)
		}
		got = append(got, time.Duration(op.Time).String()+" "+op.Type.String()+" "+op.F+" "+string(op.RawValue))
	}
	scripttest.Golden(t, filepath.Join("testdata", "run-ops.txt"), strings.Join(got, "\n")+"\n")
	if as, _ := n.Active(); len(as) != 0 {
		t.Fatalf("still active: %+v", as)
	}
}

// TestRunHoldsFromInjection: a fault whose injection took 3 s (targets
// resolved through a slow cluster) is still held for its whole 5 s, and
// the events after it keep their own times.
func TestRunHoldsFromInjection(t *testing.T) {
	mem := &history.Memory{}
	clk := &fakeClock{now: time.Unix(0, 0)}
	slowClock = clk
	defer func() { slowClock = nil }()
	rec := history.NewRecorder(mem, func() time.Duration { return clk.now.Sub(time.Unix(0, 0)) })
	n := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Recorder: rec}
	ev := Fixed{
		{At: time.Second, Action: ActStart, Key: 1, Fault: Spec{&RecordingFault{Nodes: []string{"b1"}, SlowMs: 3000}}},
		{At: 6 * time.Second, Action: ActStop, Key: 1},
		{At: 7 * time.Second, Action: ActStart, Key: 2, Fault: Spec{&RecordingFault{Nodes: []string{"b2"}}}},
		{At: 8 * time.Second, Action: ActStop, Key: 2},
	}
	if err := Play(context.Background(), n, ev, PlayOptions{Clock: clk}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range mem.Ops {
		if op.Type == history.OK {
			got = append(got, time.Duration(op.Time).String()+" "+op.F)
		}
	}
	want := "4s start-test-fault, 7s start-test-fault, 8s stop-test-fault, 9s stop-test-fault"
	if strings.Join(got, ", ") != want {
		t.Errorf("got %s\nwant %s", strings.Join(got, ", "), want)
	}
}

// TestStoreSharedByProcesses: a fault injected through one Nemesis is
// listed and healed through another on the same file.
func TestStoreSharedByProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "faults.json")
	healed := 0
	a := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Store: &Store{Path: path}}
	act, err := a.Inject(context.Background(), &RecordingFault{Nodes: []string{"b1"}})
	if err != nil {
		t.Fatal(err)
	}
	b := &Nemesis{Env: &Env{Cluster: fakeCluster()}, Store: &Store{Path: path}}
	list, err := b.Active()
	if err != nil || len(list) != 1 || list[0].ID != act.ID {
		t.Fatalf("list from another store: %+v, %v", list, err)
	}
	list[0].Fault.Run.(*recordingRun).healed = &healed
	if err := b.heal(context.Background(), list[0], true); err != nil {
		t.Fatal(err)
	}
	if healed != 1 {
		t.Fatalf("healed %d times", healed)
	}
	if err := b.Heal(context.Background(), act.ID); !errors.Is(err, ErrNotActive) {
		t.Fatalf("second heal: %v", err)
	}
	act2, _ := a.Inject(context.Background(), &RecordingFault{})
	if act2.ID == act.ID {
		t.Fatal("fault id reused")
	}
}

// TestDockerFaultsAreNodeSide: on Docker the bridge is in the host's
// namespace, which network faults must not touch: partitions and loss go
// into the nodes' namespaces, and what needs the switch is refused.
func TestDockerFaultsAreNodeSide(t *testing.T) {
	c := fakeCluster()
	c.Backend = "docker"
	env := &Env{Cluster: c, Resolver: fixedView(view)}
	p := (&Partition{Topology: TopoIsolate, Targets: []string{"b1"}}).NewRun().(*partitionRun)
	l := (&Loss{Nodes: []string{"b1"}, Percent: 5}).NewRun().(*lossRun)
	for _, f := range []Run{p, l} {
		if err := f.Resolve(context.Background(), env); err != nil {
			t.Fatalf("%s on docker: %v", f.Kind(), err)
		}
	}
	if p.Side != SideNode || l.Side != SideNode {
		t.Fatalf("sides %q, %q; want node", p.Side, l.Side)
	}
	if err := (&SlowNet{Nodes: []string{"b1"}, Rate: "1mbit"}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("slow-net into a docker node: err = %v, want ErrUnsupported", err)
	}
	if err := (&SlowNet{Nodes: []string{"b1"}, Rate: "1mbit", Direction: "out"}).NewRun().Resolve(context.Background(), env); err != nil {
		t.Fatalf("slow-net out of a docker node: %v", err)
	}
	env.Cluster.Backend = "netns"
	q := (&Partition{Topology: TopoIsolate, Targets: []string{"b1"}}).NewRun().(*partitionRun)
	if err := q.Resolve(context.Background(), env); err != nil || q.Side != SideSwitch {
		t.Fatalf("netns partition: side %q, %v", q.Side, err)
	}
}

// A fault sees its own id in the Env it is applied with; the Nemesis's
// shared Env is never changed.
func TestFaultSeesItsID(t *testing.T) {
	env := &Env{Cluster: &compose.Cluster{}}
	n := &Nemesis{Env: env, Store: &Store{Path: filepath.Join(t.TempDir(), "faults.json")}}
	var ids []string
	a, err := n.Inject(context.Background(), &RecordingFault{Nodes: []string{"b1"}, ids: &ids})
	if err != nil {
		t.Fatal(err)
	}
	if env.id != "" {
		t.Errorf("the shared Env carries id %q after an injection", env.id)
	}
	active, err := n.Store.Get(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	active.Fault.Run.(*recordingRun).ids = &ids
	if err := n.heal(context.Background(), active, false); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != a.ID || ids[1] != a.ID || env.id != "" {
		t.Errorf("ids seen %v (fault %s), shared Env's %q", ids, a.ID, env.id)
	}
	if env.Rand == nil {
		t.Error("the copies' random source was not made on the shared Env")
	}
}

// TestScramPasswordResolve: the fault needs a secured cluster, takes the
// lab's client user by default and refuses the brokers' own user; its
// spec records no password.
func TestScramPasswordResolve(t *testing.T) {
	plain := &Env{Cluster: compose.NewCluster(compose.Topology{Name: "t", RunID: "r1"}, "netns", nil, nil)}
	if err := (&ScramPassword{}).NewRun().Resolve(context.Background(), plain); !errors.Is(err, ErrUnsupported) {
		t.Errorf("plaintext cluster: %v, want ErrUnsupported", err)
	}
	dir := t.TempDir()
	sec := &compose.Security{SecretsDir: dir, Mechanism: "SCRAM-SHA-256", AdminUser: "admin", ClientUser: "client"}
	os.WriteFile(filepath.Join(dir, "client.password"), []byte("s3cret\n"), 0o600)
	env := &Env{Cluster: compose.NewCluster(compose.Topology{Name: "t", RunID: "r1", Security: sec}, "netns", nil, nil)}
	f := (&ScramPassword{}).NewRun().(*scramPasswordRun)
	if err := f.Resolve(context.Background(), env); err != nil || f.User != "client" || f.Mechanism != "SCRAM-SHA-256" {
		t.Errorf("default: %+v %v", f, err)
	}
	if b := firedJSON(f); strings.Contains(string(b), "s3cret") {
		t.Errorf("the fault's record holds the password: %s", b)
	}
	if err := (&ScramPassword{User: "admin"}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrBadFault) {
		t.Errorf("admin: %v, want ErrBadFault", err)
	}
	if err := (&ScramPassword{User: "nobody"}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrBadFault) {
		t.Errorf("unknown user: %v, want ErrBadFault", err)
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"scram-password","mechanism":"PLAIN"}`)); err == nil {
		t.Error("mechanism, set when the fault fires, was accepted in a spec")
	}
}

// In KRaft mode the controller target is the coordinator node whose
// controller is active (node id 3000+i), never a broker.
func TestResolveKRaftController(t *testing.T) {
	c := fakeCluster()
	c.KRaft = true
	v := view
	v.Controller = compose.ControllerNodeID(2)
	env := &Env{Cluster: c, Resolver: fixedView(v)}
	got, err := env.ResolveTargets(context.Background(), []string{"controller"})
	if err != nil || strings.Join(got, " ") != "c2" {
		t.Fatalf("controller in KRaft mode: got %v, %v; want c2", got, err)
	}
	v.Controller = 3 // a broker id is no KRaft controller
	env.Resolver = fixedView(v)
	if _, err := env.ResolveTargets(context.Background(), []string{"controller"}); !errors.Is(err, ErrNoTarget) {
		t.Fatalf("controller id 3 in KRaft mode: err %v, want ErrNoTarget", err)
	}
}

// TestCertFaultsResolve: cert-expiry and ca-rotation need a secured
// cluster and brokers; expires.after may not be negative and the new
// CA's name is recorded, not set in a spec.
func TestCertFaultsResolve(t *testing.T) {
	plain := &Env{Cluster: fakeCluster(), Resolver: fixedView(view)}
	secured := fakeCluster()
	secured.Topology.Security = &compose.Security{SecretsDir: t.TempDir()}
	env := &Env{Cluster: secured, Resolver: fixedView(view)}
	for _, f := range []Fault{&CertExpiry{procNodes: procNodes{Nodes: []string{"b2"}}}, &CARotation{procNodes: procNodes{Nodes: []string{"b2"}}}} {
		if err := f.NewRun().Resolve(context.Background(), plain); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s on a plaintext cluster: %v, want ErrUnsupported", f.Kind(), err)
		}
		r := f.NewRun()
		if err := r.Resolve(context.Background(), env); err != nil {
			t.Errorf("%s on b2: %v", f.Kind(), err)
		}
	}
	if err := (&CertExpiry{procNodes: procNodes{Nodes: []string{"c1"}}}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrBadFault) {
		t.Errorf("cert-expiry on a coordinator: %v, want ErrBadFault", err)
	}
	if err := (&CertExpiry{procNodes: procNodes{Nodes: []string{"b1"}}, ExpiresAfter: -1}).NewRun().Resolve(context.Background(), env); !errors.Is(err, ErrBadFault) {
		t.Errorf("negative expires.after: %v, want ErrBadFault", err)
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"ca-rotation","nodes":["b1"],"ca":"x"}`)); err == nil {
		t.Error("ca, set when the fault fires, was accepted in a spec")
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"cert-expiry","nodes":["b1"],"expires.after":"5s"}`)); err != nil {
		t.Errorf("cert-expiry spec: %v", err)
	}
}
