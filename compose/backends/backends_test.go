package backends

import (
	"context"
	"errors"
	"testing"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/compose/docker"
	"github.com/isrlab/isrlab/compose/netns"
	"github.com/isrlab/isrlab/compose/ssh"
)

func TestNew(t *testing.T) {
	var cleanedIn string
	clean := func(_ context.Context, stateDir string, _ *compose.Cluster) error {
		cleanedIn = stateDir
		return errors.New("cleaned")
	}
	tests := []struct {
		name    string
		opts    Options
		want    string // type name, "" for an error
		wantErr error
	}{
		{"", Options{}, "netns", nil},
		{"netns", Options{}, "netns", nil},
		{"docker", Options{System: docker.SystemKafka}, "docker", nil},
		{"netns", Options{System: docker.SystemKafka}, "", nil},
		{"lxc", Options{}, "", ErrUnknown},
		{"ssh", Options{}, "", nil},
		{"ssh", Options{SSH: &ssh.Config{}, CleanFaults: clean}, "ssh", nil},
	}
	for _, tt := range tests {
		b, err := New(tt.name, tt.opts)
		got := ""
		switch b.(type) {
		case *netns.Backend:
			got = "netns"
		case *docker.Backend:
			got = "docker"
		case *ssh.Backend:
			got = "ssh"
			// Down cleans faults with what the caller passed, in the
			// default state directory.
			cf := b.(*ssh.Backend).CleanFaults
			if cf == nil {
				t.Fatal("an ssh backend that does not clean faults on Down")
			}
			if err := cf(context.Background(), &compose.Cluster{}); err == nil || err.Error() != "cleaned" || cleanedIn != compose.StateDir() {
				t.Errorf("the ssh backend's fault clean-up: %v in %q, want the caller's in %q", err, cleanedIn, compose.StateDir())
			}
		}
		if got != tt.want || (tt.want == "" && err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
			t.Errorf("New(%q, %+v) = %T, %v; want %s", tt.name, tt.opts, b, err, tt.want)
		}
	}
}

func TestOpenAndDownMissing(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := Open(context.Background(), dir, "nope", nil); !errors.Is(err, compose.ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	if err := Down(context.Background(), dir, "nope", 0, nil); !errors.Is(err, compose.ErrNotFound) {
		t.Errorf("Down: %v, want ErrNotFound", err)
	}
	if err := compose.WriteState(dir, &compose.State{Name: "odd", RunID: "r", Backend: "lxc"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Open(context.Background(), dir, "odd", nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("Open of an unknown backend's state: %v, want ErrUnknown", err)
	}
}
