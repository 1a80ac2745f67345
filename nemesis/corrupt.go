package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

func init() { register(func() Fault { return &Corrupt{} }) }

// Corrupt damages a chosen class of a stopped broker's files, as Jepsen's
// file corruption does between a kill and a restart: Inject stops the
// brokers (SIGKILL, or a graceful stop with stop: graceful) and damages
// their files; Heal starts them again, and what their recovery makes of
// the damage is the experiment. What Kafka does with each class is its
// reference (docs/faults.md). Brokers whose data directory is on this
// machine only.
type Corrupt struct {
	procNodes
	// File is the class of file: segment, index, timeindex, txn-index,
	// producer-snapshot, leader-epoch-checkpoint (per partition), or
	// hw-checkpoint, recovery-checkpoint, log-start-checkpoint (per log
	// directory).
	File string `json:"file"`
	// Mode is bitflip (one bit), truncate (the file cut short) or zero
	// (Length bytes zeroed, default 4KiB).
	Mode   string `json:"mode"`
	Length Bytes  `json:"length,omitempty"`
	// Where picks the file and its bytes: tail (default: the newest file
	// of its class, in its last quarter) or middle (the middle file of
	// its class, in its middle half).
	Where string `json:"where,omitempty"`
	// Partition limits the per-partition classes to one partition,
	// "topic/P"; every partition by default.
	Partition string `json:"partition,omitempty"`
	// Stop is kill (default) or graceful.
	Stop string `json:"stop,omitempty"`
}

type corruptRun struct {
	Corrupt `json:"-"`
	nodesRun
	// Damage is what Inject did, file by file.
	Damage []FileDamage `json:"damage,omitempty"`
}

// NewRun implements Fault.
func (f *Corrupt) NewRun() Run { return &corruptRun{Corrupt: *f} }

// FileDamage is one damaged file.
type FileDamage struct {
	Node string `json:"node"`
	Path string `json:"path"` // relative to the broker's data directory
	Size int64  `json:"size"` // before the damage
	// Offset and Length are the bytes damaged (for a truncation, the new
	// size and what was cut); Bit is the bit flipped in the byte at Offset.
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Bit    int    `json:"bit,omitempty"`
	Mode   string `json:"mode"`
}

// Kind implements Fault.
func (*Corrupt) Kind() string { return "corrupt" }

// fileClass is how a class of file is found.
type fileClass struct {
	perPartition bool
	match        func(name string) bool
}

func suffixClass(suffix string) fileClass {
	return fileClass{perPartition: true, match: func(n string) bool { return strings.HasSuffix(n, suffix) }}
}

func nameClass(name string, perPartition bool) fileClass {
	return fileClass{perPartition: perPartition, match: func(n string) bool { return n == name }}
}

// fileClasses are the classes of broker file Corrupt damages, with
// Kafka's file names.
var fileClasses = map[string]fileClass{
	"segment":                 suffixClass(".log"),
	"index":                   suffixClass(".index"),
	"timeindex":               suffixClass(".timeindex"),
	"txn-index":               suffixClass(".txnindex"),
	"producer-snapshot":       suffixClass(".snapshot"),
	"leader-epoch-checkpoint": nameClass("leader-epoch-checkpoint", true),
	"hw-checkpoint":           nameClass("replication-offset-checkpoint", false),
	"recovery-checkpoint":     nameClass("recovery-point-offset-checkpoint", false),
	"log-start-checkpoint":    nameClass("log-start-offset-checkpoint", false),
}

// FileClasses lists the file classes Corrupt takes, sorted.
func FileClasses() []string { return slices.Sorted(maps.Keys(fileClasses)) }

const defaultZeroLength = 4 << 10

// Validate implements validator.
func (c *Corrupt) Validate() error {
	if _, ok := fileClasses[c.File]; !ok {
		return fmt.Errorf("%w: corrupt file %q: want one of %v", ErrBadFault, c.File, FileClasses())
	}
	switch c.Mode {
	case "bitflip", "truncate":
		if c.Length != 0 {
			return fmt.Errorf("%w: corrupt length is how many bytes mode zero zeroes", ErrBadFault)
		}
	case "zero":
	default:
		return fmt.Errorf("%w: corrupt mode %q: want bitflip, truncate or zero", ErrBadFault, c.Mode)
	}
	switch c.Where {
	case "", "tail", "middle":
	default:
		return fmt.Errorf("%w: corrupt where %q: want tail or middle", ErrBadFault, c.Where)
	}
	switch c.Stop {
	case "", "kill", "graceful":
	default:
		return fmt.Errorf("%w: corrupt stop %q: want kill or graceful", ErrBadFault, c.Stop)
	}
	if c.Partition != "" {
		if _, _, err := ParseTopicPartition(c.Partition); err != nil {
			return fmt.Errorf("corrupt partition: %w", err)
		}
		if !fileClasses[c.File].perPartition {
			return fmt.Errorf("%w: corrupt partition: a %s is one per log directory, not per partition", ErrBadFault, c.File)
		}
	}
	return nil
}

// Resolve implements Run: the targets are brokers whose data directory
// is on this machine and holds a file of the class.
func (c *corruptRun) Resolve(ctx context.Context, env *Env) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.resolveProcs(ctx, env, c.Kind(), c.procNodes); err != nil {
		return err
	}
	for _, name := range c.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		if n.Remote != nil || n.DataDir == "" {
			return fmt.Errorf("%w: corrupt: %s's data is not on this machine", ErrUnsupported, name)
		}
		files, err := c.files(n.DataDir)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("%w: corrupt: %s has no %s file with data under %s", ErrNoTarget, name, c.File, n.DataDir)
		}
	}
	return nil
}

// Inject implements Run: stop, then damage.
func (c *corruptRun) Inject(ctx context.Context, env *Env) error {
	err := c.each(env, func(n *compose.Node) error {
		if c.Stop == "graceful" {
			return n.Stop(ctx)
		}
		return n.Kill()
	})
	if err != nil {
		return err
	}
	c.Damage = nil
	rng := env.rng()
	for _, name := range c.Resolved {
		n, err := env.node(name)
		if err != nil {
			return err
		}
		ds, err := c.damage(n.DataDir, rng)
		for i := range ds {
			ds[i].Node = name
		}
		c.Damage = append(c.Damage, ds...)
		if err != nil {
			return fmt.Errorf("corrupt %s: %w", name, err)
		}
	}
	return nil
}

// Heal implements Run: the brokers start again on their damaged files.
func (c *corruptRun) Heal(ctx context.Context, env *Env) error { return c.startStopped(ctx, env) }

// files lists the non-empty files of the class under dataDir, grouped by
// directory (a partition's, or the log directory's), each group sorted.
func (c *Corrupt) files(dataDir string) ([][]string, error) {
	class := fileClasses[c.File]
	dirs := []string{dataDir}
	if class.perPartition {
		ents, err := os.ReadDir(dataDir)
		if err != nil {
			return nil, fmt.Errorf("corrupt: %w", err)
		}
		dirs = nil
		want := ""
		if c.Partition != "" {
			topic, p, _ := ParseTopicPartition(c.Partition)
			want = fmt.Sprintf("%s-%d", topic, p)
		}
		for _, e := range ents {
			// A deleted partition's directory waits as <topic>-<p>.<id>-delete.
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || strings.HasSuffix(e.Name(), "-delete") {
				continue
			}
			if want == "" || e.Name() == want {
				dirs = append(dirs, filepath.Join(dataDir, e.Name()))
			}
		}
	}
	var out [][]string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("corrupt: %w", err)
		}
		var group []string
		for _, e := range ents {
			if e.Type().IsRegular() && class.match(e.Name()) {
				path := filepath.Join(d, e.Name())
				if end, err := dataEnd(path); err == nil && end > 0 {
					group = append(group, path)
				}
			}
		}
		if len(group) > 0 {
			slices.Sort(group)
			out = append(out, group)
		}
	}
	return out, nil
}

// damage damages one file of the class in each directory that has one.
func (c *Corrupt) damage(dataDir string, rng *rand.Rand) ([]FileDamage, error) {
	groups, err := c.files(dataDir)
	if err != nil {
		return nil, err
	}
	var out []FileDamage
	var errs []error
	for _, g := range groups {
		path := g[len(g)-1]
		if c.Where == "middle" {
			path = g[(len(g)-1)/2]
		}
		d, err := c.damageFile(path, rng)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.Path, _ = filepath.Rel(dataDir, path)
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// damageFile applies the mode to the file at path, in the region Where
// names.
func (c *Corrupt) damageFile(path string, rng *rand.Rand) (FileDamage, error) {
	info, err := os.Stat(path)
	if err != nil {
		return FileDamage{}, err
	}
	size := info.Size()
	// The region, within the file's data (Kafka preallocates the active
	// segment's indexes, zeros after their entries): its last quarter, or
	// its middle half (a file of a few bytes: all of it).
	end, err := dataEnd(path)
	if err != nil {
		return FileDamage{}, err
	}
	lo, hi := end-end/4, end
	if c.Where == "middle" {
		lo, hi = end/4, end-end/4
	}
	if hi <= lo {
		lo, hi = 0, end
	}
	at := lo + rng.Int63n(hi-lo)
	d := FileDamage{Size: size, Offset: at, Mode: c.Mode}
	switch c.Mode {
	case "truncate":
		d.Length = size - at
		return d, os.Truncate(path, at)
	case "zero":
		n := int64(c.Length)
		if n == 0 {
			n = defaultZeroLength
		}
		d.Length = min(n, size-at)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return d, err
		}
		_, err = f.WriteAt(make([]byte, d.Length), at)
		return d, errors.Join(err, f.Sync(), f.Close())
	}
	d.Length, d.Bit = 1, rng.Intn(8)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return d, err
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		f.Close()
		return d, err
	}
	b[0] ^= 1 << d.Bit
	_, err = f.WriteAt(b, at)
	return d, errors.Join(err, f.Sync(), f.Close())
}

// dataEnd returns the offset after the last non-zero byte of the file.
func dataEnd(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 64<<10)
	for end := info.Size(); end > 0; {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				return end - n + i + 1, nil
			}
		}
		end -= n
	}
	return 0, nil
}
