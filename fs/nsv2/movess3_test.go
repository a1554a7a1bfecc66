package nsv2

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestMovesS3 runs directories moved across directories on a real S3
// server (versitygw on loopback unless the environment names a bucket):
// the moves log's If-None-Match and its deletions, mv a b/ against mv b a/
// on two mounts (one wins, the other EINVAL), and a rename's tidy landing
// by Close.
func TestMovesS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	clk := newFakeClock()
	one, two := openTreeClock(t, st, 1, clk), openTreeClock(t, st, 2, clk)
	rt := namespace.RootIno
	for i := range 3 {
		a := must(one.Mkdir(ctx, rt, "a", 0o755, owner))(t)
		b := must(one.Mkdir(ctx, rt, "b", 0o755, owner))(t)
		must(two.Lookup(ctx, rt, "a"))(t)
		must(two.Lookup(ctx, rt, "b"))(t)
		errs := race(
			func() error { _, err := one.Rename(ctx, rt, "a", b.Ino, "a", 0); return err },
			func() error { _, err := two.Rename(ctx, rt, "b", a.Ino, "b", 0); return err })
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: answers %v and %v, want one winner", i, errs[0], errs[1])
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, namespace.ErrInvalid) && !errors.Is(err, namespace.ErrNotExist) {
				t.Fatalf("round %d: the loser: %v", i, err)
			}
		}
		// Undo the winner's move for the next round: the moved directory
		// back to the root, then both removed.
		in, name := a, "b" // two moved b into a
		if errs[0] == nil {
			in, name = b, "a" // one moved a into b
		}
		must(one.Lookup(ctx, in.Ino, name))(t)
		must(one.Rename(ctx, in.Ino, name, rt, name, 0))(t)
		for _, n := range []string{"a", "b"} {
			if err := one.Rmdir(ctx, rt, n); err != nil {
				t.Fatalf("round %d: rmdir %s: %v", i, n, err)
			}
		}
		one.tidyWait()
		two.tidyWait()
		if e := moveEntries(t, st); len(e) != 0 {
			t.Fatalf("round %d: the moves log holds %v", i, e)
		}
	}
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}
	if l := lockedKeys(t, st); len(l) != 0 {
		t.Fatalf("locks left after Close: %v", l)
	}
}
