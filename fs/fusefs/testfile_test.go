package fusefs

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// newTestFile makes an FS over st with cfg (no kernel mount), a file "f" at
// its root and that file's engine, created (engineCreate). The FS is closed
// when the test ends; the engine is the caller's to close.
func newTestFile(t *testing.T, st staging.Store, cfg config.Config) (*FS, namespace.Node, *engine.File) {
	t.Helper()
	ctx := context.Background()
	fsys, err := New(ctx, st, Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	n, err := fsys.ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := engineCreate(ctx, fsys, n.FileID)
	if err != nil {
		t.Fatal(err)
	}
	return fsys, n, f
}
