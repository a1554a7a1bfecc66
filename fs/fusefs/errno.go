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

// errnoOf maps err to an errno; op names the operation and what it was on.
// Errors that say something is broken (a corrupt object, a store failure)
// are EIO and logged with their reason, since the program only sees the
// number; so is a timeout (ETIMEDOUT: the store did not answer in time),
// once per failed operation, with what the operation was doing.
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
			switch e.errno {
			case syscall.EIO, syscall.EBUSY:
				fsys.log.Error(op+" failed", zap.Error(err))
			case syscall.ETIMEDOUT:
				fsys.log.Error(op+" failed: the store did not answer in time", zap.Error(err))
			case syscall.EINTR:
				fsys.log.Debug(op+" interrupted before it changed anything", zap.Error(err))
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

// where names the entry name in directory n (n itself if name is empty), as
// a path inside the mount, for the log.
func (n *node) where(name string) string {
	p := "/" + n.Path(nil)
	if name == "" {
		return p
	}
	if p == "/" {
		return p + name
	}
	return p + "/" + name
}
