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

var _ fs.NodeCopyFileRanger = (*node)(nil)

// copyChunk is the most one copy_file_range answer can say was copied (the
// reply counts in 32 bits; the kernel asks for at most this much at once).
const copyChunk = math.MaxUint32 &^ 4095

// CopyFileRange answers copy_file_range(2) between two files of this mount
// (coreutils cp; Python from 3.14 in shutil.copyfile) by reference when it copies a
// whole file into an empty one: the copy's checkpoint points at the source's
// objects (engine.CloneFrom) and no data crosses the link. A file larger
// than one answer is asked for in pieces: the first makes the whole copy,
// the later ones find it made (engine.IsCopyOf). Anything else — a part of
// a file, a copy into a file that is not empty, a sparse file copied extent
// by extent, a copy between mounts — is EOPNOTSUPP, on which the kernel
// copies the bytes itself, through read and write.
//
// The one difference from a byte copy: while a large file is copied in
// pieces, the copy has the source's whole size from the first piece on, and
// a copy interrupted after it is whole rather than cut short.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
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
	if size <= 0 || offIn != offOut || int64(offIn) >= size {
		return 0, syscall.EOPNOTSUPP
	}
	reply := func() (uint32, syscall.Errno) {
		return uint32(min(length, copyChunk, uint64(size)-offIn)), 0
	}
	if offIn > 0 {
		// A later piece of a copy by reference finds it made.
		if dst.Size() == size && dst.IsCopyOf(ctx, src) {
			return reply()
		}
		return 0, syscall.EOPNOTSUPP
	}
	// The whole file, or the first piece of a file larger than one answer.
	if dst.Size() != 0 || (length < uint64(size) && length < copyChunk) {
		return 0, syscall.EOPNOTSUPP
	}
	if err := dst.CloneFrom(ctx, src); err != nil {
		if errors.Is(err, engine.ErrCloneUnsupported) {
			n.fsys.log.Debug("copy by reference not possible; the kernel copies the bytes",
				zap.String("from", hin.of.id), zap.String("to", hout.of.id), zap.Error(err))
			return 0, syscall.EOPNOTSUPP
		}
		return 0, n.fsys.errnoOf("copy_file_range to "+hout.of.id, err)
	}
	n.fsys.log.Debug("copied by reference", zap.String("from", hin.of.id), zap.String("to", hout.of.id),
		zap.Int64("bytes", dst.Size()))
	// The copy is of the source as published at the call: its size now.
	size = dst.Size()
	if uint64(size) > length && length < copyChunk {
		// The source grew after the caller looked: copy what was asked.
		if err := dst.Truncate(ctx, int64(length)); err != nil {
			return 0, n.fsys.errnoOf("copy_file_range to "+hout.of.id, err)
		}
		size = int64(length)
	}
	return reply()
}
