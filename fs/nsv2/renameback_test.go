package nsv2

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A name renamed and renamed back, by the mount that renamed it and by
// another: each rename reads both names, and each name's dentry records the
// change that wrote it (its ops name the other). Reading one made the other
// stale in turn, so the rename held a binding without an ETag and failed
// ("a binding held without an ETag: invalid argument"; mv answered EINVAL,
// "cannot move to a subdirectory of itself").
func TestRenameThereAndBack(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	a, b := openTree(t, st, 1), openTree(t, st, 2)
	rt := namespace.RootIno
	f := must(a.Create(ctx, rt, "big", 0o644, owner))(t)
	for i, step := range []struct {
		ns       *Tree
		from, to string
	}{{a, "big", "moved"}, {a, "moved", "big"}, {b, "big", "moved"}, {a, "moved", "big"}, {b, "big", "other"}, {b, "other", "big"}} {
		if _, err := step.ns.Rename(ctx, rt, step.from, rt, step.to, 0); err != nil {
			t.Fatalf("rename %d, %s to %s: %v", i, step.from, step.to, err)
		}
		for _, ns := range []*Tree{a, b} {
			if err := ns.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if n := must(ns.Lookup(ctx, rt, step.to))(t); n.Ino != f.Ino {
				t.Fatalf("rename %d: %s is %+v", i, step.to, n)
			}
		}
	}
}
