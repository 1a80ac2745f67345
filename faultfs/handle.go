package faultfs

import (
	"context"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file. Its reads and writes go through faultfs (the
// kernel opens it with FOPEN_DIRECT_IO, so no page cache hides them); it
// does not implement fs.FilePassthroughFder — see ptHandle.
type handle struct {
	n        *node
	fd       int
	append   bool
	pt       bool
	writable bool
	dsync    bool        // O_SYNC or O_DSYNC: every write is durable when it returns
	flushed  atomic.Bool // closed by its user at least once (passthrough)
	st       *fileState  // crash state, for writable regular files
}

// ptHandle is a handle the kernel may serve by FUSE passthrough: reads and
// writes go from the kernel straight to the backing file, and faultfs only
// sees opens, fsyncs, attribute changes and closes (see PassthroughMode).
type ptHandle struct{ *handle }

var (
	_ fs.FileReader          = (*handle)(nil)
	_ fs.FileWriter          = (*handle)(nil)
	_ fs.FileReleaser        = (*handle)(nil)
	_ fs.FileFlusher         = (*handle)(nil)
	_ fs.FileGetattrer       = (*handle)(nil)
	_ fs.FileStatxer         = (*handle)(nil)
	_ fs.FileLseeker         = (*handle)(nil)
	_ fs.FileAllocater       = (*handle)(nil)
	_ fs.FilePassthroughFder = (*ptHandle)(nil)
)

// PassthroughFd implements fs.FilePassthroughFder.
func (p *ptHandle) PassthroughFd() (int, bool) { return p.fd, true }

func asHandle(f fs.FileHandle) *handle {
	switch h := f.(type) {
	case *handle:
		return h
	case *ptHandle:
		return h.handle
	}
	return nil
}

// newHandle wraps backing descriptor fd opened for n with the caller's
// flags.
func (f *FS) newHandle(n *node, fd int, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		f.gate.RLock()
		defer f.gate.RUnlock()
	}
	return f.newHandleLocked(n, fd, flags)
}

// newHandleLocked is newHandle for a caller that holds the gate if the open
// truncates.
func (f *FS) newHandleLocked(n *node, fd int, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	writable := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	h := &handle{n: n, fd: fd, append: flags&syscall.O_APPEND != 0, writable: writable, dsync: flags&syscall.O_DSYNC != 0}
	h.pt = n.chooseOpen(func() bool {
		if h.dsync {
			return false // the kernel would sync the backing file unseen
		}
		switch f.opts.Passthrough {
		case PassthroughAppend:
			return !f.eng.active() && (!writable || h.append)
		case PassthroughAll:
			return !f.eng.active()
		}
		return false
	})
	if writable && n.Mode()&syscall.S_IFMT == syscall.S_IFREG {
		st, err := f.trk.open(n.ino(), fd, n.EmbeddedInode(), h.pt, h.unseen())
		if err != nil {
			n.closeOpen(h.pt, false)
			syscall.Close(fd)
			return nil, 0, syscall.EIO
		}
		h.st = st
		if flags&syscall.O_TRUNC != 0 {
			if err := st.beforeTruncate(0); err != nil {
				h.Release(context.Background())
				return nil, 0, syscall.EIO
			}
			if err := syscall.Ftruncate(fd, 0); err != nil {
				h.Release(context.Background())
				return nil, 0, fs.ToErrno(err)
			}
		}
	}
	if h.pt {
		f.ptOpens.Add(1)
		f.ptOpenNow.Add(1)
		return &ptHandle{h}, 0, 0
	}
	f.hookedOpens.Add(1)
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// unseen reports whether the handle's writes can change what a crash
// should restore without faultfs seeing it: overwrites, or syncs by
// O_DSYNC, through passthrough.
func (h *handle) unseen() bool { return h.pt && (!h.append || h.dsync) }

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.n.fault(ctx, OpRead, ""); errno != 0 {
		return nil, errno
	}
	// Spliced from the fd; the bridge keeps the handle (and fd) alive until
	// the result is sent.
	return fuse.ReadResultFd(uintptr(h.fd), off, len(buf)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.n.fault(ctx, OpWrite, ""); errno != 0 {
		return 0, errno
	}
	if !h.writable {
		return 0, syscall.EBADF
	}
	if h.st == nil { // not a regular file: nothing to undo
		n, err := syscall.Pwrite(h.fd, data, off)
		return uint32(max(n, 0)), fs.ToErrno(err)
	}
	g := &h.n.ffs.gate
	g.RLock()
	defer g.RUnlock()
	if h.append {
		// The backing file is the truth: its end may differ from the
		// kernel's cached size after a crash rolled it back.
		size, err := fileSize(h.fd)
		if err != nil {
			return 0, fs.ToErrno(err)
		}
		off = size
	}
	if err := h.st.beforeWrite(off, int64(len(data))); err != nil {
		return 0, syscall.EIO
	}
	if err := writeFull(h.fd, data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	if h.dsync {
		// The backing descriptor has O_DSYNC too. Count the whole file as
		// synced: exact for a log written in order.
		h.n.ffs.syncs.Add(1)
		h.n.ffs.trk.synced(h.n.ino(), h.fd)
	}
	return uint32(len(data)), 0
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if errno := h.n.fault(ctx, OpWrite, ""); errno != 0 {
		return errno
	}
	if h.st == nil {
		return syscall.EBADF // not writable, or not a regular file
	}
	g := &h.n.ffs.gate
	g.RLock()
	defer g.RUnlock()
	if mode != 0 && mode != unix.FALLOC_FL_KEEP_SIZE {
		// Punching or zeroing changes bytes: save them first.
		if err := h.st.beforeWrite(int64(off), int64(size)); err != nil {
			return syscall.EIO
		}
	} else {
		h.st.beforeWrite(0, 0)
	}
	return fs.ToErrno(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
}

// Flush is called on every close(2) of the file; for a passthrough handle
// the first one tells chooseOpen that its release is on the way.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if h.pt && h.flushed.CompareAndSwap(false, true) {
		h.n.flushOpen()
	}
	return 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.st != nil {
		h.n.ffs.trk.release(h.st, h.pt, h.unseen())
		h.st = nil
	}
	if h.fd >= 0 {
		syscall.Close(h.fd)
		h.fd = -1
		h.n.closeOpen(h.pt, h.flushed.Load())
		if h.pt {
			h.n.ffs.ptOpenNow.Add(-1)
		}
	}
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (h *handle) Statx(ctx context.Context, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	var st unix.Statx_t
	if err := unix.Statx(h.fd, "", unix.AT_EMPTY_PATH|int(flags), int(mask), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatx(&st)
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}
