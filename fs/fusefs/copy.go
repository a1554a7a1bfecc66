package fusefs

import (
	"context"
	"errors"
	"fmt"
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
// Anything else — a part of a file shorter than one answer, a copy into a
// file that is not empty, a sparse file copied extent by extent, a copy
// between mounts — is EOPNOTSUPP, on which the kernel copies the bytes
// itself, through read and write.
//
// A copy is one version of its source: the one its first call took. That
// call answers what it copied of that version, all of it or as much as was
// asked, at most copyChunk bytes (the reply counts in 32 bits), and leaves
// the version on the destination's handle (copyPiece). cp calls again at
// the copy's end until an answer of 0: each later call copies more of that
// same version by reference, or answers 0 at its end, whatever the source
// shows by then (another mount may have rewritten it, and another process
// here opened the newer one); one that cannot (the copy itself was written
// meanwhile) leaves the kernel to copy bytes only while the source still
// shows the version, and fails with ESTALE otherwise, never mixing two.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	n.fsys.touch()
	sz, errno := n.copyFileRange(ctx, fhIn, offIn, fhOut, offOut, length, flags)
	switch {
	case errno == syscall.EOPNOTSUPP:
		n.fsys.metrics.copies.WithLabelValues("bytes").Inc()
	case errno == 0 && sz == 0: // the end of the version copied
	case errno == 0 && offIn > 0:
		n.fsys.metrics.copies.WithLabelValues("piece").Inc()
	case errno == 0:
		n.fsys.metrics.copies.WithLabelValues("reference").Inc()
	}
	return sz, errno
}

// copyPiece is what a copy by reference leaves on its destination's handle
// for the calls after it: the source's handle, the version of the source
// the copy took, where the copy ends and a mark of the copy then
// (fileMark), so that the next call extends the copy by reference only if
// nothing else changed it. GUARDED_BY(handle.mu), of the destination.
type copyPiece struct {
	src      *handle
	version  *engine.CopyVersion
	end      int64 // the copy's size: where the next call starts
	copyMark fileMark
	// bytes: the kernel copies the rest (the copy changed since a piece);
	// it may while the source shows the version.
	bytes bool
}

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
var errCopyVersionGone = errors.New("the source no longer shows the version the copy took, and the copy changed since its last piece")

func (n *node) copyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	hin, ok := fhIn.(*handle)
	hout, ok2 := fhOut.(*handle)
	if !ok || !ok2 || flags != 0 || n.fsys.cfg.ReadOnly {
		return 0, syscall.EOPNOTSUPP
	}
	if hin.of == hout.of || offIn != offOut || length == 0 {
		return 0, syscall.EOPNOTSUPP
	}
	if offIn > 0 {
		return n.copyOn(ctx, hin, hout, int64(offIn), length)
	}
	src, dst := hin.of.f, hout.of.f
	size := src.Size()
	if n.fsys.copySized != nil {
		n.fsys.copySized()
	}
	// The whole file, or the first piece of more than one answer. The size
	// is only what decides to try: the answer is of the version the copy
	// takes, which may be another by then.
	if size <= 0 || dst.Size() != 0 || (length < uint64(size) && length < copyChunk) {
		return 0, syscall.EOPNOTSUPP
	}
	hout.setPiece(nil)
	v, err := dst.CloneTaking(ctx, src)
	if err != nil {
		return 0, n.cloneErrno(hin.of, hout.of, err)
	}
	// What this call answers: what was asked, of the version taken, of
	// what one answer can say.
	end := int64(min(length, uint64(v.Size()), copyChunk))
	if errno := n.cutCopy(ctx, hin.of, hout.of, end); errno != 0 {
		return 0, errno
	}
	hout.setPiece(&copyPiece{src: hin, version: v, end: end, copyMark: markOf(dst)})
	return uint32(end), 0
}

// cloneErrno is the answer to a copy by reference that failed: EOPNOTSUPP
// when it cannot be made so (the kernel copies the bytes).
func (n *node) cloneErrno(sof, dof *openFile, err error) syscall.Errno {
	if errors.Is(err, engine.ErrCloneUnsupported) {
		n.fsys.log.Debug("copy by reference not possible; the kernel copies the bytes",
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

// copyOn answers a later call of a copy by reference, at off: more of the
// version the first call took, [off, end). At the copy's end, the copy
// unchanged since, the copy is made again, a new checkpoint by reference of
// that version, and cut at end: the same bytes up to off, and the piece
// after them. A call at or past the version's end answers 0. Anything else
// is the kernel's bytes (EOPNOTSUPP) while the source shows the version,
// else ESTALE: the copy fails rather than mix two versions. A call not
// after a copy by reference into this handle from that source is EOPNOTSUPP.
func (n *node) copyOn(ctx context.Context, hin, hout *handle, off int64, length uint64) (uint32, syscall.Errno) {
	sof, dof := hin.of, hout.of
	p := hout.takePiece()
	if p == nil || p.src != hin {
		return 0, syscall.EOPNOTSUPP
	}
	v := p.version
	if off >= v.Size() {
		hout.setPiece(p)
		return 0, 0
	}
	if p.bytes || off != p.end || !p.copyMark.same(markOf(dof.f)) {
		// A piece by reference would undo what changed the copy.
		p.bytes = true
		hout.setPiece(p)
		if sof.f.Shows(v) {
			return 0, syscall.EOPNOTSUPP
		}
		err := fmt.Errorf("copy %s into %s at %d: %w", sof.id, dof.id, off, errCopyVersionGone)
		n.fsys.log.Warn("copy_file_range failed rather than mix two versions of its source", zap.Error(err))
		return 0, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
	}
	end := off + int64(min(length, uint64(v.Size()-off), copyChunk))
	// Emptied first: CloneAgain makes a copy of an empty file. From here on
	// a failure leaves the copy empty, and is the call's error.
	if err := dof.f.Truncate(ctx, 0); err != nil {
		return 0, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
	}
	if err := dof.f.CloneAgain(ctx, sof.f, v); err != nil {
		// Even one that cannot be made by reference now (another writer's
		// head on the copy) is the call's error: the earlier pieces are
		// gone, not a byte copy's to finish.
		return 0, n.fsys.errnoOf("copy_file_range to "+dof.id, fmt.Errorf("a later piece, the copy emptied for it: %w", err))
	}
	if errno := n.cutCopy(ctx, sof, dof, end); errno != 0 {
		return 0, errno
	}
	hout.setPiece(&copyPiece{src: hin, version: v, end: end, copyMark: markOf(dof.f)})
	return uint32(end - off), 0
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
