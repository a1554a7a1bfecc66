package nsv2

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestLinkS3 runs hard links of two mounts on a real S3 server (versitygw
// on loopback unless the environment names a bucket): the inode object's
// If-None-Match and If-Match on its ETags, two mounts linking to one name
// at once, attribute changes through two names at once, and the last
// name's unlink leaving an orphan.
func TestLinkS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	clk := newFakeClock()
	a, b := openTreeClock(t, st, 1, clk), openTreeClock(t, st, 2, clk)
	root := namespace.RootIno

	f := must(a.Create(ctx, root, "f", 0o644, owner))(t)
	e := must(a.Create(ctx, root, "e", 0o644, owner))(t)
	must(b.Lookup(ctx, root, "f"))(t)
	must(b.Lookup(ctx, root, "e"))(t)

	// Two mounts link two nodes to one name at once: one wins.
	errs := race(
		func() error { _, err := a.Link(ctx, f.Ino, root, "n"); return err },
		func() error { _, err := b.Link(ctx, e.Ino, root, "n"); return err },
	)
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("answers %v and %v, want one winner", errs[0], errs[1])
	}
	if lost := errors.Join(errs...); !errors.Is(lost, namespace.ErrExist) {
		t.Fatalf("the loser: %v", lost)
	}
	node := f
	if errs[0] != nil {
		node = e
	}
	// Attribute changes through two names on two mounts at once: both land.
	errs = race(
		func() error { return a.SetXattr(ctx, node.Ino, "user.a", []byte("1"), 0) },
		func() error { return b.SetXattr(ctx, node.Ino, "user.b", []byte("2"), 0) },
	)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c := openTreeClock(t, st, 3, clk)
	for _, name := range []string{"n", map[namespace.Ino]string{f.Ino: "f", e.Ino: "e"}[node.Ino]} {
		n := must(c.Lookup(ctx, root, name))(t)
		if n.Ino != node.Ino || n.Nlink != 2 {
			t.Fatalf("%s: %+v", name, n)
		}
	}
	if x := must(c.ListXattr(ctx, node.Ino))(t); !reflect.DeepEqual(x, []string{"user.a", "user.b"}) {
		t.Fatalf("attributes %v", x)
	}
	// Every name unlinked, from either mount: an orphan at the last.
	must(b.Unlink(ctx, root, "n"))(t)
	if o := must(c.Orphans(ctx))(t); len(o) != 0 {
		t.Fatalf("orphans %+v with a name left", o)
	}
	must(a.Unlink(ctx, root, map[namespace.Ino]string{f.Ino: "f", e.Ino: "e"}[node.Ino]))(t)
	if o := must(c.Orphans(ctx))(t); !reflect.DeepEqual(o, []namespace.Orphan{{Ino: node.Ino, FileID: node.FileID}}) {
		t.Fatalf("orphans %+v", o)
	}
}
