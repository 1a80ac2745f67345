package faultfs

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one file or directory of the mount. It embeds the go-fuse
// loopback node for what faultfs passes through unchanged (lookups,
// attributes, links, listing) and overrides every operation that faults or
// crash tracking must see.
type node struct {
	fs.LoopbackNode
	ffs *FS

	mu             sync.Mutex
	released       *sync.Cond // signalled when a handle is flushed or closes
	ptOpen, hooked int        // open handles of each kind
	// ptUnflushed counts passthrough handles never flushed: the kernel
	// flushes a file on every close(2), so these are surely still open.
	ptUnflushed int
}

// releaseWait bounds how long an open waits for the kernel's release of
// passthrough handles that were all closed (flushed) already: the kernel
// sends RELEASE in the background, so a close followed by an open can
// reach faultfs in either order.
const releaseWait = 2 * time.Second

// chooseOpen decides whether a new open of n is a passthrough open: the
// kernel refuses non-passthrough opens of an inode open by passthrough, so
// open handles decide, and policy only when there are none.
func (n *node) chooseOpen(policy func() bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ptOpen > 0 && n.ptUnflushed == 0 && n.hooked == 0 && !policy() {
		if n.released == nil {
			n.released = sync.NewCond(&n.mu)
		}
		expired := false
		t := time.AfterFunc(releaseWait, func() {
			n.mu.Lock()
			expired = true
			n.mu.Unlock()
			n.released.Broadcast()
		})
		for n.ptOpen > 0 && n.ptUnflushed == 0 && !expired {
			n.released.Wait()
		}
		t.Stop()
	}
	pt := n.ptOpen > 0 || (n.hooked == 0 && policy())
	if pt {
		n.ptOpen++
		n.ptUnflushed++
	} else {
		n.hooked++
	}
	return pt
}

// flushOpen records the first flush of a passthrough handle.
func (n *node) flushOpen() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ptUnflushed--
	if n.released != nil {
		n.released.Broadcast()
	}
}

func (n *node) closeOpen(pt, flushed bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if pt {
		n.ptOpen--
		if !flushed {
			n.ptUnflushed--
		}
	} else {
		n.hooked--
	}
	if n.released != nil {
		n.released.Broadcast()
	}
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
)

func (n *node) newChild() *node {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: n.RootData}, ffs: n.ffs}
}

// WrapChild turns the loopback nodes that the embedded loopback operations
// create into faultfs nodes.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if _, ok := ops.(*node); ok {
		return ops
	}
	return n.newChild()
}

// ino is the key of this node's crash state: the backing inode number on a
// single backing filesystem (1 for the root).
func (n *node) ino() uint64 { return n.StableAttr().Ino }

// rel is the path of the node relative to the mount root.
func (n *node) rel() string { return n.Path(n.Root()) }

func (n *node) backing() string { return filepath.Join(n.RootData.Path, n.rel()) }

// hidden reports whether name is the trash directory, which only the
// daemon sees.
func (n *node) hidden(name string) bool {
	return name == n.ffs.trashName && n.IsRoot()
}

// fault applies the active faults to an operation of kind op on this node
// (or on its child name).
func (n *node) fault(ctx context.Context, op Op, name string) syscall.Errno {
	e := n.ffs.eng
	if !e.active() {
		e.count[op.index()].ops.Add(1)
		return 0
	}
	return e.check(ctx, op, func() string {
		p := n.rel()
		if name != "" {
			p = path.Join(p, name)
		}
		return p
	})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.ENOENT
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fault(ctx, OpMeta, ""); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Getattr(ctx, f, out)
}

// backingFlags are the open flags faultfs uses on the backing file. Append
// positions come from the kernel (or from fstat, see handle.Write), O_TRUNC
// is done by faultfs so that it can save what it drops, and O_DIRECT would
// need aligned buffers.
func backingFlags(flags uint32) int {
	return int(flags)&^(syscall.O_APPEND|syscall.O_TRUNC|syscall.O_CREAT|syscall.O_EXCL|syscall.O_DIRECT|fuse.FMODE_EXEC) | syscall.O_CLOEXEC
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fault(ctx, OpMeta, ""); errno != 0 {
		return nil, 0, errno
	}
	fd, err := syscall.Open(n.backing(), backingFlags(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	return n.ffs.newHandle(n, fd, flags)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.hidden(name) {
		return nil, nil, 0, syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return nil, nil, 0, errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	p := filepath.Join(n.backing(), name)
	bflags := backingFlags(flags)
	fd, err := syscall.Open(p, bflags|syscall.O_CREAT|syscall.O_EXCL, mode)
	created := err == nil
	if err == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		fd, err = syscall.Open(p, bflags, 0)
	}
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	if created {
		preserveOwner(ctx, p)
	}
	st, id, err := fstatID(n.RootData, fd)
	if err != nil {
		syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	child := n.NewInode(ctx, n.newChild(), id)
	if created {
		n.ffs.trk.record(&nsOp{kind: opCreate, ino: id.Ino, dir: n.EmbeddedInode(), name: name, path: p,
			needs: map[uint64]bool{n.ino(): true}, selfSync: true})
	}
	cn := child.Operations().(*node)
	h, fuseFlags, errno := n.ffs.newHandleLocked(cn, fd, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	out.FromStat(&st)
	return child, h, fuseFlags, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return nil, errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.ffs.trk.record(&nsOp{kind: opMkdir, ino: ch.StableAttr().Ino, dir: n.EmbeddedInode(), name: name,
			path: filepath.Join(n.backing(), name), needs: map[uint64]bool{n.ino(): true}, selfSync: true})
	}
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.newName(ctx, name, opCreate, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	})
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.newName(ctx, name, opCreate, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Symlink(ctx, target, name, out)
	})
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if t, ok := target.(*node); ok {
		target = &t.LoopbackNode
	}
	return n.newName(ctx, name, opLink, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Link(ctx, target, name, out)
	})
}

// newName runs mk, which adds name to this directory, and records it.
func (n *node) newName(ctx context.Context, name string, kind opKind, mk func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return nil, errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	ch, errno := mk()
	if errno == 0 {
		n.ffs.trk.record(&nsOp{kind: kind, ino: ch.StableAttr().Ino, dir: n.EmbeddedInode(), name: name,
			path: filepath.Join(n.backing(), name), needs: map[uint64]bool{n.ino(): true}})
	}
	return ch, errno
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	p := filepath.Join(n.backing(), name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	// Keep the inode in the trash until the unlink is durable.
	tn := n.ffs.trk.trashName()
	if err := syscall.Rename(p, tn); err != nil {
		return fs.ToErrno(err)
	}
	n.ffs.trk.record(&nsOp{kind: opUnlink, dir: n.EmbeddedInode(), name: name, path: p, trash: tn,
		needs: map[uint64]bool{n.ino(): true}})
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	p := filepath.Join(n.backing(), name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if err := syscall.Rmdir(p); err != nil {
		return fs.ToErrno(err)
	}
	n.ffs.trk.record(&nsOp{kind: opRmdir, dir: n.EmbeddedInode(), name: name, path: p, mode: st.Mode,
		needs: map[uint64]bool{n.ino(): true}})
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.ffs != n.ffs {
		return syscall.EXDEV
	}
	if n.hidden(name) || np.hidden(newName) {
		return syscall.EPERM
	}
	if errno := n.fault(ctx, OpMeta, name); errno != 0 {
		return errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	p1 := filepath.Join(n.backing(), name)
	p2 := filepath.Join(np.backing(), newName)
	op := &nsOp{kind: opRename, dir: n.EmbeddedInode(), newDir: np.EmbeddedInode(), name: name, newName: newName,
		path: p1, newPath: p2, needs: map[uint64]bool{n.ino(): true, np.ino(): true}}
	switch {
	case flags&unix.RENAME_WHITEOUT != 0:
		return syscall.EINVAL
	case flags&unix.RENAME_EXCHANGE != 0:
		op.kind = opExchange
	case flags&unix.RENAME_NOREPLACE == 0:
		// Keep a replaced file alive through a second link in the trash.
		var st syscall.Stat_t
		if err := syscall.Lstat(p2, &st); err == nil {
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				op.victimDir, op.mode = true, st.Mode
			} else {
				tn := n.ffs.trk.trashName()
				if err := os.Link(p2, tn); err == nil {
					op.trash = tn
				}
			}
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, uint(flags)); err != nil {
		if op.trash != "" {
			removeTrash(op.trash)
		}
		return fs.ToErrno(err)
	}
	n.ffs.trk.record(op)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, truncate := in.GetSize()
	kind := OpMeta
	if truncate {
		kind = OpWrite
	}
	if errno := n.fault(ctx, kind, ""); errno != 0 {
		return errno
	}
	if truncate {
		n.ffs.gate.RLock()
		defer n.ffs.gate.RUnlock()
		h := asHandle(f)
		var fd int
		if h != nil {
			fd = h.fd
		} else {
			var err error
			if fd, err = syscall.Open(n.backing(), syscall.O_WRONLY|syscall.O_CLOEXEC, 0); err != nil {
				return fs.ToErrno(err)
			}
			defer syscall.Close(fd)
		}
		st, err := n.ffs.trk.open(n.ino(), fd, n.EmbeddedInode(), false, false)
		if err != nil {
			return syscall.EIO
		}
		defer n.ffs.trk.release(st, false, false)
		if err := st.beforeTruncate(int64(size)); err != nil {
			return syscall.EIO
		}
		if err := syscall.Ftruncate(fd, int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// Fsync handles fsync and fdatasync of files and directories: it makes the
// node's content, and the namespace changes it completes, durable.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.fault(ctx, OpFsync, ""); errno != 0 {
		return errno
	}
	n.ffs.gate.RLock()
	defer n.ffs.gate.RUnlock()
	sync := func(fd int) error {
		if flags&1 != 0 {
			return syscall.Fdatasync(fd)
		}
		return syscall.Fsync(fd)
	}
	fd := -1
	if h := asHandle(f); h != nil {
		fd = h.fd
	} else {
		var err error
		if fd, err = syscall.Open(n.backing(), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return fs.ToErrno(err)
		}
		defer syscall.Close(fd)
	}
	if err := sync(fd); err != nil {
		return fs.ToErrno(err)
	}
	n.ffs.syncs.Add(1)
	n.ffs.trk.synced(n.ino(), fd)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fault(ctx, OpMeta, ""); errno != 0 {
		return nil, 0, errno
	}
	fd, err := syscall.Open(n.backing(), syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	ds, errno := fs.NewLoopbackDirStreamFd(fd)
	if errno != 0 {
		syscall.Close(fd)
		return nil, 0, errno
	}
	h := &dirHandle{ds: ds}
	if n.IsRoot() {
		h.hide = n.ffs.trashName
	}
	return h, 0, 0
}

// Tmpfile is refused: an O_TMPFILE inode has no name to track.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// dirHandle lists a directory, hiding the trash at the root. It has no
// Fsyncdir so that directory fsyncs reach node.Fsync.
type dirHandle struct {
	ds   fs.DirStream
	hide string
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	r := d.ds.(fs.FileReaddirenter)
	for {
		e, errno := r.Readdirent(ctx)
		if errno != 0 || e == nil || d.hide == "" || e.Name != d.hide {
			return e, errno
		}
	}
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.ds.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.ds.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
		return
	}
	d.ds.Close()
}

// preserveOwner gives a new file the caller's uid and gid, as the kernel
// would; the daemon runs as root.
func preserveOwner(ctx context.Context, p string) {
	if os.Getuid() != 0 {
		return
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		syscall.Lchown(p, int(caller.Uid), int(caller.Gid))
	}
}

// fstatID stats fd and derives the inode identity the same way the go-fuse
// loopback does, so that lookups and creates agree on it.
func fstatID(r *fs.LoopbackRoot, fd int) (syscall.Stat_t, fs.StableAttr, error) {
	var x unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		return syscall.Stat_t{}, fs.StableAttr{}, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return st, fs.StableAttr{}, err
	}
	gen := uint64(1)
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	swapped := (uint64(st.Dev) << 32) | (uint64(st.Dev) >> 32)
	swappedRootDev := (r.Dev << 32) | (r.Dev >> 32)
	return st, fs.StableAttr{Mode: st.Mode, Gen: gen, Ino: (swapped ^ swappedRootDev) ^ st.Ino}, nil
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.fault(ctx, OpMeta, ""); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Statx(ctx, f, flags, mask, out)
}
