package fusefs

import (
	"context"
	"errors"
	"math"
	"syscall"

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
// A call answers exactly what it copied, at most copyChunk bytes (the reply
// counts in 32 bits), and never copies more than it was asked: a copy of
// more than one answer (a file over 4 GiB, or its first 6 GiB) is asked for
// in pieces. The first makes the copy and cuts it to its answer; each later
// piece, at the copy's end, extends it by reference (a new copy of the
// source, cut at the new end) while neither file changed since the last
// piece (copyPiece); else it is EOPNOTSUPP and the kernel copies the rest.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
	n.fsys.touch()
	sz, errno := n.copyFileRange(ctx, fhIn, offIn, fhOut, offOut, length, flags)
	switch {
	case errno == syscall.EOPNOTSUPP:
		n.fsys.metrics.copies.WithLabelValues("bytes").Inc()
	case errno == 0 && offIn > 0:
		n.fsys.metrics.copies.WithLabelValues("piece").Inc()
	case errno == 0:
		n.fsys.metrics.copies.WithLabelValues("reference").Inc()
	}
	return sz, errno
}

// copyPiece is what a copy by reference in pieces left on its destination
// after its last piece: the source it copies, and marks of both files then
// (fileMark), so that the next piece extends the copy only if nothing else
// changed either. GUARDED_BY(FS.mu), on the destination's openFile.
type copyPiece struct {
	src      *openFile
	end      int64 // the copy's size: where the next piece starts
	srcMark  fileMark
	copyMark fileMark
}

// fileMark is what shows that a file changed: a write or a truncate moves
// its mtime (and maybe its size), a publish its checkpoint, the
// adoption of another mount's head its count of foreign changes.
type fileMark struct {
	st      engine.Stat
	foreign uint64
}

func markOf(f *engine.File) fileMark {
	st := f.Stat()
	return fileMark{st: engine.Stat{Size: st.Size, Cno: st.Cno, Dirty: st.Dirty, Mtime: st.Mtime},
		foreign: f.ForeignChanges()}
}

func (m fileMark) same(o fileMark) bool {
	return m.foreign == o.foreign && m.st.Size == o.st.Size && m.st.Cno == o.st.Cno &&
		m.st.Dirty == o.st.Dirty && m.st.Mtime.Equal(o.st.Mtime)
}

func (n *node) copyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	hin, ok := fhIn.(*handle)
	hout, ok2 := fhOut.(*handle)
	if !ok || !ok2 || flags != 0 || n.fsys.cfg.ReadOnly {
		return 0, syscall.EOPNOTSUPP
	}
	if hin.of == hout.of {
		return 0, syscall.EOPNOTSUPP
	}
	src, dst := hin.of.f, hout.of.f
	size := src.Size()
	if size <= 0 || offIn != offOut || offIn >= uint64(size) || length == 0 {
		return 0, syscall.EOPNOTSUPP
	}
	// What this call may answer: what was asked, of what there is, of what
	// one answer can say.
	want := min(length, uint64(size)-offIn, copyChunk)
	if offIn > 0 {
		return n.copyPieceAt(ctx, hin.of, hout.of, int64(offIn), int64(offIn+want))
	}
	// The whole file, or the first piece of more than one answer.
	if dst.Size() != 0 || (want < uint64(size) && want < copyChunk) {
		return 0, syscall.EOPNOTSUPP
	}
	n.fsys.forgetPiece(hout.of)
	if errno := n.cloneCut(ctx, hin.of, hout.of, int64(want)); errno != 0 {
		return 0, errno
	}
	got := dst.Size()
	if got < src.Size() {
		n.fsys.notePiece(hin.of, hout.of, got)
	}
	return uint32(got), 0
}

// cloneCut makes dst a copy by reference of src (as published now; src is
// published first if it must be) cut to at most end bytes.
func (n *node) cloneCut(ctx context.Context, sof, dof *openFile, end int64) syscall.Errno {
	src, dst := sof.f, dof.f
	if err := dst.CloneFrom(ctx, src); err != nil {
		if errors.Is(err, engine.ErrCloneUnsupported) {
			n.fsys.log.Debug("copy by reference not possible; the kernel copies the bytes",
				zap.String("from", sof.id), zap.String("to", dof.id), zap.Error(err))
			return syscall.EOPNOTSUPP
		}
		return n.fsys.errnoOf("copy_file_range to "+dof.id, err)
	}
	n.fsys.log.Debug("copied by reference", zap.String("from", sof.id), zap.String("to", dof.id),
		zap.Int64("bytes", min(dst.Size(), end)))
	// The copy is of the source as published at the call, which may be
	// longer than was asked (a prefix, a piece, or the source grew after
	// the caller looked): cut it to what this call answers.
	if dst.Size() > end {
		if err := dst.Truncate(ctx, end); err != nil {
			return n.fsys.errnoOf("copy_file_range to "+dof.id, err)
		}
	}
	return 0
}

// copyPieceAt answers a later piece of a copy by reference, [off, end): the
// copy ends at off, as the last piece left it, and neither file changed
// since. The copy is then made again, a new checkpoint by reference of the
// source as it still is, and cut at end: the same bytes up to off, and the
// piece after them. Anything else is EOPNOTSUPP (the kernel copies bytes).
func (n *node) copyPieceAt(ctx context.Context, sof, dof *openFile, off, end int64) (uint32, syscall.Errno) {
	src, dst := sof.f, dof.f
	n.fsys.mu.Lock()
	p := dof.piece
	dof.piece = nil
	n.fsys.mu.Unlock()
	if p == nil || p.src != sof || p.end != off || !p.srcMark.same(markOf(src)) || !p.copyMark.same(markOf(dst)) {
		return 0, syscall.EOPNOTSUPP
	}
	// Emptied first: CloneFrom makes a copy of an empty file. From here on
	// a failure leaves the copy empty, and is the call's error.
	if err := dst.Truncate(ctx, 0); err != nil {
		return 0, n.fsys.errnoOf("copy_file_range to "+dof.id, err)
	}
	if errno := n.cloneCut(ctx, sof, dof, end); errno != 0 {
		if errno == syscall.EOPNOTSUPP {
			errno = syscall.EIO // the earlier pieces are gone: not a byte copy's to finish
		}
		return 0, errno
	}
	got := dst.Size()
	if got <= off {
		// The source shrank under the copy: nothing of this piece copied.
		return 0, syscall.EIO
	}
	if got < src.Size() {
		n.fsys.notePiece(sof, dof, got)
	}
	return uint32(got - off), 0
}

// notePiece records that dof is a copy of sof, by reference, cut at end,
// which a next piece may extend.
func (fsys *FS) notePiece(sof, dof *openFile, end int64) {
	p := &copyPiece{src: sof, end: end, srcMark: markOf(sof.f), copyMark: markOf(dof.f)}
	fsys.mu.Lock()
	dof.piece = p
	fsys.mu.Unlock()
}

func (fsys *FS) forgetPiece(dof *openFile) {
	fsys.mu.Lock()
	dof.piece = nil
	fsys.mu.Unlock()
}
