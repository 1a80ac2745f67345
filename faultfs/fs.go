package faultfs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FSType is the filesystem type faultfs mounts show in /proc/self/mountinfo;
// the source field is FSNamePrefix followed by the run id.
const (
	FSType       = "fuse.faultfs"
	FSNamePrefix = "faultfs-"
	trashPrefix  = ".faultfs-trash-"
)

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidRunID reports whether id can name a mount: letters, digits, dot,
// underscore and dash, at most 64 characters.
func ValidRunID(id string) bool { return runIDPattern.MatchString(id) }

// PassthroughMode says which opens faultfs lets the kernel serve by FUSE
// passthrough: reads and writes go from the kernel straight to the backing
// file at near plain-disk speed, and faultfs sees only the opens, fsyncs,
// truncations and closes. Passthrough needs root and Linux 6.9+; elsewhere
// such opens quietly go through faultfs.
//
// The kernel requires every open of an inode that is open by passthrough to
// be a passthrough open too, so the choice is made per inode: the first open
// decides (by the mode, and only while no fault is active), and later opens
// follow it until all are closed. Faults injected later therefore delay or
// fail the opens, fsyncs and metadata of such files but not their reads and
// writes.
type PassthroughMode string

// Passthrough modes.
const (
	// PassthroughOff sends every read and write through faultfs.
	PassthroughOff PassthroughMode = "off"
	// PassthroughAppend uses passthrough for read-only and O_APPEND opens,
	// whose effect a crash undoes exactly from the synced size.
	PassthroughAppend PassthroughMode = "append"
	// PassthroughAll also uses it for other writable opens. A crash still
	// drops everything past the synced size and undoes truncations, but not
	// overwrites of synced bytes made through such opens (CrashReport.Inexact
	// counts the files concerned): a legal but not worst-case power loss.
	PassthroughAll PassthroughMode = "all"
)

// ParsePassthroughMode parses off, append or all.
func ParsePassthroughMode(s string) (PassthroughMode, error) {
	switch m := PassthroughMode(s); m {
	case PassthroughOff, PassthroughAppend, PassthroughAll:
		return m, nil
	}
	return "", fmt.Errorf("passthrough mode %q: want off, append or all", s)
}

// Options configure a mount.
type Options struct {
	// Backing is the directory whose content the mount shows. One faultfs
	// at a time per backing directory: mounting removes leftover trash.
	Backing string
	// Mount is the (existing, empty) mount point.
	Mount string
	// RunID tags the mount (see FSNamePrefix) so that CleanStale finds it.
	RunID string
	// Seed seeds jitter and EIO draws.
	Seed int64
	// Passthrough chooses which opens the kernel may serve by FUSE
	// passthrough (see PassthroughMode); the zero value is PassthroughOff.
	Passthrough PassthroughMode
	// Logger receives mount and crash events; nil discards them.
	Logger *slog.Logger
}

// FS is a mounted faultfs.
type FS struct {
	opts      Options
	log       *slog.Logger
	server    *fuse.Server
	eng       *engine
	trk       *tracker
	trashName string

	// gate lets mutating operations run together (read lock) and a crash
	// run alone (write lock). Fault delays happen before taking it.
	gate sync.RWMutex

	syncs, ptOpens, hookedOpens, crashes atomic.Uint64
	ptOpenNow                            atomic.Int64

	mu        sync.Mutex
	lastCrash *CrashReport
	notes     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Mount mounts a faultfs at opts.Mount that mirrors opts.Backing. It needs
// root (or CAP_SYS_ADMIN) and /dev/fuse. Close unmounts it. The process
// that mounts must not mmap files of the mount: a page fault it serves
// itself can deadlock with the Go garbage collector (run the daemon as its
// own process, or touch mappings from another one).
func Mount(opts Options) (*FS, error) {
	if !ValidRunID(opts.RunID) {
		return nil, fmt.Errorf("run id %q: want 1-64 of [A-Za-z0-9._-]", opts.RunID)
	}
	var err error
	if opts.Backing, err = filepath.Abs(opts.Backing); err != nil {
		return nil, fmt.Errorf("backing dir: %w", err)
	}
	if opts.Mount, err = filepath.Abs(opts.Mount); err != nil {
		return nil, fmt.Errorf("mount point: %w", err)
	}
	if within(opts.Mount, opts.Backing) || within(opts.Backing, opts.Mount) {
		// The daemon would reach its own mount and deadlock.
		return nil, fmt.Errorf("mount point %s and backing dir %s must not contain each other", opts.Mount, opts.Backing)
	}
	if opts.Passthrough == "" {
		opts.Passthrough = PassthroughOff
	}
	if _, err := ParsePassthroughMode(string(opts.Passthrough)); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(opts.Backing, &st); err != nil {
		return nil, fmt.Errorf("backing dir %s: %w", opts.Backing, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("backing dir %s: not a directory", opts.Backing)
	}
	fi, err := os.Stat(opts.Mount)
	if errors.Is(err, syscall.ENOTCONN) {
		// A faultfs whose daemon died is still mounted there: replace it.
		if derr := detachStale(opts.Mount); derr != nil {
			return nil, derr
		}
		fi, err = os.Stat(opts.Mount)
	}
	if err != nil {
		return nil, fmt.Errorf("mount point %s: %w", opts.Mount, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("mount point %s: not a directory", opts.Mount)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("run", opts.RunID)

	// Trash left by a daemon that died holds files already unlinked.
	if ents, err := os.ReadDir(opts.Backing); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), trashPrefix) {
				os.RemoveAll(filepath.Join(opts.Backing, e.Name()))
			}
		}
	}
	trashName := trashPrefix + opts.RunID
	trash := filepath.Join(opts.Backing, trashName)
	if err := os.Mkdir(trash, 0o700); err != nil {
		return nil, fmt.Errorf("create trash %s: %w", trash, err)
	}
	rootFd, err := unix.Open(opts.Backing, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.RemoveAll(trash)
		return nil, fmt.Errorf("open backing dir %s: %w", opts.Backing, err)
	}

	f := &FS{
		opts:      opts,
		log:       log,
		eng:       newEngine(opts.Seed),
		trk:       newTracker(trash, rootFd),
		trashName: trashName,
	}
	lr := &fs.LoopbackRoot{Path: opts.Backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: fs.LoopbackNode{RootData: lr}, ffs: f}
	lr.RootNode = root

	sec := time.Second
	zero := time.Duration(0)
	server, err := fs.Mount(opts.Mount, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            FSNamePrefix + opts.RunID,
			Name:              "faultfs",
			DisableXAttrs:     true,
			AllowOther:        true,
			Options:           []string{"default_permissions"},
			// Reads of MaxWrite plus a header must fit the default
			// maximum pipe size (1 MiB) that go-fuse splices through.
			MaxWrite: 512 << 10,
			// Direct-I/O (hooked) files may still be mmapped.
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		},
		EntryTimeout:    &sec,
		AttrTimeout:     &sec,
		NegativeTimeout: &zero,
	})
	if err != nil {
		unix.Close(rootFd)
		os.RemoveAll(trash)
		return nil, fmt.Errorf("mount faultfs at %s: %w", opts.Mount, err)
	}
	f.server = server
	log.Info("faultfs mounted", "mount", opts.Mount, "backing", opts.Backing, "passthrough", opts.Passthrough, "seed", opts.Seed)
	return f, nil
}

// within reports whether path p is dir or lies under it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Inject adds or replaces (same kind, op and prefix) an active fault.
func (f *FS) Inject(flt Fault) error {
	if err := f.eng.add(flt); err != nil {
		return err
	}
	f.log.Info("faultfs fault injected", "fault", flt.Kind, "op", flt.Op, "prefix", flt.Prefix)
	return nil
}

// Unhang lifts every hang fault and releases the operations it blocked.
func (f *FS) Unhang() {
	f.eng.removeKind(KindHang)
	f.log.Info("faultfs unhang", "fault", KindHang)
}

// Heal removes every fault and releases blocked operations. It is safe to
// call any number of times.
func (f *FS) Heal() {
	f.eng.removeKind("")
	f.log.Info("faultfs healed")
}

// Crash forgets every write not made durable by an fsync, like a power
// loss: files return to their last-fsynced content, and namespace changes
// whose directory was not fsynced since are undone. Stop (kill) the
// writers first, as a power loss would.
func (f *FS) Crash(opts ...CrashOpt) CrashReport {
	var cfg crashConfig
	for _, o := range opts {
		o.apply(&cfg)
	}
	var torn func(synced, n int64) int64
	if cfg.torn {
		torn = f.eng.tornCut
	}
	f.gate.Lock()
	rep, notes := f.trk.crash(torn)
	f.gate.Unlock()
	f.crashes.Add(1)

	// A notification can wait on a directory lock held by a hung
	// operation: send them in the background and wait only briefly.
	done := make(chan struct{})
	f.notes.Add(1)
	go func() {
		defer f.notes.Done()
		defer close(done)
		for _, n := range notes {
			n()
		}
	}()
	t := time.NewTimer(2 * time.Second)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()

	f.mu.Lock()
	f.lastCrash = &rep
	f.mu.Unlock()
	f.log.Info("faultfs crash", "fault", "crash", "torn", cfg.torn, "files", rep.Files, "bytes_lost", rep.BytesLost, "undone", rep.Undone, "errors", len(rep.Errors))
	return rep
}

// CrashOpt configures a crash.
type CrashOpt interface{ apply(*crashConfig) }

type crashConfig struct{ torn bool }

type crashOpt func(*crashConfig)

func (o crashOpt) apply(c *crashConfig) { o(c) }

// Torn makes a crash keep a random part of each file's unsynced appends
// (from none to all, cut at a page boundary, drawn from the seeded
// generator), as when the page cache had written some pages back before
// the power went: the tail of a log is then torn inside a batch. Overwrites
// of synced bytes and namespace changes are still all undone.
func Torn() CrashOpt { return crashOpt(func(c *crashConfig) { c.torn = true }) }

// Status is the state of a mount.
type Status struct {
	RunID   string `json:"run_id"`
	Mount   string `json:"mount"`
	Backing string `json:"backing"`
	// Seed seeds the jitter and EIO draws.
	Seed int64 `json:"seed"`
	// Faults are the active faults; empty when healed.
	Faults   []Fault         `json:"faults"`
	Counters map[Op]Counters `json:"counters"`
	// Passthrough is the passthrough mode; PassthroughOpens and
	// HookedOpens count opens of each kind.
	Passthrough      PassthroughMode `json:"passthrough"`
	PassthroughOpens uint64          `json:"passthrough_opens"`
	// PassthroughOpenNow counts passthrough handles open now: reads and
	// writes through them escape read and write faults.
	PassthroughOpenNow int64  `json:"passthrough_open_now"`
	HookedOpens        uint64 `json:"hooked_opens"`
	Syncs              uint64 `json:"syncs"`
	Crashes            uint64 `json:"crashes"`
	// UnsyncedFiles and PendingOps are what a crash now would undo.
	UnsyncedFiles int `json:"unsynced_files"`
	PendingOps    int `json:"pending_ops"`
	// ForcedDurable counts namespace changes made durable early because
	// too many were pending (4096) or their trash held too much (1 GiB).
	ForcedDurable uint64       `json:"forced_durable"`
	LastCrash     *CrashReport `json:"last_crash,omitempty"`
}

// Status reports active faults and counters.
func (f *FS) Status() Status {
	files, pops, forced := f.trk.pending()
	f.mu.Lock()
	last := f.lastCrash
	f.mu.Unlock()
	return Status{
		RunID: f.opts.RunID, Mount: f.opts.Mount, Backing: f.opts.Backing, Seed: f.opts.Seed,
		Faults: f.eng.list(), Counters: f.eng.counters(),
		Passthrough: f.opts.Passthrough, PassthroughOpens: f.ptOpens.Load(), PassthroughOpenNow: f.ptOpenNow.Load(), HookedOpens: f.hookedOpens.Load(),
		Syncs: f.syncs.Load(), Crashes: f.crashes.Load(),
		UnsyncedFiles: files, PendingOps: pops, ForcedDurable: forced, LastCrash: last,
	}
}

// Close heals, unmounts and makes every pending change durable, as a clean
// unmount would. If files are still open it detaches the mount lazily
// instead. It is idempotent.
func (f *FS) Close() error {
	f.closeOnce.Do(func() {
		f.Heal()
		err := f.server.Unmount()
		if err != nil {
			if derr := syscall.Unmount(f.opts.Mount, syscall.MNT_DETACH); derr != nil && !errors.Is(derr, syscall.EINVAL) {
				f.closeErr = fmt.Errorf("unmount %s: %w (lazy: %v)", f.opts.Mount, err, derr)
			}
		} else {
			f.server.Wait()
		}
		f.notes.Wait()
		f.trk.close()
		unix.Close(f.trk.root)
		os.RemoveAll(f.trk.trash)
		f.log.Info("faultfs unmounted", "mount", f.opts.Mount)
	})
	return f.closeErr
}
