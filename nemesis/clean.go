package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/isrlab/isrlab/compose"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Clean removes what faults left in a cluster's namespaces: the nftables
// tables of run in the switch and node namespaces and the root qdiscs faults added
// there and in each node namespace (nodeNS), stops the run's helper
// processes (packet delayers, clock strobers) and removes the run's
// cgroups (their processes moved out). It does not touch node processes: taking the cluster down kills
// paused ones. Missing namespaces are
// skipped, so it is safe on a half-removed run. compose's clean calls it
// before removing the namespaces, and `isrlab fault heal --all` after
// healing the stored faults.
func Clean(ctx context.Context, switchNS, run string, nodeNS []string) error {
	var errs []error
	if switchNS != "" && sameNetNS(switchNS, "/proc/thread-self/ns/net") {
		// Every process living in a switch namespace is a delayer, and
		// every qdisc there a fault's: never so in this process's own.
		// thread-self: /proc/self/ns/net is the main thread's, which may
		// be visiting another namespace for a goroutine locked to it.
		return fmt.Errorf("clean: %s is this host's own network namespace, not a switch namespace of the lab's", switchNS)
	}
	if switchNS != "" {
		if err := cleanTables(switchNS, run); err != nil {
			errs = append(errs, err)
		}
	}
	for _, pid := range delayers(switchNS) {
		if err := stopProcess(ctx, pid, compose.Identify(pid)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := stopNodeDelayers(ctx, nodeNS); err != nil {
		errs = append(errs, err)
	}
	for _, p := range append([]string{switchNS}, nodeNS...) {
		if p == "" {
			continue
		}
		if err := cleanQdiscs(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range nodeNS {
		if p == "" {
			continue // a node on another machine: CleanRemote's
		}
		if err := cleanTables(p, run); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := CleanCgroups(ctx, func(r string) bool { return r != run }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func cleanTables(path, run string) error {
	c, done, err := nftIn(path)
	if err != nil {
		return ignoreMissing(err)
	}
	defer done()
	for _, fam := range families {
		ts, err := c.ListTablesOfFamily(fam)
		if err != nil {
			return fmt.Errorf("list nftables tables in %s: %w", path, err)
		}
		for _, t := range ts {
			if strings.HasPrefix(t.Name, TablePrefix+run+"-") {
				if err := delTableOf(c, fam, t.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sameNetNS reports whether the namespaces at paths a and b are one (both
// readable, same inode).
func sameNetNS(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Ino == sb.Ino && sa.Dev == sb.Dev
}

func cleanQdiscs(path string) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return ignoreMissing(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links in %s: %w", path, err)
	}
	var errs []error
	for _, l := range links {
		errs = append(errs, delQdisc(h, l))
	}
	return errors.Join(errs...)
}

func ignoreMissing(err error) error {
	if errors.Is(err, errNotExist) {
		return nil
	}
	return err
}

var errNotExist = os.ErrNotExist

// CleanFaults heals every fault the store of c's run (in stateDir) holds,
// then removes whatever else faults of the run left on remote hosts. It is
// the ssh backend's first step down (compose/backends.FaultCleaner), passed
// in by lab and cmd so that compose does not import this package.
func CleanFaults(ctx context.Context, stateDir string, c *compose.Cluster) error {
	n := &Nemesis{Env: &Env{Cluster: c}, Store: &Store{Path: FaultsFile(stateDir, c.Name)}}
	err := n.HealAll(ctx)
	return errors.Join(err, CleanRemote(ctx, c))
}
