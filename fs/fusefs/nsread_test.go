package fusefs

import (
	"context"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// failingReads is a namespace whose reads fail with err, as those of a
// namespace that reads names from the store do when it does not answer; the
// rest is the namespace it wraps.
type failingReads struct {
	namespace.Names
	err error
}

func (f failingReads) Lookup(context.Context, namespace.Ino, string) (namespace.Node, error) {
	return namespace.Node{}, f.err
}

func (f failingReads) GetNode(context.Context, namespace.Ino) (namespace.Node, error) {
	return namespace.Node{}, f.err
}

func (f failingReads) ReadDir(context.Context, namespace.Ino) ([]namespace.Dirent, error) {
	return nil, f.err
}

func (f failingReads) ReadDirAfter(context.Context, namespace.Ino, uint64) ([]namespace.Dirent, error) {
	return nil, f.err
}

func (f failingReads) GetXattr(context.Context, namespace.Ino, string) ([]byte, error) {
	return nil, f.err
}

func (f failingReads) ListXattr(context.Context, namespace.Ino) ([]string, error) {
	return nil, f.err
}

func (f failingReads) Named(context.Context, string) (bool, error)    { return false, f.err }
func (f failingReads) Orphaned(context.Context, string) (bool, error) { return false, f.err }

// TestNamespaceReadErrors: a read of the namespace that fails is answered
// with errnoOf's errno for that error (a store that did not answer in time:
// ETIMEDOUT), in the tree and in .checkpoints, never taken for a missing
// name (ENOENT) or a missing attribute (ENODATA).
func TestNamespaceReadErrors(t *testing.T) {
	ctx := context.Background()
	fsys, err := New(ctx, mem.New(), Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	root := &node{fsys: fsys, ino: namespace.RootIno}
	fs.NewNodeFS(root, &fs.Options{}) // a bridge without a server
	if _, err := fsys.ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	in, errno := root.Lookup(ctx, "f", &fuse.EntryOut{})
	if errno != 0 {
		t.Fatalf("lookup f: %v", errno)
	}
	f := in.Operations().(*node)
	ckpt := &ckptDir{fsys: fsys, ino: namespace.RootIno}
	// Closed first, so that no loop of the mount reads fsys.ns while it is
	// replaced; the calls below answer from the namespace alone.
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	fsys.ns = failingReads{fsys.ns, context.DeadlineExceeded}
	for _, c := range []struct {
		name string
		call func() syscall.Errno
	}{
		{"lookup", func() syscall.Errno {
			_, errno := root.Lookup(ctx, "f", &fuse.EntryOut{})
			return errno
		}},
		{"getattr", func() syscall.Errno { return f.Getattr(ctx, nil, &fuse.AttrOut{}) }},
		{"getxattr", func() syscall.Errno {
			_, errno := f.Getxattr(ctx, "user.k", make([]byte, 64))
			return errno
		}},
		{"getxattr of an ACL", func() syscall.Errno {
			_, errno := f.Getxattr(ctx, xattrACLAccess, make([]byte, 64))
			return errno
		}},
		{"listxattr", func() syscall.Errno {
			_, errno := f.Listxattr(ctx, make([]byte, 64))
			return errno
		}},
		{"getattr in .checkpoints", func() syscall.Errno { return ckpt.Getattr(ctx, nil, &fuse.AttrOut{}) }},
		{"lookup in .checkpoints", func() syscall.Errno {
			_, errno := ckpt.Lookup(ctx, "f", &fuse.EntryOut{})
			return errno
		}},
		{"readdir of .checkpoints", func() syscall.Errno {
			_, errno := ckpt.Readdir(ctx)
			return errno
		}},
	} {
		if errno := c.call(); errno != syscall.ETIMEDOUT {
			t.Errorf("%s with the namespace's reads failing: %v, want ETIMEDOUT", c.name, errno)
		}
	}
}

// The decisions that a read of the namespace only refines take a read that
// fails for proof of nothing: a directory is not gone (no ESTALE), a file
// whose object is missing is not reaped, and an orphan is remembered until
// the namespace says it forgot it.
func TestNamespaceReadErrorsProveNothing(t *testing.T) {
	ctx := context.Background()
	fsys := &FS{
		ns:      failingReads{err: context.DeadlineExceeded},
		files:   map[string]*openFile{},
		orphans: map[string]struct{}{"id": {}},
	}
	if r, g := fsys.replaced(ctx, &node{fsys: fsys, ino: 5}); r || g {
		t.Errorf("replaced = %v, gone %v with the namespace's reads failing, want neither", r, g)
	}
	if fsys.reapedFile(ctx, "id") {
		t.Error("a file taken for reaped with the namespace's reads failing")
	}
	fsys.pruneOrphans(ctx)
	if !fsys.isOrphan("id") {
		t.Error("an orphan forgotten with the namespace's reads failing")
	}
}
