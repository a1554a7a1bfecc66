package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
)

// copyChunk is the most one copy_file_range answer can say was copied (the
// reply counts in 32 bits; the kernel asks for at most this much at once).
const copyChunk = math.MaxUint32 &^ 4095

// CopyFileRange answers copy_file_range(2) between two files of this mount
// (coreutils cp; Python from 3.14 in shutil.copyfile) by reference when it copies a
// whole file, or the start of one, into an empty one: the copy's checkpoint points at
// the source's objects (engine.CloneFrom) and no data crosses the link.
// A copy that cannot be made so — a part of a file shorter than one answer, a
// source whose bytes are not a checkpoint alone (another writer's WAL
// records) — the mount copies as bytes itself, from its engine of the
// source (copyBytes), not the kernel: the kernel's copy reads through its
// own cache of the source, which may hold another version's pages, and
// ends at the size it caches, which may be another version's. Anything
// else — a copy into a file that is not empty, one that does not start at
// 0 of both files, a copy between mounts — is EOPNOTSUPP, on which the
// kernel copies the bytes itself, through read and write.
//
// A copy is one version of its source: the one its first call took. That
// call answers what it copied of that version, all of it or as much as was
// asked, at most copyChunk bytes (the reply counts in 32 bits), and leaves
// the version on the destination's handle (copyPiece). cp calls again at
// the copy's end until an answer of 0: each later call copies more of that
// same version, by reference or as bytes, or answers 0 at its end, whatever
// the source shows by then (another mount may have rewritten it, and
// another process here opened the newer one); one that cannot fails with
// ESTALE, never mixing two. So does a first call the kernel cut at a size
// of another version than the source shows (staleCut).
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	sz, how, errno := n.copyFileRange(ctx, fhIn, offIn, fhOut, offOut, length, flags)
	switch {
	case errno == syscall.EOPNOTSUPP:
		n.fsys.metrics.copies.WithLabelValues("bytes").Inc()
	case errno == 0 && sz == 0: // the end of the version copied
	case errno == 0 && how == copiedBytes:
		n.fsys.metrics.copies.WithLabelValues("bytes").Inc()
	case errno == 0 && offIn > 0:
		n.fsys.metrics.copies.WithLabelValues("piece").Inc()
	case errno == 0:
		n.fsys.metrics.copies.WithLabelValues("reference").Inc()
	}
	return sz, errno
}

// copiedBytes says a call's answer was copied as bytes, by the mount.
const copiedBytes = true

// copyPiece is what a copy's first call leaves on its destination's handle
// for the calls after it: the source's handle, and the version of the
// source the copy takes. A copy by reference holds that version, where the
// copy ends and a mark of the copy then (fileMark), so that the next call
// extends the copy by reference only if nothing else changed it.
// A copy the mount makes of the bytes (bytes) holds the source's count of
// foreign changes when it started: while it stays there the source shows
// the version it showed then, with no other mount's head or records taken
// since, and the bytes it reads are of that version.
type copyPiece struct {
	src      *handle
	version  *engine.CopyVersion // nil: copied as bytes from the start
	end      int64               // the copy's size: where the next call starts
	copyMark fileMark
	bytes    bool
	foreign  uint64
}

// copyAttempts bounds the copies by reference a first call makes of a
// source another mount keeps replacing: each one that finds the source's
// head replaced while it was made takes the new head and tries again,
// rather than copy bytes that another version may replace before the copy
// is done (which fails the copy, ESTALE).
const copyAttempts = 3

// fileMark is what shows that the copy changed other than by its own
// publish: a write or a truncate moves its mtime (and maybe its size), the
// adoption of another mount's head its count of foreign changes.
type fileMark struct {
	size    int64
	mtime   time.Time
	foreign uint64
}

func markOf(f *engine.File) fileMark {
	st := f.Stat()
	return fileMark{size: st.Size, mtime: st.Mtime, foreign: f.ForeignChanges()}
}

func (m fileMark) same(o fileMark) bool {
	return m.foreign == o.foreign && m.size == o.size && m.mtime.Equal(o.mtime)
}

// errCopyVersionGone: a copy's later call can copy neither by reference
// nor as bytes of the version its first call took (ESTALE).
var errCopyVersionGone = errors.New("the source shows another version than the one the copy took")

func (n *node) copyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, bool, syscall.Errno) {
	hin, ok := fhIn.(*handle)
	hout, ok2 := fhOut.(*handle)
	if !ok || !ok2 || flags != 0 || n.fsys.cfg.ReadOnly {
		return 0, false, syscall.EOPNOTSUPP
	}
	if hin.of == hout.of || offIn != offOut || length == 0 {
		return 0, false, syscall.EOPNOTSUPP
	}
	if offIn > 0 {
		return n.copyOn(ctx, hin, hout, int64(offIn), length)
	}
	src, dst := hin.of.f, hout.of.f
	size := src.Size()
	if n.fsys.copySized != nil {
		n.fsys.copySized()
	}
	if dst.Size() != 0 {
		return 0, false, syscall.EOPNOTSUPP // not a copy of a file: a write into one
	}
	hout.setPiece(nil)
	// The whole file, or the first piece of more than one answer. The size
	// is only what decides to try: the answer is of the version the copy
	// takes, which may be another by then.
	if size <= 0 || (length < uint64(size) && length < copyChunk) {
		return n.copyBytesFirst(ctx, hin, hout, length)
	}
	v, err := dst.CloneTaking(ctx, src)
	for try := 1; errors.Is(err, engine.ErrSourceMoved) && try < copyAttempts; try++ {
		if _, rerr := src.Refresh(ctx); rerr != nil {
			break
		}
		v, err = dst.CloneTaking(ctx, src)
	}
	if err != nil {
		if errno := n.cloneErrno(hin.of, hout.of, err); errno != syscall.EOPNOTSUPP {
			return 0, false, errno
		}
		return n.copyBytesFirst(ctx, hin, hout, length)
	}
	// The version taken may be longer than the size looked at: a part of
	// it asked is a cut by the kernel at another version's size, as below.
	if uint64(v.Size()) > length && length < copyChunk && n.staleCut(hin, length, src.ForeignChanges()) {
		if errno := n.cutCopy(ctx, hin.of, hout.of, 0); errno != 0 {
			return 0, false, errno
		}
		return n.copyStaleSize(hin.of, hout.of, length, v.Size())
	}
	// What this call answers: what was asked, of the version taken, of
	// what one answer can say.
	end := int64(min(length, uint64(v.Size()), copyChunk))
	if errno := n.cutCopy(ctx, hin.of, hout.of, end); errno != 0 {
		return 0, false, errno
	}
	hout.setPiece(&copyPiece{src: hin, version: v, end: end, copyMark: markOf(dst)})
	return uint32(end), false, 0
}

// copyBytesFirst is a copy's first call that the mount makes of the bytes
// (copyBytes), or fails when the kernel cut it at a size of another
// version (staleCut). The count of foreign changes comes first: the size
// read after it is of that version or a later one, which the copy's reads
// then refuse.
func (n *node) copyBytesFirst(ctx context.Context, hin, hout *handle, length uint64) (uint32, bool, syscall.Errno) {
	foreign := hin.of.f.ForeignChanges()
	if size := hin.of.f.Size(); uint64(size) > length && n.staleCut(hin, length, foreign) {
		return n.copyStaleSize(hin.of, hout.of, length, size)
	}
	return n.copyBytes(ctx, hin, hout, 0, length, &copyPiece{src: hin, bytes: true, foreign: foreign})
}

// copyStaleSize fails a copy's first call that the kernel cut at a size
// of another version of the source than it shows, size bytes long.
func (n *node) copyStaleSize(sof, dof *openFile, length uint64, size int64) (uint32, bool, syscall.Errno) {
	err := fmt.Errorf("copy %s into %s: %d bytes asked, the size the kernel holds, of %d: %w",
		sof.id, dof.id, length, size, errCopyStaleSize)
	n.fsys.log.Warn("copy_file_range failed rather than copy a part of its source", zap.Error(err))
	return 0, false, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
}

// errCopyStaleSize: a copy's first call asked for less than the source
// holds, cut by the kernel at a size it holds of another version (ESTALE).
var errCopyStaleSize = errors.New("the kernel cut the copy at a size of another version of the source")

// staleCut says whether the kernel may have cut a copy's first call, of
// length bytes from 0, less than the source holds, at a size of the source
// that another version had: the kernel cuts copy_file_range at the size it
// caches without asking the mount, and stops the copy there (a later call
// at that size never comes). It is so when length is the size the kernel
// was last answered, or when the source took another mount's version since
// the source's descriptor opened (the open, and cp's fstat after it, gave
// the kernel the size then). A copy of that length would be the start of
// one version cut at another's size; a copy of fewer bytes than the file
// asked for on purpose meets this only when the source changed meanwhile.
func (n *node) staleCut(hin *handle, length uint64, foreign uint64) bool {
	shown := n.shownSize.Load()
	return shown != 0 && uint64(shown-1) == length || foreign != hin.foreign
}

// copyBytesMax is the most one call copies as bytes, and copyBytesBuf the
// buffer it copies them through: a large copy goes in more calls (cp
// calls again at the copy's end), each well inside the operation's time.
const (
	copyBytesMax = 64 << 20
	copyBytesBuf = 1 << 20
)

// copyBytes copies the bytes of the source at off, at most length of them
// (and copyBytesMax), into the copy at off, by reading the mount's engine
// of the source, as read(2) does, and writing the copy's, as write(2)
// does. p is the copy's piece: its earlier calls', or for a first call a
// new one holding the source's count of foreign changes, taken before the
// call looked at the source's size: a buffer read once that count moved (another mount's version taken) is not written,
// and the call answers what it copied before, or fails (ESTALE) if
// nothing. Every byte the copy holds is so of the version its first call
// saw. The source's own writes on this mount are not foreign: they reach
// the copy as they would a read(2). An answer of 0 is the source's end.
func (n *node) copyBytes(ctx context.Context, hin, hout *handle, off int64, length uint64, p *copyPiece) (uint32, bool, syscall.Errno) {
	sof, dof := hin.of, hout.of
	hout.setPiece(p)
	want := int64(min(length, copyBytesMax))
	buf := make([]byte, min(want, copyBytesBuf))
	var done int64
	for done < want {
		k := min(int64(len(buf)), want-done)
		r, rerr := sof.f.ReadAt(ctx, buf[:k], off+done)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			if done > 0 {
				break // what was copied is answered; the next call meets it again
			}
			return 0, false, n.fsys.errnoOf("copy_file_range from "+sof.id, rerr)
		}
		// The count after the read: a version taken before it moved it
		// (the engine counts under the lock its reads take).
		if sof.f.ForeignChanges() != p.foreign {
			if done > 0 {
				break
			}
			return n.copyVersionGone(sof, dof, off)
		}
		if r > 0 {
			w, werr := dof.f.WriteAt(ctx, buf[:r], off+done)
			done += int64(w)
			if werr != nil {
				if done > 0 {
					break
				}
				return 0, false, n.fsys.errnoOf("copy_file_range to "+dof.id, werr)
			}
			if n.fsys.copyWrote != nil {
				n.fsys.copyWrote()
			}
		}
		if int64(r) < k { // the source's end
			break
		}
	}
	return uint32(done), copiedBytes, 0
}

// cloneErrno is the answer to a copy by reference that failed: EOPNOTSUPP
// when it cannot be made so (the mount copies the bytes).
func (n *node) cloneErrno(sof, dof *openFile, err error) syscall.Errno {
	if errors.Is(err, engine.ErrCloneUnsupported) {
		n.fsys.log.Debug("copy by reference not possible; the mount copies the bytes",
			zap.String("from", sof.id), zap.String("to", dof.id), zap.Error(err))
		return syscall.EOPNOTSUPP
	}
	return n.fsys.errnoOf("copy_file_range to "+dof.id, err)
}

// cutCopy cuts the copy just made, of a whole version, to what the call
// answers (a prefix, or a piece).
func (n *node) cutCopy(ctx context.Context, sof, dof *openFile, end int64) syscall.Errno {
	dst := dof.f
	n.fsys.log.Debug("copied by reference", zap.String("from", sof.id), zap.String("to", dof.id),
		zap.Int64("bytes", min(dst.Size(), end)))
	if dst.Size() > end {
		if err := dst.Truncate(ctx, end); err != nil {
			return n.fsys.errnoOf("copy_file_range to "+dof.id, err)
		}
	}
	return 0
}

// copyOn answers a later call of a copy, at off: more of the version the
// first call took, [off, end). For a copy by reference at the copy's end,
// the copy unchanged since, the copy is made again, a new checkpoint by
// reference of that version, and cut at end: the same bytes up to off, and
// the piece after them; a call at or past the version's end answers 0. The
// mount copies bytes for a copy it began so (copyBytes), or one by
// reference whose copy changed since its last piece (a piece by reference
// would undo that), while the source shows the version; else the call
// fails (ESTALE) rather than mix two versions. A call not after a first
// call into this handle from that source is EOPNOTSUPP (the kernel copies).
func (n *node) copyOn(ctx context.Context, hin, hout *handle, off int64, length uint64) (uint32, bool, syscall.Errno) {
	sof, dof := hin.of, hout.of
	p := hout.takePiece()
	if p == nil || p.src != hin {
		return 0, false, syscall.EOPNOTSUPP
	}
	v := p.version
	if v != nil && off >= v.Size() {
		hout.setPiece(p)
		return 0, false, 0
	}
	if !p.bytes && (off != p.end || !p.copyMark.same(markOf(dof.f))) {
		// The count first: a head taken after it is seen by the read.
		foreign := sof.f.ForeignChanges()
		if !sof.f.Shows(v) {
			hout.setPiece(p)
			return n.copyVersionGone(sof, dof, off)
		}
		p.bytes, p.foreign = true, foreign
	}
	if p.bytes {
		if v != nil {
			length = min(length, uint64(v.Size()-off))
		}
		return n.copyBytes(ctx, hin, hout, off, length, p)
	}
	end := off + int64(min(length, uint64(v.Size()-off), copyChunk))
	// Emptied first: CloneAgain makes a copy of an empty file. From here on
	// a failure leaves the copy empty, and is the call's error.
	if err := dof.f.Truncate(ctx, 0); err != nil {
		return 0, false, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
	}
	if err := dof.f.CloneAgain(ctx, sof.f, v); err != nil {
		// Even one that cannot be made by reference now (another writer's
		// head on the copy) is the call's error: the earlier pieces are
		// gone, not a byte copy's to finish.
		return 0, false, n.fsys.errnoOf("copy_file_range to "+dof.id, fmt.Errorf("a later piece, the copy emptied for it: %w", err))
	}
	if errno := n.cutCopy(ctx, sof, dof, end); errno != 0 {
		return 0, false, errno
	}
	hout.setPiece(&copyPiece{src: hin, version: v, end: end, copyMark: markOf(dof.f)})
	return uint32(end - off), false, 0
}

// copyVersionGone fails a copy's call that could only copy another version
// of the source than the copy holds.
func (n *node) copyVersionGone(sof, dof *openFile, off int64) (uint32, bool, syscall.Errno) {
	err := fmt.Errorf("copy %s into %s at %d: %w", sof.id, dof.id, off, errCopyVersionGone)
	n.fsys.log.Warn("copy_file_range failed rather than mix two versions of its source", zap.Error(err))
	return 0, false, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
}

// setPiece leaves p (nil: nothing) for the next call of a copy into h.
func (h *handle) setPiece(p *copyPiece) {
	h.mu.Lock()
	h.piece = p
	h.mu.Unlock()
}

// takePiece returns what the last call of a copy into h left, and leaves
// nothing.
func (h *handle) takePiece() *copyPiece {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.piece
	h.piece = nil
	return p
}
