package fusefs

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A file unlinked here is remembered as unlinked (no flush, no new head)
// while the namespace holds it as an orphan, and forgotten once a cleaner
// has made the namespace forget it. Its data is never deleted by the mount.
func TestOrphanLeftToCleaner(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	fsys, n, f := newTestFile(t, st, config.MountDefault(1<<30))
	// Written and flushed, so that it has a head (Create stores none).
	if _, err := f.WriteAt(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	gone, err := fsys.ns.Unlink(ctx, namespace.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	fsys.orphaned(gone)
	fsys.pruneOrphans(ctx)
	if u, err := fsys.unlinked(ctx, n.FileID); !fsys.isOrphan(n.FileID) || err != nil || !u {
		t.Fatal("an orphan the namespace still holds was forgotten")
	}
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, volume.HeadKey(fsys.prefix(n.FileID))); err != nil {
		t.Fatalf("the head of the unlinked file after unmount: %v (the mount must leave it to the cleaner)", err)
	}
	if err := fsys.ns.Forget(ctx, n.FileID); err != nil {
		t.Fatal(err)
	}
	fsys.pruneOrphans(ctx)
	if u, err := fsys.unlinked(ctx, n.FileID); fsys.isOrphan(n.FileID) || err != nil || u {
		t.Fatal("an orphan the namespace forgot is still remembered")
	}
}
