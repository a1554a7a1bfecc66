package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestTreeS3 runs two mounts' Trees on a real S3 server (versitygw on
// loopback unless the environment names a bucket): a listing's ETags
// against the ones its writes and reads got, O_EXCL across mounts, an
// unlink seen after a Refresh, attributes rewritten If-Match, and a lost
// answer of a create and of an unlink.
func TestTreeS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	a, b := namespace.Names(openTree(t, st, 1)), namespace.Names(openTree(t, st, 2))

	d := must(a.Mkdir(ctx, namespace.RootIno, "d", 0o755, owner))(t)
	x := must(a.Create(ctx, d.Ino, "x", 0o644, owner))(t)
	must(b.Lookup(ctx, namespace.RootIno, "d"))(t)
	if l := must(b.ReadDir(ctx, d.Ino))(t); len(l) != 1 || l[0].Ino != x.Ino {
		t.Fatalf("b lists d: %+v", l)
	}

	t.Run("a listing's ETags are the cache's", func(t *testing.T) {
		// The ETags of the S3 store's List and Get must agree, or every
		// listing reads every name again: after a Refresh, a listing of
		// names cached must send no GET (each one would fail here).
		f := faulty.New(st, 1)
		c := openTree(t, f, 3)
		must(c.Lookup(ctx, namespace.RootIno, "d"))(t)
		must(c.ReadDir(ctx, d.Ino))(t) // reads x
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		f.Add(faulty.Rule{Op: staging.OpGet, Kind: faulty.Error})
		if l, err := c.ReadDir(ctx, d.Ino); err != nil || len(l) != 1 {
			t.Fatalf("a listing whose names are cached read one again: %+v, %v", l, err)
		}
	})

	t.Run("exclusive", func(t *testing.T) {
		for round := range 4 {
			name := fmt.Sprintf("race%d", round)
			start := make(chan struct{})
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, ns := range []namespace.Names{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = ns.Create(ctx, d.Ino, name, 0o644, owner)
				}()
			}
			close(start)
			wg.Wait()
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Fatalf("%s: answers %v and %v, want one winner", name, errs[0], errs[1])
			}
			for _, err := range errs {
				if err != nil && !errors.Is(err, namespace.ErrExist) {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	})

	t.Run("unlink, xattrs", func(t *testing.T) {
		if err := b.SetXattr(ctx, x.Ino, "user.b", []byte("2"), 0); err != nil {
			t.Fatal(err)
		}
		// a holds x's dentry from before b's change: refused, read again.
		if err := a.SetXattr(ctx, x.Ino, "user.a", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if l := must(b.ListXattr(ctx, x.Ino))(t); len(l) != 2 {
			t.Fatalf("b lists %q", l)
		}
		must(a.Unlink(ctx, d.Ino, "x"))(t)
		if err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(ctx, d.Ino, "x"); !errors.Is(err, namespace.ErrNotExist) {
			t.Fatalf("b looks up x after its unlink: %v", err)
		}
		if o := must(b.Orphaned(ctx, x.FileID))(t); !o {
			t.Fatal("x is not an orphan")
		}
	})

	t.Run("lost answers", func(t *testing.T) {
		f := faulty.New(st, 1)
		c := openTree(t, f, 4)
		must(c.Lookup(ctx, namespace.RootIno, "d"))(t)
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 2, Times: 1, Kind: faulty.LostAnswer})
		y := must(c.Create(ctx, d.Ino, "y", 0o644, owner))(t) // the claim's answer lost, then the bind's
		if got := must(a.Lookup(ctx, d.Ino, "y"))(t); got.Ino != y.Ino {
			t.Fatalf("a sees %+v, c made %+v", got, y)
		}
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Times: 1, Kind: faulty.LostAnswer})
		f.Add(faulty.Rule{Op: staging.OpPut, Nth: 2, Times: 1, Kind: faulty.LostAnswer})
		must(c.Unlink(ctx, d.Ino, "y"))(t) // the record's answer lost, then the tombstone's
		if o := must(a.Orphaned(ctx, y.FileID))(t); !o {
			t.Fatal("y is not an orphan")
		}
	})
}
