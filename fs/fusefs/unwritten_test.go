package fusefs

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// A file created and closed without writes stores nothing: its attributes
// are an empty file's (no blocks), opening it again makes it afresh, and a
// write through that publishes it.
func TestUnwrittenFileIsEmpty(t *testing.T) {
	ctx := context.Background()
	st := staging.NewMem()
	fsys, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	n, err := fsys.ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := engineCreate(ctx, fsys, n.FileID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := st.Head(ctx, fsys.prefix(n.FileID)+engine.HeadKey); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("head of a file closed unwritten: %v, want none stored", err)
	}
	h, err := fsys.fileHead(ctx, n.FileID)
	if err != nil || h.size != 0 || h.cno != 0 || !h.blocksKnown || h.blocks != 0 {
		t.Fatalf("fileHead of the unwritten file: %+v, %v", h, err)
	}
	of, err := fsys.acquire(ctx, n.FileID)
	if err != nil {
		t.Fatalf("acquire of the unwritten file: %v", err)
	}
	if st := of.f.Stat(); st.Size != 0 || st.Blocks != 0 || !st.BlocksKnown {
		t.Fatalf("stat of the reopened file: %+v", st)
	}
	if _, err := of.f.WriteAt(ctx, []byte("now written"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := of.f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fsys.release(ctx, of, false)
	fsys.mu.Lock()
	fsys.heads.remove(n.FileID) // read the head from the store
	fsys.mu.Unlock()
	h, err = fsys.fileHead(ctx, n.FileID)
	if err != nil || h.size != 11 || h.cno != 1 || !h.blocksKnown || h.blocks != 64<<10/512 {
		t.Fatalf("fileHead after a write: %+v, %v", h, err)
	}
}
