package nemesis

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/isrlab/isrlab/internal/mountinfo"
	"github.com/isrlab/isrlab/units"
)

func init() {
	register(func() Fault { return &CPUThrottle{} })
	register(func() Fault { return &MemoryPressure{} })
}

// Limping nodes: a node's processes move into a cgroup of the fault's own
// that limits their CPU time or memory, so that the node is alive and slow
// rather than dead (a gray failure). cgroup v2 is used where it offers the
// controller, else a cgroup v1 hierarchy that mounts it (hybrid machines
// bind cpu and memory to v1); which one is recorded in the fault. The
// cgroup is named isrlab-<run>-<fault id>-<node>, so that runs sharing a
// host never collide and Clean finds what a dead run left. Processes the
// node starts after the injection (a restart) are not limited.

// Cgroup is one cgroup a fault made, recorded in the fault when it fires.
type Cgroup struct {
	Node    string `json:"node"`
	Version int    `json:"version"` // 1 or 2
	Path    string `json:"path"`    // the fault's cgroup directory
	// From is the cgroup directory the node's processes came from: Heal
	// moves them back there.
	From string `json:"from"`
	PIDs []int  `json:"pids"`
}

// CPUThrottle limits the CPU time of the nodes' processes to CPU percent
// of one core: a CFS quota of CPU×Period per Period (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us). Heal moves the processes back and removes the cgroup.
type CPUThrottle struct {
	procNodes
	CPU Percent `json:"cpu"`
	// Period is the CFS period (default 100ms, Linux's): the quota is
	// spent in bursts within each period.
	Period units.Duration `json:"period,omitempty"`
}

type cpuThrottleRun struct {
	CPUThrottle `json:"-"`
	nodesRun
	Cgroups []Cgroup `json:"cgroups,omitempty"`
}

// NewRun implements Fault.
func (f *CPUThrottle) NewRun() Run { return &cpuThrottleRun{CPUThrottle: *f} }

// Kind implements Fault.
func (*CPUThrottle) Kind() string { return "cpu-throttle" }

const defaultCFSPeriod = 100 * time.Millisecond

func (f *CPUThrottle) period() time.Duration {
	if f.Period == 0 {
		return defaultCFSPeriod
	}
	return time.Duration(f.Period)
}

// quota is the CPU time the processes get per period.
func (f *CPUThrottle) quota() time.Duration {
	return time.Duration(float64(f.period()) * float64(f.CPU) / 100)
}

// Validate implements validator.
func (f *CPUThrottle) Validate() error {
	if err := f.CPU.check("cpu", false); err != nil {
		return err
	}
	if p := f.period(); p < time.Millisecond || p > time.Second {
		return fmt.Errorf("%w: cpu-throttle period %v: want 1ms to 1s (the kernel's CFS period range)", ErrBadFault, p)
	}
	if f.quota() < time.Millisecond {
		return fmt.Errorf("%w: cpu-throttle cpu %v%% of a %v period is %v of CPU time: the kernel's least quota is 1ms", ErrBadFault, float64(f.CPU), f.period(), f.quota())
	}
	return nil
}

// Resolve implements Run.
func (f *cpuThrottleRun) Resolve(ctx context.Context, env *Env) error {
	if err := f.Validate(); err != nil {
		return err
	}
	return f.resolveLocal(ctx, env, f.Kind(), f.procNodes)
}

// Inject implements Run.
func (f *cpuThrottleRun) Inject(ctx context.Context, env *Env) error {
	period, quota := f.period().Microseconds(), f.quota().Microseconds()
	return limitNodes(env, f.Kind(), "cpu", f.Resolved, &f.Cgroups, func(dir string, v2 bool) error {
		if v2 {
			return writeCgroup(dir, "cpu.max", fmt.Sprintf("%d %d", quota, period))
		}
		return errors.Join(writeCgroup(dir, "cpu.cfs_period_us", strconv.FormatInt(period, 10)),
			writeCgroup(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)))
	})
}

// Heal implements Run.
func (f *cpuThrottleRun) Heal(ctx context.Context, env *Env) error {
	return healCgroups(ctx, f.Cgroups)
}

// MemoryPressure holds the memory the nodes' processes use from now on to
// Limit: cgroup v2 memory.high (above it the kernel reclaims their page
// cache and throttles their allocations; Max, if set, is memory.max, above
// which the OOM killer ends them), or on cgroup v1 memory.limit_in_bytes
// (Limit, or Max when set with Limit as the soft limit): v1 has no
// throttling limit, so there a process whose anonymous memory alone
// exceeds it is OOM-killed. Memory charged before the injection stays
// charged where it was (charges do not move with a process), so the
// pressure builds as the node allocates and reads. Heal moves the
// processes back and removes the cgroup.
type MemoryPressure struct {
	procNodes
	Limit Bytes `json:"limit"`
	Max   Bytes `json:"max,omitempty"`
}

type memoryPressureRun struct {
	MemoryPressure `json:"-"`
	nodesRun
	Cgroups []Cgroup `json:"cgroups,omitempty"`
}

// NewRun implements Fault.
func (f *MemoryPressure) NewRun() Run { return &memoryPressureRun{MemoryPressure: *f} }

// Kind implements Fault.
func (*MemoryPressure) Kind() string { return "memory-pressure" }

// minMemoryLimit keeps a limit from ending a node at once: below it no
// Go process lives.
const minMemoryLimit = 4 << 20

// Validate implements validator.
func (f *MemoryPressure) Validate() error {
	switch {
	case f.Limit < minMemoryLimit:
		return fmt.Errorf("%w: memory-pressure limit %v: want at least %v, like 64MiB", ErrBadFault, f.Limit, Bytes(minMemoryLimit))
	case f.Max != 0 && f.Max < f.Limit:
		return fmt.Errorf("%w: memory-pressure max %v is below its limit %v", ErrBadFault, f.Max, f.Limit)
	}
	return nil
}

// Resolve implements Run.
func (f *memoryPressureRun) Resolve(ctx context.Context, env *Env) error {
	if err := f.Validate(); err != nil {
		return err
	}
	return f.resolveLocal(ctx, env, f.Kind(), f.procNodes)
}

// Inject implements Run.
func (f *memoryPressureRun) Inject(ctx context.Context, env *Env) error {
	return limitNodes(env, f.Kind(), "memory", f.Resolved, &f.Cgroups, func(dir string, v2 bool) error {
		if v2 {
			err := writeCgroup(dir, "memory.high", strconv.FormatUint(uint64(f.Limit), 10))
			if f.Max != 0 {
				err = errors.Join(err, writeCgroup(dir, "memory.max", strconv.FormatUint(uint64(f.Max), 10)))
			}
			return err
		}
		if f.Max != 0 {
			return errors.Join(writeCgroup(dir, "memory.limit_in_bytes", strconv.FormatUint(uint64(f.Max), 10)),
				writeCgroup(dir, "memory.soft_limit_in_bytes", strconv.FormatUint(uint64(f.Limit), 10)))
		}
		return writeCgroup(dir, "memory.limit_in_bytes", strconv.FormatUint(uint64(f.Limit), 10))
	})
}

// Heal implements Run.
func (f *memoryPressureRun) Heal(ctx context.Context, env *Env) error {
	return healCgroups(ctx, f.Cgroups)
}

// resolveLocal resolves the targets into nodes whose processes run on
// this machine.
func (r *nodesRun) resolveLocal(ctx context.Context, env *Env, kind string, p procNodes) error {
	if err := r.resolveProcs(ctx, env, kind, p); err != nil {
		return err
	}
	for _, name := range r.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if n.Remote != nil {
			return fmt.Errorf("%w: %s: %s runs on another host (ssh backend): its cgroups are not this machine's", ErrUnsupported, kind, name)
		}
		if !n.Proc.Running() || n.PID() <= 0 {
			return fmt.Errorf("%w: %s: %s is not running", ErrBadFault, kind, name)
		}
	}
	return nil
}

// limitNodes makes a cgroup of controller for each node, sets it up with
// set, and moves the node's processes (its process and its descendants)
// into it, recording each cgroup in *out before it touches it, so that a
// heal after a failure half way removes it.
func limitNodes(env *Env, kind, controller string, nodes []string, out *[]Cgroup, set func(dir string, v2 bool) error) error {
	h, err := findHierarchy(controller)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, kind, err)
	}
	*out = nil
	for _, name := range nodes {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		pid := n.PID()
		from, err := h.cgroupOf(pid)
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		parent := h.parentFor(from, controller)
		cg := Cgroup{Node: name, Version: h.version(), From: from,
			Path: filepath.Join(parent, cgroupName(env.runID(), env.id, name)), PIDs: processTree(pid)}
		*out = append(*out, cg)
		if err := os.Mkdir(cg.Path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
				return fmt.Errorf("%w: %s: create cgroup %s: %v (root, or a cgroup delegated to this user, is needed)", ErrUnsupported, kind, cg.Path, err)
			}
			return fmt.Errorf("%s: create cgroup %s: %w", kind, cg.Path, err)
		}
		if h.v2 && parent == h.mount {
			// The root hands the controller to its children (harmless if it does).
			if err := writeCgroup(parent, "cgroup.subtree_control", "+"+controller); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrUnsupported, kind, err)
			}
		}
		if err := set(cg.Path, h.v2); err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		for _, p := range cg.PIDs {
			if err := writeCgroup(cg.Path, "cgroup.procs", strconv.Itoa(p)); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("%s %s: move process %d: %w", kind, name, p, err)
			}
		}
	}
	return nil
}

// healCgroups moves every process in each cgroup back where the node's
// processes came from and removes the cgroup. A cgroup already gone is
// healed.
func healCgroups(ctx context.Context, cgs []Cgroup) error {
	var errs []error
	for _, cg := range cgs {
		if cg.Path == "" || !cgroupNameRE.MatchString(filepath.Base(cg.Path)) {
			continue // not one of ours: never touch it
		}
		errs = append(errs, removeCgroup(ctx, cg.Path, cg.From))
	}
	return errors.Join(errs...)
}

// removeCgroup moves the processes in dir to the cgroup to (or, if to
// cannot take them, to the hierarchy's root) and removes dir.
func removeCgroup(ctx context.Context, dir, to string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, p := range cgroupProcs(dir) {
			err := writeCgroup(to, "cgroup.procs", strconv.Itoa(p))
			if err != nil && !errors.Is(err, syscall.ESRCH) {
				// A v2 cgroup with controllers for its children holds no
				// process; the root takes any.
				err = writeCgroup(hierarchyRoot(dir), "cgroup.procs", strconv.Itoa(p))
			}
			if err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("move process %d out of %s: %w", p, dir, err)
			}
		}
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		// EBUSY: a process that is exiting still counts for a moment.
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// CleanCgroups removes the cgroups faults made for runs that are not
// alive (runIDAlive decides; when in doubt it should say alive), moving
// any process still in one to its parent cgroup (the hierarchy's root on
// cgroup v2, whose inner cgroups hold no process). `isrlab clean` calls it
// after the dead runs' processes are gone; `fault heal --all` for the
// cgroups of its run that no stored fault knew. It returns the cgroups
// removed.
func CleanCgroups(ctx context.Context, runIDAlive func(string) bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		filepath.WalkDir(h.mount, func(path string, d fs.DirEntry, err error) error { //nolint:errcheck // a cgroup that went while walking is no leftover
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(strings.TrimPrefix(path, h.mount), "/") > 12 {
				return fs.SkipDir
			}
			m := cgroupNameRE.FindStringSubmatch(d.Name())
			if m == nil {
				return nil
			}
			if !runIDAlive(m[1]) {
				dirs = append(dirs, path)
			}
			return fs.SkipDir // ours have no children
		})
		for _, dir := range dirs {
			to := filepath.Dir(dir)
			if h.v2 {
				to = h.mount
			}
			if err := removeCgroup(ctx, dir, to); err != nil {
				// Another user's run (seen from a rootless clean) is theirs
				// to clean.
				if !errors.Is(err, fs.ErrPermission) {
					errs = append(errs, err)
				}
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// cgroupName names the cgroup of fault id in run for node.
func cgroupName(run, id, node string) string { return TablePrefix + run + "-" + id + "-" + node }

// cgroupNameRE matches cgroupName's names: the run id, the fault id, the node.
var cgroupNameRE = regexp.MustCompile(`^` + TablePrefix + `([a-z0-9-]+)-(f[0-9]+)-([A-Za-z0-9_.]+)$`)

// hierarchy is a mounted cgroup hierarchy.
type hierarchy struct {
	mount string // where it is mounted
	root  string // the cgroup path its mount shows (mountinfo's root)
	v2    bool
	// controllers of a v1 hierarchy (its mount options), or what a v2
	// root offers (cgroup.controllers).
	controllers []string
}

func (h hierarchy) version() int {
	if h.v2 {
		return 2
	}
	return 1
}

// cgroupHierarchies lists the cgroup hierarchies mounted here.
func cgroupHierarchies() []hierarchy {
	ms, err := mountinfo.Read()
	if err != nil {
		return nil
	}
	hs := cgroupMounts(ms)
	for i, h := range hs {
		if h.v2 {
			b, _ := os.ReadFile(filepath.Join(h.mount, "cgroup.controllers"))
			hs[i].controllers = strings.Fields(string(b))
		}
	}
	return hs
}

// cgroupMounts picks the cgroup and cgroup2 mounts, one per mount point.
func cgroupMounts(ms []mountinfo.Mount) []hierarchy {
	var out []hierarchy
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.MountPoint] {
			continue
		}
		h := hierarchy{mount: m.MountPoint, root: m.Root}
		switch m.FSType {
		case "cgroup2":
			h.v2 = true
		case "cgroup":
			for _, o := range strings.Split(m.SuperOpts, ",") {
				if o != "rw" && o != "ro" && !strings.Contains(o, "=") {
					h.controllers = append(h.controllers, o)
				}
			}
		default:
			continue
		}
		seen[m.MountPoint] = true
		out = append(out, h)
	}
	return out
}

// findHierarchy returns the hierarchy that offers controller: cgroup v2
// where its root offers it, else a v1 hierarchy mounting it. Its error
// says what the machine has.
func findHierarchy(controller string) (hierarchy, error) {
	hs := cgroupHierarchies()
	for _, h := range hs {
		if h.v2 && slices.Contains(h.controllers, controller) {
			return h, nil
		}
	}
	for _, h := range hs {
		if !h.v2 && slices.Contains(h.controllers, controller) {
			return h, nil
		}
	}
	var have []string
	for _, h := range hs {
		v := "v1"
		if h.v2 {
			v = "v2"
		}
		have = append(have, fmt.Sprintf("cgroup %s at %s offers %v", v, h.mount, h.controllers))
	}
	if len(have) == 0 {
		have = []string{"no cgroup filesystem is mounted"}
	}
	return hierarchy{}, fmt.Errorf("no cgroup hierarchy offers the %s controller here (%s)", controller, strings.Join(have, "; "))
}

// cgroupOf returns the directory of pid's cgroup in h.
func (h hierarchy) cgroupOf(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("read the cgroup of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if h.v2 != (parts[0] == "0" && parts[1] == "") {
			continue
		}
		if !h.v2 && !slices.ContainsFunc(strings.Split(parts[1], ","), func(c string) bool { return slices.Contains(h.controllers, c) }) {
			continue
		}
		rel := parts[2]
		if h.root != "/" {
			var ok bool
			if rel, ok = strings.CutPrefix(rel, h.root); !ok {
				return "", fmt.Errorf("process %d's cgroup %s is outside the mount of %s (root %s)", pid, parts[2], h.mount, h.root)
			}
		}
		return filepath.Join(h.mount, rel), nil
	}
	return "", fmt.Errorf("process %d is in no cgroup of %s", pid, h.mount)
}

// parentFor returns where the fault's cgroup for a process in cgroup from
// goes. On v1, under from: processes may live in inner cgroups there. On
// v2, inner cgroups hold no processes, so it goes under the nearest
// ancestor of from that already hands controller to its children, or
// under the root.
func (h hierarchy) parentFor(from, controller string) string {
	if !h.v2 {
		return from
	}
	for dir := filepath.Dir(from); dir != h.mount && strings.HasPrefix(dir, h.mount+"/"); dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err == nil && slices.Contains(strings.Fields(string(b)), controller) {
			return dir
		}
	}
	return h.mount
}

// hierarchyRoot returns the mount point of the hierarchy dir is in.
func hierarchyRoot(dir string) string {
	best := "/"
	for _, h := range cgroupHierarchies() {
		if (dir == h.mount || strings.HasPrefix(dir, h.mount+"/")) && len(h.mount) > len(best) {
			best = h.mount
		}
	}
	return best
}

func writeCgroup(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

// cgroupProcs lists the processes in the cgroup at dir.
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// processTree returns pid and its descendants.
func processTree(pid int) []int {
	children := map[int][]int{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		self, err2 := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err1 == nil && err2 == nil {
			children[ppid] = append(children[ppid], self)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}
