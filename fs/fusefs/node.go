package fusefs

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
)

// node is a directory, file or symlink of the namespace, addressed by its
// inode number (never by path).
type node struct {
	fs.Inode
	fsys *FS
	ino  namespace.Ino
	// shownSize is the size (plus one; 0: none yet) the kernel was last
	// answered for this file, and staleAt (unix ns) when an open last
	// answered ESTALE for it (see Open).
	shownSize atomic.Int64
	staleAt   atomic.Int64
}

// Every go-fuse operation a node or handle type answers is checked here, in
// one block next to the type (as for the other types of this package): a
// method whose signature drifts from go-fuse's would otherwise compile and
// leave the operation ENOSYS. TestFuseInterfaces checks that no method
// named as an operation is missing from these blocks.
var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeCopyFileRanger)((*node)(nil))
)

// staleSizeQuiet: an open answers ESTALE for a stale size at most once in
// this while per file, so that openers of a file another mount keeps
// changing are not all sent back each time it moves.
const staleSizeQuiet = 5 * time.Second

// maxOwedRetries bounds the retries owed (staleRetries): one whose retry
// never came (its walk failed in the kernel) is dropped, oldest first, once
// this many are owed.
const maxOwedRetries = 4096

// staleRetries are the kernel's retries owed to callers whose open (or
// create, or a lookup or change in a directory another mount replaced)
// answered ESTALE: by the calling thread, not by file, because the retry
// walks the path again and its lookup may lead to another file (the name
// renamed over in between, or another mount's rename read meanwhile), whose
// size may be stale too. A retry owed stays owed until that thread's next
// open or create takes it, however long the retry takes (its lookup and open
// wait on the store, seconds on a slow or failing link), or until a lookup of
// that thread fails: the walk ended there, and no open of it comes.
type staleRetries struct {
	mu sync.Mutex
	// owed: by the caller's thread id, when owed (a sequence number, for
	// dropping the oldest); GUARDED_BY(mu)
	owed map[uint32]uint64
	seq  uint64 // GUARDED_BY(mu)
	// created: when a create refused for another mount's name answered
	// ESTALE, by the inode number the name leads to; its retry opens that
	// file, and the per-file quiet while starts then (see hush); GUARDED_BY(mu)
	created map[namespace.Ino]int64
	// now is the clock of the per-file quiet while (staleSizeQuiet); nil
	// is time.Now (a test sets a fake).
	now func() time.Time
}

// clock is the time now, for the per-file quiet while.
func (r *staleRetries) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// owe records that caller tid's request answered ESTALE: the kernel retries.
func (r *staleRetries) owe(tid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owed == nil {
		r.owed = map[uint32]uint64{}
	}
	if _, ok := r.owed[tid]; !ok && len(r.owed) >= maxOwedRetries {
		oldest, first := uint32(0), true
		for k, seq := range r.owed {
			if first || seq < r.owed[oldest] {
				oldest, first = k, false
			}
		}
		delete(r.owed, oldest)
	}
	r.seq++
	r.owed[tid] = r.seq
}

// ended forgets the retry owed to caller tid, whose lookup failed: a walk
// that fails at a lookup opens nothing, so the retry it was is over. Not for
// callers outside the mount's PID namespace, who share id 0: the lookup may
// be another's.
func (r *staleRetries) ended(tid uint32) {
	if tid == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.owed, tid)
}

// hush starts the per-file quiet while (staleSizeQuiet) of file ino at now
// (unix ns): a create refused for its name answered ESTALE, and the open
// the kernel's retry makes of it must not be sent back for a stale size.
// The retry owed to the caller covers it only while no other caller takes
// it first, which one with the same id may: callers outside the mount's PID
// namespace (a container's, or any when the mount runs in a namespace of
// its own) all have id 0. Entries past the quiet are dropped here.
func (r *staleRetries) hush(ino namespace.Ino, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.created == nil {
		r.created = map[namespace.Ino]int64{}
	}
	for k, at := range r.created {
		if now-at > int64(staleSizeQuiet) || len(r.created) >= maxOwedRetries {
			delete(r.created, k)
		}
	}
	r.created[ino] = now
}

// hushedAt is when a create refused for file ino's name last answered
// ESTALE (unix ns; 0: not within the quiet while, as far as kept).
func (r *staleRetries) hushedAt(ino namespace.Ino) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created[ino]
}

// take takes the retry owed to caller tid, if any.
func (r *staleRetries) take(tid uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.owed[tid]
	delete(r.owed, tid)
	return ok
}

// callerTid is the thread id of the request's caller, as the kernel gives
// it: 0 for a caller outside the mount's PID namespace, whose opens then
// share one owed retry (one may take another's: the per-file quiet while
// still keeps most second ESTALEs away).
func callerTid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// noteShown records the size a reply of attributes gave the kernel.
func (n *node) noteShown(a *fuse.Attr) {
	if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		n.shownSize.Store(int64(a.Size) + 1)
	}
}

// Virtual extended attributes of every file; read-only.
const (
	xattrCno    = "user.ckptfs.cno"
	xattrFormat = "user.ckptfs.format"
)

// checkpointsDir is the name of the hidden directory of old checkpoints.
// The name is reserved at the root: a real entry there would be hidden
// behind the virtual one.
const checkpointsDir = ".checkpoints"

// reserved says whether name in directory n is the reserved checkpointsDir.
func (n *node) reserved(name string) bool {
	return n.ino == namespace.RootIno && name == checkpointsDir
}

func kindMode(k namespace.Kind) uint32 {
	switch k {
	case namespace.KindDir:
		return syscall.S_IFDIR
	case namespace.KindSymlink:
		return syscall.S_IFLNK
	case namespace.KindFIFO:
		return syscall.S_IFIFO
	case namespace.KindSocket:
		return syscall.S_IFSOCK
	case namespace.KindCharDev:
		return syscall.S_IFCHR
	case namespace.KindBlockDev:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

func owner(ctx context.Context) namespace.Owner {
	if c, ok := fuse.FromContext(ctx); ok {
		return namespace.Owner{Uid: c.Uid, Gid: c.Gid}
	}
	return namespace.Owner{}
}

// fillAttr fills out with the attributes of n as shown (the owner and mode
// options applied); a file's size and mtime come from its engine or head.
func (fsys *FS) fillAttr(ctx context.Context, n namespace.Node, out *fuse.Attr) syscall.Errno {
	n = fsys.shown(n)
	out.Ino = uint64(n.Ino)
	out.Mode = kindMode(n.Kind) | n.Mode
	out.Nlink = n.Nlink
	out.Uid, out.Gid = n.Uid, n.Gid
	out.Blksize = 4096
	mtime, ctime := n.MtimeNs, n.CtimeNs
	var blocks uint64
	var known bool
	switch n.Kind {
	case namespace.KindFile:
		h, err := fsys.fileHead(ctx, n.FileID)
		if err != nil {
			return fsys.errnoOf("stat file "+n.FileID, err)
		}
		out.Size = uint64(h.size)
		blocks, known = h.blocks, h.blocksKnown
		if h.mtime > n.MtimeSetNs {
			// A write after the last explicit set: it changed the
			// ctime too (POSIX), at the time it changed the mtime.
			mtime = h.mtime
			ctime = max(ctime, h.mtime)
		}
	case namespace.KindSymlink:
		out.Size = uint64(len(n.Target))
	case namespace.KindDir:
		out.Size = 4096
	case namespace.KindCharDev, namespace.KindBlockDev:
		out.Rdev = encodeDev(n.Major, n.Minor)
	}
	out.Blocks = (out.Size + 511) / 512
	if known {
		out.Blocks = blocks // what the file stores: holes take nothing
	}
	setTime(&out.Atime, &out.Atimensec, n.AtimeNs)
	setTime(&out.Mtime, &out.Mtimensec, mtime)
	setTime(&out.Ctime, &out.Ctimensec, ctime)
	return 0
}

func setTime(sec *uint64, nsec *uint32, ns int64) {
	if ns < 0 {
		ns = 0
	}
	*sec = uint64(ns / 1e9)
	*nsec = uint32(ns % 1e9)
}

// child makes (or finds) the go-fuse inode of namespace node n and fills out.
func (n *node) child(ctx context.Context, nn namespace.Node, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.fillAttr(ctx, nn, &out.Attr); errno != 0 {
		return nil, errno
	}
	out.NodeId = 0
	ch := n.NewInode(ctx, &node{fsys: n.fsys, ino: nn.Ino}, fs.StableAttr{Mode: kindMode(nn.Kind), Ino: uint64(nn.Ino)})
	if cn, ok := ch.Operations().(*node); ok {
		cn.noteShown(&out.Attr)
	}
	return ch, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if n.reserved(name) {
		root, errno := n.get(ctx)
		if errno != 0 {
			return nil, errno
		}
		ch := n.NewInode(ctx, &ckptDir{fsys: n.fsys, ino: namespace.RootIno}, fs.StableAttr{Mode: syscall.S_IFDIR})
		root = n.fsys.shown(root)
		fillCkptDirAttr(root, ckptDirMode(root), &out.Attr)
		return ch, 0
	}
	nn, err := n.fsys.lookup(ctx, n.ino, name)
	if err != nil {
		n.fsys.staleRetries.ended(callerTid(ctx))
		return nil, n.dirErrno(ctx, "lookup "+n.where(name), err, n)
	}
	return n.child(ctx, nn, out)
}

// lookup finds name in directory dir; a miss reads what other mounts
// changed first when the mount has not for ns_refresh (freshen).
func (fsys *FS) lookup(ctx context.Context, dir namespace.Ino, name string) (namespace.Node, error) {
	nn, err := fsys.ns.Lookup(ctx, dir, name)
	if errors.Is(err, namespace.ErrNotExist) && fsys.freshen(ctx) {
		nn, err = fsys.ns.Lookup(ctx, dir, name)
	}
	return nn, err
}

func (n *node) get(ctx context.Context) (namespace.Node, syscall.Errno) {
	nn, err := n.fsys.ns.GetNode(ctx, n.ino)
	if err != nil {
		return namespace.Node{}, n.fsys.errnoOf("getattr "+n.where(""), err)
	}
	return nn, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	nn, errno := n.get(ctx)
	if _, held := f.(*handle); held && errno == syscall.ENOENT {
		// A descriptor held on a file the namespace no longer knows:
		// another mount removed its last name and a cleaner deleted its
		// objects, then forgot it. The kernel asks through it before a
		// read past the size it caches: the descriptor is stale, as its
		// read says (readErrno); ENOENT has no meaning for either.
		return syscall.ESTALE
	}
	if errno != 0 {
		return errno
	}
	errno = n.fsys.fillAttr(ctx, nn, &out.Attr)
	if errno == syscall.ENOENT && nn.Kind == namespace.KindFile {
		n.dropEntry() // removed on another mount (missingHead)
	}
	if errno == 0 {
		n.noteShown(&out.Attr)
	}
	return errno
}

// dropEntry has the kernel forget the name it reached this node by, so that
// the next use of the name looks it up: a file another mount removed, which
// this mount's view still named. The kernel is told from a task of the
// mount, never from the request that found it out (it may hold the locks
// the notification takes).
func (n *node) dropEntry() {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	n.fsys.tasks.goFn(func() { parent.NotifyEntry(name) })
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	nn, errno := n.get(ctx)
	if errno != 0 {
		return errno
	}
	if sz, ok := in.GetSize(); ok {
		if nn.Kind != namespace.KindFile {
			return syscall.EISDIR
		}
		if sz > engine.MaxFileSize {
			return syscall.EFBIG // as ext4 answers past its largest size
		}
		if errno := n.truncate(ctx, f, nn.FileID, int64(sz)); errno != 0 {
			return errno
		}
	}
	var a namespace.SetAttr
	change := false
	if m, ok := in.GetMode(); ok {
		m &= namespace.ModeMask
		a.Mode, change = &m, true
	}
	if u, ok := in.GetUID(); ok {
		a.Uid, change = &u, true
	}
	if g, ok := in.GetGID(); ok {
		a.Gid, change = &g, true
	}
	// Only the times the kernel marks valid are set: UTIME_OMIT leaves the
	// other one alone (touch -m keeps atime).
	if t, ok := in.GetATime(); ok {
		a.Atime, change = &t, true
	}
	if t, ok := in.GetMTime(); ok {
		a.Mtime, change = &t, true
		if nn.Kind == namespace.KindFile {
			n.fsys.setOpenMtime(ctx, nn.FileID, t)
		}
	}
	if change {
		var err error
		var later *namespace.Node
		var lerr error
		// Only times may wait for the file's fsync or close: a change of
		// who may use the file (mode, owner) is in the store before it
		// returns, or fails, whoever holds the file open.
		if a.Mode == nil && a.Uid == nil && a.Gid == nil {
			later, lerr = n.fsys.setAttrLater(nn, a)
		}
		switch {
		case lerr != nil:
			return n.fsys.errnoOf("setattr "+n.where(""), lerr)
		case later != nil:
			nn = *later
		default:
			if nn, err = n.fsys.ns.SetAttr(changeCtx(ctx), n.ino, a); err != nil {
				return n.fsys.errnoOf("setattr "+n.where(""), err)
			}
		}
	}
	errno = n.fsys.fillAttr(ctx, nn, &out.Attr)
	if errno == 0 {
		n.noteShown(&out.Attr)
	}
	return errno
}

// setAttrLater changes the times of a file open on this mount without
// waiting for the store (namespace.SetAttrLater): the change lands in the
// background and the file's next fsync or close waits for it, with its data,
// and reports its error (waitAttrs). A program that sets the attributes of
// the file it writes (tar -x: futimens, fchown, fchmod, then close) thus
// waits one round trip at the close instead of one per change. It returns
// nil, nil when the file is not open here: then the change is made the
// ordinary way, as it is when the namespace cannot land a change later
// (namespace.AttrsLater).
func (fsys *FS) setAttrLater(nn namespace.Node, a namespace.SetAttr) (*namespace.Node, error) {
	later, ok := fsys.ns.(namespace.AttrsLater)
	if !ok || nn.Kind != namespace.KindFile {
		return nil, nil
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	of := fsys.files[nn.FileID]
	if of == nil || of.refs == 0 || of.closing != nil {
		return nil, nil
	}
	out, w, err := later.SetAttrLater(nn.Ino, a)
	if err != nil {
		return nil, err
	}
	of.attrs = append(of.attrs, w)
	return &out, nil
}

// kickAttrs sends the attribute changes made with setAttrLater on file of
// that wait for company (namespace.Kick), so that their entry goes while the
// file's data does.
func (fsys *FS) kickAttrs(of *openFile) {
	fsys.mu.Lock()
	pending := len(of.attrs) > 0
	fsys.mu.Unlock()
	if later, ok := fsys.ns.(namespace.AttrsLater); ok && pending {
		later.Kick()
	}
}

// waitAttrs waits for the attribute changes made with setAttrLater on file
// of before now, and reports the first that failed (each once).
func (fsys *FS) waitAttrs(ctx context.Context, of *openFile, op string) syscall.Errno {
	fsys.mu.Lock()
	ws := of.attrs
	of.attrs = nil
	fsys.mu.Unlock()
	var first error
	for i, w := range ws {
		if err := w.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				// Interrupted: the changes go on; the next fsync or close
				// waits for those not seen to end.
				fsys.mu.Lock()
				of.attrs = append(ws[i:len(ws):len(ws)], of.attrs...)
				fsys.mu.Unlock()
				return fsys.errnoOf(op+" file "+of.id, err)
			}
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return fsys.errnoOf(op+" attributes of file "+of.id, first)
	}
	return 0
}

// setOpenMtime passes an explicit mtime to the open engine of a file, so that
// its next checkpoint records it.
func (fsys *FS) setOpenMtime(ctx context.Context, id string, t time.Time) {
	fsys.mu.Lock()
	of := fsys.files[id]
	fsys.mu.Unlock()
	if of == nil {
		return
	}
	<-of.ready
	if of.f != nil {
		// Read-only, closed, or a WAL append that failed: the namespace's
		// mtime stands.
		if err := of.f.SetMtime(ctx, t); err != nil {
			fsys.log.Debug("mtime of an open file not set", zap.String("file", id), zap.Error(err))
		}
	}
}

// truncate sets the size of file id, through the handle f when the kernel
// names one.
func (n *node) truncate(ctx context.Context, f fs.FileHandle, id string, size int64) syscall.Errno {
	if h, ok := f.(*handle); ok {
		if err := h.of.f.Truncate(ctx, size); err != nil {
			return n.fsys.errnoOf("truncate "+n.where(""), err)
		}
		return 0
	}
	of, err := n.fsys.acquire(ctx, id)
	if err != nil {
		return n.fsys.errnoOf("truncate "+n.where(""), err)
	}
	terr := of.f.Truncate(ctx, size)
	// No close will follow a truncate by path: publish it now.
	rerr := n.fsys.release(ctx, of, true)
	if terr != nil {
		return n.fsys.errnoOf("truncate "+n.where(""), terr)
	}
	return n.fsys.errnoOf("truncate "+n.where(""), rerr)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	// The kernel's retry of a request of this caller that answered ESTALE,
	// if one is owed, is this open: taken whatever it answers.
	tid := callerTid(ctx)
	retry := n.fsys.staleRetries.take(tid)
	nn, errno := n.get(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	if nn.Kind != namespace.KindFile {
		return nil, 0, syscall.EISDIR
	}
	reading := flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0
	of, fresh, err := n.fsys.acquireFile(ctx, nn.FileID, reading)
	if errors.Is(err, errReaped) {
		n.dropEntry()
	}
	if err != nil {
		return nil, 0, n.fsys.errnoOf("open "+n.where(""), err)
	}
	// Close-to-open: an engine shared with other handles reads the head
	// again (a fresh one just did).
	if !fresh {
		if _, err := of.f.Refresh(ctx); err != nil {
			n.fsys.release(ctx, of, false)
			return nil, 0, n.fsys.errnoOf("open "+n.where(""), err)
		}
	}
	n.fsys.dropCachedAttrs(of, n.EmbeddedInode())
	// The kernel cuts copy_file_range (and splice) at the size it holds,
	// without asking again as a read does: a size another mount changed
	// since the kernel was last answered would copy a part, or nothing, as
	// if at the end of the file. ESTALE has the kernel walk the path again,
	// looking the name up (the answer carries the size this engine shows
	// now), and open once more. It retries once only, and would hand a
	// second ESTALE to the caller: an open by a caller owed a retry (this
	// one's, a create's that met another mount's name, or a walk's through
	// a replaced directory) is that retry, whatever the file and the sizes,
	// and however long the retry took (its lookup and this open wait on the
	// store). Only for an open for reading (what a copy's source is).
	shown := n.shownSize.Load()
	stale := flags&syscall.O_ACCMODE == syscall.O_RDONLY && shown != 0 && shown-1 != of.f.Stat().Size
	now := n.fsys.staleRetries.clock()
	last := max(n.staleAt.Load(), n.fsys.staleRetries.hushedAt(n.ino))
	if !retry && stale && now.Sub(time.Unix(0, last)) > staleSizeQuiet {
		n.fsys.staleRetries.owe(tid)
		n.staleAt.Store(now.UnixNano())
		n.fsys.release(ctx, of, false)
		return nil, 0, syscall.ESTALE
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err := of.f.Truncate(ctx, 0); err != nil {
			n.fsys.release(ctx, of, false)
			return nil, 0, n.fsys.errnoOf("open "+n.where(""), err)
		}
	}
	h := newHandle(n.fsys, of, flags)
	return h, n.fsys.openFlags(of, n.EmbeddedInode(), flags), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if n.reserved(name) {
		return nil, nil, 0, syscall.EPERM
	}
	// A retry owed to the caller (its open's walk led here the second
	// time: the name went meanwhile) is this create.
	n.fsys.staleRetries.take(callerTid(ctx))
	mode, acls, err := n.fsys.inherit(ctx, n.ino, namespace.KindFile, mode)
	if err != nil {
		return nil, nil, 0, n.dirErrno(ctx, "create "+n.where(name), err, n)
	}
	nn, err := n.fsys.ns.Create(changeCtx(ctx), n.ino, name, mode, owner(ctx))
	if errors.Is(err, namespace.ErrExist) && flags&syscall.O_EXCL == 0 {
		// The kernel looked the name up and we had not seen it: another
		// mount made it since our last read of the log, which the refused
		// create has now read. Without O_EXCL the open must open it: ESTALE
		// has the kernel walk the path again, find the name, and open it as
		// any existing file (checking its permissions, applying O_TRUNC),
		// which answering here as if created would skip. That open is the
		// retry owed to the caller: for reading (O_RDONLY|O_CREAT, as lock
		// files and flock(1) open), it must not meet ESTALE for a size that
		// moved since its lookup, which the kernel would hand the caller.
		// (When this create was itself the kernel's retry, no other comes:
		// the retry owed here stays for the caller's next open, which then
		// skips one answer of a stale size, the lesser harm.) Another
		// caller with the same id may take that retry first: the file's
		// quiet while starts too, as after an open's ESTALE (hush).
		if ex, lerr := n.fsys.ns.Lookup(ctx, n.ino, name); lerr == nil {
			n.fsys.staleRetries.hush(ex.Ino, n.fsys.staleRetries.clock().UnixNano())
		}
		return nil, nil, 0, n.stale(ctx)
	}
	if err != nil {
		return nil, nil, 0, n.dirErrno(ctx, "create "+n.where(name), err, n)
	}
	// The name is in the log now: an interrupt must not leave it there
	// behind an error, so the rest (the head, or the undo of the name) is
	// finished with a context free of the caller's cancellation, bounded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestBound(n.fsys.cfg))
	defer cancel()
	err = n.fsys.applyInherited(ctx, nn.Ino, acls)
	var f *engine.File
	if err == nil {
		f, err = engineCreate(ctx, n.fsys, nn.FileID)
	}
	if errors.Is(err, engine.ErrExists) {
		// Another mount opened the new name before its head landed, wrote
		// and published it (acquire): the head is this file's.
		f, err = engine.Open(ctx, n.fsys.st, n.fsys.prefix(nn.FileID), n.fsys.engineOptions(nn.FileID))
	}
	if err != nil {
		if _, uerr := n.fsys.ns.Unlink(ctx, n.ino, name); uerr != nil {
			n.fsys.log.Warn("undo of a failed create failed; the name stays, an empty file",
				zap.String("path", n.where(name)), zap.Error(uerr))
		}
		return nil, nil, 0, n.fsys.errnoOf("create "+n.where(name), err)
	}
	of := n.fsys.adopt(nn.FileID, f)
	ch, errno := n.child(ctx, nn, out)
	if errno != 0 {
		n.fsys.release(ctx, of, false)
		return nil, nil, 0, errno
	}
	n.fsys.mu.Lock()
	of.pages.noteLocked(ch)
	n.fsys.mu.Unlock()
	return ch, newHandle(n.fsys, of, flags), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if n.reserved(name) {
		return nil, syscall.EPERM
	}
	mode, acls, err := n.fsys.inherit(ctx, n.ino, namespace.KindDir, mode)
	if err != nil {
		return nil, n.dirErrno(ctx, "mkdir "+n.where(name), err, n)
	}
	nn, err := n.fsys.ns.Mkdir(changeCtx(ctx), n.ino, name, mode, owner(ctx))
	if err != nil {
		return nil, n.dirErrno(ctx, "mkdir "+n.where(name), err, n)
	}
	if acls.access != nil || acls.dflt != nil {
		// As in Create: the name is in the log; its ACLs, or its undo,
		// are finished whatever the caller's cancellation.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestBound(n.fsys.cfg))
		defer cancel()
		if err := n.fsys.applyInherited(ctx, nn.Ino, acls); err != nil {
			if uerr := n.fsys.ns.Rmdir(ctx, n.ino, name); uerr != nil {
				n.fsys.log.Warn("undo of a failed mkdir failed; the directory stays without its inherited ACL",
					zap.String("path", n.where(name)), zap.Error(uerr))
			}
			return nil, n.fsys.errnoOf("mkdir "+n.where(name), err)
		}
	}
	return n.child(ctx, nn, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if n.reserved(name) {
		return nil, syscall.EPERM
	}
	nn, err := n.fsys.ns.Symlink(changeCtx(ctx), n.ino, name, target, owner(ctx))
	if err != nil {
		return nil, n.dirErrno(ctx, "symlink "+n.where(name), err, n)
	}
	return n.child(ctx, nn, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	nn, errno := n.get(ctx)
	if errno != 0 {
		return nil, errno
	}
	if nn.Kind != namespace.KindSymlink {
		return nil, syscall.EINVAL
	}
	return []byte(nn.Target), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if n.reserved(name) {
		return nil, syscall.EPERM
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	nn, err := n.fsys.ns.Link(changeCtx(ctx), t.ino, n.ino, name)
	if err != nil {
		return nil, n.dirErrno(ctx, "link "+n.where(name), err, n, t)
	}
	// The reply carries the new link count to the kernel for every name of
	// the node at once (they share one inode).
	return n.child(ctx, nn, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	nn, err := n.fsys.ns.Unlink(changeCtx(ctx), n.ino, name)
	if err != nil {
		return n.dirErrno(ctx, "unlink "+n.where(name), err, n)
	}
	n.fsys.orphaned(nn)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	if err := n.fsys.ns.Rmdir(changeCtx(ctx), n.ino, name); err != nil {
		return n.dirErrno(ctx, "rmdir "+n.where(name), err, n)
	}
	return 0
}

// Linux renameat2 flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
)

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^(renameNoReplace|renameExchange) != 0 {
		return syscall.EINVAL
	}
	// Nothing may take the reserved name; an entry that has it (made before
	// it was reserved) may be renamed away, not exchanged.
	if np.reserved(newName) || (flags&renameExchange != 0 && n.reserved(name)) {
		return syscall.EPERM
	}
	var rf namespace.RenameFlags
	if flags&renameNoReplace != 0 {
		rf |= namespace.RenameNoReplace
	}
	if flags&renameExchange != 0 {
		rf |= namespace.RenameExchange
	}
	replaced, err := n.fsys.ns.Rename(changeCtx(ctx), n.ino, name, np.ino, newName, rf)
	if err != nil {
		return n.dirErrno(ctx, "rename "+n.where(name), err, n, np)
	}
	n.fsys.orphaned(replaced)
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// Object storage has no fixed capacity: the total is a large number
	// (4 PiB), and what is used is what the volume's files hold in the
	// bucket as the background cleaner last counted it (none before its
	// first count, or with gc off), so that df shows what is stored and
	// tools that check free space proceed.
	const blocks = 1 << 40
	const bsize = 4096
	out.Bsize = bsize
	out.Frsize = bsize
	out.Blocks = blocks
	used := uint64(0)
	if _, b, ok := n.fsys.stored(); ok && b > 0 {
		used = min((uint64(b)+bsize-1)/bsize, blocks)
	}
	out.Bfree = blocks - used
	out.Bavail = blocks - used
	const files = 1 << 40
	// The files in use, from a namespace that counts them without asking
	// the store (namespace.Counted); none shown from one that cannot.
	nodes := uint64(0)
	if c, ok := n.fsys.ns.(namespace.Counted); ok {
		nodes = min(uint64(c.Nodes()), files)
	}
	out.Files = files
	out.Ffree = files - nodes
	out.NameLen = namespace.MaxNameLen
	return 0
}

func (n *node) virtualXattr(ctx context.Context, name string) ([]byte, bool, syscall.Errno) {
	if name != xattrCno && name != xattrFormat {
		return nil, false, 0
	}
	nn, errno := n.get(ctx)
	if errno != 0 {
		return nil, true, errno
	}
	if nn.Kind != namespace.KindFile {
		return nil, false, 0
	}
	h, err := n.fsys.fileHead(ctx, nn.FileID)
	if err != nil {
		return nil, true, n.fsys.errnoOf("getxattr "+n.where(""), err)
	}
	if name == xattrCno {
		return []byte(strconv.FormatUint(h.cno, 10)), true, 0
	}
	return []byte(h.format.String()), true, 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	if isACLName(attr) || isStoredACLName(attr) {
		return n.getACLXattr(ctx, attr, dest)
	}
	v, virtual, errno := n.virtualXattr(ctx, attr)
	if errno != 0 {
		return 0, errno
	}
	if !virtual {
		var err error
		if v, err = n.fsys.ns.GetXattr(ctx, n.ino, attr); err != nil {
			return 0, n.fsys.errnoOf("getxattr "+n.where(""), err)
		}
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	if attr == xattrCno || attr == xattrFormat || isStoredACLName(attr) {
		return syscall.EPERM
	}
	if isACLName(attr) {
		return n.setACLXattr(ctx, attr, data, flags)
	}
	flags &^= aclKillSgid // meant for ACLs only
	if err := n.fsys.ns.SetXattr(changeCtx(ctx), n.ino, attr, data, namespace.XattrFlags(flags)); err != nil {
		return n.fsys.errnoOf("setxattr "+n.where(""), err)
	}
	return 0
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	if attr == xattrCno || attr == xattrFormat || isStoredACLName(attr) {
		return syscall.EPERM
	}
	if s, ok := aclStored[attr]; ok {
		attr = s // the mode stays as it is, as on ext4
	}
	if err := n.fsys.ns.RemoveXattr(changeCtx(ctx), n.ino, attr); err != nil {
		return n.fsys.errnoOf("removexattr "+n.where(""), err)
	}
	return 0
}

// Listxattr lists the stored attributes only: the virtual ones are read by
// name, and left out so that cp -a, rsync -X and tar --xattrs do not copy
// them onto other files.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	names, err := n.fsys.ns.ListXattr(ctx, n.ino)
	if err != nil {
		return 0, n.fsys.errnoOf("listxattr "+n.where(""), err)
	}
	var b []byte
	for _, s := range names {
		if name, ok := aclName(s); ok {
			s = name // an ACL, listed as itself (cp -a, rsync -A copy it)
		}
		b = append(append(b, s...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fsys.touch()
	nn, errno := n.get(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	if nn.Kind != namespace.KindDir {
		return nil, 0, syscall.ENOTDIR
	}
	return &dirHandle{fsys: n.fsys, ino: n.ino, parent: nn.Parent}, 0, 0
}

// dirHandle lists a directory with stable offsets: the offset of an entry is
// its namespace cookie, and a listing resumes after it, so entries removed
// during the listing never make others repeat or vanish. Offsets 1 and 2 are
// "." and "..".
//
// As it lists, it has the heads of the files it names read ahead (at most
// prefetchWindow entries past what it returned), so that the lookups and
// stats the kernel sends next (ls -l, readdirplus) find them: a cold
// listing then waits for about one round trip per prefetchConcurrency files,
// not one per file.
type dirHandle struct {
	fsys   *FS
	ino    namespace.Ino
	parent namespace.Ino
	pos    uint64
	buf    []namespace.Dirent
	ahead  int // entries at the front of buf already given to prefetch
	// end: buf holds the rest of the directory as the last listing found
	// it, so the stream ends when buf does. Without it, the end of every
	// listing was found by listing the directory twice more (once for the
	// readdir whose buffer the entries fit in, once for the next), each a
	// LIST on a v2 volume: two round trips of the three a directory of a
	// recursive walk took. Names made since the listing show at the next
	// opendir or rewinddir (Seekdir), as POSIX allows.
	end bool
}

var (
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
)

// Fsyncdir succeeds at once: every change of the namespace (create, rename,
// unlink, ...) is in the store, as its log entry, before the call that made
// it returns; nothing of a directory is held back in memory. A directory
// removed while open has nothing to sync either.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	switch d.pos {
	case 0:
		d.pos = 1
		return &fuse.DirEntry{Name: ".", Ino: uint64(d.ino), Mode: syscall.S_IFDIR, Off: 1}, 0
	case 1:
		d.pos = 2
		return &fuse.DirEntry{Name: "..", Ino: uint64(d.parent), Mode: syscall.S_IFDIR, Off: 2}, 0
	}
	if len(d.buf) == 0 && d.end {
		return nil, 0
	}
	if len(d.buf) == 0 {
		d.fsys.touch()
		// Within op_timeout: a v2 listing waits for the store (a LIST,
		// and a GET of each name not cached).
		octx, done := d.fsys.opCtx(ctx)
		ents, err := d.fsys.ns.ReadDirAfter(octx, d.ino, d.pos)
		done()
		if errors.Is(err, namespace.ErrNotExist) {
			return nil, 0 // removed while listed: nothing more
		}
		if err != nil {
			return nil, d.fsys.errnoOf("readdir", err)
		}
		// ReadDirAfter returns every entry after pos.
		d.end = true
		if len(ents) == 0 {
			return nil, 0
		}
		d.buf, d.ahead = ents, 0
	}
	// Keep the window ahead full, a chunk at a time. The prefetch reads
	// the slice while the listing goes on: buf is only ever resliced or
	// replaced, never written.
	if d.ahead <= prefetchWindow-prefetchChunk && d.ahead < len(d.buf) {
		end := min(len(d.buf), prefetchWindow)
		d.fsys.prefetch(d.buf[d.ahead:end])
		d.ahead = end
	}
	e := d.buf[0]
	d.buf = d.buf[1:]
	d.ahead--
	d.pos = e.Cookie
	return &fuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: kindMode(e.Kind), Off: e.Cookie}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.pos = off
	d.buf, d.ahead, d.end = nil, 0, false
	return 0
}
