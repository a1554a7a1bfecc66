package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Mknod makes FIFOs (mkfifo) and Unix socket files (bind of an AF_UNIX
// socket): namespace entries with their mode and owner and no data object,
// seen by every mount of the volume. What passes through them stays in the
// kernel of the machine that opened them, as on any filesystem; a socket
// file found on another mount is a name only (connect there is
// ECONNREFUSED, as for a socket file whose server is gone).
//
// Block and character devices are refused with EPERM, as POSIX has mknod
// refuse what the caller may not make: a device number means nothing on
// the other machines that mount the bucket, and the mount is nodev by
// default. A regular file (S_IFREG, or no type) is made as by creat, and
// closed at once.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fsys.touch()
	if n.reserved(name) {
		return nil, syscall.EPERM
	}
	var kind namespace.Kind
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		kind = namespace.KindFIFO
	case syscall.S_IFSOCK:
		kind = namespace.KindSocket
	case syscall.S_IFREG, 0:
		ch, fh, _, errno := n.Create(ctx, name, syscall.O_WRONLY, mode, out)
		if errno != 0 {
			return nil, errno
		}
		if r, ok := fh.(fs.FileReleaser); ok {
			r.Release(ctx)
		}
		return ch, 0
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return nil, syscall.EPERM
	default:
		return nil, syscall.EINVAL
	}
	// The umask, or the directory's default ACL (acl.go).
	mode, acls, err := n.fsys.inherit(n.ino, kind, mode)
	if err != nil {
		return nil, n.dirErrno(ctx, "mknod "+n.where(name), err, n)
	}
	nn, err := n.fsys.ns.Mknod(changeCtx(ctx), n.ino, name, kind, mode, owner(ctx))
	if err != nil {
		return nil, n.dirErrno(ctx, "mknod "+n.where(name), err, n)
	}
	if err := n.fsys.applyInherited(context.WithoutCancel(ctx), nn.Ino, acls); err != nil {
		return nil, n.fsys.errnoOf("mknod "+n.where(name)+": its inherited ACL", err)
	}
	return n.child(ctx, nn, out)
}
