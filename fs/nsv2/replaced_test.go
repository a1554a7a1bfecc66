package nsv2

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestChangeInDirectoryReplacedElsewhere: mount b holds directory
// ckpt/latest and the names in it fresh in its cache when mount a removes
// latest (or ckpt above it) and makes it again (rm -r; mkdir -p). b's
// change in the old directory is refused (ErrNotExist), and after that
// refusal b knows the old directory gone and the path leading to the new
// one, well within its TTL: the mount answers ESTALE for such a refusal
// (fs/fusefs/staledir.go), so that the kernel walks the path again to the
// new directory, only when its namespace says so.
func TestChangeInDirectoryReplacedElsewhere(t *testing.T) {
	ctx := context.Background()
	changes := []struct {
		name string
		do   func(b *Tree, old, file namespace.Ino) error
	}{
		{"create", func(b *Tree, old, _ namespace.Ino) error {
			_, err := b.Create(ctx, old, "shard", 0o644, owner)
			return err
		}},
		{"mkdir", func(b *Tree, old, _ namespace.Ino) error {
			_, err := b.Mkdir(ctx, old, "sub", 0o755, owner)
			return err
		}},
		{"rename", func(b *Tree, old, _ namespace.Ino) error {
			_, err := b.Rename(ctx, old, "x", old, "y", 0)
			return err
		}},
		{"unlink", func(b *Tree, old, _ namespace.Ino) error {
			_, err := b.Unlink(ctx, old, "x")
			return err
		}},
		{"rmdir", func(b *Tree, old, _ namespace.Ino) error { return b.Rmdir(ctx, old, "d") }},
		{"link", func(b *Tree, old, file namespace.Ino) error {
			_, err := b.Link(ctx, file, old, "x2")
			return err
		}},
	}
	for _, top := range []string{"latest", "ckpt"} {
		for _, c := range changes {
			t.Run(top+"/"+c.name, func(t *testing.T) {
				st := mem.New()
				a := openTree(t, st, 1)
				b, err := Open(Config{Store: st, Root: root, Mount: cid(2), FirstBatch: 1<<40 + 32, TTL: time.Hour, RefreshEvery: -1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				ckpt := must(a.Mkdir(ctx, namespace.RootIno, "ckpt", 0o755, owner))(t)
				latest := must(a.Mkdir(ctx, ckpt.Ino, "latest", 0o755, owner))(t)
				must(a.Create(ctx, latest.Ino, "x", 0o644, owner))(t)
				must(a.Mkdir(ctx, latest.Ino, "d", 0o755, owner))(t)
				f := must(a.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)

				bc := must(b.Lookup(ctx, namespace.RootIno, "ckpt"))(t)
				old := must(b.Lookup(ctx, bc.Ino, "latest"))(t)
				must(b.Lookup(ctx, old.Ino, "x"))(t)
				must(b.Lookup(ctx, old.Ino, "d"))(t)
				must(b.Lookup(ctx, namespace.RootIno, "f"))(t)

				// a: rm -r top; mkdir -p ckpt/latest, and the same names
				// in it.
				must(a.Unlink(ctx, latest.Ino, "x"))(t)
				must(0, a.Rmdir(ctx, latest.Ino, "d"))(t)
				must(0, a.Rmdir(ctx, ckpt.Ino, "latest"))(t)
				if top == "ckpt" {
					must(0, a.Rmdir(ctx, namespace.RootIno, "ckpt"))(t)
					ckpt = must(a.Mkdir(ctx, namespace.RootIno, "ckpt", 0o755, owner))(t)
				}
				latest = must(a.Mkdir(ctx, ckpt.Ino, "latest", 0o755, owner))(t)
				must(a.Create(ctx, latest.Ino, "x", 0o644, owner))(t)
				must(a.Mkdir(ctx, latest.Ino, "d", 0o755, owner))(t)

				if err := c.do(b, old.Ino, f.Ino); !errors.Is(err, namespace.ErrNotExist) {
					t.Fatalf("%s in the removed directory: %v, want ErrNotExist", c.name, err)
				}
				if n, err := b.GetNode(ctx, old.Ino); !errors.Is(err, namespace.ErrNotExist) {
					t.Fatalf("the removed directory after the refused %s: %+v, %v; want ErrNotExist", c.name, n, err)
				}
				if top == "ckpt" {
					if n, err := b.GetNode(ctx, bc.Ino); !errors.Is(err, namespace.ErrNotExist) {
						t.Fatalf("the removed ckpt after the refused %s: %+v, %v; want ErrNotExist", c.name, n, err)
					}
					bc = must(b.Lookup(ctx, namespace.RootIno, "ckpt"))(t)
					if bc.Ino != ckpt.Ino {
						t.Fatalf("b looks ckpt up as %d, a made %d", bc.Ino, ckpt.Ino)
					}
				}
				if n := must(b.Lookup(ctx, bc.Ino, "latest"))(t); n.Ino != latest.Ino {
					t.Fatalf("b looks latest up as %d, a made %d", n.Ino, latest.Ino)
				}
				if err := c.do(b, latest.Ino, f.Ino); err != nil {
					t.Fatalf("%s in the new directory: %v", c.name, err)
				}
			})
		}
	}
}
