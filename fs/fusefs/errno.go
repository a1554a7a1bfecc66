package fusefs

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
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
	{namespace.ErrNoSpace, syscall.ENOSPC},
	{engine.ErrReadOnly, syscall.EROFS},
	{engine.ErrInvalid, syscall.EINVAL},
	{engine.ErrNotExist, syscall.ENOENT},
	{engine.ErrExists, syscall.EEXIST},
	{engine.ErrClosed, syscall.EBADF},
	{engine.ErrConflict, syscall.EIO},
	{engine.ErrNoData, syscall.ENXIO},
	{wal.ErrBusy, syscall.EBUSY}, // another writer holds the file's write-ahead log
	// namespace v2: a name another mount's change of several names still
	// holds when the call's deadline came (nsv2.Tree waits for it until then).
	{nsv2.ErrLocked, syscall.EBUSY},
	// namespace v2: a directory moved into another whose loop check met a
	// directory above the target renamed or moved by another mount since
	// this one looked it up; nothing changed.
	{nsv2.ErrMovedAncestor, syscall.EBUSY},
	{context.Canceled, syscall.EINTR},
	{context.DeadlineExceeded, syscall.ETIMEDOUT},
	{staging.ErrNotFound, syscall.EIO},   // an object the file needs is gone
	{errCopyVersionGone, syscall.ESTALE}, // a copy's source shows another version (copy.go)
	{errCopyStaleSize, syscall.ESTALE},   // the kernel cut a copy at another version's size (copy.go)
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

// changeCtx is the context of a namespace change made for the FUSE request
// ctx: once the request is interrupted, the change asks whether its caller
// is being killed, and if so answers at once (the kernel keeps a killed
// process in uninterruptible sleep until the request is answered) and lets
// the change finish without it.
func changeCtx(ctx context.Context) context.Context {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return ctx
	}
	pid := c.Pid
	return namespace.WithGone(ctx, func() bool { return killed(pid) })
}

// killed says whether thread tid has SIGKILL pending (a fatal signal is
// turned into one for every thread of its process), or is gone.
func killed(tid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	const sigkill = 1 << (9 - 1)
	for _, line := range strings.Split(string(b), "\n") {
		for _, field := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && m&sigkill != 0 {
					return true
				}
			}
		}
	}
	return false
}
