package compose

import (
	"errors"
	"strings"
	"testing"
)

// TestCapabilitiesOf: what each backend can do, the default being netns's,
// and an unknown name an error naming the known ones.
func TestCapabilitiesOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Capabilities
	}{
		{"", Capabilities{Switch: true, Rootless: true, Secured: true, KafkaProxy: true}},
		{Netns, Capabilities{Switch: true, Rootless: true, Secured: true, KafkaProxy: true}},
		{Docker, Capabilities{SharedNetwork: true, Secured: true}},
		{SSH, Capabilities{UserHosts: true}},
	} {
		if got, err := CapabilitiesOf(tc.name); err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := CapabilitiesOf("kubernetes"); err == nil || !strings.Contains(err.Error(), "use netns, docker or ssh") {
		t.Errorf("unknown backend: %v", err)
	}
	if c := (&Cluster{Backend: Docker}); c.Caps().Switch || !c.Caps().SharedNetwork {
		t.Errorf("docker cluster caps %+v", c.Caps())
	}
}

// TestCheckExisting: the guard every backend's Up runs. No state: go on. A
// live run: ErrRunning. A dead run of the same backend: torn down, then go
// on (a failed teardown is the error). A dead run of another backend:
// ErrRunning, left for isrlab clean.
func TestCheckExisting(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	teardown := func(*State) error { calls++; return nil }
	if err := CheckExisting(dir, "lab-x", Netns, teardown); err != nil || calls != 0 {
		t.Fatalf("no state: %v, %d teardowns", err, calls)
	}
	live := &State{Name: "lab-x", RunID: "r1", Backend: Netns}
	live.SetOwner() // this process: alive
	if err := WriteState(dir, live); err != nil {
		t.Fatal(err)
	}
	if err := CheckExisting(dir, "lab-x", Netns, teardown); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "run r1") || calls != 0 {
		t.Errorf("live run: %v, %d teardowns", err, calls)
	}
	dead := &State{Name: "lab-x", RunID: "r2", Backend: Netns, Owner: 1 << 30} // no such process
	if err := WriteState(dir, dead); err != nil {
		t.Fatal(err)
	}
	if err := CheckExisting(dir, "lab-x", Netns, teardown); err != nil || calls != 1 {
		t.Errorf("dead run: %v, %d teardowns", err, calls)
	}
	boom := errors.New("boom")
	if err := CheckExisting(dir, "lab-x", Netns, func(*State) error { return boom }); !errors.Is(err, boom) || !strings.Contains(err.Error(), "remove dead run r2") {
		t.Errorf("failed teardown: %v", err)
	}
	if err := CheckExisting(dir, "lab-x", Docker, teardown); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "leftovers of a dead netns run r2") || calls != 1 {
		t.Errorf("another backend's dead run: %v, %d teardowns", err, calls)
	}
}
