package volume_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestResolve: paths are cleaned and looked up from the root; a name under
// a file is ErrNotDir, a missing name ErrNotExist, whatever the path's form.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	ns, err := namespace.Open(ctx, mem.New(), "vol/", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	d, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ns.Create(ctx, d.Ino, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ns.Symlink(ctx, namespace.RootIno, "l", "d/f", namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		want namespace.Ino
		err  error
	}{
		{"", namespace.RootIno, nil},
		{"/", namespace.RootIno, nil},
		{"..", namespace.RootIno, nil},
		{"d", d.Ino, nil},
		{"/d/", d.Ino, nil},
		{"/d/f", f.Ino, nil},
		{"d//f", f.Ino, nil},
		{"/d/../d/./f", f.Ino, nil},
		{"/l", l.Ino, nil}, // a symlink is a name, not followed
		{"/nope", 0, namespace.ErrNotExist},
		{"/d/nope", 0, namespace.ErrNotExist},
		{"/nope/f", 0, namespace.ErrNotExist},
		{"/d/f/x", 0, namespace.ErrNotDir},
		{"/l/x", 0, namespace.ErrNotDir},
		{"/d/f/x/y", 0, namespace.ErrNotDir},
	}
	for _, c := range cases {
		n, err := volume.Resolve(ctx, ns, c.path)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("Resolve(%q) = %v, want %v", c.path, err, c.err)
			}
			continue
		}
		if err != nil || n.Ino != c.want {
			t.Errorf("Resolve(%q) = node %d, %v; want node %d", c.path, n.Ino, err, c.want)
		}
	}
}

// failingLookups is a namespace whose lookups fail as a store that does
// not answer would (a namespace that reads names from the store).
type failingLookups struct {
	namespace.Names
	err error
}

func (f failingLookups) Lookup(context.Context, namespace.Ino, string) (namespace.Node, error) {
	return namespace.Node{}, f.err
}

// TestResolveReadError: a read of the namespace that fails (the store) fails
// the resolution with that error, not with a made-up ErrNotExist.
func TestResolveReadError(t *testing.T) {
	ctx := context.Background()
	ns, err := namespace.Open(ctx, mem.New(), "vol/", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if _, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	_, err = volume.Resolve(ctx, failingLookups{ns, context.DeadlineExceeded}, "/d")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("Resolve with a failing lookup = %v, want context.DeadlineExceeded", err)
	}
	if n, err := volume.Resolve(ctx, failingLookups{ns, context.DeadlineExceeded}, "/"); err != nil || n.Ino != namespace.RootIno {
		t.Fatalf("Resolve(/) = node %d, %v: the root needs no lookup", n.Ino, err)
	}
}
