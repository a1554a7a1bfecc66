package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/engine"
)

// handle is one open file description. All handles of a file share its
// engine (openFile).
type handle struct {
	fsys  *FS
	of    *openFile
	flags uint32

	mu sync.Mutex
	// losses is the engine's count of rollbacks that dropped unflushed
	// changes, as this handle last reported it; GUARDED_BY(mu)
	losses uint64
	// foreign is the engine's count of foreign changes when the handle
	// opened (after the open's read of the head): the kernel's size of
	// the file is the engine's then (see copy.go, staleCut).
	foreign uint64
	// piece is what a copy by reference into this handle left for its
	// next call (copy.go); GUARDED_BY(mu).
	piece *copyPiece
}

// newHandle opens a handle on of: losses before it opened are not its own.
func newHandle(fsys *FS, of *openFile, flags uint32) *handle {
	if writing(flags) {
		fsys.mu.Lock()
		of.writers++
		fsys.mu.Unlock()
	}
	return &handle{fsys: fsys, of: of, flags: flags, losses: of.f.Losses(), foreign: of.f.ForeignChanges()}
}

// writing says whether an open with flags may write.
func writing(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// lost reports, once, that a rollback dropped changes not yet in a
// checkpoint while this handle was open (another handle's flush lost a
// conflict under flush_conflict_policy=failfast): its fsync or close fails,
// even though the file is clean again.
func (h *handle) lost(op string) syscall.Errno {
	n := h.of.f.Losses()
	h.mu.Lock()
	seen := h.losses
	h.losses = n
	h.mu.Unlock()
	if n == seen {
		return 0
	}
	return h.fsys.errnoOf(op, fmt.Errorf("%s: %w", op, engine.ErrLost))
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
)

// engineCreate creates a new file and stores its empty head (If-None-Match,
// engine.Options.StoreHead): a file id is created once, so a named file
// whose head is missing was deleted (heads.go, missingHead), never "not yet
// written", and no mount whose view of the names lags makes it again.
func engineCreate(ctx context.Context, fsys *FS, id string) (*engine.File, error) {
	o := fsys.engineOptions(id)
	o.StoreHead = !fsys.cfg.ReadOnly
	return engine.Create(ctx, fsys.st, fsys.prefix(id), o)
}

// Whence values of lseek(2) the kernel passes on to the file system; it
// answers SEEK_SET, SEEK_CUR and SEEK_END itself.
const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

// Lseek answers SEEK_DATA and SEEK_HOLE from the file's block map. Other
// whence values never reach it; EINVAL, not ENOSYS (which the kernel takes
// as "no lseek" for the whole mount).
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	if off > math.MaxInt64 {
		return 0, syscall.ENXIO
	}
	var got int64
	var err error
	switch whence {
	case seekData:
		got, err = h.of.f.SeekData(ctx, int64(off))
	case seekHole:
		got, err = h.of.f.SeekHole(ctx, int64(off))
	default:
		return 0, syscall.EINVAL
	}
	if err != nil {
		return 0, h.fsys.errnoOf("lseek "+h.of.id, err)
	}
	return uint64(got), 0
}

// Read reads through the engine's stream reader: the kernel asks for at
// most 1 MiB at a time (128 KiB where the mount could not raise its
// read-ahead: setKernelReadAhead), and the engine follows sequential readers and
// fetches ahead of them (several ranged GETs in flight, the window growing as
// the stream goes on), so that these reads are served from memory; other
// reads fetch exactly their blocks. A read wholly inside one piece fetched
// ahead is answered with the piece's own bytes (ReadStreamView), not a copy
// of them in dest: go-fuse only writes them to the device, and they are
// never changed.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	b, err := h.of.f.ReadStreamView(ctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		// The version this handle shows may be one the cleaner dropped
		// since (another mount published two newer ones, and gc
		// --min-age passed while the handle was held).
		return nil, h.fsys.readErrno(ctx, "read file "+h.of.id, h.of.id, h.of.f.Stat().Cno, err)
	}
	return fuse.ReadResultData(b), 0
}

// Write writes data at off, or at the end of the file for a write of a
// descriptor with O_APPEND set (appendMark): the kernel gives an append the
// offset of the size it caches, which may be older than the file's (another
// mount's bytes taken since, with the WAL or by a merge), and the engine
// must know an append is one to place it past those, and past another
// mount's at a merge (engine.File.Append). A write the kernel sends of its
// own (pages of a shared mapping written back) is at its offset, whatever
// descriptor it goes through.
//
// A write at or past the largest file size is EFBIG, as on ext4 (the
// kernel's own limit for FUSE is higher), and one that crosses it writes up
// to it, a short write, as ext4 does; an append the engine places past it
// is EFBIG too.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	app := off < 0 // appendMark
	off &= math.MaxInt64
	if off >= engine.MaxFileSize {
		return 0, syscall.EFBIG
	}
	var n int
	var err error
	if app {
		var at int64
		at, n, err = h.of.f.Append(ctx, data)
		if errors.Is(err, engine.ErrInvalid) && n == 0 && at+int64(len(data)) > engine.MaxFileSize {
			return 0, syscall.EFBIG
		}
		if n > 0 && at != off {
			// The kernel's pages hold the bytes at off.
			h.fsys.dropPagesLater(h.of)
		}
	} else {
		if int64(len(data)) > engine.MaxFileSize-off {
			data = data[:engine.MaxFileSize-off]
		}
		n, err = h.of.f.WriteAt(ctx, data, off)
	}
	if err != nil {
		return uint32(n), h.fsys.errnoOf("write file "+h.of.id, err)
	}
	// O_SYNC and O_DSYNC writes are durable when they return: a checkpoint.
	// With the WAL the write is durable already.
	if h.flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0 && !h.fsys.cfg.WAL {
		if _, err := h.fsys.flush(ctx, h.of); err != nil {
			return 0, h.fsys.errnoOf("write (O_SYNC flush) file "+h.of.id, err)
		}
	}
	return uint32(n), 0
}

// appendMark, set in a write's offset by umaskFS (the kernel's offsets are
// never negative), says the write is one of a descriptor that had O_APPEND
// set when it wrote (the request's flags), not the kernel's write-back of
// pages (FUSE_WRITE_CACHE, no flags). go-fuse's node API passes a write
// neither, and the caller's pid cannot tell them apart: the kernel gives
// pid 0 to its write-back and to every caller outside the mount's PID
// namespace alike (a mount run in a container of its own).
const appendMark = uint64(1) << 63

// Write marks an append's offset (appendMark).
func (u *umaskFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer markAppend(in)()
	return u.RawFileSystem.Write(c, in, data)
}

// Writev is what the server asks first for a write: it marks too.
func (u *umaskFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer markAppend(in)()
	return u.RawFileSystem.Writev(c, in, data)
}

// markAppend sets appendMark in the offset of a write with O_APPEND in its
// flags, and returns what puts the offset back.
func markAppend(in *fuse.WriteIn) func() {
	off := in.Offset
	if in.Flags&syscall.O_APPEND != 0 && in.WriteFlags&fuse.WRITE_CACHE == 0 {
		in.Offset |= appendMark
	}
	return func() { in.Offset = off }
}

// Flush is the close of one file descriptor: with flush_on_close it publishes
// a checkpoint before close returns, so that a successful close means the
// data is safe.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	if !h.fsys.cfg.FlushOnClose || h.fsys.isOrphan(h.of.id) {
		return 0
	}
	return h.sync(ctx, "close")
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	if h.fsys.isOrphan(h.of.id) {
		return 0
	}
	return h.sync(ctx, "fsync")
}

// sync publishes what is dirty; a loss since this handle last reported one
// fails it (the handle whose flush lost the conflict hears of it there).
//
// Attribute changes made on the open file without waiting (setAttrLater)
// are sent first (kickAttrs) and waited for after the data: their entry
// lands while the data does.
func (h *handle) sync(ctx context.Context, op string) syscall.Errno {
	h.fsys.kickAttrs(h.of)
	if h.of.f.Stat().Dirty {
		if _, err := h.fsys.flush(ctx, h.of); err != nil {
			h.lost(op)
			return h.fsys.errnoOf(op+" file "+h.of.id, err)
		}
	}
	if errno := h.fsys.waitAttrs(ctx, h.of, op); errno != 0 {
		h.lost(op)
		return errno
	}
	return h.lost(op)
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	// Release comes after the last Flush; it has no one to report to, so a
	// file still dirty here stays in the table for the periodic flush and the
	// unmount. Its flush is bounded: the kernel holds the release (and an
	// unmount behind it) until it is answered.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestBound(h.fsys.cfg))
	defer cancel()
	lastWriter := false
	if writing(h.flags) {
		h.fsys.mu.Lock()
		h.of.writers--
		lastWriter = h.of.writers == 0
		h.fsys.mu.Unlock()
	}
	h.fsys.release(ctx, h.of, h.fsys.cfg.FlushOnClose)
	if lastWriter && h.fsys.cfg.WAL {
		// Readers may hold the file for long: the lease goes now, not
		// at their close, so that another mount may write (with the
		// WAL, one writer at a time). Not while the kernel waits.
		h.fsys.mu.Lock()
		open := h.fsys.files[h.of.id] == h.of && h.of.refs > 0 && h.of.closing == nil
		h.fsys.mu.Unlock()
		if open {
			of := h.of
			h.fsys.tasks.goFn(func() { of.f.LetGoWAL(h.fsys.ctx) })
		}
	}
	return 0
}

// Linux fallocate modes.
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// Allocate: holes cost nothing, so there is no space to reserve and every
// range is as allocated as it will ever be. Mode 0 extends the file to
// off+size; KEEP_SIZE alone changes nothing and succeeds; PUNCH_HOLE (the
// kernel sends it only with KEEP_SIZE) and ZERO_RANGE make the range read as
// zeros, its whole blocks holes (engine.File.ZeroRange), ZERO_RANGE without
// KEEP_SIZE also extending the file to off+size. Collapsing, inserting and
// unsharing ranges are not supported (EOPNOTSUPP).
//
// A range ending past the largest file size is EFBIG, as on ext4 (the
// kernel refuses one past its own limit before it gets here).
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	ctx, done := h.fsys.opCtx(ctx)
	defer done()
	if off > engine.MaxFileSize || size > engine.MaxFileSize-off {
		return syscall.EFBIG
	}
	var err error
	switch mode {
	case 0:
		err = h.of.f.Extend(ctx, int64(off+size))
	case fallocKeepSize:
	case fallocPunchHole | fallocKeepSize, fallocZeroRange | fallocKeepSize:
		err = h.of.f.ZeroRange(ctx, int64(off), int64(size), true)
	case fallocZeroRange:
		err = h.of.f.ZeroRange(ctx, int64(off), int64(size), false)
	default:
		return syscall.EOPNOTSUPP
	}
	if err != nil {
		return h.fsys.errnoOf("fallocate file "+h.of.id, err)
	}
	return 0
}
