package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// A lookup or a change of names the kernel sends names its directory by
// the node it holds for the path it walked. That node may be a directory
// another mount has since removed and made again under the same name
// (rm -r out; mkdir out), or under the name of a directory above it: this
// mount's lookups answered from its view, which lags the log by up to
// ns_refresh, and led the kernel to the old one. Once the view shows the
// old directory gone (a refused change has read the log to its end before
// answering, and a call that finds its directory gone reads it once more),
// ENOENT would be wrong: the path names a directory. ESTALE has
// the kernel walk the path again, once, revalidating every name on it
// (LOOKUP_REVAL), and the lookups now answer from the view that knows the
// new directory: the call goes there, as on a local filesystem. When the
// path leads nowhere now (the directory removed), the answer stays ENOENT,
// which a second walk could not change. A walk that starts at the old
// directory itself (a working directory, a descriptor for openat) meets
// ESTALE again, which the kernel hands to the caller, as NFS does.

// dirErrno is the errno of a lookup or change of names that failed with
// err on the nodes dirs (its directories as the kernel reached them, and a
// link's source): ESTALE when one of them is gone and the name the kernel
// reached it by now names another node, else errnoOf's. The retry the ESTALE asks for is owed to the caller
// (see staleRetries), so that an open it leads to does not answer a second
// one for a stale size, which the kernel would hand to the caller.
func (n *node) dirErrno(ctx context.Context, op string, err error, dirs ...*node) syscall.Errno {
	if !errors.Is(err, namespace.ErrNotExist) {
		return n.fsys.errnoOf(op, err)
	}
	gone := false
	for _, d := range dirs {
		r, g := n.fsys.replaced(ctx, d)
		if r {
			return n.stale(ctx)
		}
		gone = gone || g
	}
	// A node gone whose name leads nowhere in the view may be one the view
	// shows half way through its replacement (another mount's removal read,
	// the new directory not yet: a lookup or a default ACL read from the
	// view, which no refusal read to the end first). The log is read once
	// more, bounded and interruptible, and the names looked at again.
	if gone && n.fsys.refreshNow(ctx) {
		for _, d := range dirs {
			if r, _ := n.fsys.replaced(ctx, d); r {
				return n.stale(ctx)
			}
		}
	}
	return n.fsys.errnoOf(op, err)
}

// stale answers ESTALE, owing the kernel's retry to the caller.
func (n *node) stale(ctx context.Context) syscall.Errno {
	n.fsys.staleRetries.owe(callerTid(ctx))
	return syscall.ESTALE
}

// replaced says whether node d is gone from the namespace (gone) and the
// path the kernel reached it by now leads elsewhere (replaced): going up the
// names the kernel knows it by, the first directory still there holds the
// name of the next one down, and the node the name leads to is another. A
// read of the namespace that fails (the store did not answer) proves
// nothing: d is not taken as gone, nor its path as leading elsewhere, and
// the call keeps errnoOf's answer.
func (fsys *FS) replaced(ctx context.Context, d *node) (replaced, gone bool) {
	if _, err := fsys.ns.GetNode(ctx, d.ino); !errors.Is(err, namespace.ErrNotExist) {
		return false, false
	}
	cur := d
	for range maxDepth {
		name, parent := cur.Parent()
		if parent == nil {
			return false, true
		}
		p, ok := parent.Operations().(*node)
		if !ok {
			return false, true
		}
		_, err := fsys.ns.GetNode(ctx, p.ino)
		if errors.Is(err, namespace.ErrNotExist) {
			cur = p // gone too: look one level up
			continue
		}
		if err != nil {
			return false, true
		}
		got, err := fsys.ns.Lookup(ctx, p.ino, name)
		return err == nil && got.Ino != cur.ino, true
	}
	return false, true
}

// maxDepth bounds the walk up: a path of PATH_MAX bytes has fewer names.
const maxDepth = 4096
