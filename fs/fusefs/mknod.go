package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Mknod makes FIFOs (mkfifo), Unix socket files (bind of an AF_UNIX
// socket) and block and character device nodes: namespace entries with
// their mode and owner (a device its number besides) and no data object,
// seen by every mount of the volume. What passes through a FIFO or socket
// stays in the kernel of the machine that opened it, as on any filesystem;
// a socket file found on another mount is a name only (connect there is
// ECONNREFUSED, as for a socket file whose server is gone).
//
// A device node is stored and shown (type, mode, number, through stat) as
// ext4 and tmpfs keep one, for programs that make them (archivers,
// container images, conformance suites); the kernel lets only a caller
// with CAP_MKNOD make one. It never opens a device: the number means
// nothing on the other machines that mount the bucket, and the bucket is
// not trusted, so every mount is nodev (config refuses dev), and the kernel
// refuses to open a device node of the mount (EACCES). A regular file
// (S_IFREG, or no type) is made as by creat, and closed at once.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, done := n.fsys.opCtx(ctx)
	defer done()
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
	case syscall.S_IFCHR:
		kind = namespace.KindCharDev
	case syscall.S_IFBLK:
		kind = namespace.KindBlockDev
	default:
		return nil, syscall.EINVAL
	}
	// The umask, or the directory's default ACL (acl.go).
	mode, acls, err := n.fsys.inherit(ctx, n.ino, kind, mode)
	if err != nil {
		return nil, n.dirErrno(ctx, "mknod "+n.where(name), err, n)
	}
	var nn namespace.Node
	if kind == namespace.KindCharDev || kind == namespace.KindBlockDev {
		major, minor := devNumber(dev)
		nn, err = n.fsys.ns.MknodDevice(changeCtx(ctx), n.ino, name, kind, mode, major, minor, owner(ctx))
	} else {
		nn, err = n.fsys.ns.Mknod(changeCtx(ctx), n.ino, name, kind, mode, owner(ctx))
	}
	if err != nil {
		return nil, n.dirErrno(ctx, "mknod "+n.where(name), err, n)
	}
	if err := n.fsys.applyInherited(context.WithoutCancel(ctx), nn.Ino, acls); err != nil {
		return nil, n.fsys.errnoOf("mknod "+n.where(name)+": its inherited ACL", err)
	}
	return n.child(ctx, nn, out)
}

// devNumber splits a device number as FUSE carries it (the kernel's
// new_encode_dev: a 12-bit major in bits 8-19, a 20-bit minor in bits 0-7
// and 20-31) into its major and minor.
func devNumber(dev uint32) (major, minor uint32) {
	return dev >> 8 & 0xfff, dev&0xff | dev>>12&0xfff00
}

// encodeDev is devNumber's inverse, the number fuse.Attr.Rdev carries.
func encodeDev(major, minor uint32) uint32 {
	return minor&0xff | major&0xfff<<8 | (minor&0xfff00)<<12
}
