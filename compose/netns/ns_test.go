package netns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/isrlab/isrlab/internal/mountinfo"
)

// ipNetnsAdd does to dir what the first `ip netns add` on a host does to
// /run/netns: make it a shared mount, binding it over itself (with what
// is mounted inside) when it is not a mount point yet.
func ipNetnsAdd(t *testing.T, dir string) {
	t.Helper()
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err = unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// unmountAll detaches every mount at or under dir, innermost first.
func unmountAll(dir string) {
	for range 10 {
		ms, _ := mountinfo.Read()
		var under []string
		for _, m := range ms {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				under = append(under, m.MountPoint)
			}
		}
		if len(under) == 0 {
			return
		}
		for i := len(under) - 1; i >= 0; i-- {
			unix.Unmount(under[i], unix.MNT_DETACH) //nolint:errcheck // best effort; the loop looks again
		}
	}
}

// TestNSDirSurvivesIPNetnsAdd: a run's namespaces stay removable when
// `ip netns add` upgrades the directory while the run is up, because the
// run made it a mount point first. Without that (the second half) the
// namespace underneath cannot be removed: EBUSY, the failure this guards.
func TestNSDirSurvivesIPNetnsAdd(t *testing.T) {
	requireNetns(t)
	for _, shared := range []bool{true, false} {
		dir := t.TempDir()
		t.Cleanup(func() { unmountAll(dir) })
		if shared {
			if err := shareNSDir(dir); err != nil {
				t.Fatal(err)
			}
			if err := shareNSDir(dir); err != nil { // a second run's
				t.Fatalf("a second run: %v", err)
			}
		}
		path := filepath.Join(dir, NSName("t", "n1"))
		if err := createNS(path); err != nil {
			t.Fatal(err)
		}
		ipNetnsAdd(t, dir)
		err := removeNS(path)
		switch {
		case shared && err != nil:
			t.Errorf("remove after ip netns add: %v", err)
		case shared:
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the namespace file is still there: %v", err)
			}
		case !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "ip netns add"):
			t.Errorf("without a shared dir: %v, want EBUSY and why", err)
		}
	}
}
