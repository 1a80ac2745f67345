package nemesis

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRunsApartFromSpecs: every kind's run starts with a copy of its spec
// and adds fields of its own, none of which is a spec field, so that one
// JSON object holds both and a spec never carries what firing learned.
func TestRunsApartFromSpecs(t *testing.T) {
	for _, kind := range Kinds() {
		f, _ := New(kind)
		r := f.NewRun()
		if r.Kind() != kind || SpecOf(r).Kind() != kind {
			t.Errorf("%s: run kind %s, spec of run %s", kind, r.Kind(), SpecOf(r).Kind())
		}
		if first := reflect.TypeOf(r).Elem().Field(0); !first.Anonymous || first.Tag.Get("json") != "-" || first.Type != reflect.TypeOf(f).Elem() {
			t.Errorf("%s: a run's first field must be its spec, embedded and tagged json:\"-\"; it is %s %s", kind, first.Name, first.Tag)
		}
		spec := jsonFields(reflect.TypeOf(f))
		for _, name := range RuntimeFields(kind) {
			if slices.Contains(spec, name) {
				t.Errorf("%s: field %q is in both its spec and its run", kind, name)
			}
		}
	}
	// What used to be refused for every kind is a spec field where a kind
	// has it, and a run field is still refused.
	if _, err := ParseUserSpec([]byte(`{"kind":"corrupt","nodes":["b1"],"file":"segment","mode":"zero"}`)); err != nil {
		t.Errorf("corrupt's mode: %v", err)
	}
	if _, err := ParseUserSpec([]byte(`{"kind":"slow-net","nodes":["b1"],"delay":"10ms","mode":"netem"}`)); err == nil || !strings.Contains(err.Error(), "set by the fault when it fires") {
		t.Errorf("slow-net's mode in a spec: err = %v", err)
	}
	if got := RuntimeFields("partition"); !slices.Equal(got, []string{"cut", "resolved", "side", "table"}) {
		t.Errorf("partition's run fields %v", got)
	}
}

// TestFiredRoundTrip: a fired fault's record reads back into the same spec
// and run, which is how `isrlab fault heal` heals what another process
// injected.
func TestFiredRoundTrip(t *testing.T) {
	env := &Env{Cluster: fakeCluster(), Resolver: fixedView(view), id: "f7"}
	spec := &Partition{Topology: TopoRandomHalves}
	r := spec.NewRun()
	if err := r.Resolve(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fired(r))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "topology", "seed", "cut", "resolved", "side", "table"} {
		if _, ok := m[k]; !ok {
			t.Errorf("record %s has no %q", b, k)
		}
	}
	var back Fired
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Run, r) || !reflect.DeepEqual(back.Fault, SpecOf(r)) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back.Run, r)
	}
	// The spec fired from is untouched: its seed is still to be drawn, so
	// it can fire again with another.
	if spec.Seed != 0 || r.(*partitionRun).Seed == 0 {
		t.Fatalf("spec seed %d, run seed %d", spec.Seed, r.(*partitionRun).Seed)
	}
}
