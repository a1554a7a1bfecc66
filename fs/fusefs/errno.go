package fusefs

import (
	"context"
	"errors"
	"syscall"

	"go.uber.org/zap"

	"ckptfs/fs/engine"
	"ckptfs/fs/namespace"
	"ckptfs/segment"
	"ckptfs/staging"
	"ckptfs/wal"
)

// errnoTable maps typed errors to errno values, first match wins. This is the
// only place where errno values are chosen.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{namespace.ErrExist, syscall.EEXIST},
	{namespace.ErrNotExist, syscall.ENOENT},
	{namespace.ErrNotEmpty, syscall.ENOTEMPTY},
	{namespace.ErrNotDir, syscall.ENOTDIR},
	{namespace.ErrIsDir, syscall.EISDIR},
	{namespace.ErrInvalid, syscall.EINVAL},
	{namespace.ErrNotPermitted, syscall.EPERM},
	{namespace.ErrNotSupported, syscall.ENOTSUP},
	{namespace.ErrNameTooLong, syscall.ENAMETOOLONG},
	{namespace.ErrNoAttr, syscall.ENODATA},
	{namespace.ErrTooBig, syscall.E2BIG},
	{engine.ErrReadOnly, syscall.EROFS},
	{engine.ErrInvalid, syscall.EINVAL},
	{engine.ErrNotExist, syscall.ENOENT},
	{engine.ErrExists, syscall.EEXIST},
	{engine.ErrClosed, syscall.EBADF},
	{engine.ErrConflict, syscall.EIO},
	{wal.ErrBusy, syscall.EBUSY}, // another writer holds the file's write-ahead log
	{context.Canceled, syscall.EINTR},
	{context.DeadlineExceeded, syscall.ETIMEDOUT},
	{staging.ErrNotFound, syscall.EIO}, // an object the file needs is gone
}

// errnoOf maps err to an errno. Errors that say something is broken (a
// corrupt object, a store failure) are EIO and logged with their reason,
// since the program only sees the number.
func (fsys *FS) errnoOf(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			if e.errno == syscall.EIO || e.errno == syscall.EBUSY {
				fsys.log.Error(op+" failed", zap.Error(err))
			}
			return e.errno
		}
	}
	switch {
	case errors.Is(err, segment.ErrCorrupt), errors.Is(err, namespace.ErrCorrupt):
		fsys.log.Error(op+": corrupt object refused", zap.Error(err))
	case errors.Is(err, segment.ErrUnsupported):
		fsys.log.Error(op+": object written by a newer build refused", zap.Error(err))
	default:
		fsys.log.Error(op+" failed", zap.Error(err))
	}
	return syscall.EIO
}
