package fusefs

import (
	"context"
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// The read-only tree of old checkpoints (see the package doc):
// .checkpoints mirrors the directories; a file appears as a directory of its
// checkpoints, each a read-only file opened with engine.OpenAt.
//
// Every node of the tree carries the owner, group and permission bits, as of
// now, of the directory or file it mirrors (write bits cleared), and the
// kernel checks them (the mount has default_permissions): a path under
// .checkpoints is open to exactly those who may search every directory on
// the path of the live file and read the file.

// ckptDirMode is the mode of the mirror of a directory: its own, read-only.
func ckptDirMode(nn namespace.Node) uint32 { return nn.Mode & 0o555 }

// ckptListMode is the mode of the directory of a file's checkpoints: who may
// read the file may list and enter it (r becomes r-x), no one else.
func ckptListMode(nn namespace.Node) uint32 {
	r := nn.Mode & 0o444
	return r | r>>2
}

// ckptFileMode is the mode of one checkpoint: the file's read bits.
func ckptFileMode(nn namespace.Node) uint32 { return nn.Mode & 0o444 }

// fillCkptDirAttr fills out as a read-only directory with mode perm and the
// owner and times of nn.
func fillCkptDirAttr(nn namespace.Node, perm uint32, out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | perm
	out.Uid, out.Gid = nn.Uid, nn.Gid
	out.Nlink = 2
	out.Size = 4096
	out.Blocks = 8
	setTime(&out.Atime, &out.Atimensec, nn.AtimeNs)
	setTime(&out.Mtime, &out.Mtimensec, nn.MtimeNs)
	setTime(&out.Ctime, &out.Ctimensec, nn.CtimeNs)
}

// ckptDir mirrors directory ino of the namespace.
type ckptDir struct {
	fs.Inode
	fsys *FS
	ino  namespace.Ino
}

var (
	_ = (fs.NodeLookuper)((*ckptDir)(nil))
	_ = (fs.NodeReaddirer)((*ckptDir)(nil))
	_ = (fs.NodeGetattrer)((*ckptDir)(nil))
	_ = (fs.NodeFsyncer)((*ckptDir)(nil))
	_ = (fs.NodeGetxattrer)((*ckptDir)(nil))
)

func (d *ckptDir) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	nn, err := d.fsys.ns.GetNode(ctx, d.ino)
	if err != nil {
		return d.fsys.errnoOf("getattr checkpoints", err)
	}
	nn = d.fsys.shown(nn) // as stat shows the original (uid=, file_mode=, ...)
	fillCkptDirAttr(nn, ckptDirMode(nn), &out.Attr)
	return 0
}

// Fsync: the tree is read-only; there is nothing to make durable.
func (d *ckptDir) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno { return 0 }

func (d *ckptDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := d.fsys.opCtx(ctx)
	defer done()
	nn, err := d.fsys.ns.Lookup(ctx, d.ino, name)
	if err != nil {
		return nil, d.fsys.errnoOf("lookup", err)
	}
	nn = d.fsys.shown(nn) // as stat shows the original (uid=, file_mode=, ...)
	// A name here leads through the namespace as it is now: the kernel must
	// not keep the entry, or after a rename or unlink (which tell the
	// kernel of the names in the tree, not of this one) the path would lead
	// for a while to another file's checkpoints. The least timeout go-fuse
	// passes on (0 means its default).
	out.SetEntryTimeout(time.Nanosecond)
	switch nn.Kind {
	case namespace.KindDir:
		fillCkptDirAttr(nn, ckptDirMode(nn), &out.Attr)
		return d.NewInode(ctx, &ckptDir{fsys: d.fsys, ino: nn.Ino}, fs.StableAttr{Mode: syscall.S_IFDIR}), 0
	case namespace.KindFile:
		fillCkptDirAttr(nn, ckptListMode(nn), &out.Attr)
		return d.NewInode(ctx, &ckptList{fsys: d.fsys, ino: nn.Ino, id: nn.FileID}, fs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	return nil, syscall.ENOENT
}

func (d *ckptDir) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx, done := d.fsys.opCtx(ctx)
	defer done()
	ents, err := d.fsys.ns.ReadDir(ctx, d.ino)
	if err != nil {
		return nil, d.fsys.errnoOf("readdir", err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		if e.Kind != namespace.KindDir && e.Kind != namespace.KindFile {
			continue // symlinks, FIFOs, sockets: no checkpoints
		}
		out = append(out, fuse.DirEntry{Name: e.Name, Mode: syscall.S_IFDIR})
	}
	return fs.NewListDirStream(out), 0
}

// ckptList is the directory of the checkpoints of one file, node ino.
type ckptList struct {
	fs.Inode
	fsys *FS
	ino  namespace.Ino
	id   string
}

var (
	_ = (fs.NodeLookuper)((*ckptList)(nil))
	_ = (fs.NodeReaddirer)((*ckptList)(nil))
	_ = (fs.NodeGetattrer)((*ckptList)(nil))
	_ = (fs.NodeFsyncer)((*ckptList)(nil))
	_ = (fs.NodeGetxattrer)((*ckptList)(nil))
)

func (l *ckptList) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	nn, err := l.fsys.ns.GetNode(ctx, l.ino)
	if err != nil {
		return l.fsys.errnoOf("getattr checkpoints", err)
	}
	nn = l.fsys.shown(nn) // as stat shows the original (uid=, file_mode=, ...)
	fillCkptDirAttr(nn, ckptListMode(nn), &out.Attr)
	return 0
}

// Fsync: the tree is read-only; there is nothing to make durable.
func (l *ckptList) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno { return 0 }

func (l *ckptList) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx, done := l.fsys.opCtx(ctx)
	defer done()
	pts, err := l.fsys.ckptChain(ctx, l.id)
	if err != nil {
		return nil, l.fsys.errnoOf("readdir checkpoints", err)
	}
	out := make([]fuse.DirEntry, 0, len(pts))
	for _, p := range pts {
		out = append(out, fuse.DirEntry{Name: strconv.FormatUint(p.cno, 10), Mode: syscall.S_IFREG})
	}
	return fs.NewListDirStream(out), 0
}

func (l *ckptList) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := l.fsys.opCtx(ctx)
	defer done()
	cno, err := strconv.ParseUint(name, 10, 64)
	if err != nil || cno == 0 || strconv.FormatUint(cno, 10) != name {
		return nil, syscall.ENOENT
	}
	nn, err := l.fsys.ns.GetNode(ctx, l.ino)
	if err != nil {
		return nil, l.fsys.errnoOf("lookup checkpoint", err)
	}
	nn = l.fsys.shown(nn) // as stat shows the original (uid=, file_mode=, ...)
	p, err := l.fsys.ckptOne(ctx, l.id, cno)
	if errors.Is(err, errNoCheckpoint) {
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, l.fsys.errnoOf("lookup checkpoint", err)
	}
	cf := &ckptFile{fsys: l.fsys, ino: l.ino, id: l.id, cno: cno, size: p.size, mtime: p.mtime}
	cf.fill(nn, &out.Attr)
	return l.NewInode(ctx, cf, fs.StableAttr{Mode: syscall.S_IFREG}), 0
}

// ckptFile is one checkpoint of file node ino, read-only.
type ckptFile struct {
	fs.Inode
	fsys  *FS
	ino   namespace.Ino
	id    string
	cno   uint64
	size  int64
	mtime int64
}

var (
	_ = (fs.NodeOpener)((*ckptFile)(nil))
	_ = (fs.NodeGetattrer)((*ckptFile)(nil))
	_ = (fs.NodeGetxattrer)((*ckptFile)(nil))
)

// fill fills out with the checkpoint's size and time and the owner and read
// bits of the file nn.
func (c *ckptFile) fill(nn namespace.Node, out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | ckptFileMode(nn)
	out.Uid, out.Gid = nn.Uid, nn.Gid
	out.Nlink = 1
	out.Size = uint64(c.size)
	out.Blocks = (out.Size + 511) / 512
	setTime(&out.Mtime, &out.Mtimensec, c.mtime)
	setTime(&out.Ctime, &out.Ctimensec, c.mtime)
	setTime(&out.Atime, &out.Atimensec, c.mtime)
}

func (c *ckptFile) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, done := c.fsys.opCtx(ctx)
	defer done()
	nn, err := c.fsys.ns.GetNode(ctx, c.ino)
	if err != nil {
		return c.fsys.errnoOf("getattr checkpoint", err)
	}
	nn = c.fsys.shown(nn) // as stat shows the original (uid=, file_mode=, ...)
	c.fill(nn, &out.Attr)
	return 0
}

func (c *ckptFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx, done := c.fsys.opCtx(ctx)
	defer done()
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	f, err := engine.OpenAt(ctx, c.fsys.st, c.fsys.prefix(c.id), c.cno, c.fsys.engineOptions(c.id))
	if err != nil {
		return nil, 0, c.fsys.errnoOf("open checkpoint", err)
	}
	// A checkpoint never changes: the page cache may keep it.
	return &ckptHandle{fsys: c.fsys, id: c.id, cno: c.cno, f: f}, fuse.FOPEN_KEEP_CACHE, 0
}

type ckptHandle struct {
	fsys *FS
	id   string
	cno  uint64
	f    *engine.File
}

var (
	_ = (fs.FileReader)((*ckptHandle)(nil))
	_ = (fs.FileReleaser)((*ckptHandle)(nil))
)

func (h *ckptHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	n, err := h.f.ReadAt(ctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.fsys.readErrno(ctx, "read checkpoint", h.id, h.cno, err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// readErrno is the errno of a failed read of checkpoint cno of file id (op
// names the read): ESTALE when an object it needs is missing because the
// cleaner removed that checkpoint (ckptGone), or the whole file, which has
// no name left (reapedFile), since a new open reads what is there now;
// errnoOf's answer otherwise (a lost object is EIO, logged).
func (fsys *FS) readErrno(ctx context.Context, op, id string, cno uint64, err error) syscall.Errno {
	if !errors.Is(err, staging.ErrNotFound) {
		return fsys.errnoOf(op, err)
	}
	if cno != 0 {
		if gone, gerr := fsys.ckptGone(ctx, id, cno); gerr == nil && gone {
			fsys.log.Info("a version of a file the cleaner removed was read; a new open reads the newest",
				zap.String("file", id), zap.Uint64("cno", cno), zap.Error(err))
			return syscall.ESTALE
		}
	}
	if fsys.reapedFile(ctx, id) {
		fsys.log.Info("a file removed on another mount and deleted by the cleaner was read through a descriptor held on it",
			zap.String("file", id), zap.Error(err))
		return syscall.ESTALE
	}
	return fsys.errnoOf(op, err)
}

// reapedFile says whether file id, an object of which a read found
// missing, has no name left: the cleaner deletes the objects of such a file
// (the head last, so the file's checkpoint is not yet gone for ckptGone
// while it runs), and of no other whole. The view of the names may lag
// the removal, which is in the log before a cleaner deletes anything: when
// it still names the file, the log is read once more (only on this error
// path). A read of the names that fails tells nothing: not reaped, and the
// read's error stands.
func (fsys *FS) reapedFile(ctx context.Context, id string) bool {
	if named, err := fsys.ns.Named(ctx, id); err != nil || !named {
		return err == nil
	}
	if !fsys.refreshNow(ctx) {
		return false
	}
	named, err := fsys.ns.Named(ctx, id)
	return err == nil && !named
}

// ckptGone says whether checkpoint cno of file id is gone: its part 0 is,
// and the head does not carry it (a head may carry its checkpoint's part 0
// before that object is stored). The cleaner deletes a dropped checkpoint's
// part 0 before any object it names (cleaner.Plan.Execute), so an object
// missing under a checkpoint whose part 0 is gone was the cleaner's (a
// handle opened on it before; the reader is told ESTALE, as a lookup now
// finds no such checkpoint), and one missing under a part 0 still there is
// lost (EIO, logged). Only asked on that error path: a HEAD, and a read of
// the head when the part 0 is missing.
func (fsys *FS) ckptGone(ctx context.Context, id string, cno uint64) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, requestBound(fsys.cfg))
	defer cancel()
	_, err := fsys.st.Head(rctx, fsys.prefix(id)+segment.ObjectName{Cno: cno, Part: 0}.String())
	if !errors.Is(err, staging.ErrNotFound) {
		return false, err
	}
	e, err := fsys.ckptHeadWithin(ctx, id, 0)
	if err != nil {
		return false, err
	}
	return e.missing || e.head.Inode.Cno != cno, nil
}

func (h *ckptHandle) Release(ctx context.Context) syscall.Errno {
	h.f.Close()
	return 0
}
