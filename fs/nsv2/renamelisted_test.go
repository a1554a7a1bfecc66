package nsv2

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestLookupOfLinkedNameRenamedIntoListedDirectory: a mount lists a
// directory, then renames a name of a node of several names into it; its
// lookup of the new name, within the TTL of the listing, must find it (the
// mount's own acknowledged change), not answer the miss from the listing.
// Found by the campaign's many mode: `unlink d2/x1/f6 err 2` right after
// the same mount's `rename s/2.f6 d2/x1/f6`.
func TestLookupOfLinkedNameRenamedIntoListedDirectory(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	one := openTree(t, st, 1)
	two, err := Open(Config{Store: st, Root: root, Mount: cid(2), FirstBatch: 1<<40 + 2*16, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = two.Close() })
	s := must(one.Mkdir(ctx, namespace.RootIno, "s", 0o755, owner))(t)
	x := must(one.Mkdir(ctx, namespace.RootIno, "x", 0o755, owner))(t)
	f := must(one.Create(ctx, s.Ino, "f", 0o644, owner))(t)
	must(one.Link(ctx, f.Ino, namespace.RootIno, "g"))(t)
	must(two.Lookup(ctx, namespace.RootIno, "s"))(t)
	must(two.Lookup(ctx, namespace.RootIno, "x"))(t)
	must(two.ReadDir(ctx, x.Ino))(t)
	must(two.Rename(ctx, s.Ino, "f", x.Ino, "f", 0))(t)
	if n, err := two.Lookup(ctx, x.Ino, "f"); err != nil || n.Ino != f.Ino {
		t.Fatalf("lookup of the name the mount just renamed into the directory it listed: %+v, %v", n, err)
	}
	if _, err := two.Unlink(ctx, x.Ino, "f"); err != nil {
		t.Fatalf("unlink of it: %v", err)
	}
}
