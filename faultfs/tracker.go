package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// The crash model, in short: the backing directory always holds the
// newest content (writes go straight through), and the tracker keeps just
// enough to go back to the last durable state:
//
//   - per inode written since its last fsync: the size at that fsync and the
//     original bytes of every synced range overwritten since (copied on the
//     first overwrite only); appends cost nothing beyond the synced size;
//   - per namespace change (create, mkdir, unlink, rmdir, rename) that is
//     not yet durable: how to undo it. An unlinked or replaced file is moved
//     or linked into a hidden trash directory instead of being deleted.
//
// A change becomes durable when the directories it touched are fsynced
// after it; a new file or directory also becomes durable when it is itself
// fsynced (as on ext4). Crash undoes the pending namespace changes newest
// first and then rolls every file back to its synced size and bytes.

// extent is original content of [off, off+n) saved before its first
// overwrite since the last sync: in memory (up to memBudget per file), or
// in the file's spill file at offset spill.
type extent struct {
	off, n int64
	data   []byte // nil when spilled or zero
	spill  int64
	zero   bool // a hole in the synced content: nothing to save
}

func (e extent) end() int64 { return e.off + e.n }

// memBudget bounds the saved bytes a file keeps in memory; beyond it (for
// example the tail cut by a truncation) they go to its spill file.
const memBudget = 1 << 20

// fileState is the unsynced state of one backing inode.
type fileState struct {
	ino uint64

	mu     sync.Mutex
	fd     int // O_RDWR, no O_APPEND: used to capture and to roll back
	inode  *fs.Inode
	synced int64
	undo   []extent // sorted, disjoint, inside [0, synced)
	dirty  bool
	// fh names the inode while no handle is open and fd is -1 (parked).
	fh *unix.FileHandle
	// spill is an unnamed file (O_TMPFILE in spillDir) holding large
	// extents, -1 until needed.
	spill     int
	spillDir  string
	spillSize int64
	memBytes  int64
	// open counts writable handles; passthrough counts those whose writes
	// the kernel sends straight to the backing file (we never see them).
	open        int
	passthrough int
	// overwriters counts passthrough handles that may overwrite synced
	// bytes unseen; inexact stays set until a sync with none open.
	overwriters int
	inexact     bool
}

// capture saves the bytes of [off, off+n) ∩ [0, synced) that are not saved
// yet. Must hold s.mu.
func (s *fileState) capture(off, n int64) error {
	end := min(off+n, s.synced)
	if off >= end {
		return nil
	}
	var add []extent
	pos := off
	for _, e := range s.undo {
		if e.end() <= pos {
			continue
		}
		if e.off >= end {
			break
		}
		if e.off > pos {
			add = append(add, extent{off: pos, n: e.off - pos})
		}
		pos = max(pos, e.end())
		if pos >= end {
			break
		}
	}
	if pos < end {
		add = append(add, extent{off: pos, n: end - pos})
	}
	if len(add) == 0 {
		return nil
	}
	// Holes (a preallocated index, say) need no copy.
	var split []extent
	for _, e := range add {
		split = append(split, splitHoles(s.fd, e.off, e.end())...)
	}
	add = split
	// A short read means the file is shorter than its synced size; the
	// missing tail was saved when it was truncated, so the zeros saved
	// instead are never restored over real data.
	for i := range add {
		e := &add[i]
		if e.zero {
			continue
		}
		if s.memBytes+e.n <= memBudget {
			s.memBytes += e.n
			e.data = make([]byte, e.n)
			if _, err := readFull(s.fd, e.data, e.off); err != nil {
				return fmt.Errorf("save original bytes at %d: %w", e.off, err)
			}
			continue
		}
		if s.spill < 0 {
			fd, err := unix.Open(s.spillDir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return fmt.Errorf("create spill file in %s: %w", s.spillDir, err)
			}
			s.spill = fd
		}
		e.spill = s.spillSize
		if err := copyRange(s.fd, e.off, s.spill, e.spill, e.n); err != nil {
			return fmt.Errorf("spill original bytes at %d: %w", e.off, err)
		}
		s.spillSize += e.n
		if err := unix.Ftruncate(s.spill, s.spillSize); err != nil {
			return fmt.Errorf("size spill file: %w", err)
		}
	}
	s.undo = append(s.undo, add...)
	sort.Slice(s.undo, func(i, j int) bool { return s.undo[i].off < s.undo[j].off })
	// Merge neighbours so that sequential overwrites stay one extent.
	merged := s.undo[:1]
	for _, e := range s.undo[1:] {
		last := &merged[len(merged)-1]
		if last.end() == e.off && last.data != nil && e.data != nil {
			last.data = append(last.data, e.data...)
			last.n += e.n
			continue
		}
		if last.end() == e.off && last.zero && e.zero {
			last.n += e.n
			continue
		}
		merged = append(merged, e)
	}
	s.undo = merged
	return nil
}

// splitHoles splits [a, b) of fd into data and hole (zero) extents.
func splitHoles(fd int, a, b int64) []extent {
	var out []extent
	for a < b {
		d, err := unix.Seek(fd, a, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data from a to the end
			return append(out, extent{off: a, n: b - a, zero: true})
		}
		if err != nil { // no hole support: all data
			return append(out, extent{off: a, n: b - a})
		}
		if d > a {
			h := min(d, b)
			out = append(out, extent{off: a, n: h - a, zero: true})
			a = h
			continue
		}
		h, err := unix.Seek(fd, a, unix.SEEK_HOLE)
		if err != nil {
			return append(out, extent{off: a, n: b - a})
		}
		h = min(h, b)
		out = append(out, extent{off: a, n: h - a})
		a = h
	}
	return out
}

// zeroRange makes [off, off+n) of fd read as zeros again.
func zeroRange(fd int, off, n int64) error {
	err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	buf := make([]byte, min(n, 1<<16))
	for n > 0 {
		m := min(n, int64(len(buf)))
		if err := writeFull(fd, buf[:m], off); err != nil {
			return err
		}
		off, n = off+m, n-m
	}
	return nil
}

func readFull(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := syscall.Pread(fd, buf[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

func writeFull(fd int, buf []byte, off int64) error {
	for len(buf) > 0 {
		m, err := syscall.Pwrite(fd, buf, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		buf, off = buf[m:], off+int64(m)
	}
	return nil
}

// copyRange copies n bytes in the kernel; past the source's end it stops.
func copyRange(src int, srcOff int64, dst int, dstOff int64, n int64) error {
	for n > 0 {
		m, err := unix.CopyFileRange(src, &srcOff, dst, &dstOff, int(min(n, 1<<30)), 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if m == 0 {
			return nil
		}
		n -= int64(m)
	}
	return nil
}

// resetUndo forgets the saved bytes. Must hold s.mu.
func (s *fileState) resetUndo() {
	s.undo, s.memBytes = nil, 0
	if s.spill >= 0 {
		unix.Close(s.spill)
		s.spill, s.spillSize = -1, 0
	}
}

// closeFd releases the state's descriptors. Must hold s.mu.
func (s *fileState) closeFd() {
	s.resetUndo()
	if s.fd >= 0 {
		syscall.Close(s.fd)
		s.fd = -1
	}
}

func fileSize(fd int) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

// rollback returns the file to its synced bytes. Its size goes back to the
// synced size, or, if keep is not nil, to the synced size plus keep(n) of
// the n bytes appended since. It reports the bytes lost and kept. Must hold
// s.mu.
func (s *fileState) rollback(keep func(n int64) int64) (lost, kept int64, err error) {
	size, err := fileSize(s.fd)
	if err != nil {
		return 0, 0, fmt.Errorf("stat inode %d: %w", s.ino, err)
	}
	cut := s.synced
	if size > s.synced && keep != nil {
		kept = keep(size - s.synced)
		cut += kept
	}
	if size > cut {
		for _, e := range splitHoles(s.fd, cut, size) {
			if !e.zero {
				lost += e.n // written data, not preallocated holes
			}
		}
	}
	if size != cut {
		if err := syscall.Ftruncate(s.fd, cut); err != nil {
			return lost, kept, fmt.Errorf("truncate inode %d to %d: %w", s.ino, cut, err)
		}
	}
	for _, e := range s.undo {
		var err error
		switch {
		case e.zero:
			err = zeroRange(s.fd, e.off, e.n)
		case e.data != nil:
			err = writeFull(s.fd, e.data, e.off)
		default:
			err = copyRange(s.spill, e.spill, s.fd, e.off, e.n)
		}
		if err != nil {
			return lost, kept, fmt.Errorf("restore inode %d at %d: %w", s.ino, e.off, err)
		}
		if !e.zero {
			lost += e.n
		}
	}
	s.resetUndo()
	s.dirty = false
	return lost, kept, nil
}

type opKind int

const (
	opCreate opKind = iota // a new name for a new inode: file, symlink, device
	opLink                 // a new name for an existing inode
	opMkdir
	opUnlink
	opRmdir
	opRename
	opExchange
)

// nsOp is a namespace change that is not durable yet, with what undoes it.
// Paths are absolute backing paths as they were right after the change:
// undoing newest first restores exactly that state before each undo.
type nsOp struct {
	kind          opKind
	ino           uint64 // backing inode created (create, mkdir) or removed
	dir, newDir   *fs.Inode
	name, newName string
	path, newPath string
	trash         string // trash entry holding the unlinked or replaced inode
	victimDir     bool   // a rename replaced an empty directory
	mode          uint32 // of a removed directory
	needs         map[uint64]bool
	selfSync      bool  // fsync of ino itself makes the change durable
	trashBytes    int64 // space the trash entry holds
}

// maxPendingOps and maxTrashBytes bound the pending namespace changes and
// the space their trash holds; beyond them the oldest changes become
// durable, as a journal commit would make them (Status.ForcedDurable).
const (
	maxPendingOps = 4096
	maxTrashBytes = 1 << 30
)

// tracker holds the crash state of one mount.
type tracker struct {
	trash string
	root  int // descriptor of the backing dir, for OpenByHandleAt

	mu     sync.Mutex
	files  map[uint64]*fileState
	ops    []*nsOp
	seq    uint64
	forced uint64
	// trashBytes is the space held by the trash of pending changes.
	trashBytes int64
	// maxOps and maxTrash are maxPendingOps and maxTrashBytes (tests lower
	// them).
	maxOps   int
	maxTrash int64
}

func newTracker(trash string, root int) *tracker {
	return &tracker{trash: trash, root: root, files: make(map[uint64]*fileState), maxOps: maxPendingOps, maxTrash: maxTrashBytes}
}

// open registers a writable handle on backing inode ino whose descriptor is
// fd and returns its state; the state keeps its own descriptor.
func (t *tracker) open(ino uint64, fd int, inode *fs.Inode, passthrough, overwriter bool) (*fileState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.files[ino]
	if s == nil || s.fd < 0 {
		// Reopen through /proc to get a descriptor of our own that has
		// no O_APPEND (pwrite on an O_APPEND descriptor appends).
		own, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("reopen inode %d: %w", ino, err)
		}
		if s != nil { // parked: unchanged since its last handle closed
			s.mu.Lock()
			s.fd, s.fh = own, nil
			s.mu.Unlock()
		} else {
			size, err := fileSize(own)
			if err != nil {
				syscall.Close(own)
				return nil, fmt.Errorf("stat inode %d: %w", ino, err)
			}
			s = &fileState{ino: ino, fd: own, inode: inode, synced: size, spill: -1, spillDir: t.trash}
			t.files[ino] = s
		}
	}
	s.mu.Lock()
	s.open++
	if passthrough {
		s.passthrough++
	}
	if overwriter {
		s.overwriters++
		s.inexact = true
	}
	if s.inode == nil {
		s.inode = inode
	}
	s.mu.Unlock()
	return s, nil
}

// release drops a writable handle. A state with no handles and nothing
// unsynced is forgotten.
func (t *tracker) release(s *fileState, passthrough, overwriter bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if overwriter {
		s.overwriters--
	}
	if passthrough {
		s.passthrough--
		// Appends we never saw: compare with the synced size.
		if size, err := fileSize(s.fd); err != nil || size != s.synced {
			s.dirty = true
		}
	}
	if s.open > 0 || t.files[s.ino] != s {
		return
	}
	if !s.dirty && !s.inexact {
		delete(t.files, s.ino)
		s.closeFd()
		return
	}
	// Still unsynced: park it on a file handle instead of a descriptor,
	// so that files written and closed never fsynced (the rule for a
	// Kafka log) do not pile up open descriptors.
	if h, _, err := unix.NameToHandleAt(s.fd, "", unix.AT_EMPTY_PATH); err == nil {
		s.fh = &h
		syscall.Close(s.fd)
		s.fd = -1
	}
}

// beforeWrite saves what a write of n bytes at off would overwrite.
func (s *fileState) beforeWrite(off, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirty = true
	return s.capture(off, n)
}

// beforeTruncate saves what truncating to size would drop.
func (s *fileState) beforeTruncate(size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirty = true
	if size >= s.synced {
		return nil
	}
	return s.capture(size, s.synced-size)
}

// synced records that backing inode ino, open as fd, was fsynced: its
// current content is durable, and so is its own creation.
func (t *tracker) synced(ino uint64, fd int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.files[ino]; s != nil {
		s.mu.Lock()
		if size, err := fileSize(fd); err == nil {
			s.synced = size
			s.resetUndo()
			s.dirty = false
			s.inexact = s.overwriters > 0
		}
		if s.open == 0 && !s.inexact { // a parked state with nothing left
			delete(t.files, ino)
			s.closeFd()
		}
		s.mu.Unlock()
	}
	t.settle(func(op *nsOp) bool {
		if op.selfSync && op.ino == ino {
			return true
		}
		delete(op.needs, ino) // a directory fsync
		return len(op.needs) == 0
	})
}

// settle makes durable every pending op for which durable returns true,
// and with each every earlier pending op it depends on (one that touched
// the same name or a name above or below it), so that the durable state
// never holds a change without what it was made on. Must hold t.mu.
func (t *tracker) settle(durable func(*nsOp) bool) {
	mark := make([]bool, len(t.ops))
	any := false
	for i, op := range t.ops {
		if durable(op) {
			mark[i], any = true, true
		}
	}
	if !any {
		return
	}
	for i := len(t.ops) - 1; i > 0; i-- {
		if !mark[i] {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			if !mark[j] && t.ops[i].touches(t.ops[j]) {
				mark[j] = true
			}
		}
	}
	keep := t.ops[:0]
	for i, op := range t.ops {
		if mark[i] {
			t.commit(op)
			continue
		}
		keep = append(keep, op)
	}
	clear(t.ops[len(keep):])
	t.ops = keep
}

// names are the directory entries op changed.
func (op *nsOp) names() []string {
	if op.kind == opRename || op.kind == opExchange {
		return []string{op.path, op.newPath}
	}
	return []string{op.path}
}

// touches reports whether op and other changed the same entry, or one an
// entry inside a directory the other changed.
func (op *nsOp) touches(other *nsOp) bool {
	for _, a := range op.names() {
		for _, b := range other.names() {
			if a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/") {
				return true
			}
		}
	}
	return false
}

// commit forgets how to undo op. Must hold t.mu.
func (t *tracker) commit(op *nsOp) {
	if op.trash != "" {
		removeTrash(op.trash)
		t.trashBytes -= op.trashBytes
	}
}

func removeTrash(p string) {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.RemoveAll(p)
	}
}

// trashName reserves a fresh name in the trash directory.
func (t *tracker) trashName() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return filepath.Join(t.trash, strconv.FormatUint(t.seq, 10))
}

// record appends a namespace change that is not durable yet.
func (t *tracker) record(op *nsOp) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var st syscall.Stat_t
	if op.trash != "" && syscall.Lstat(op.trash, &st) == nil {
		op.trashBytes = st.Blocks * 512
		t.trashBytes += op.trashBytes
	}
	t.ops = append(t.ops, op)
	for len(t.ops) > 0 && (len(t.ops) > t.maxOps || t.trashBytes > t.maxTrash) {
		t.commit(t.ops[0])
		t.ops[0] = nil
		t.ops = t.ops[1:]
		t.forced++
	}
}

// pending reports the number of files with unsynced data, of namespace
// changes not yet durable, and of changes made durable by the bounds.
func (t *tracker) pending() (files, ops int, forced uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.files {
		s.mu.Lock()
		if s.dirty || s.passthrough > 0 || s.inexact {
			files++
		}
		s.mu.Unlock()
	}
	return files, len(t.ops), t.forced
}

// CrashReport says what a crash undid.
type CrashReport struct {
	// Files is the number of files that lost content: rolled back to
	// their synced content, or removed as never durable.
	Files int `json:"files"`
	// BytesLost counts appended bytes dropped, overwritten bytes restored
	// and the content of removed files.
	BytesLost int64 `json:"bytes_lost"`
	// Undone counts namespace changes undone (creates, unlinks, renames…).
	Undone int `json:"undone"`
	// Kept counts unsynced appended bytes a torn crash kept.
	Kept int64 `json:"kept,omitempty"`
	// Inexact counts files written through passthrough opens that can
	// overwrite (PassthroughAll): their overwrites of synced bytes were kept.
	Inexact int `json:"inexact,omitempty"`
	// Errors lists undo steps that failed (for example a path a durable
	// change reused); the rest of the crash still happened.
	Errors []string `json:"errors,omitempty"`
}

// crash undoes everything not durable; torn, if not nil, says how many of
// the n bytes appended to a file since its synced size survive. The caller blocks every mutating
// operation while it runs. It returns the kernel notifications to send once
// operations may run again (a notification can wait on a directory lock
// that a blocked operation holds).
func (t *tracker) crash(torn func(synced, n int64) int64) (CrashReport, []func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rep CrashReport
	var notes []func()
	fail := func(format string, args ...any) { rep.Errors = append(rep.Errors, fmt.Sprintf(format, args...)) }
	gone := make(map[uint64]bool)

	for i := len(t.ops) - 1; i >= 0; i-- {
		op := t.ops[i]
		t.ops[i] = nil
		rep.Undone++
		switch op.kind {
		case opCreate, opLink:
			var st syscall.Stat_t
			sized := op.kind == opCreate && syscall.Lstat(op.path, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG
			if err := syscall.Unlink(op.path); err != nil {
				fail("undo create %s: %v", op.path, err)
				continue
			}
			if sized && st.Size > 0 {
				rep.Files++
				rep.BytesLost += min(st.Size, st.Blocks*512) // not holes
			}
			if op.kind == opCreate {
				gone[op.ino] = true
			}
			notes = append(notes, forgetChild(op.dir, op.name))
		case opMkdir:
			if err := syscall.Rmdir(op.path); err != nil {
				fail("undo mkdir %s: %v", op.path, err)
				continue
			}
			notes = append(notes, forgetChild(op.dir, op.name))
		case opUnlink:
			if err := syscall.Rename(op.trash, op.path); err != nil {
				fail("undo unlink %s: %v", op.path, err)
				continue
			}
			notes = append(notes, notifyEntry(op.dir, op.name))
		case opRmdir:
			if err := syscall.Mkdir(op.path, op.mode&0o7777); err != nil {
				fail("undo rmdir %s: %v", op.path, err)
				continue
			}
			notes = append(notes, notifyEntry(op.dir, op.name))
		case opRename:
			if err := syscall.Rename(op.newPath, op.path); err != nil {
				fail("undo rename %s: %v", op.newPath, err)
				continue
			}
			switch {
			case op.trash != "":
				if err := syscall.Rename(op.trash, op.newPath); err != nil {
					fail("restore %s: %v", op.newPath, err)
				}
			case op.victimDir:
				if err := syscall.Mkdir(op.newPath, op.mode&0o7777); err != nil {
					fail("restore %s: %v", op.newPath, err)
				}
			}
			if op.newDir != nil && op.dir != nil {
				op.newDir.MvChild(op.newName, op.dir, op.name, true)
			}
			notes = append(notes, notifyEntry(op.dir, op.name), notifyEntry(op.newDir, op.newName))
		case opExchange:
			if err := unix.Renameat2(unix.AT_FDCWD, op.path, unix.AT_FDCWD, op.newPath, unix.RENAME_EXCHANGE); err != nil {
				fail("undo exchange %s: %v", op.path, err)
				continue
			}
			if op.newDir != nil && op.dir != nil {
				op.dir.ExchangeChild(op.name, op.newDir, op.newName)
			}
			notes = append(notes, notifyEntry(op.dir, op.name), notifyEntry(op.newDir, op.newName))
		}
	}
	t.ops = nil
	t.trashBytes = 0

	inos := make([]uint64, 0, len(t.files))
	for ino := range t.files {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		s := t.files[ino]
		s.mu.Lock()
		if s.fd < 0 && s.fh != nil && !gone[ino] {
			fd, err := unix.OpenByHandleAt(t.root, *s.fh, unix.O_RDWR|unix.O_CLOEXEC)
			switch {
			case err == nil:
				s.fd = fd
			case errors.Is(err, unix.ESTALE):
				gone[ino] = true // deleted, durably
			default:
				fail("reopen inode %d: %v", ino, err)
				gone[ino] = true
			}
		}
		if gone[ino] {
			s.resetUndo()
			s.dirty, s.synced = false, 0
		} else if s.dirty || s.passthrough > 0 || s.inexact {
			var keep func(int64) int64
			if torn != nil {
				synced := s.synced
				keep = func(n int64) int64 { return torn(synced, n) }
			}
			lost, kept, err := s.rollback(keep)
			if err != nil {
				fail("%v", err)
			}
			rep.Kept += kept
			if lost > 0 {
				rep.Files++
				rep.BytesLost += lost
			}
			if s.inexact {
				rep.Inexact++
			}
			s.inexact = s.overwriters > 0
		}
		if in := s.inode; in != nil {
			notes = append(notes, func() { in.NotifyContent(0, 0) })
		}
		if s.open == 0 {
			delete(t.files, ino)
			s.closeFd()
		}
		s.mu.Unlock()
	}
	return rep, notes
}

// forgetChild drops name from dir in the inode tree now and returns the
// kernel notification for later.
func forgetChild(dir *fs.Inode, name string) func() {
	if dir == nil {
		return func() {}
	}
	child := dir.GetChild(name)
	dir.RmChild(name)
	return func() {
		if child != nil {
			dir.NotifyDelete(name, child)
		} else {
			dir.NotifyEntry(name)
		}
	}
}

func notifyEntry(dir *fs.Inode, name string) func() {
	if dir == nil {
		return func() {}
	}
	return func() { dir.NotifyEntry(name) }
}

// close makes everything durable, as a clean unmount does, and empties the
// trash.
func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, op := range t.ops {
		t.commit(op)
	}
	t.ops = nil
	for ino, s := range t.files {
		s.mu.Lock()
		s.closeFd()
		s.mu.Unlock()
		delete(t.files, ino)
	}
}
