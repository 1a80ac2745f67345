// Package netns is the default compose backend: a switch namespace holding a
// Linux bridge, one network namespace per node joined to it by a veth pair,
// and each node's process started inside its namespace. Nothing is created in
// the root namespace. Namespaces are bind-mounted under a directory
// (/run/netns for root, so `ip netns exec` works) with names that carry the
// run id: isrlab-<run>-sw for the switch, isrlab-<run>-<node> for nodes.
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace the backend creates.
const Prefix = "isrlab-"

// SwitchName is the node-name slot of the switch namespace.
const SwitchName = "sw"

// NSName is the name of run's namespace for node (or SwitchName).
func NSName(run, node string) string { return Prefix + run + "-" + node }

// ParseNSName returns the run id of a namespace name made by NSName.
func ParseNSName(name string) (run string, ok bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", false
	}
	run, _, ok = strings.Cut(rest, "-")
	if !ok || run == "" {
		return "", false
	}
	return run, true
}

// shareNSDir makes dir a shared mount point of its own before any
// namespace is bound under it, as `ip netns add` makes /run/netns the
// first time. Otherwise the first `ip netns add` on the host while a run
// is up bind-mounts the directory over itself with the run's namespaces
// inside: the originals, underneath, can then be neither unmounted nor
// removed by path (EBUSY). An flock on the directory keeps two runs from
// both upgrading it (the second would hide the first's namespaces).
func shareNSDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("netns dir: %w", err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock netns dir %s: %w", dir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too
	for upgraded := false; ; upgraded = true {
		err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || upgraded {
			return fmt.Errorf("make netns dir %s a shared mount: %w", dir, err)
		}
		// EINVAL: not a mount point yet.
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind netns dir %s over itself: %w", dir, err)
		}
	}
}

// createNS creates a new network namespace and bind-mounts it at path. It
// runs on a locked thread that never returns to the runtime's pool, so no
// goroutine is left inside the new namespace. On failure it removes what it
// made.
func createNS(path string) (err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file %s: %w", path, err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		src := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind mount netns at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// removeNS unmounts and removes a namespace file. It is idempotent.
func removeNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("remove netns file %s: %w (its directory was bind-mounted over itself after the namespace was made, as the first `ip netns add` on a host does: the namespace underneath is out of reach until that mount goes, and with it every namespace made since)", path, err)
		}
		return fmt.Errorf("remove netns file %s: %w", path, err)
	}
	return nil
}

// nsInode returns the inode of the namespace mounted at path, 0 if none.
func nsInode(path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	// A plain file (unmounted leftover) is not a namespace.
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return 0
	}
	return st.Ino
}

// procsInNetNS returns the pids of every process whose network namespace has
// one of the given inodes (as seen in /proc/PID/ns/net).
func procsInNetNS(inodes map[uint64]bool) []int {
	if len(inodes) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st); err != nil {
			continue
		}
		if inodes[st.Ino] {
			out = append(out, pid)
		}
	}
	return out
}

// listNS returns the namespace files under dir whose names start with Prefix.
func listNS(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), Prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}
