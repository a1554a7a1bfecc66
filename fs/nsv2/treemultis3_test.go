package nsv2

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestTreeMultiS3 runs rename, exchange and rmdir of two mounts on a real
// S3 server (versitygw on loopback unless the environment names a bucket):
// the locks' If-Match and If-None-Match, the decisions, the seal and the
// leases on its ETags, and two mounts renaming one name at once.
func TestTreeMultiS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	clk := newFakeClock()
	a, b := openTreeClock(t, st, 1, clk), openTreeClock(t, st, 2, clk)
	root := namespace.RootIno

	d := must(a.Mkdir(ctx, root, "d", 0o755, owner))(t)
	f := must(a.Create(ctx, root, "f", 0o644, owner))(t)
	g := must(a.Create(ctx, d.Ino, "g", 0o644, owner))(t)
	must(b.Lookup(ctx, root, "d"))(t)
	must(b.Lookup(ctx, root, "f"))(t)

	// Across directories, over a file: seen by b after a Refresh.
	rep := must(a.Rename(ctx, root, "f", d.Ino, "g", 0))(t)
	if rep.Ino != g.Ino || rep.Nlink != 0 {
		t.Fatalf("replaced %+v", rep)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(ctx, root, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("b looks up f: %v", err)
	}
	if n := must(b.Lookup(ctx, d.Ino, "g"))(t); n.Ino != f.Ino {
		t.Fatalf("b looks up g: %+v", n)
	}
	if o := must(b.Orphaned(ctx, g.FileID))(t); !o {
		t.Fatal("the replaced file is not an orphan")
	}

	// Two mounts rename one name at once: one wins.
	must(a.Create(ctx, root, "r", 0o644, owner))(t)
	errs := race(
		func() error { _, err := a.Rename(ctx, root, "r", root, "ra", 0); return err },
		func() error { _, err := b.Rename(ctx, root, "r", root, "rb", 0); return err },
	)
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("answers %v and %v, want one winner", errs[0], errs[1])
	}

	// Exchange, then rmdir: refused with a name (b's lease is a's to wait
	// out: b created there), then done once empty.
	must(a.Mkdir(ctx, root, "e", 0o755, owner))(t)
	must(a.Rename(ctx, root, "d", root, "e", namespace.RenameExchange))(t)
	if n := must(b.Lookup(ctx, root, "e"))(t); n.Ino != d.Ino {
		t.Fatalf("b looks up e: %+v", n)
	}
	must(b.Create(ctx, d.Ino, "late", 0o644, owner))(t)
	if err := a.Rmdir(ctx, root, "e"); !errors.Is(err, namespace.ErrNotEmpty) {
		t.Fatalf("rmdir of a directory with names: %v", err)
	}
	for _, n := range []string{"g", "late"} {
		must(b.Unlink(ctx, d.Ino, n))(t)
	}
	if err := a.Rmdir(ctx, root, "e"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, d.Ino, "after", 0o644, owner); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("create in the removed directory: %v", err)
	}
}
