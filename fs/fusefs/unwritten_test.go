package fusefs

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A file created and closed without writes stores its empty head and
// nothing else: its attributes are an empty file's (no blocks).
func TestCreatedFileStoresItsHead(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	fsys, n, f := newTestFile(t, st, config.MountDefault(1<<30))
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	objs, err := staging.ListAll(ctx, st, fsys.prefix(n.FileID))
	if err != nil || len(objs) != 1 || objs[0].Key != volume.HeadKey(fsys.prefix(n.FileID)) {
		t.Fatalf("objects of a file closed unwritten: %v, %v; want its head alone", objs, err)
	}
	h, err := fsys.fileHead(ctx, n.FileID)
	if err != nil || h.size != 0 || h.cno != 0 || !h.blocksKnown || h.blocks != 0 {
		t.Fatalf("fileHead of the unwritten file: %+v, %v", h, err)
	}
	// The id is made once: a second create of it is refused.
	if _, err := engineCreate(ctx, fsys, n.FileID); !errors.Is(err, engine.ErrExists) {
		t.Fatalf("second create of one file id: %v, want ErrExists", err)
	}
}

// A file whose head is missing and that no name holds any more (another
// mount removed it and a cleaner deleted it) is gone: its stat and open fail
// with ENOENT and nothing is made again.
func TestReapedFileIsNotMadeAgain(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	fsys, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	n, err := fsys.ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	// Another mount removes the name and the cleaner forgets the file: this
	// mount has not read the log since.
	other, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Unlink(ctx, namespace.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if err := other.Forget(ctx, n.FileID); err != nil {
		t.Fatal(err)
	}
	if named, err := fsys.ns.Named(ctx, n.FileID); err != nil || !named {
		t.Fatalf("the mount's view already lost the name (%v)", err)
	}
	if _, err := fsys.fileHead(ctx, n.FileID); !errors.Is(err, errReaped) || fsys.errnoOf("stat", err) != syscall.ENOENT {
		t.Fatalf("fileHead of the deleted file: %v, want ENOENT", err)
	}
	if _, err := fsys.acquire(ctx, n.FileID); !errors.Is(err, errReaped) {
		t.Fatalf("acquire of the deleted file: %v, want ENOENT", err)
	}
	if objs, err := staging.ListAll(ctx, st, fsys.prefix(n.FileID)); err != nil || len(objs) != 0 {
		t.Fatalf("objects of the deleted file: %v, %v; want none", objs, err)
	}
}

// A file named by a mount made before heads were stored at create, and never
// written, has no head: it is an empty file (no blocks), opening it makes it
// afresh, and a write through that publishes it.
func TestUnwrittenFileIsEmpty(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	fsys, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	n, err := fsys.ns.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := engine.Create(ctx, fsys.st, fsys.prefix(n.FileID), fsys.engineOptions(n.FileID)) // as before
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := st.Head(ctx, volume.HeadKey(fsys.prefix(n.FileID))); !errors.Is(err, staging.ErrNotFound) {
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
