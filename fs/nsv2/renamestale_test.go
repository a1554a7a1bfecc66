package nsv2

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestRenameOntoNameOfAnEarlierChange: another mount renamed x2 to x1;
// this one removed x1, made x1 again and renames it back to x2. Reading
// x2 (the earlier rename's tombstone, whose ops name x1) made the cached
// x1, a newer name, stale: the rename held it without an ETag and failed
// with EINVAL ("a binding held without an ETag"). Found by the campaign's
// many mode: `rename d3/x0/x1 d3/x0/x2 err 22`.
func TestRenameOntoNameOfAnEarlierChange(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a, b := openTree(t, st, 1), openTree(t, st, 2)
	p := must(a.Mkdir(ctx, namespace.RootIno, "p", 0o755, owner))(t)
	must(b.Lookup(ctx, namespace.RootIno, "p"))(t)
	must(b.Mkdir(ctx, p.Ino, "x2", 0o755, owner))(t)
	must(b.Rename(ctx, p.Ino, "x2", p.Ino, "x1", 0))(t)
	must(a.Lookup(ctx, p.Ino, "x1"))(t)
	if err := a.Rmdir(ctx, p.Ino, "x1"); err != nil {
		t.Fatal(err)
	}
	x1 := must(a.Mkdir(ctx, p.Ino, "x1", 0o755, owner))(t)
	if _, err := a.Rename(ctx, p.Ino, "x1", p.Ino, "x2", 0); err != nil {
		t.Fatalf("rename x1 to x2: %v", err)
	}
	c := openTree(t, st, 3)
	must(c.Lookup(ctx, namespace.RootIno, "p"))(t)
	if n := must(c.Lookup(ctx, p.Ino, "x2"))(t); n.Ino != x1.Ino {
		t.Fatalf("x2 is %+v, want the x1 made last (%d)", n, x1.Ino)
	}
}
