package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/faultfs"
)

// TestDockerFaultFS runs a broker container on a faultfs disk mounted on
// the host: its writes go through the daemon, the mount is in the container
// again after a restart, and Down removes mount and daemon.
func TestDockerFaultFS(t *testing.T) {
	cli := requireDocker(t)
	if err := compose.CheckFUSE(); err != nil {
		t.Skipf("needs /dev/fuse for faultfs disks; CI has it: %v", err)
	}
	if testing.Short() {
		t.Skip("builds and runs the isrlab binary; skipped with -short")
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, top := upOneBroker(ctx, t, stateDir, compose.Options{Name: "dffs", FaultFS: []string{"b1"}})
	b1 := c.Node("b1")
	inContainer := func() bool {
		mi, err := os.ReadFile("/proc/" + strconv.Itoa(b1.PID()) + "/mountinfo")
		return err == nil && strings.Contains(string(mi), " "+b1.DataDir+" ") && strings.Contains(string(mi), faultfs.FSNamePrefix+c.RunID)
	}
	if !inContainer() {
		t.Fatal("the broker's container does not see the faultfs mount at its data dir")
	}
	produceConsume(ctx, t, c, 1)
	ctl := faultfs.NewClient(c.Disks()["b1"])
	s, err := ctl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Counters[faultfs.OpWrite].Ops == 0 {
		t.Fatalf("no write went through faultfs: %+v", s.Counters)
	}
	if err := b1.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if !inContainer() {
		t.Fatal("the restarted broker's container does not see the faultfs mount")
	}
	st, err := compose.ReadState(stateDir, "dffs")
	if err != nil {
		t.Fatal(err)
	}
	daemon := st.Node("b1")
	if !compose.Alive(daemon.DiskPID, daemon.DiskPIDStart) {
		t.Fatalf("faultfs daemon %d not running after the broker's restart", daemon.DiskPID)
	}
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := faultfs.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.RunID == c.RunID {
			t.Errorf("faultfs mount left after Down: %s", m.MountPoint)
		}
	}
	if compose.Alive(daemon.DiskPID, daemon.DiskPIDStart) {
		t.Errorf("faultfs daemon %d still running after Down", daemon.DiskPID)
	}
	if left := leftovers(t, cli, stateDir, top.RunID); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
}

func TestDockerFaultFSNeedsIsrlab(t *testing.T) {
	top, err := compose.Build(compose.Options{RunID: "r1", RunDir: t.TempDir(), Brokers: 1, Coordinators: 1, FaultFS: []string{"all"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Backend{System: SystemKafka, StateDir: t.TempDir()}).Up(context.Background(), top)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "kafka") {
		t.Fatalf("Up of a kafka system with faultfs disks: %v, want ErrUnsupported naming the system", err)
	}
}
